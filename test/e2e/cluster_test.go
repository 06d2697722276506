//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// clusterCheckInterval is how often the e2e operators check a ready cluster: short, so that a
// test sees a break soon.
const clusterCheckInterval = "--cluster-check-interval=2s"

func newClusterCache(t *testing.T, namespace, name string, shards, replicas int32) client.ObjectKey {
	t.Helper()
	return newClusterCacheOf(t, namespace, name, shards, replicas, valkeyVersion)
}

// newClusterCacheOf is newClusterCache with the Valkey version given, and the Cache as the
// functions given change it.
func newClusterCacheOf(t *testing.T, namespace, name string, shards, replicas int32, version string, change ...func(*cachev2.Cache)) client.ObjectKey {
	t.Helper()
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: shards, ReplicasPerShard: &replicas,
			Version: version, Memory: resource.MustParse("64Mi")},
	}
	for _, f := range change {
		f(c)
	}
	if err := admin.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return client.ObjectKeyFromObject(c)
}

// waitReadyAs waits until the Cache's Ready condition has the status and reason given, for the
// current generation, and returns the Cache.
func waitReadyAs(t *testing.T, key client.ObjectKey, status metav1.ConditionStatus, reason string, timeout time.Duration) *cachev2.Cache {
	t.Helper()
	var c *cachev2.Cache
	testenv.WaitFor(t, timeout, fmt.Sprintf("%s to be Ready=%s %s", key, status, reason), func() (bool, string) {
		var err error
		if c, err = getCache(t, key); err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
		if ready == nil {
			return false, "no Ready condition"
		}
		return ready.Status == status && ready.Reason == reason && ready.ObservedGeneration == c.Generation,
			fmt.Sprintf("Ready=%s %s: %s", ready.Status, ready.Reason, ready.Message)
	})
	return c
}

// waitReadyWithNewNodes waits until the Cache is Ready as a cluster whose status lists n nodes,
// each with an ID and none of them one of the old IDs, and returns the Cache. Pods replaced
// without a change to the spec leave the Ready condition of the generation as it was written
// before; only new node IDs in the same status show that the operator judged the new nodes. It
// waits 3 minutes at most: pods replaced, and their nodes joined.
func waitReadyWithNewNodes(t *testing.T, key client.ObjectKey, n int, old map[string]bool) *cachev2.Cache {
	t.Helper()
	var c *cachev2.Cache
	testenv.WaitFor(t, 3*time.Minute, fmt.Sprintf("%s Ready with %d new nodes", key, n), func() (bool, string) {
		var err error
		if c, err = getCache(t, key); err != nil {
			return false, err.Error()
		}
		for _, node := range c.Status.Nodes {
			if node.ID == "" || old[node.ID] {
				return false, fmt.Sprintf("%s has its old node, or none", node.Pod)
			}
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
		if ready == nil {
			return false, "no Ready condition"
		}
		return ready.Status == metav1.ConditionTrue && ready.Reason == cachev2.ReasonClusterReady &&
				ready.ObservedGeneration == c.Generation && len(c.Status.Nodes) == n,
			fmt.Sprintf("%d nodes, Ready=%s %s: %s", len(c.Status.Nodes), ready.Status, ready.Reason, ready.Message)
	})
	return c
}

// waitNewReplicaOn waits until the Cache is settled with the given number of nodes, the pod's
// node a new one (not oldID) that replicates a primary: a lost server healed back in.
func waitNewReplicaOn(t *testing.T, key client.ObjectKey, pod, oldID string, nodes int) {
	t.Helper()
	testenv.WaitFor(t, 3*time.Minute, pod+"'s new node a replica and the cluster ready", func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		ok, why := settled(c)
		for _, n := range c.Status.Nodes {
			if n.Pod == pod && (n.ID == oldID || n.Role != cachev2.RoleReplica) {
				return false, pod + " is not a new replica yet; " + why
			}
		}
		return ok && len(c.Status.Nodes) == nodes, fmt.Sprintf("%d nodes; %s", len(c.Status.Nodes), why)
	})
}

