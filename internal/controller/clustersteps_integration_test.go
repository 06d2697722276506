//go:build integration

package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"example.com/cache-operator/internal/topology"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// A migration step moves keys only until its deadline (and the slot's own budget, none here), so
// that no pass blocks a worker for as long as a slot's keys take to move: a step out of time
// returns with the slot left open, IMPORTING on the target and MIGRATING on the source, and the
// next step, planned afresh from the open slot, finishes it. On real servers; and, with auth, the
// keys go to a target that refuses clients without credentials (MIGRATE ... AUTH2 as the
// operator's user).
func TestAMigrationStepOutOfTimeLeavesTheSlotOpenForTheNext(t *testing.T) {
	t.Run("without auth", func(t *testing.T) { migrationStepOutOfTime(t, valkey.Auth{}) })
	t.Run("with auth", func(t *testing.T) {
		migrationStepOutOfTime(t, valkey.Auth{User: "operator", Password: "the-operators-password"})
	})
}

func migrationStepOutOfTime(t *testing.T, auth valkey.Auth) {
	ctx := context.Background()
	ips := testenv.LoopbackIPs(2)
	servers, ids := testenv.StartClusterNodes(t, ips, auth, func(i int) []string {
		var args []string
		if auth.User != "" {
			args = append(args, "--user", auth.User, "on", ">"+auth.Password, "~*", "&*", "+@all")
			if i == 1 {
				// The test's own client writes on the source without credentials.
				args = append(args, "--user", "default", "off")
			}
		}
		return args
	})
	source, target := servers[0], servers[1]
	if err := source.AddSlots(ctx, []valkey.SlotRange{{Start: 0, End: valkey.SlotCount - 1}}); err != nil {
		t.Fatal(err)
	}
	if err := source.Meet(ctx, ips[1], 6379); err != nil {
		t.Fatal(err)
	}
	// MIGRATE is refused while the target says the cluster is down, so both sides must know each
	// other and say ok: the source alone can say ok before the target does.
	testenv.WaitFor(t, 30*time.Second, "both servers to know each other and say cluster_state:ok", func() (bool, string) {
		for i, s := range servers {
			nodes, err := s.ClusterNodes(ctx)
			if err != nil {
				return false, err.Error()
			}
			if !knowsSettled(nodes, ids[1-i]) {
				return false, fmt.Sprintf("server %d does not know server %d yet: %+v", i, 1-i, nodes)
			}
			state, err := s.ClusterState(ctx)
			if err != nil {
				return false, err.Error()
			}
			if state != "ok" {
				return false, fmt.Sprintf("server %d: cluster_state %s", i, state)
			}
		}
		return true, ""
	})

	// Keys with one hash tag share a slot.
	const keys = 500
	client := testenv.Valkey(t, ips[0], 6379)
	for i := range keys {
		if err := client.Do(ctx, client.B().Set().Key(fmt.Sprintf("{moving}-%d", i)).Value("v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	slot, err := client.Do(ctx, client.B().ClusterKeyslot().Key("{moving}").Build()).AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	m := &topology.Migration{SourceID: ids[0], Target: "target", TargetID: ids[1],
		TargetAddress: topology.Address{IP: ips[1], Port: 6379},
		Slots:         []int{int(slot)}, Import: []int{int(slot)}, Export: []int{int(slot)}}
	countKeys := func(s *valkey.Server) int {
		n, err := s.KeysInSlot(ctx, int(slot), keys)
		if err != nil {
			t.Fatal(err)
		}
		return len(n)
	}
	selfOf := func(s *valkey.Server) valkey.ClusterNode {
		nodes, err := s.ClusterNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		self, _ := valkey.Myself(nodes)
		return self
	}

	if err := migrate(ctx, source, nil, m, time.Now(), 0); err != nil {
		t.Fatal(err)
	}
	if got := selfOf(source).Migrating[int(slot)]; got != ids[1] {
		t.Errorf("after a step out of time, the source migrates slot %d to %q, want the target %s", slot, got, ids[1])
	}
	if got := selfOf(target).Importing[int(slot)]; got != ids[0] {
		t.Errorf("after a step out of time, the target imports slot %d from %q, want the source %s", slot, got, ids[0])
	}
	if n := countKeys(source); n != keys {
		t.Errorf("a step out of time moved keys: %d of %d left on the source", n, keys)
	}

	if err := migrate(ctx, source, nil, m, time.Now().Add(time.Minute), 0); err != nil {
		t.Fatal(err)
	}
	src, dst := selfOf(source), selfOf(target)
	if len(src.Migrating)+len(dst.Importing) > 0 || dst.SlotsServed() != 1 {
		t.Errorf("after the next step: source migrating %v, target importing %v and serving %d slots; want the slot closed and the target's",
			src.Migrating, dst.Importing, dst.SlotsServed())
	}
	if left, arrived := countKeys(source), countKeys(target); left != 0 || arrived != keys {
		t.Errorf("after the next step, %d keys on the source and %d on the target, want 0 and %d", left, arrived, keys)
	}
}

// knowsSettled reports whether nodes lists the node id past its handshake.
func knowsSettled(nodes []valkey.ClusterNode, id string) bool {
	for _, n := range nodes {
		if n.ID == id && !n.Handshake {
			return true
		}
	}
	return false
}
