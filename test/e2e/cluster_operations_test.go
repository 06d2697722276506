//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/releases"
	"example.com/cache-operator/test/harness/testenv"
)

// serverView is a running pod's server and what it reports of the cluster.
type serverView struct {
	pod   corev1.Pod
	self  valkey.ClusterNode
	nodes []valkey.ClusterNode
}

// clusterViews asks every pod of the Cache that is not going away for CLUSTER NODES.
func clusterViews(t *testing.T, key client.ObjectKey) []serverView {
	t.Helper()
	var views []serverView
	for _, pod := range cachePods(t, key) {
		if pod.DeletionTimestamp != nil {
			continue
		}
		self, nodes := clusterNodes(t, &pod)
		views = append(views, serverView{pod: pod, self: self, nodes: nodes})
	}
	return views
}

// assertShape checks the cluster as its servers report it: exactly the wanted pods, each slot
// served by exactly one primary, the primaries' counts of slots within one of each other, every
// primary with its replicas, no slot open, and no server knowing a node that is not one of the
// pods' (removed nodes are forgotten everywhere).
func assertShape(t *testing.T, key client.ObjectKey, shards, replicas int) {
	t.Helper()
	nodes := shards * (1 + replicas)
	testenv.WaitFor(t, time.Minute, fmt.Sprintf("%d pods, none going away", nodes), func() (bool, string) {
		pods := cachePods(t, key)
		return len(pods) == nodes, fmt.Sprintf("%d pods", len(pods))
	})
	// Servers were seen, in one loaded tier, to hold a handshake with a removed node's address
	// right after a scale-in, its pod gone; Valkey drops a handshake that gets no answer within
	// the node timeout (5 s). Such a handshake is waited out; any other node that is no pod's
	// fails at once.
	var views []serverView
	var strangers []string
	testenv.WaitFor(t, 30*time.Second, "every server's handshakes with nodes that are no pod's to end", func() (bool, string) {
		views, strangers = clusterViews(t, key), nil
		ids := map[string]bool{}
		for _, v := range views {
			ids[v.self.ID] = true
		}
		var handshakes []string
		for _, v := range views {
			for _, n := range v.nodes {
				if ids[n.ID] {
					continue
				}
				known := fmt.Sprintf("%s knows node %+v, which is no pod's", v.pod.Name, n)
				if n.Handshake {
					handshakes = append(handshakes, known)
				} else {
					strangers = append(strangers, known)
				}
			}
		}
		return len(strangers) > 0 || len(handshakes) == 0, strings.Join(handshakes, "; ")
	})
	for _, known := range strangers {
		t.Error(known)
	}
	owner := map[int]string{}
	replicasOf := map[string]int{}
	var counts []int
	for _, v := range views {
		if len(v.self.Migrating)+len(v.self.Importing) > 0 {
			t.Errorf("%s has slots open: migrating %v, importing %v", v.pod.Name, v.self.Migrating, v.self.Importing)
		}
		if v.self.PrimaryID != "" {
			replicasOf[v.self.PrimaryID]++
			continue
		}
		counts = append(counts, v.self.SlotsServed())
		for _, r := range v.self.Slots {
			for s := r.Start; s <= r.End; s++ {
				if other, dup := owner[s]; dup {
					t.Fatalf("slot %d is served by %s and %s", s, other, v.pod.Name)
				}
				owner[s] = v.pod.Name
			}
		}
	}
	t.Logf("slots per primary: %v", counts)
	if len(owner) != valkey.SlotCount || len(counts) != shards || slices.Max(counts)-slices.Min(counts) > 1 {
		t.Errorf("%d slots served by %d primaries with %v; want all %d by %d, within one of each other",
			len(owner), len(counts), counts, valkey.SlotCount, shards)
	}
	for _, v := range views {
		if v.self.PrimaryID == "" && replicasOf[v.self.ID] != replicas {
			t.Errorf("primary %s has %d replicas, want %d", v.pod.Name, replicasOf[v.self.ID], replicas)
		}
	}
}

// eventReasons are the reasons and actions of the events about the Cache, as "reason/action".
func eventReasons(t *testing.T, key client.ObjectKey) []string {
	t.Helper()
	var list eventsv1.EventList
	if err := admin.List(context.Background(), &list, client.InNamespace(key.Namespace)); err != nil {
		t.Fatal(err)
	}
	var reasons []string
	for _, e := range list.Items {
		if e.Regarding.Name == key.Name {
			reasons = append(reasons, e.Reason+"/"+e.Action)
		}
	}
	return reasons
}

func waitEvents(t *testing.T, key client.ObjectKey, want ...string) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, fmt.Sprintf("events %v", want), func() (bool, string) {
		got := eventReasons(t, key)
		for _, w := range want {
			if !slices.Contains(got, w) {
				return false, fmt.Sprintf("events %v", got)
			}
		}
		return true, ""
	})
}

// scalingTimeout bounds a scaling of a 3 × 1 Cluster with 20,000 keys: 24 s out and 6 s in
// under a whole make test with Valkey 9's atomic migration; key by key, as on 8.x, about 100 s
// each way on a quiet machine, past 3 min once under a whole make test.
const scalingTimeout = 6 * time.Minute

