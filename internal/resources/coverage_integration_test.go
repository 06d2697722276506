//go:build integration

package resources

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"

	cachev2 "example.com/cache-operator/api/v2"
	valkeyadmin "example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// A Cluster whose shard has no node left (its only primary stopped here, as a pod evicted from a
// Cache with replicasPerShard 0) keeps serving the other shards' keys once the nodes count the
// shard's node failed; clients of its own slots are sent to its stopped node. On real servers started with the
// arguments of the pods' Valkey container.
func TestAClusterWithAShardDownServesTheOtherShards(t *testing.T) {
	ips := testenv.LoopbackIPs(20)[17:]
	cache := testCache()
	cache.Spec.Mode = cachev2.ModeCluster
	// The container's arguments after valkey-server itself, with what the kubelet substitutes.
	args := valkeyContainer(cache, "valkey").Args[1:]
	processes := make([]*os.Process, len(ips))
	servers := make([]*valkeyadmin.Server, len(ips))
	ids := make([]string, len(ips))
	for i, ip := range ips {
		pod := strings.NewReplacer("$(POD_IP)", ip, "$(POD_NAMESPACE)", cache.Namespace, "$(POD_NAME)", fmt.Sprint("node-", i))
		podArgs := make([]string, len(args))
		for j, arg := range args {
			podArgs[j] = pod.Replace(arg)
		}
		servers[i], ids[i], processes[i] = testenv.StartClusterNode(t, ip, valkeyadmin.Auth{}, podArgs...)
	}
	ctx := t.Context()
	// A third of the slots each, the last node taking the remainder.
	third := valkeyadmin.SlotCount / len(servers)
	shards := make([]valkeyadmin.SlotRange, len(servers))
	for i, s := range servers {
		shards[i] = valkeyadmin.SlotRange{Start: i * third, End: (i+1)*third - 1}
		if i == len(servers)-1 {
			shards[i].End = valkeyadmin.SlotCount - 1
		}
		if err := s.AddSlots(ctx, []valkeyadmin.SlotRange{shards[i]}); err != nil {
			t.Fatal(err)
		}
		if err := s.Meet(ctx, ips[0], Port); err != nil {
			t.Fatal(err)
		}
	}
	// theOthersSay waits until both nodes that stay up say of the node of ID of what says checks.
	theOthersSay := func(what string, says func(valkeyadmin.ClusterNode) bool, of string) {
		t.Helper()
		testenv.WaitFor(t, time.Minute, what, func() (bool, string) {
			for i, s := range servers[:2] {
				nodes, err := s.ClusterNodes(ctx)
				if err != nil {
					return false, err.Error()
				}
				if j := slices.IndexFunc(nodes, func(n valkeyadmin.ClusterNode) bool { return n.ID == of }); j < 0 || !says(nodes[j]) {
					return false, fmt.Sprintf("node %d: %+v", i, nodes)
				}
			}
			return true, ""
		})
	}
	for _, id := range ids {
		theOthersSay("the nodes that stay up to know every node", func(valkeyadmin.ClusterNode) bool { return true }, id)
	}
	testenv.WaitFor(t, time.Minute, "every node to say the cluster is ok", func() (bool, string) {
		for i, s := range servers {
			if state, err := s.ClusterState(ctx); err != nil || state != "ok" {
				return false, fmt.Sprintf("node %d: %s %v", i, state, err)
			}
		}
		return true, ""
	})

	// A key of the first shard, which stays up, and one of the last, whose node stops.
	first := testenv.Valkey(t, ips[0], Port)
	kept, lost := keyInSlots(t, first, shards[0]), keyInSlots(t, first, shards[2])
	if err := first.Do(ctx, first.B().Set().Key(kept).Value("kept").Build()).Error(); err != nil {
		t.Fatal(err)
	}

	if err := processes[2].Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = processes[2].Signal(syscall.SIGCONT) })
	theOthersSay("both nodes left to count the stopped one failed", func(n valkeyadmin.ClusterNode) bool { return n.Failing }, ids[2])

	if got, err := first.Do(ctx, first.B().Get().Key(kept).Build()).ToString(); err != nil || got != "kept" {
		t.Errorf("GET of a key of a shard that serves: %q, %v; want it served", got, err)
	}
	if err := first.Do(ctx, first.B().Set().Key(kept).Value("written").Build()).Error(); err != nil {
		t.Errorf("SET of a key of a shard that serves: %v", err)
	}
	// The shard's own keys are still its stopped node's: a client is sent there, and fails.
	second := testenv.Valkey(t, ips[1], Port)
	if err := second.Do(ctx, second.B().Get().Key(lost).Build()).Error(); err == nil || !strings.HasSuffix(err.Error(), ips[2]+":"+fmt.Sprint(Port)) {
		t.Errorf("GET of a key of the stopped node's shard: %v; want it sent there (MOVED)", err)
	}
}

// keyInSlots is a key whose slot is in slots, as the server computes it.
func keyInSlots(t *testing.T, c valkey.Client, slots valkeyadmin.SlotRange) string {
	t.Helper()
	for i := 0; ; i++ {
		key := fmt.Sprint("key-", i)
		slot, err := c.Do(t.Context(), c.B().ClusterKeyslot().Key(key).Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if int(slot) >= slots.Start && int(slot) <= slots.End {
			return key
		}
	}
}
