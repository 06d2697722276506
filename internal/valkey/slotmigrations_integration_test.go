//go:build integration

package valkey_test

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// An atomic slot migration (Valkey 9) moves its slots with their keys in one job that the
// source's log follows to success, after which the target serves them and a second request for
// them is refused; a job cancelled while its target does not answer ends cancelled, its slots
// still the source's. On real servers of the newest release.
func TestAnAtomicSlotMigrationMovesItsSlotsOrCancelsWhole(t *testing.T) {
	ctx := context.Background()
	ips := testenv.LoopbackIPs(19)[16:]
	servers, ids := testenv.StartClusterNodes(t, ips[:2], valkey.Auth{}, func(int) []string { return nil })
	source, target := servers[0], servers[1]
	if err := source.AddSlots(ctx, []valkey.SlotRange{{Start: 0, End: valkey.SlotCount - 1}}); err != nil {
		t.Fatal(err)
	}
	if err := source.Meet(ctx, ips[1], 6379); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 30*time.Second, "the source's cluster state ok", func() (bool, string) {
		state, err := source.ClusterState(ctx)
		return state == "ok", fmt.Sprint(state, err)
	})
	c := testenv.Valkey(t, ips[0], 6379)
	const keys = 200
	for i := range keys {
		// {a} hashes to slot 15495, {b} to 3300: half of the keys each.
		tag := []string{"{a}", "{b}"}[i%2]
		if err := c.Do(ctx, c.B().Set().Key(fmt.Sprintf("%s%d", tag, i)).Value("v").Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}

	moving := []valkey.SlotRange{{Start: 3000, End: 3999}, {Start: 5000, End: 5000}}
	testenv.WaitFor(t, 30*time.Second, "a migration of slots 3000-3999 and 5000 to succeed", func() (bool, string) {
		jobs, err := source.SlotMigrations(ctx)
		if err != nil {
			return false, err.Error()
		}
		if len(jobs) == 0 || !jobs[0].Running() && jobs[0].State != valkey.MigrationSucceeded {
			// None yet, or the last one failed (the target may not know the source yet).
			if err := source.MigrateSlots(ctx, moving, ids[1]); err != nil {
				return false, err.Error()
			}
			return false, "started"
		}
		return jobs[0].State == valkey.MigrationSucceeded, fmt.Sprintf("%+v", jobs[0])
	})
	jobs, err := source.SlotMigrations(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if job := jobs[0]; !job.Export || job.SourceID != ids[0] || job.TargetID != ids[1] || job.SlotsMoving() != 1001 || job.Name == "" {
		t.Errorf("the source's log has %+v, want its export of 1001 slots to %s", job, ids[1])
	}
	nodes, err := target.ClusterNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if self, _ := valkey.Myself(nodes); valkey.FormatSlots(self.Slots) != "3000-3999,5000" {
		t.Errorf("the target serves %s, want 3000-3999,5000", valkey.FormatSlots(self.Slots))
	}
	if n := testenv.Valkey(t, ips[1], 6379).Do(ctx, c.B().Dbsize().Build()); n.Error() != nil {
		t.Fatal(n.Error())
	} else if got, _ := n.AsInt64(); got != keys/2 {
		t.Errorf("the target holds %d keys, want the %d of slot 3300", got, keys/2)
	}
	if err := source.MigrateSlots(ctx, moving, ids[1]); err == nil || !strings.Contains(err.Error(), "not served by this node") {
		t.Errorf("moving slots the source no longer serves: %v", err)
	}

	// A target that does not answer holds the next job before its snapshot.
	stopped := testenv.StartValkey(t, ips[2], 6379, "--cluster-enabled", "yes")
	if err := source.Meet(ctx, ips[2], 6379); err != nil {
		t.Fatal(err)
	}
	third, err := valkey.Connect(ips[2], 6379, valkey.Auth{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(third.Close)
	thirdNodes, err := third.ClusterNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	thirdSelf, _ := valkey.Myself(thirdNodes)
	testenv.WaitFor(t, 30*time.Second, "the third node to know the source", func() (bool, string) {
		nodes, err := third.ClusterNodes(ctx)
		return err == nil && len(nodes) == 3, fmt.Sprint(len(nodes), err)
	})
	if err := stopped.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	testenv.WaitStopped(t, stopped)
	t.Cleanup(func() { _ = stopped.Signal(syscall.SIGCONT) })
	if err := source.MigrateSlots(ctx, []valkey.SlotRange{{Start: 15000, End: 15999}}, thirdSelf.ID); err != nil {
		t.Fatal(err)
	}
	jobs, err = source.SlotMigrations(ctx)
	if err != nil || !jobs[0].Running() {
		t.Fatalf("the job to a stopped target is %+v (%v), want it running", jobs[0], err)
	}
	if err := source.CancelSlotMigrations(ctx); err != nil {
		t.Fatal(err)
	}
	if err := source.CancelSlotMigrations(ctx); err != nil {
		t.Errorf("cancelling with nothing to cancel: %v", err)
	}
	jobs, err = source.SlotMigrations(ctx)
	if err != nil || jobs[0].State != valkey.MigrationCancelled {
		t.Errorf("the cancelled job is %+v (%v)", jobs[0], err)
	}
	nodes, err = source.ClusterNodes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if self, _ := valkey.Myself(nodes); valkey.FormatSlots(self.Slots) != "0-2999,4000-4999,5001-16383" {
		t.Errorf("after the cancel the source serves %s, want every slot it had", valkey.FormatSlots(self.Slots))
	}
}