// Scaling out moves slots onto the new shards until each serves its share; scaling in moves
// them off the shards that go before their pods are removed; a scale-in that interrupts a
// scale-out still ends balanced; fewer replicas removes replicas only. No key is lost on the way.
// It runs beside the others since Valkey 9 moves slots atomically: key by key, 6,553 slots each
// acknowledged by the replicas took the most CPU of any case, and beside two others on two cores
// moved under a hundred slots in six minutes.
func TestClusterScalesOutAndInWithoutLosingAKey(t *testing.T) {
	runBeside(t, 1)
	operator := startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	key := newClusterCache(t, ns, "sessions", 3, 1)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	const keys = 20000
	writeKeys(t, key, keys)

	began := time.Now()
	patchCache(t, key, `{"spec":{"shards":5}}`)
	c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, scalingTimeout)
	t.Logf("3 → 5 shards with %d keys: Ready again after %s", keys, time.Since(began).Round(100*time.Millisecond))
	assertShape(t, key, 5, 1)
	// 5462+5461+5461 slots to 3277,3277,3277,3277,3276: the three old primaries give 6553.
	if c.Status.SlotsToMove != 0 || c.Status.SlotsMoved < 6553 || c.Status.Shards != 5 {
		t.Errorf("status: %d shards, %d slots to move, %d moved; want 5, 0, at least 6553", c.Status.Shards, c.Status.SlotsToMove, c.Status.SlotsMoved)
	}
	assertKeysRead(t, key, keys)
	waitEvents(t, key, cachev2.ReasonScalingOut+"/Start", cachev2.ReasonScalingOut+"/Finish")
	cacheLabels := map[string]string{"namespace": key.Namespace, "name": key.Name}
	// The metrics are read off the operator's informer, which can be a moment behind the status
	// that waitReadyAs read from the API server.
	testenv.WaitFor(t, 30*time.Second, "the metrics to show the scale-out done", func() (bool, string) {
		families := operator.Metrics(t)
		toMove := testenv.Sum(families, "cache_operator_cache_slots_to_move", cacheLabels)
		moved := testenv.Sum(families, "cache_operator_cache_slots_moved", cacheLabels)
		return toMove == 0 && moved >= 6553, fmt.Sprintf("%v slots to move, %v moved; want 0 and at least 6553", toMove, moved)
	})

	began = time.Now()
	patchCache(t, key, `{"spec":{"shards":3}}`)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, scalingTimeout)
	t.Logf("5 → 3 shards: Ready again after %s", time.Since(began).Round(100*time.Millisecond))
	assertShape(t, key, 3, 1)
	assertKeysRead(t, key, keys)
	waitEvents(t, key, cachev2.ReasonDraining+"/Start", cachev2.ReasonDraining+"/Finish")

	patchCache(t, key, `{"spec":{"shards":4}}`)
	// The metrics show the operation in flight: the Cache counted under its reason, and the
	// slots it still has to move.
	testenv.WaitFor(t, time.Minute, "the metrics to show the scale-out moving slots", func() (bool, string) {
		families := operator.Metrics(t)
		toMove := testenv.Sum(families, "cache_operator_cache_slots_to_move", cacheLabels)
		scalingOut := testenv.Sum(families, "cache_operator_caches", map[string]string{"reason": cachev2.ReasonScalingOut})
		return toMove > 0 && scalingOut >= 1, fmt.Sprintf("%v slots to move, %v Caches scaling out", toMove, scalingOut)
	})
	patchCache(t, key, `{"spec":{"shards":3}}`)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, scalingTimeout)
	assertShape(t, key, 3, 1)
	assertKeysRead(t, key, keys)

	patchCache(t, key, `{"spec":{"replicasPerShard":0}}`)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	assertShape(t, key, 3, 0)
	assertKeysRead(t, key, keys)
}

// openSlot leaves one slot of source half migrated to target, as an operator killed in the
// middle of a migration leaves it: MIGRATING on the source, IMPORTING on the target, one of the
// slot's keys moved. It returns the slot and the key moved.
func openSlot(t *testing.T, source, target serverView) (int, string) {
	t.Helper()
	ctx := context.Background()
	v := node(t, &source.pod)
	for _, r := range source.self.Slots {
		for slot := r.Start; slot <= r.End; slot++ {
			keys, err := v.Do(ctx, v.B().ClusterGetkeysinslot().Slot(int64(slot)).Count(2).Build()).AsStrSlice()
			if err != nil {
				t.Fatal(err)
			}
			if len(keys) < 2 {
				continue
			}
			do(t, &target.pod, func(b valkeygo.Builder) valkeygo.Completed {
				return b.ClusterSetslot().Slot(int64(slot)).Importing().NodeId(source.self.ID).Build()
			})
			do(t, &source.pod, func(b valkeygo.Builder) valkeygo.Completed {
				return b.ClusterSetslot().Slot(int64(slot)).Migrating().NodeId(target.self.ID).Build()
			})
			do(t, &source.pod, func(b valkeygo.Builder) valkeygo.Completed {
				return b.Migrate().Host(target.pod.Status.PodIP).Port(resources.Port).Key("").DestinationDb(0).
					Timeout(5000).Keys(keys[0]).Build()
			})
			return slot, keys[0]
		}
	}
	t.Fatalf("no slot of %s holds two keys", source.pod.Name)
	return 0, ""
}