// clusterClient is a cluster client seeded with one of the Cache's nodes: it learns the others,
// and where each slot is, from the cluster itself.
func clusterClient(t *testing.T, key client.ObjectKey) valkeygo.Client {
	t.Helper()
	pods := cachePods(t, key)
	c, err := valkeygo.NewClient(valkeygo.ClientOption{
		InitAddress:      []string{net.JoinHostPort(pods[len(pods)-1].Status.PodIP, fmt.Sprint(resources.Port))},
		DisableCache:     true,
		Dialer:           net.Dialer{Timeout: 5 * time.Second},
		ConnWriteTimeout: 5 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// assertClusterServesKeys writes n keys through a cluster client and reads every one back.
func assertClusterServesKeys(t *testing.T, key client.ObjectKey, n int) {
	t.Helper()
	writeKeys(t, key, n)
	assertKeysRead(t, key, n)
}

// writeKeys writes key-0 … key-(n-1) through a cluster client, each with its number as value.
func writeKeys(t *testing.T, key client.ObjectKey, n int) {
	t.Helper()
	c := clusterClient(t, key)
	cmds := make(valkeygo.Commands, 0, n)
	for i := range n {
		cmds = append(cmds, c.B().Set().Key(fmt.Sprintf("key-%d", i)).Value(fmt.Sprint(i)).Build())
	}
	for i, res := range c.DoMulti(context.Background(), cmds...) {
		if err := res.Error(); err != nil {
			logRouting(t, key)
			t.Fatalf("SET key-%d: %v", i, err)
		}
	}
}

// logRouting logs the map of the slots that each of the Cache's servers gives a cluster client
// (CLUSTER SHARDS), for a test whose client could not route a command.
func logRouting(t *testing.T, key client.ObjectKey) {
	t.Helper()
	for _, pod := range cachePods(t, key) {
		v := node(t, &pod)
		shards, err := v.Do(context.Background(), v.B().ClusterShards().Build()).ToAny()
		t.Logf("%s: CLUSTER SHARDS %v, %v", pod.Name, shards, err)
	}
}

// assertKeysRead reads key-0 … key-(n-1) through a new cluster client and checks each value.
func assertKeysRead(t *testing.T, key client.ObjectKey, n int) {
	t.Helper()
	c := clusterClient(t, key)
	cmds := make(valkeygo.Commands, 0, n)
	for i := range n {
		cmds = append(cmds, c.B().Get().Key(fmt.Sprintf("key-%d", i)).Build())
	}
	missing := 0
	for i, res := range c.DoMulti(context.Background(), cmds...) {
		if got, err := res.ToString(); err != nil || got != fmt.Sprint(i) {
			if missing++; missing <= 3 {
				t.Errorf("GET key-%d = %q, %v; want %d", i, got, err, i)
			}
		}
	}
	if missing > 0 {
		logRouting(t, key)
		t.Fatalf("%d of %d keys missing or wrong", missing, n)
	}
}

// assertClusterStateOK checks that every node of the Cache says cluster_state:ok.
func assertClusterStateOK(t *testing.T, key client.ObjectKey) {
	t.Helper()
	for _, pod := range cachePods(t, key) {
		v := node(t, &pod)
		info, err := v.Do(context.Background(), v.B().ClusterInfo().Build()).ToString()
		if state := valkey.InfoField(strings.TrimPrefix(info, "txt:"), "cluster_state"); err != nil || state != "ok" {
			t.Errorf("%s: cluster_state %q, %v", pod.Name, state, err)
		}
	}
}

// do runs one command on a pod's server and fails the test on an error reply.
func do(t *testing.T, pod *corev1.Pod, build func(valkeygo.Builder) valkeygo.Completed) valkeygo.ValkeyResult {
	t.Helper()
	v := node(t, pod)
	reply := v.Do(context.Background(), build(v.B()))
	if err := reply.Error(); err != nil {
		t.Fatalf("%s: %v", pod.Name, err)
	}
	return reply
}

// podOfRole is the first pod whose node has the role given, in the Cache's status.
func podOfRole(t *testing.T, c *cachev2.Cache, role cachev2.Role) (*corev1.Pod, cachev2.ClusterNode) {
	t.Helper()
	for _, n := range c.Status.Nodes {
		if n.Role == role {
			for _, pod := range cachePods(t, client.ObjectKeyFromObject(c)) {
				if pod.Name == n.Pod {
					return &pod, n
				}
			}
		}
	}
	t.Fatalf("no %s in %+v", role, c.Status.Nodes)
	return nil, cachev2.ClusterNode{}
}

func TestClusterFormsServesAndIsListedInTheCatalogue(t *testing.T) {
	runBeside(t, 1)
	etcd := testenv.StartEtcd(t)
	startOperator(t, "a", etcd.Endpoint, clusterCheckInterval)
	ns := newNamespace(t)
	big := newClusterCache(t, ns, "sessions", 3, 1)
	small := newClusterCache(t, ns, "tiny", 1, 0)

	for _, tc := range []struct {
		key            client.ObjectKey
		nodes, shards  int32
		replicasLinked int
	}{{big, 6, 3, 1}, {small, 1, 1, 0}} {
		c := waitReadyAs(t, tc.key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
		// Forming is no operation: a new cluster whose pods start one by one is not said to heal
		// (or scale) on its way to its first Ready.
		for _, event := range eventReasons(t, tc.key) {
			if strings.HasSuffix(event, "/Start") {
				t.Errorf("%s: event %s while the cluster formed", tc.key, event)
			}
		}
		assertClusterStateOK(t, tc.key)
		assertClusterServesKeys(t, tc.key, 10000)

		st := c.Status
		if st.Shards != tc.shards || st.ReadyShards != tc.shards || st.SlotsAssigned != valkey.SlotCount || int32(len(st.Nodes)) != tc.nodes {
			t.Errorf("%s: status shards %d, ready %d, slots %d, %d nodes; want %d shards, all ready, %d slots, %d nodes",
				tc.key, st.Shards, st.ReadyShards, st.SlotsAssigned, len(st.Nodes), tc.shards, valkey.SlotCount, tc.nodes)
		}
		primaries := map[string]int{}
		for _, n := range st.Nodes {
			if n.Role == cachev2.RoleReplica {
				primaries[n.PrimaryPod]++
			}
		}
		for _, n := range st.Nodes {
			if n.Role == cachev2.RolePrimary && primaries[n.Pod] != tc.replicasLinked {
				t.Errorf("%s: primary %s has %d replicas in status, want %d", tc.key, n.Pod, primaries[n.Pod], tc.replicasLinked)
			}
		}

		etcdClient := etcd.Client(t)
		if got := testenv.KeyValues(t, etcdClient, catalogDir(tc.key)); int32(len(got)) != tc.nodes {
			t.Errorf("%s: catalogue lists %d nodes, want all %d: %v", tc.key, len(got), tc.nodes, got)
		}
		_ = etcdClient.Close()
	}
}

// Ready is True only while Valkey says the cluster serves; each way of breaking it makes the Cache
// not Ready with a reason and a message that names what is wrong, and mending it makes it Ready
// again. One shard with a replica has each thing to break: a replica's link, a primary's slot.
func TestClusterReadyFallsWithWhatValkeyReports(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	key := newClusterCache(t, ns, "sessions", 1, 1)
	c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	replicaPod, replica := podOfRole(t, c, cachev2.RoleReplica)
	var primaryPod *corev1.Pod
	for _, pod := range cachePods(t, key) {
		if pod.Name == replica.PrimaryPod {
			primaryPod = &pod
		}
	}
	slot := firstSlot(t, primaryPod)
	run := func(pod *corev1.Pod, cmds ...func(valkeygo.Builder) valkeygo.Completed) func(t *testing.T) {
		return func(t *testing.T) {
			for _, cmd := range cmds {
				do(t, pod, cmd)
			}
		}
	}

	for _, tc := range []struct {
		name         string
		reason       string
		message      string
		break_, mend func(t *testing.T)
	}{{
		// The replica cannot authenticate to its primary, which it then tries to: its link stays
		// down once cut.
		name:    "a replica whose link to its primary is down",
		reason:  cachev2.ReasonReplicasMissing,
		message: "has 0 of 1 replicas with their link up",
		break_: run(replicaPod,
			func(b valkeygo.Builder) valkeygo.Completed {
				return b.ConfigSet().ParameterValue().ParameterValue("masteruser", "nobody").ParameterValue("masterauth", "wrong").Build()
			},
			func(b valkeygo.Builder) valkeygo.Completed { return b.ClientKill().TypeMaster().Build() }),
		mend: run(replicaPod, func(b valkeygo.Builder) valkeygo.Completed {
			return b.ConfigSet().ParameterValue().ParameterValue("masteruser", "").ParameterValue("masterauth", "").Build()
		}),
	}, {
		// The nodes run with cluster-require-full-coverage no: the cluster says ok and serves
		// every other slot, and the operator counts the slot nobody serves.
		name:    "a node that serves less than every slot",
		reason:  cachev2.ReasonSlotsUnserved,
		message: fmt.Sprintf("%d of %d slots are served", valkey.SlotCount-1, valkey.SlotCount),
		break_:  run(primaryPod, func(b valkeygo.Builder) valkeygo.Completed { return b.ClusterDelslots().Slot(int64(slot)).Build() }),
		mend:    run(primaryPod, func(b valkeygo.Builder) valkeygo.Completed { return b.ClusterAddslots().Slot(int64(slot)).Build() }),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.break_(t)
			broken := waitReadyAs(t, key, metav1.ConditionFalse, tc.reason, time.Minute)
			if ready := meta.FindStatusCondition(broken.Status.Conditions, cachev2.ConditionReady); !strings.Contains(ready.Message, tc.message) {
				t.Errorf("Ready message %q does not name %q", ready.Message, tc.message)
			}
			tc.mend(t)
			waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, time.Minute)
		})
	}
}

// clusterNodes is CLUSTER NODES as the pod's server reports it, and the server's own entry.
func clusterNodes(t *testing.T, pod *corev1.Pod) (self valkey.ClusterNode, nodes []valkey.ClusterNode) {
	t.Helper()
	reply, err := do(t, pod, func(b valkeygo.Builder) valkeygo.Completed { return b.ClusterNodes().Build() }).ToString()
	if err != nil {
		t.Fatal(err)
	}
	if nodes, err = valkey.ParseClusterNodes(strings.TrimPrefix(reply, "txt:")); err != nil {
		t.Fatal(err)
	}
	self, _ = valkey.Myself(nodes)
	return self, nodes
}

// firstSlot is the first slot a primary's server serves.
func firstSlot(t *testing.T, pod *corev1.Pod) int {
	t.Helper()
	self, _ := clusterNodes(t, pod)
	if len(self.Slots) == 0 {
		t.Fatalf("%s serves no slot", pod.Name)
	}
	return self.Slots[0].Start
}

// A pod replaced gets a new, empty node with a new ID and, usually, a new IP: a primary whose
// pod is deleted hands its shard to its replica first (its preStop hook asks the replica for a
// CLUSTER FAILOVER, which the replica counts as an MFSTART sent: a handover, not an election
// after the primary was found gone), and the operator has the others forget the old node and
// brings the new one in as a replica, with no human. Then every pod replaced at once: every node
// is new, and the cluster forms again by itself, and serves.
func TestClusterFormsAgainAfterPodsAreReplaced(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	key := newClusterCache(t, ns, "sessions", 3, 1)
	c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)

	primaryPod, primary := podOfRole(t, c, cachev2.RolePrimary)
	replicaPod := replicaOf(t, c, primaryPod.Name)
	handovers := func() (int, string) {
		info, err := do(t, replicaPod, func(b valkeygo.Builder) valkeygo.Completed { return b.ClusterInfo().Build() }).ToString()
		if err != nil {
			t.Fatal(err)
		}
		role, _ := do(t, replicaPod, func(b valkeygo.Builder) valkeygo.Completed { return b.Role().Build() }).ToArray()
		name, _ := role[0].ToString()
		return clusterInfoField(info, "cluster_stats_messages_mfstart_sent"), name
	}
	before, _ := handovers()
	if err := admin.Delete(context.Background(), primaryPod); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the deleted primary's replica took over by a handover", func() (bool, string) {
		sent, role := handovers()
		return role == "master" && sent > before, fmt.Sprintf("%s is %s, MFSTART sent %d times (%d before)", replicaPod.Name, role, sent, before)
	})
	c = waitReadyWithNewNodes(t, key, 6, map[string]bool{primary.ID: true})
	for _, pod := range cachePods(t, key) {
		reply, err := do(t, &pod, func(b valkeygo.Builder) valkeygo.Completed { return b.ClusterNodes().Build() }).ToString()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(reply, primary.ID) {
			t.Errorf("%s still knows the replaced node %s", pod.Name, primary.ID)
		}
	}
	assertClusterServesKeys(t, key, 1000)

	oldPods, oldNodes := map[string]bool{}, map[string]bool{}
	for _, pod := range cachePods(t, key) {
		oldPods[string(pod.UID)] = true
	}
	for _, n := range c.Status.Nodes {
		oldNodes[n.ID] = true
	}
	if err := admin.DeleteAllOf(context.Background(), &corev1.Pod{}, client.InNamespace(ns),
		client.MatchingLabels{resources.LabelInstance: key.Name}); err != nil {
		t.Fatal(err)
	}
	waitPodsReplaced(t, key, oldPods, 6)
	// Ready with only new nodes, not the Ready of the old ones, before any server is asked: the
	// new servers say cluster_state:fail until the operator has formed them into a cluster.
	waitReadyWithNewNodes(t, key, 6, oldNodes)
	assertClusterStateOK(t, key)
	assertClusterServesKeys(t, key, 1000)
}

// replicaOf is the pod of a replica of the primary on the named pod, in the Cache's status.
func replicaOf(t *testing.T, c *cachev2.Cache, primaryPod string) *corev1.Pod {
	t.Helper()
	for _, n := range c.Status.Nodes {
		if n.Role == cachev2.RoleReplica && n.PrimaryPod == primaryPod {
			for _, pod := range cachePods(t, client.ObjectKeyFromObject(c)) {
				if pod.Name == n.Pod {
					return &pod
				}
			}
		}
	}
	t.Fatalf("no replica of %s in %+v", primaryPod, c.Status.Nodes)
	return nil
}

// clusterInfoField is a number of CLUSTER INFO's reply, 0 if it is not there.
func clusterInfoField(info, field string) int {
	for line := range strings.Lines(info) {
		if value, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, _ := strconv.Atoi(value)
			return n
		}
	}
	return 0
}
