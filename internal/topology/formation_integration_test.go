//go:build integration

package topology

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"

	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// observe asks every server for its view of the cluster, as a reconcile would; a server that
// does not answer is a member with no view.
func observe(t *testing.T, ips []string) []Member {
	t.Helper()
	var members []Member
	for i, ip := range ips {
		m := Member{Pod: fmt.Sprintf("pod-%d", i), IP: ip, Port: 6379}
		if s, err := valkey.Connect(ip, 6379, valkey.Auth{}); err == nil {
			ctx := context.Background()
			m.Nodes, _ = s.ClusterNodes(ctx)
			m.State, _ = s.ClusterState(ctx)
			replication, _ := s.Status(ctx)
			m.LinkUp, m.ReplOffset = replication.LinkUp, replication.Offset
			s.Close()
		}
		members = append(members, m)
	}
	return members
}

// act runs one planned action on its server.
func act(t *testing.T, members []Member, a Action) {
	t.Helper()
	i := slices.IndexFunc(members, func(m Member) bool { return m.Pod == a.On })
	if i < 0 {
		t.Fatalf("%s: no such member", a)
	}
	s, err := valkey.Connect(members[i].IP, members[i].Port, valkey.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	switch a.Kind {
	case KindMeet:
		err = s.Meet(ctx, a.Meet.IP, a.Meet.Port)
	case KindAddSlots:
		err = s.AddSlots(ctx, a.AddSlots)
	case KindReplicate:
		err = s.Replicate(ctx, a.Replicate)
	default:
		t.Fatalf("%s: forming fresh servers takes no such step", a)
	}
	if err != nil {
		t.Fatalf("%s: %v", a, err)
	}
}

// Real servers, formed by the planner the way the reconciler drives it (observe, plan, act on
// one step, look again), end as a cluster that Assess finds ready and that takes keys through
// any node.
func TestFormationOnRealServers(t *testing.T) {
	for _, want := range []Want{{Shards: 3, ReplicasPerShard: 1}, {Shards: 1, ReplicasPerShard: 0}} {
		t.Run(fmt.Sprintf("%d shards × %d replicas", want.Shards, want.ReplicasPerShard), func(t *testing.T) {
			ips := testenv.LoopbackIPs(want.Shards * (1 + want.ReplicasPerShard))
			for _, ip := range ips {
				testenv.StartValkey(t, ip, 6379, "--cluster-enabled", "yes")
			}
			steps := 0
			testenv.WaitFor(t, time.Minute, "the cluster to form", func() (bool, string) {
				members := observe(t, ips)
				// Next, as the reconciler judges: Assess alone can find the cluster ready while
				// Form still acts (a server that does not yet know every other one says ok), and
				// the view it judged would then be gone before the keys below are written.
				plan, health := Next(want, members)
				for _, a := range plan.Actions {
					act(t, members, a)
				}
				if len(plan.Actions) > 0 {
					steps++
				}
				return health.Ready(), fmt.Sprintf("%s: %s", health.Problem, health.Message)
			})
			t.Logf("formed in %d steps", steps)

			client, err := valkeygo.NewClient(valkeygo.ClientOption{InitAddress: []string{ips[len(ips)-1] + ":6379"}})
			if err != nil {
				t.Fatal(err)
			}
			defer client.Close()
			ctx := context.Background()
			for i := range 1000 {
				key := fmt.Sprintf("key-%d", i)
				if err := client.Do(ctx, client.B().Set().Key(key).Value(key).Build()).Error(); err != nil {
					t.Fatalf("SET %s through the cluster: %v", key, err)
				}
			}
			for i := range 1000 {
				key := fmt.Sprintf("key-%d", i)
				if got, err := client.Do(ctx, client.B().Get().Key(key).Build()).ToString(); err != nil || got != key {
					t.Fatalf("GET %s through the cluster = %q, %v", key, got, err)
				}
			}
		})
	}
}