// clusterOfKilledOperator forms a Cluster Cache of the given shards and replicas, writes the
// keys, and kills its operator with SIGKILL, as a crash would, leaving the cluster to the test.
func clusterOfKilledOperator(t *testing.T, shards, replicas int32, keys int) client.ObjectKey {
	t.Helper()
	first := startOperator(t, "a", "", clusterCheckInterval)
	key := newClusterCache(t, newNamespace(t), "sessions", shards, replicas)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	writeKeys(t, key, keys)
	first.Stop(t, syscall.SIGKILL)
	return key
}

// primaries are the views of the servers that serve slots.
func primaries(views []serverView) []serverView {
	return slices.DeleteFunc(slices.Clone(views), func(v serverView) bool { return v.self.SlotsServed() == 0 })
}

// An operator killed with SIGKILL in the middle of a migration leaves a slot open with some of
// its keys moved; the next operator finishes the migration: no slot is left open, no key is lost,
// and the slot's keys are all on one node.
func TestClusterMigrationLeftOpenByAKilledOperatorIsFinished(t *testing.T) {
	runBeside(t, 1)
	const keys = 5000
	key := clusterOfKilledOperator(t, 2, 0, keys)

	p := primaries(clusterViews(t, key))
	slot, _ := openSlot(t, p[0], p[1])
	startOperator(t, "b", "", clusterCheckInterval)
	// The status still says what the killed operator saw; the servers tell when it is done.
	// Finishing the migration leaves one primary a slot ahead of the other, so done also means
	// the rebalance that follows has given it back.
	testenv.WaitFor(t, 3*time.Minute, fmt.Sprintf("slot %d closed and the slots balanced", slot), func() (bool, string) {
		views := clusterViews(t, key)
		for _, v := range views {
			if len(v.self.Migrating)+len(v.self.Importing) > 0 {
				return false, fmt.Sprintf("%s: migrating %v, importing %v", v.pod.Name, v.self.Migrating, v.self.Importing)
			}
		}
		var counts []int
		for _, v := range primaries(views) {
			counts = append(counts, v.self.SlotsServed())
		}
		return len(counts) == 2 && slices.Max(counts)-slices.Min(counts) <= 1, fmt.Sprintf("slots per primary: %v", counts)
	})
	// The servers' own views alone do not show that every server agrees on the slots' owners,
	// and the Ready condition is the killed operator's until the new one writes its own: the
	// Finish event comes after the new operator's status write, so Ready is its verdict then.
	waitEvents(t, key, cachev2.ReasonRebalancing+"/Start", cachev2.ReasonRebalancing+"/Finish")
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, time.Minute)
	assertShape(t, key, 2, 0)
	assertKeysRead(t, key, keys)
	holders := 0
	for _, v := range clusterViews(t, key) {
		count, err := do(t, &v.pod, func(b valkeygo.Builder) valkeygo.Completed {
			return b.ClusterCountkeysinslot().Slot(int64(slot)).Build()
		}).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		if count > 0 {
			holders++
		}
	}
	if holders != 1 {
		t.Errorf("the keys of slot %d are on %d nodes, want one", slot, holders)
	}
}

// A node of a migration dies with the slot open, and with no replica, its keys with it. Once its
// pod is replaced, the operator closes the open slot, gives the dead node's slots to the new node
// so that the cluster serves every slot again, says so in the status and in an event, and every
// key of the other shards is still there. If the target died, the key it had received is lost
// with it; if the source died, the target keeps that key and takes over the slot.
func TestClusterHealsWhenANodeOfAMigrationDies(t *testing.T) {
	t.Parallel() // and each case beside the others, with a scope of its own
	for _, dies := range []string{"target", "source"} {
		t.Run("the "+dies, func(t *testing.T) {
			runBeside(t, 1)
			const keys = 3000
			key := clusterOfKilledOperator(t, 3, 0, keys)

			p := primaries(clusterViews(t, key))
			source, target := p[0], p[1]
			_, moved := openSlot(t, source, target)
			dead := map[string]serverView{"target": target, "source": source}[dies]
			lost := keysServedBy(t, keys, dead)
			var movedIndex int
			if _, err := fmt.Sscanf(moved, "key-%d", &movedIndex); err != nil {
				t.Fatal(err)
			}
			lost[movedIndex] = dies == "target"
			history := watchReady(t, key)
			if err := crashServer(key.Namespace, dead.pod.Name); err != nil {
				t.Fatal(err)
			}
			startOperator(t, "b", "", clusterCheckInterval)
			testenv.WaitFor(t, 3*time.Minute, "the crashed pod replaced and the cluster ready", func() (bool, string) {
				c, err := getCache(t, key)
				if err != nil {
					return false, err.Error()
				}
				ok, why := settled(c)
				for _, n := range c.Status.Nodes {
					if n.Pod == dead.pod.Name && n.ID == dead.self.ID {
						return false, "the old node is still there; " + why
					}
				}
				return ok, why
			})
			assertShape(t, key, 3, 0)
			waitEvents(t, key, "SlotsLost/Forget")
			history.caughtUp(t, key)
			if !strings.Contains(history.String(), "departed with no replica") {
				t.Errorf("the status never said the slots were given up:\n%s", history)
			}

			c := clusterClient(t, key)
			for i := range keys {
				got, err := c.Do(context.Background(), c.B().Get().Key(fmt.Sprintf("key-%d", i)).Build()).ToString()
				switch {
				case lost[i] && err == nil:
					t.Errorf("key-%d, served by the crashed node, survived it", i)
				case !lost[i] && got != fmt.Sprint(i):
					t.Errorf("GET key-%d = %q, %v; want %d", i, got, err, i)
				}
			}
		})
	}
}

