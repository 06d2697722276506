//go:build integration

package valkey_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// A batch of SETSLOTs on a primary with a replica, which holds each until the replica
// acknowledges it, sets every slot of the batch, though the batch goes out on many connections
// at once; and a batch that the server refuses says which slot failed first, in the batch's
// order, and how many more did.
func TestABatchOfSetslotsSetsEverySlotAndReportsTheFirstRefusal(t *testing.T) {
	ctx := context.Background()
	ips := testenv.LoopbackIPs(3)
	servers, ids := testenv.StartClusterNodes(t, ips, valkey.Auth{}, func(int) []string { return nil })
	primary, replica := servers[0], servers[1]
	if err := primary.AddSlots(ctx, []valkey.SlotRange{{Start: 0, End: valkey.SlotCount - 1}}); err != nil {
		t.Fatal(err)
	}
	for _, ip := range ips[1:] {
		if err := primary.Meet(ctx, ip, 6379); err != nil {
			t.Fatal(err)
		}
	}
	testenv.WaitFor(t, 30*time.Second, "the replica to know its primary", func() (bool, string) {
		err := replica.Replicate(ctx, ids[0])
		return err == nil, fmt.Sprint(err)
	})
	testenv.WaitFor(t, 30*time.Second, "the replica's link to its primary up", func() (bool, string) {
		status, err := replica.Status(ctx)
		return err == nil && status.LinkUp, fmt.Sprintf("%+v, %v", status, err)
	})

	// More slots than connections, and not a multiple of them.
	var slots []int
	for slot := 100; slot < 150; slot++ {
		slots = append(slots, slot)
	}
	migrating := func() map[int]string {
		nodes, err := primary.ClusterNodes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		self, _ := valkey.Myself(nodes)
		return self.Migrating
	}
	if err := primary.SetSlotsMigrating(ctx, slots, ids[2]); err != nil {
		t.Fatal(err)
	}
	if got := migrating(); len(got) != len(slots) || got[100] != ids[2] || got[149] != ids[2] {
		t.Errorf("after migrating %d slots, the primary migrates %d: %v", len(slots), len(got), got)
	}
	if err := primary.SetSlotsStable(ctx, slots); err != nil {
		t.Fatal(err)
	}
	if got := migrating(); len(got) != 0 {
		t.Errorf("after making the slots stable, the primary still migrates %v", got)
	}

	err := primary.SetSlotsOwner(ctx, slots, strings.Repeat("0", 40))
	if err == nil || !strings.Contains(err.Error(), "CLUSTER SETSLOT NODE 100 on ") || !strings.Contains(err.Error(), "(and 49 more of 50 slots)") {
		t.Errorf("giving the slots to an unknown node: %v; want the first slot, 100, named and 49 more counted", err)
	}
}