// The same with a replica per shard: the source or the target of an open migration has its
// server killed and restarted in place, a new node at the same address. Its replica takes over,
// with the slot's migration or import (Valkey 8 passes SETSLOT on to replicas) and the keys it
// had; the operator finishes the migration toward the new primaries and heals the restarted node
// in as a replica. No key is lost, the one already moved included, and no slot is left open.
func TestClusterMigrationSurvivesARestartOfItsSourceOrTarget(t *testing.T) {
	t.Parallel() // and each case beside the others, with a scope of its own
	for _, dies := range []string{"target", "source"} {
		t.Run("the "+dies, func(t *testing.T) {
			runBeside(t, 1)
			const keys = 3000
			key := clusterOfKilledOperator(t, 3, 1, keys)
			p := primaries(clusterViews(t, key))
			source, target := p[0], p[1]
			openSlot(t, source, target)
			// Every write, the key moved to the target included, is on a replica before the crash.
			for _, v := range []serverView{source, target} {
				if n, err := do(t, &v.pod, func(b valkeygo.Builder) valkeygo.Completed {
					return b.Wait().Numreplicas(1).Timeout(5000).Build()
				}).AsInt64(); err != nil || n < 1 {
					t.Fatalf("WAIT 1 on %s: %d, %v", v.pod.Name, n, err)
				}
			}
			dead := map[string]serverView{"target": target, "source": source}[dies]
			if err := crashServer(key.Namespace, dead.pod.Name); err != nil {
				t.Fatal(err)
			}
			startOperator(t, "b", "", clusterCheckInterval)
			waitNewReplicaOn(t, key, dead.pod.Name, dead.self.ID, 6)
			assertShape(t, key, 3, 1) // no slot open on any node, too
			assertKeysRead(t, key, keys)
		})
	}
}

// keysServedBy reports which of key-0 … key-(n-1) are in the slots the server serves.
func keysServedBy(t *testing.T, n int, server serverView) map[int]bool {
	t.Helper()
	v := node(t, &server.pod)
	cmds := make(valkeygo.Commands, n)
	for i := range n {
		cmds[i] = v.B().ClusterKeyslot().Key(fmt.Sprintf("key-%d", i)).Build()
	}
	served := map[int]bool{}
	for i, res := range v.DoMulti(context.Background(), cmds...) {
		slot, err := res.AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		served[i] = slices.ContainsFunc(server.self.Slots, func(r valkey.SlotRange) bool { return r.Start <= int(slot) && int(slot) <= r.End })
	}
	return served
}

// A replica keeps on disk the copy of its primary's data that its last sync loaded (here, one
// added to a primary that holds keys). Its server killed and restarted in place, with no operator
// to heal anything, it must come back a new, empty node: one that loaded that copy would claim
// the slots of its keys, which its primary serves, and answer for them with old values. That new
// node is not ready (it serves nothing, and a drain must not count it as its shard's replica)
// until the operator, started again, makes it its primary's replica in sync.
func TestClusterReplicaRestartedInPlaceComesBackEmpty(t *testing.T) {
	runBeside(t, 1)
	operator := startOperator(t, "a", "", clusterCheckInterval)
	key := newClusterCache(t, newNamespace(t), "sessions", 1, 0)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	writeKeys(t, key, 1000)
	patchCache(t, key, `{"spec":{"replicasPerShard":1}}`)
	c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	assertShape(t, key, 1, 1)
	operator.Stop(t, syscall.SIGKILL)
	replicaPod, _ := podOfRole(t, c, cachev2.RoleReplica)
	_, primary := podOfRole(t, c, cachev2.RolePrimary)
	if err := crashServer(key.Namespace, replicaPod.Name); err != nil {
		t.Fatal(err)
	}
	var restarted corev1.Pod
	testenv.WaitFor(t, time.Minute, "the replica's container restarted and its server answering", func() (bool, string) {
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(replicaPod), &restarted); err != nil {
			return false, err.Error()
		}
		if cs := serverStatus(&restarted); cs == nil || cs.RestartCount != 1 || cs.State.Running == nil {
			return false, fmt.Sprintf("%+v", restarted.Status.ContainerStatuses)
		}
		server, err := valkey.Connect(restarted.Status.PodIP, resources.Port, valkey.Auth{})
		if err != nil {
			return false, err.Error()
		}
		server.Close()
		return true, ""
	})
	if keys, err := node(t, &restarted).Do(context.Background(), node(t, &restarted).B().Dbsize().Build()).AsInt64(); err != nil || keys != 0 {
		t.Errorf("the restarted replica holds %d keys (%v), want none", keys, err)
	}
	if self, _ := clusterNodes(t, &restarted); self.SlotsServed() != 0 || self.PrimaryID != "" {
		t.Errorf("the restarted replica came back serving %d slots, replicating %q: want a new, empty node", self.SlotsServed(), self.PrimaryID)
	}
	// The kubelet reports a restarted container not ready until its probe passes; this one's
	// cannot pass while the node is alone.
	if err := admin.Get(context.Background(), client.ObjectKeyFromObject(replicaPod), &restarted); err != nil {
		t.Fatal(err)
	}
	if podReady(&restarted) {
		t.Errorf("the restarted replica's pod is Ready as a new, empty node")
	}

	startOperator(t, "b", "", clusterCheckInterval)
	testenv.WaitFor(t, 3*time.Minute, "the restarted node Ready as the primary's replica", func() (bool, string) {
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(replicaPod), &restarted); err != nil {
			return false, err.Error()
		}
		if !podReady(&restarted) {
			return false, "pod not ready"
		}
		self, _ := clusterNodes(t, &restarted)
		return self.PrimaryID == primary.ID, fmt.Sprintf("replicating %q", self.PrimaryID)
	})
	assertShape(t, key, 1, 1)
	assertKeysRead(t, key, 1000)
}

// A primary's server is killed (SIGKILL, not its pod) while a client writes, and its container
// restarts in place, as the kubelet restarts it: same pod, same IP, same data directory, and,
// persistence being off, no keys. It comes back as a new node, not as the owner of its slots, and
// fenced, so that its replica, which reconnects to that address, does not resynchronise from it
// and empty itself; the replica takes over (no majority needed: with one or two shards, the
// operator makes it), and the operator brings the new node in as its replica and forgets the
// dead one, with no human.
// Every write a replica acknowledged (WAIT 1) before the crash is there after it; the status and
// an event say what happened. With three shards, the replicas are then cut to none, which removes
// the pod the promoted replica runs on: its shard is handed back first, and no key is lost.
func TestClusterPrimaryRestartedInPlaceKeepsEveryWriteAReplicaAcknowledged(t *testing.T) {
	t.Parallel() // and each case beside the others, with a scope of its own
	for _, shards := range []int32{1, 2, 3} {
		t.Run(fmt.Sprintf("%d×1", shards), func(t *testing.T) {
			runBeside(t, 1)
			operator := startOperator(t, "a", "", clusterCheckInterval)
			ns := newNamespace(t)
			key := newClusterCache(t, ns, "sessions", shards, 1)
			c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
			primaryPod, primary := podOfRole(t, c, cachev2.RolePrimary)
			acked := writeAcknowledgedByAReplica(t, primaryPod, primary.ID, key)
			history := watchReady(t, key)
			load := &upgradeLoad{}
			loadCtx, stopLoad := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Go(func() { load.run(loadCtx, clusterClient(t, key)) })
			t.Cleanup(func() { stopLoad(); wg.Wait() })

			if err := crashServer(ns, primaryPod.Name); err != nil {
				t.Fatal(err)
			}
			nodes := int(shards) * 2
			waitNewReplicaOn(t, key, primaryPod.Name, primary.ID, nodes)
			stopLoad()
			wg.Wait()
			t.Logf("a client writing all along: %d requests, %d failed, longest outage %s", load.requests, load.failures, load.longestOutage)

			var restarted corev1.Pod
			if err := admin.Get(context.Background(), client.ObjectKeyFromObject(primaryPod), &restarted); err != nil {
				t.Fatal(err)
			}
			if restarted.UID != primaryPod.UID || restarted.Status.PodIP != primaryPod.Status.PodIP {
				t.Errorf("pod %s was replaced (UID %s → %s, IP %s → %s), not restarted in place", primaryPod.Name,
					primaryPod.UID, restarted.UID, primaryPod.Status.PodIP, restarted.Status.PodIP)
			}
			if cs := serverStatus(&restarted); cs == nil || cs.RestartCount < 1 || cs.LastTerminationState.Terminated == nil ||
				cs.LastTerminationState.Terminated.ExitCode != 137 {
				t.Errorf("the container's status does not show the restart after SIGKILL: %+v", restarted.Status.ContainerStatuses)
			}
			history.caughtUp(t, key)
			if !strings.Contains(history.String(), "False/") {
				t.Errorf("Ready never went False:\n%s", history)
			}
			assertShape(t, key, int(shards), 1)
			assertAcknowledgedKeys(t, key, acked, "after the restart")
			// Without a majority only the operator's takeover promotes the replica; with three
			// shards, Valkey's own failover may come first (the node timeout, 5 s, against the
			// operator's look every 2 s and a container's restart).
			healed := []string{cachev2.ReasonHealing + "/Start", cachev2.ReasonHealing + "/Finish"}
			if shards < 3 {
				healed = append(healed, "PrimaryLost/Takeover")
			}
			waitEvents(t, key, healed...)
			noErrorLogged(t, operator, "healing a restarted primary")
			if shards < 3 {
				return
			}

			// The promoted replica runs on a pod that one replica fewer removes: the operator
			// hands its shard back to the replica that stays before the pod goes.
			c = waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, time.Minute)
			if !slices.ContainsFunc(c.Status.Nodes, func(n cachev2.ClusterNode) bool {
				return n.Role == cachev2.RolePrimary && ordinalOf(key, n.Pod) >= int(shards)
			}) {
				t.Fatalf("no primary on a pod that fewer replicas would remove: %+v", c.Status.Nodes)
			}
			patchCache(t, key, `{"spec":{"replicasPerShard":0}}`)
			waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
			assertShape(t, key, int(shards), 0)
			assertAcknowledgedKeys(t, key, acked, "after one replica fewer")
		})
	}
}

// writeAcknowledgedByAReplica writes, on the primary, every key of key-0 … key-5999 that it
// serves, and waits until a replica has acknowledged them all (WAIT 1). It returns their indexes.
func writeAcknowledgedByAReplica(t *testing.T, primaryPod *corev1.Pod, primaryID string, key client.ObjectKey) []int {
	t.Helper()
	view := serverView{pod: *primaryPod, self: valkey.ClusterNode{ID: primaryID}}
	for _, v := range clusterViews(t, key) {
		if v.self.ID == primaryID {
			view = v
		}
	}
	const candidates = 6000
	mine := keysServedBy(t, candidates, view)
	var acked []int
	var keys, values []string
	for i := range candidates {
		if mine[i] {
			acked = append(acked, i)
			keys, values = append(keys, fmt.Sprintf("key-%d", i)), append(values, fmt.Sprint(i))
		}
	}
	testenv.SetAcknowledgedByAReplica(t, node(t, primaryPod), keys, values)
	return acked
}

// assertAcknowledgedKeys checks that the cluster serves every key-i of acked with its value i.
func assertAcknowledgedKeys(t *testing.T, key client.ObjectKey, acked []int, when string) {
	t.Helper()
	reader := clusterClient(t, key)
	for _, i := range acked {
		if got, err := reader.Do(context.Background(), reader.B().Get().Key(fmt.Sprintf("key-%d", i)).Build()).ToString(); got != fmt.Sprint(i) {
			t.Fatalf("key-%d, acknowledged by a replica before the crash, %s: %q, %v", i, when, got, err)
		}
	}
	t.Logf("%d acknowledged keys of the crashed primary all readable %s", len(acked), when)
}

// ordinalOf is the ordinal of one of the Cache's pods, from its name.
func ordinalOf(key client.ObjectKey, pod string) int {
	var n int
	if _, err := fmt.Sscanf(strings.TrimPrefix(pod, key.Name+"-"), "%d", &n); err != nil {
		return -1
	}
	return n
}

// watchRestarts checks each of the Cache's pods as it is deleted: its server must have last said
// it was a replica (a primary is restarted only once a failover has made it one), and every other
// server must be running and answer, with its replication link up if it is a replica (one restart
// at a time, each back in sync before the next). Each server is asked for its role every 10 ms,
// well within the time from the operator's own look to the deletion reaching the watch. It
// returns how many deletions it has checked, and what it found wrong.
func watchRestarts(t *testing.T, key client.ObjectKey) func() (checked int, wrong []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := admin.Watch(ctx, &corev1.PodList{}, client.InNamespace(key.Namespace),
		client.MatchingLabels{resources.LabelInstance: key.Name})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	servers := map[types.UID]*valkey.Server{} // of the running pods not going away
	primary := map[types.UID]bool{}           // whether the server last said it serves slots as a primary
	var wrong []string
	checked := 0
	var wg sync.WaitGroup
	wg.Go(func() {
		for ctx.Err() == nil {
			mu.Lock()
			asked := maps.Clone(servers)
			mu.Unlock()
			for uid, server := range asked {
				if nodes, err := server.ClusterNodes(ctx); err == nil {
					self, _ := valkey.Myself(nodes)
					mu.Lock()
					primary[uid] = self.PrimaryID == "" && self.SlotsServed() > 0
					mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	})
	wg.Go(func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			mu.Lock()
			server, known := servers[pod.UID]
			mu.Unlock()
			switch {
			case pod.DeletionTimestamp == nil && !known && pod.Status.Phase == corev1.PodRunning:
				if !testenv.Reachable(pod.Status.PodIP) {
					continue // not started yet, or not a server a test may talk to
				}
				if server, err := valkey.Connect(pod.Status.PodIP, resources.Port, valkey.Auth{}); err == nil {
					mu.Lock()
					servers[pod.UID] = server
					mu.Unlock()
				}
			case pod.DeletionTimestamp != nil && known:
				mu.Lock()
				wasPrimary := primary[pod.UID]
				delete(servers, pod.UID)
				mu.Unlock()
				server.Close()
				problems := restartProblems(ctx, key, pod)
				if wasPrimary {
					problems = append(problems, fmt.Sprintf("%s was deleted while its server said it was a primary", pod.Name))
				}
				mu.Lock()
				wrong = append(wrong, problems...)
				checked++
				mu.Unlock()
			}
		}
	})
	t.Cleanup(func() {
		w.Stop()
		cancel()
		wg.Wait()
		for _, server := range servers {
			server.Close()
		}
	})
	return func() (int, []string) {
		mu.Lock()
		defer mu.Unlock()
		return checked, slices.Clone(wrong)
	}
}

// restartProblems is what the Cache's other servers report against restarting the pod now: one
// that is not running, or not in sync.
func restartProblems(ctx context.Context, key client.ObjectKey, restarted *corev1.Pod) []string {
	var pods corev1.PodList
	if err := admin.List(ctx, &pods, client.InNamespace(key.Namespace), client.MatchingLabels{resources.LabelInstance: key.Name}); err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for _, pod := range pods.Items {
		// The pod itself, or its replacement, which the StatefulSet controller may already have
		// made when the deletion's event arrives late: a server starting, not another one.
		if pod.Name == restarted.Name {
			continue
		}
		problem := func(format string, args ...any) {
			problems = append(problems, fmt.Sprintf("when %s was deleted, %s: %s", restarted.Name, pod.Name, fmt.Sprintf(format, args...)))
		}
		if pod.DeletionTimestamp != nil || pod.Status.Phase != corev1.PodRunning {
			problem("not running (%s), or going away as well", pod.Status.Phase)
			continue
		}
		if !testenv.Reachable(pod.Status.PodIP) {
			problem("IP %q is not a local cluster's pod address", pod.Status.PodIP)
			continue
		}
		server, err := valkey.Connect(pod.Status.PodIP, resources.Port, valkey.Auth{})
		if err != nil {
			problem("%v", err)
			continue
		}
		nodes, err := server.ClusterNodes(ctx)
		if self, _ := valkey.Myself(nodes); err == nil && self.PrimaryID != "" {
			if replication, rerr := server.Status(ctx); rerr != nil || !replication.LinkUp {
				problem("a replica with its link down (%v)", rerr)
			}
		} else if err != nil {
			problem("%v", err)
		}
		server.Close()
	}
	return problems
}

// upgradeLoad writes and reads through a cluster client until stopped, over a fixed set of keys,
// and measures what a client sees: the longest stretch of time in which requests failed, and,
// per key, the last write acknowledged and the last one tried (whose outcome a failure leaves
// unknown).
type upgradeLoad struct {
	requests, failures int
	longestOutage      time.Duration
	acked, tried       [loadKeys]int
	// errors counts the failures by their error's text.
	errors map[string]int
}

// loadKeys is how many keys the load writes over and over: few enough that they stay far from
// maxmemory, so that no eviction passes for a lost write.
const loadKeys = 20000

// loadPace is how often the load writes a key and reads another: 500 times a second, about 1,000
// requests a second, as a steady application's client. Unpaced, one client sent as many as the
// machine answered (6,800 a second in the upgrade test), and the two shared cores that the
// servers, the kubelets and the tests beside it needed went to it: the test measured the machine
// more than the operator, and slowed every test beside it. A request that takes longer delays
// the next; missed ticks are not made up.
const loadPace = 2 * time.Millisecond

func (l *upgradeLoad) run(ctx context.Context, c valkeygo.Client) {
	var failingSince time.Time
	pace := time.NewTicker(loadPace)
	defer pace.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-pace.C:
		}
		k := i % loadKeys
		opCtx, cancel := context.WithTimeout(ctx, time.Second)
		l.tried[k] = i
		err := c.Do(opCtx, c.B().Set().Key(fmt.Sprintf("load-%d", k)).Value(fmt.Sprint(i)).Build()).Error()
		if err == nil {
			l.acked[k] = i
			err = c.Do(opCtx, c.B().Get().Key(fmt.Sprintf("load-%d", (k+loadKeys/2)%loadKeys)).Build()).Error()
			if valkeygo.IsValkeyNil(err) {
				err = nil // not written yet
			}
		}
		cancel()
		now := time.Now()
		l.requests++
		if l.acked[k] == i {
			l.requests++ // the GET
		}
		switch {
		case ctx.Err() != nil:
		case err != nil:
			l.failures++
			if l.errors == nil {
				l.errors = map[string]int{}
			}
			l.errors[err.Error()]++
			if failingSince.IsZero() {
				failingSince = now
			}
		case !failingSince.IsZero():
			l.longestOutage = max(l.longestOutage, now.Sub(failingSince))
			failingSince = time.Time{}
		}
	}
}

// errorKinds says which errors the failures were, and how often each: "none" if none.
func (l *upgradeLoad) errorKinds() string {
	if len(l.errors) == 0 {
		return "none"
	}
	var kinds []string
	for _, text := range slices.Sorted(maps.Keys(l.errors)) {
		kinds = append(kinds, fmt.Sprintf("%d × %q", l.errors[text], text))
	}
	return strings.Join(kinds, ", ")
}

// refused counts the failures other than a request timed out: an error reply, a connection
// refused or dropped, a handshake failed. Timeouts are left out where a test asserts what a
// change to a running Cache does to its clients, not how fast two shared cores answer.
func (l *upgradeLoad) refused() int {
	return l.failures - l.errors[context.DeadlineExceeded.Error()]
}

// lost counts the keys whose value is neither their last acknowledged write nor a later one tried.
func (l *upgradeLoad) lost(t *testing.T, c valkeygo.Client) (lost, acked int) {
	t.Helper()
	cmds := make(valkeygo.Commands, loadKeys)
	for k := range loadKeys {
		cmds[k] = c.B().Get().Key(fmt.Sprintf("load-%d", k)).Build()
	}
	for k, res := range c.DoMulti(context.Background(), cmds...) {
		if l.acked[k] == 0 {
			continue
		}
		acked++
		got, err := res.ToString()
		if got != fmt.Sprint(l.acked[k]) && got != fmt.Sprint(l.tried[k]) {
			if lost++; lost <= 3 {
				t.Errorf("load-%d: acknowledged %d, tried %d, reads %q, %v", k, l.acked[k], l.tried[k], got, err)
			}
		}
	}
	return lost, acked
}

// An upgrade of Valkey through each release of the toolchain in turn, the oldest first (8.0, 8.1,
// then 9.1, whose RDB format 8.x cannot read), restarts every pod once per release, in the
// operator's order: replicas first, then each shard's primary after CLUSTER FAILOVER to an updated
// replica, one pod at a time, each with every other server up and in sync. Every server then
// runs the release, and a client writing and reading all along loses no acknowledged write. A
// change back to 8.x then waits, Ready False with the reason, and restarts no pod.
func TestClusterUpgradeFailsOverEachShardAndLosesNoAcknowledgedWrite(t *testing.T) {
	runBesideFirst(t, 1)
	operator := startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	key := newClusterCacheOf(t, ns, "sessions", 3, 1, valkeys[0].Version)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	var sts appsv1.StatefulSet
	if err := admin.Get(context.Background(), key, &sts); err != nil {
		t.Fatal(err)
	}
	if sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Errorf("update strategy %q: the StatefulSet controller would restart pods on its own", sts.Spec.UpdateStrategy.Type)
	}
	deletions := watchPodDeletions(t, ns)
	restarts := watchRestarts(t, key)
	c := clusterClient(t, key)
	load := &upgradeLoad{}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); load.run(ctx, c) }()
	started := time.Now()

	for i, release := range valkeys[1:] {
		old := map[string]bool{}
		for _, pod := range cachePods(t, key) {
			old[string(pod.UID)] = true
		}
		from := time.Now()
		patchCache(t, key, fmt.Sprintf(`{"spec":{"version":%q}}`, release.Version))
		testenv.WaitFor(t, 5*time.Minute, "every pod replaced and the cluster ready on "+release.Version, func() (bool, string) {
			for _, pod := range cachePods(t, key) {
				if old[string(pod.UID)] {
					return false, pod.Name + " is not replaced yet"
				}
			}
			c, err := getCache(t, key)
			if err != nil {
				return false, err.Error()
			}
			return settled(c)
		})
		for pod, version := range serverVersions(t, key) {
			if version != release.Version {
				t.Errorf("after the upgrade to %s, %s runs Valkey %s", release.Version, pod, version)
			}
		}
		t.Logf("upgrade %s → %s: %s", valkeys[i].Version, release.Version, time.Since(from).Round(time.Second))
	}
	took := time.Since(started)
	// Back to a release that cannot read the newest one's format: held before any pod changes,
	// with a reason, and over once the version is set back.
	if older := valkeys[len(valkeys)-2]; valkey.RDBFormat(older.Version) < valkey.RDBFormat(valkeyVersion) {
		patchCache(t, key, fmt.Sprintf(`{"spec":{"version":%q}}`, older.Version))
		held := waitReadyAs(t, key, metav1.ConditionFalse, cachev2.ReasonDowngradeRefused, time.Minute)
		t.Logf("back to %s: %s", older.Version, meta.FindStatusCondition(held.Status.Conditions, cachev2.ConditionReady).Message)
		patchCache(t, key, fmt.Sprintf(`{"spec":{"version":%q}}`, valkeyVersion))
		waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, time.Minute)
	}
	stop()
	<-done
	assertShape(t, key, 3, 1)

	// Each watch delivers late, and each on its own: the reads above can be ahead of both.
	upgrades := len(valkeys) - 1
	deleted := waitDeletions(t, deletions, 6*upgrades)
	perPod := map[string]int{}
	for _, pod := range deleted {
		perPod[pod]++
	}
	if len(deleted) != 6*upgrades || len(perPod) != 6 || slices.ContainsFunc(slices.Collect(maps.Values(perPod)), func(n int) bool { return n != upgrades }) {
		t.Errorf("pods deleted: %v; want each of the 6 once per upgrade (%d)", deleted, upgrades)
	}
	testenv.WaitFor(t, 30*time.Second, "the restart checks of the deletions", func() (bool, string) {
		checked, _ := restarts()
		return checked >= 6*upgrades, fmt.Sprintf("%d deletions checked", checked)
	})
	_, wrong := restarts()
	for _, problem := range wrong {
		t.Error(problem)
	}
	if failovers := strings.Count(operator.Logs(t), `CLUSTER FAILOVER"`); failovers < 3*upgrades {
		t.Errorf("%d CLUSTER FAILOVER steps, want one per shard and upgrade at least", failovers)
	}
	waitEvents(t, key, cachev2.ReasonUpgrading+"/Start", cachev2.ReasonUpgrading+"/Finish")
	lost, acked := load.lost(t, clusterClient(t, key))
	t.Logf("upgrades of a 3×1 cluster through %v: %s; client: %d requests, %d failed (%v), longest outage %s; %d of %d keys lost their last acknowledged write",
		releases.Lines(valkeys), took.Round(time.Second), load.requests, load.failures, load.errors, load.longestOutage.Round(time.Millisecond), lost, acked)
}
