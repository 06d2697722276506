//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
	appsv1 "k8s.io/api/apps/v1"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// measureRuns, when set (CACHE_OPERATOR_MEASURE=N), runs the measurements below N times. They
// are the benchmark of the Cluster operations on real servers (docs/benchmark.md), not tests:
// without it they are skipped, and `make test` spends no time on them. Their waits look every
// 50 ms, so that a figure is when its condition first held.
func measureRuns(t *testing.T) int {
	runs, err := strconv.Atoi(os.Getenv("CACHE_OPERATOR_MEASURE"))
	if err != nil || runs < 1 {
		t.Skip("a measurement: CACHE_OPERATOR_MEASURE=N runs it N times")
	}
	testenv.PollClosely(t)
	return runs
}

// dataSet is data a measurement loads into a Cache: keys bench-0 … bench-(keys-1) of size bytes
// each, all "v", or random (a stream that no compression shrinks, the same in every run), with
// the spec.memory that holds them over 3 shards.
type dataSet struct {
	keys, size int
	random     bool
	memory     string
}

var (
	// smallData is the reference data of the rebalancing and backup measurements.
	smallData = dataSet{keys: 200_000, size: 100, memory: "64Mi"}
	// largeData is the largest data set that loads, moves, copies and restores here in a few
	// minutes a run: 1 GB.
	largeData = dataSet{keys: 1_000_000, size: 1000, random: true, memory: "1Gi"}
)

func (d dataSet) String() string {
	kind := "bytes"
	if !d.random {
		kind = "B"
	}
	return fmt.Sprintf("%s keys of %s %s", thousands(d.keys), thousands(d.size), kind)
}

// thousands writes n with a comma between each group of three digits.
func thousands(n int) string {
	digits := strconv.Itoa(n)
	for i := len(digits) - 3; i > 0; i -= 3 {
		digits = digits[:i] + "," + digits[i:]
	}
	return digits
}

// dataChunk is how many keys of a data set go to the Cache in one pipeline.
const dataChunk = 5_000

// chunks yields the data set's keys, a chunk at a time: the index of the first, and their values.
func (d dataSet) chunks() iter.Seq2[int, []string] {
	return func(yield func(int, []string) bool) {
		random := rand.New(rand.NewChaCha8([32]byte{7}))
		buf := []byte(strings.Repeat("v", d.size*dataChunk))
		for from := 0; from < d.keys; from += dataChunk {
			if d.random {
				for i := range buf {
					buf[i] = byte(random.Uint32())
				}
			}
			values := make([]string, min(dataChunk, d.keys-from))
			for i := range values {
				values[i] = string(buf[i*d.size : (i+1)*d.size])
			}
			if !yield(from, values) {
				return
			}
		}
	}
}

// load writes the data set through the client.
func (d dataSet) load(t *testing.T, c valkeygo.Client) {
	t.Helper()
	for from, values := range d.chunks() {
		cmds := make(valkeygo.Commands, 0, len(values))
		for i, value := range values {
			cmds = append(cmds, c.B().Set().Key("bench-"+strconv.Itoa(from+i)).Value(value).Build())
		}
		for _, res := range c.DoMulti(context.Background(), cmds...) {
			if err := res.Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// missing counts the data set's keys that do not read back as written.
func (d dataSet) missing(t *testing.T, c valkeygo.Client) int {
	t.Helper()
	missing := 0
	for from, values := range d.chunks() {
		cmds := make(valkeygo.Commands, 0, len(values))
		for i := range values {
			cmds = append(cmds, c.B().Get().Key("bench-"+strconv.Itoa(from+i)).Build())
		}
		for i, res := range c.DoMulti(context.Background(), cmds...) {
			if got, err := res.ToString(); err != nil || got != values[i] {
				missing++
			}
		}
	}
	return missing
}

// scaleUnderLoad scales the Cache to the given number of shards while a client writes and reads
// all along, and waits until every slot has moved and the Cache is Ready with that many shards.
// It returns what the client saw, the Cache as it then is, and when the patch was sent and the
// scaling seen done.
func scaleUnderLoad(t *testing.T, key client.ObjectKey, shards int32, timeout time.Duration) (load *upgradeLoad, after *cachev2.Cache, began, done time.Time) {
	t.Helper()
	load = &upgradeLoad{}
	ctx, stop := context.WithCancel(context.Background())
	// Seeded before the patch: the pods it makes have no address yet.
	c := clusterClient(t, key)
	var wg sync.WaitGroup
	wg.Go(func() { load.run(ctx, c) })
	began = time.Now()
	patchCache(t, key, fmt.Sprintf(`{"spec":{"shards":%d}}`, shards))
	testenv.WaitFor(t, timeout, fmt.Sprintf("the scaling to %d shards done", shards), func() (bool, string) {
		var err error
		if after, err = getCache(t, key); err != nil {
			return false, err.Error()
		}
		ok, why := settled(after)
		return ok && after.Status.Shards == shards && after.Status.SlotsToMove == 0, why
	})
	done = time.Now()
	stop()
	wg.Wait()
	return load, after, began, done
}

// Scale-out of a Cluster Cache 3 → 5 primaries, under a client writing and reading all along,
// then the scale-in back to 3, against valkey-cli --cluster rebalance --cluster-use-empty-masters
// on the same servers afterwards, under the same client (valkeyCLIRebalance). Ours moves slots
// with atomic slot migration (the default on Valkey 9) and, with --atomic-slot-migration=false,
// key by key; valkey-cli too, with and without --cluster-use-atomic-slot-migration. With the
// reference data, 200,000 keys of 100 B, and with 1 GB of data that does not compress; with one
// replica per shard, the shape users run, and without. It logs, per run: the operator's time
// from the patch to Ready, valkey-cli's time, the client's requests, failures (valkey-go follows
// MOVED and ASK itself, so every failure is an error other than a redirection) and longest
// stretch of failures, and the keys lost.
func TestMeasureScaleOutAgainstValkeyCLI(t *testing.T) {
	runs := measureRuns(t)
	for _, data := range []dataSet{smallData, largeData} {
		t.Run(data.String(), func(t *testing.T) {
			for _, replicas := range []int32{1, 0} {
				t.Run(fmt.Sprintf("%d replicas per shard", replicas), func(t *testing.T) {
					for run := 1; run <= runs; run++ {
						t.Run(fmt.Sprintf("run %d", run), func(t *testing.T) {
							for _, atomic := range []bool{true, false} {
								t.Run(migrationMode(atomic), func(t *testing.T) {
									operator := startOperator(t, "a", "", clusterCheckInterval, "--zap-time-encoding=rfc3339nano",
										fmt.Sprintf("--atomic-slot-migration=%t", atomic))
									measureScaleOut(t, operator, data, replicas, run, atomic)
								})
							}
						})
					}
				})
			}
		})
	}
}

// migrationMode names how slots move.
func migrationMode(atomic bool) string {
	if atomic {
		return "atomic"
	}
	return "key by key"
}

// firstMigrationStep is when the operator logged its first step that moves slots of the
// namespace's Cache, key by key or atomically: the time before it went to the new pods' start
// and their joining the cluster, which valkey-cli's timing leaves out.
func firstMigrationStep(t *testing.T, operator *testenv.Operator, namespace string) time.Time {
	t.Helper()
	for line := range strings.Lines(operator.Logs(t)) {
		if !strings.Contains(line, `"namespace":"`+namespace+`"`) ||
			!strings.Contains(line, ": migrate slots ") && !strings.Contains(line, ": CLUSTER MIGRATESLOTS ") {
			continue
		}
		var entry struct {
			TS time.Time `json:"ts"`
		}
		if err := json.Unmarshal([]byte(line), &entry); err != nil {
			t.Fatal(err)
		}
		return entry.TS
	}
	t.Fatal("no migration step in the operator's log")
	return time.Time{}
}

// serversAgreeOn polls the servers at the addresses addrs gives (asked afresh each time, as pods
// come and go) every 20 ms until every one of them lists the same primaries, primaries of them,
// serving all 16384 slots between them, and returns when that first held: the end of a
// rebalancing as a cluster client sees it, whoever made it. It gives up when ctx ends.
func serversAgreeOn(ctx context.Context, addrs func() []string, primaries int) (time.Time, error) {
	servers := map[string]*valkey.Server{}
	defer func() {
		for _, s := range servers {
			s.Close()
		}
	}()
	agree := func() bool {
		seen := ""
		all := addrs()
		for i, addr := range all {
			s := servers[addr]
			if s == nil {
				var err error
				if s, err = valkey.Connect(addr, resources.Port, valkey.Auth{}); err != nil {
					return false
				}
				servers[addr] = s
			}
			nodes, err := s.ClusterNodes(ctx)
			if err != nil {
				return false
			}
			var served []string
			slots := 0
			for _, n := range nodes {
				if n.PrimaryID == "" && n.SlotsServed() > 0 {
					served = append(served, fmt.Sprint(n.ID, n.Slots))
					slots += n.SlotsServed()
				}
			}
			slices.Sort(served)
			view := strings.Join(served, " ")
			if len(served) != primaries || slots != valkey.SlotCount || i > 0 && view != seen {
				return false
			}
			seen = view
		}
		return len(all) > 0
	}
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if agree() {
			return time.Now(), nil
		}
		select {
		case <-ctx.Done():
			return time.Time{}, ctx.Err()
		case <-tick.C:
		}
	}
}

// podAddresses are the addresses of the Cache's pods that have one and are not going away.
func podAddresses(key client.ObjectKey) func() []string {
	return func() []string {
		var list corev1.PodList
		if err := admin.List(context.Background(), &list, client.InNamespace(key.Namespace),
			client.MatchingLabels{resources.LabelInstance: key.Name}); err != nil {
			return nil
		}
		var addrs []string
		for _, pod := range list.Items {
			if pod.DeletionTimestamp == nil && pod.Status.PodIP != "" {
				addrs = append(addrs, pod.Status.PodIP)
			}
		}
		return addrs
	}
}

// measureScaleOut is one run of TestMeasureScaleOutAgainstValkeyCLI, in the mode given.
func measureScaleOut(t *testing.T, operator *testenv.Operator, data dataSet, replicas int32, run int, atomic bool) {
	ns := newNamespace(t)
	cache := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "rebalance", Namespace: ns},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 3, ReplicasPerShard: &replicas,
			Version: valkeyVersion, Memory: resource.MustParse(data.memory)},
	}
	if err := admin.Create(context.Background(), cache); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cache)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	c := clusterClient(t, key)
	data.load(t, c)

	// When every server sees the five primaries, beside the Cache's Ready, which also waits for
	// the new primaries' pods to be Ready: their readiness probe passes only once they serve slots.
	agreeing := make(chan time.Time, 1)
	watch, stopWatch := context.WithTimeout(context.Background(), 10*time.Minute)
	defer stopWatch()
	go func() {
		at, _ := serversAgreeOn(watch, podAddresses(key), 5)
		agreeing <- at
	}()
	load, _, began, done := scaleUnderLoad(t, key, 5, 10*time.Minute)
	firstStep, agreed := firstMigrationStep(t, operator, ns), <-agreeing
	if agreed.IsZero() {
		t.Fatal("Ready, but the servers never all saw the five primaries")
	}
	took, migrating, moved := done.Sub(began), done.Sub(firstStep), agreed.Sub(firstStep)
	lost, acked := load.lost(t, c)
	missing := data.missing(t, clusterClient(t, key))

	// And back in, 5 → 3, with the same data: the leaving primaries drain before their pods go.
	in, _, inBegan, inDone := scaleUnderLoad(t, key, 3, 10*time.Minute)
	inLost, inAcked := in.lost(t, c)
	inMissing := data.missing(t, clusterClient(t, key))
	mode := migrationMode(atomic)
	t.Logf("run %d, %s: operator 5 → 3: %s from the patch; client: %d requests, %d failed (%s), longest failing stretch %s; "+
		"%d of %d load keys lost their last acknowledged write; %d of %d reference keys missing",
		run, mode, inDone.Sub(inBegan).Round(100*time.Millisecond), in.requests, in.failures, in.errorKinds(), in.longestOutage.Round(time.Millisecond),
		inLost, inAcked, inMissing, data.keys)

	cli, cliMoved := valkeyCLIRebalance(t, operator, key, data, int(replicas), atomic)
	// Key by key, every server sees the five primaries once each new one has its first slot, long
	// before the last moves: the comparison is then of the time from the first step to Ready
	// against valkey-cli's whole run.
	ours, theirs := moved, cliMoved
	if !atomic {
		ours, theirs = migrating, cli
	}
	t.Logf("run %d, %s: operator 3 → 5: %s from the patch, %s from its first migration step to Ready; every server sees 5 primaries %s after that step "+
		"(%.2f × valkey-cli's, which took %s, its servers agreeing %s after it began); "+
		"client: %d requests, %d failed (%s), longest failing stretch %s; %d of %d load keys lost their last acknowledged write; %d of %d reference keys missing",
		run, mode, took.Round(100*time.Millisecond), migrating.Round(100*time.Millisecond), moved.Round(10*time.Millisecond),
		ours.Seconds()/theirs.Seconds(), cli.Round(10*time.Millisecond), cliMoved.Round(10*time.Millisecond),
		load.requests, load.failures, load.errorKinds(), load.longestOutage.Round(time.Millisecond), lost, acked, missing, data.keys)
	deleteAllCaches(t, ns)
}

// valkeyCLIRebalance times valkey-cli --cluster rebalance --cluster-use-empty-masters, with
// --cluster-use-atomic-slot-migration if atomic, on the Cache's own servers, after the operator
// scaled them out and back in: the same servers, nodes, network, data and client, so that what
// differs is only who moves the slots. With the operator stopped (it would undo the rest), the
// Cache's StatefulSet is scaled by hand to five shards' pods, whose servers valkey-cli adds to the
// cluster, the replicas with --cluster-slave. It returns how long the command took, and how long
// from its start until every server saw the five primaries. The Cache's finalizers are taken off
// at once, since no operator is there to when it is deleted.
func valkeyCLIRebalance(t *testing.T, operator *testenv.Operator, key client.ObjectKey, data dataSet, replicas int, atomic bool) (took, moved time.Duration) {
	t.Helper()
	ctx := context.Background()
	operator.Stop(t, syscall.SIGKILL)
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	if err := admin.Patch(ctx, cache, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	perShard := 1 + replicas
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	if err := admin.Patch(ctx, sts, client.RawPatch(types.MergePatchType, fmt.Appendf(nil, `{"spec":{"replicas":%d}}`, 5*perShard))); err != nil {
		t.Fatal(err)
	}
	cli := func(args ...string) string {
		t.Helper()
		cmd := exec.Command(valkeyCLI(), args...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("valkey-cli %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	// The servers by the ordinal of their pods, the new ones answering.
	ips := make([]string, 5*perShard)
	testenv.WaitFor(t, 2*time.Minute, "the five shards' pods' servers answering", func() (bool, string) {
		for i := range ips {
			pod := &corev1.Pod{}
			if err := admin.Get(ctx, types.NamespacedName{Namespace: key.Namespace, Name: fmt.Sprintf("%s-%d", key.Name, i)}, pod); err != nil || pod.Status.PodIP == "" {
				return false, fmt.Sprintf("pod %d: no address (%v)", i, err)
			}
			ips[i] = pod.Status.PodIP
			if out, err := exec.Command(valkeyCLI(), "-h", ips[i], "ping").Output(); err != nil || strings.TrimSpace(string(out)) != "PONG" {
				return false, fmt.Sprintf("pod %d: %s %v", i, out, err)
			}
		}
		return true, ""
	})
	addr := func(i int) string { return net.JoinHostPort(ips[i], strconv.Itoa(resources.Port)) }
	// valkey-cli refuses to add a node while the nodes disagree about the cluster, as they do
	// until every one has learnt of the node added before: each is added once all know the last.
	for i := 3 * perShard; i < 5*perShard; i++ {
		// A new server refuses its replicas until its fence is lifted, as the operator lifts it
		// once the server is a member (resources.FenceRule).
		cli("-h", ips[i], "acl", "setuser", "default", "+sync", "+psync")
		if (i-3*perShard)%perShard == 0 {
			cli("--cluster", "add-node", addr(i), addr(0))
		} else {
			primary := cli("-h", ips[i-(i-3*perShard)%perShard], "cluster", "myid")
			cli("--cluster", "add-node", addr(i), addr(0), "--cluster-slave", "--cluster-master-id", primary)
		}
		// MIGRATE is refused while its target says the cluster is down: every server, the new
		// ones too, must also say ok.
		waitClusterKnows(t, ips[:i+1])
	}
	waitReplicasInSync(t, ips)
	rebalance := []string{"--cluster", "rebalance", addr(0), "--cluster-use-empty-masters"}
	if atomic {
		rebalance = append(rebalance, "--cluster-use-atomic-slot-migration")
	}
	// Under the same client as the operator's scale-out: the changes it writes to the slots
	// moving are what an atomic job streams before it hands them over.
	c := clusterClient(t, key)
	load := &upgradeLoad{}
	loading, stopLoad := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { load.run(loading, c) })
	began := time.Now()
	cli(rebalance...)
	took = time.Since(began)
	watch, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	agreed, err := serversAgreeOn(watch, func() []string { return ips }, 5)
	stopLoad()
	wg.Wait()
	if err != nil {
		t.Fatalf("the servers never agreed on 5 primaries after valkey-cli's rebalance: %v", err)
	}
	t.Logf("valkey-cli's client: %d requests, %d failed (%s), longest failing stretch %s",
		load.requests, load.failures, load.errorKinds(), load.longestOutage.Round(time.Millisecond))
	if missing := data.missing(t, c); missing > 0 {
		t.Errorf("valkey-cli's rebalance lost %d keys", missing)
	}
	return took, agreed.Sub(began)
}

// valkeyCLI is the valkey-cli the toolchain links into bin/ (Valkey 9.1's).
func valkeyCLI() string { return filepath.Join(testenv.BinDir(), "valkey-cli") }

// waitReplicasInSync waits until every server at ips that is a replica has its link to its
// primary up.
func waitReplicasInSync(t *testing.T, ips []string) {
	t.Helper()
	cli := valkeyCLI()
	testenv.WaitFor(t, time.Minute, "every replica in sync", func() (bool, string) {
		for _, ip := range ips {
			info, err := exec.Command(cli, "-h", ip, "info", "replication").Output()
			if err != nil || strings.Contains(string(info), "role:slave") && !strings.Contains(string(info), "master_link_status:up") {
				return false, ip + ": " + string(info)
			}
		}
		return true, ""
	})
}

// waitClusterKnows waits until every server at ips knows all of them, with no handshake under
// way, and says cluster_state:ok.
func waitClusterKnows(t *testing.T, ips []string) {
	t.Helper()
	cli := valkeyCLI()
	testenv.WaitFor(t, time.Minute, fmt.Sprintf("every server to know all %d and say cluster_state:ok", len(ips)), func() (bool, string) {
		for _, ip := range ips {
			nodes, err := exec.Command(cli, "-h", ip, "cluster", "nodes").Output()
			if err != nil || strings.Count(string(nodes), "\n") < len(ips) || strings.Contains(string(nodes), "handshake") {
				return false, ip + ": " + string(nodes)
			}
			info, err := exec.Command(cli, "-h", ip, "cluster", "info").Output()
			if err != nil || !strings.Contains(string(info), "cluster_state:ok") {
				return false, ip + ": " + string(info)
			}
		}
		return true, ""
	})
}

// largeValues and largeValue are the large values mixed into the reference data: 1,000 of 1 MiB.
const largeValues = 1000

var largeValue = strings.Repeat("L", 1<<20)

// Scale-out of a Cluster Cache 3 × 1 → 5 × 1 holding the reference data with 1,000 values of
// 1 MiB mixed in, under a client writing and reading all along. MIGRATE blocks the source while
// it runs: batches bounded by bytes must keep every source answering its replica and the cluster
// bus, so that no source is failed over mid-migration. It logs, per run, the time, the client's
// failures and longest failing stretch, whether any primary changed, and the keys lost.
func TestMeasureScaleOutWithLargeValues(t *testing.T) {
	runs := measureRuns(t)
	startOperator(t, "a", "", clusterCheckInterval)
	for run := 1; run <= runs; run++ {
		t.Run(fmt.Sprintf("run %d", run), func(t *testing.T) {
			ns := newNamespace(t)
			c := &cachev2.Cache{
				ObjectMeta: metav1.ObjectMeta{Name: "large", Namespace: ns},
				Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 3, ReplicasPerShard: ptr.To[int32](1),
					Version: valkeyVersion, Memory: resource.MustParse("1Gi")},
			}
			if err := admin.Create(context.Background(), c); err != nil {
				t.Fatal(err)
			}
			key := client.ObjectKeyFromObject(c)
			before := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
			vc := clusterClient(t, key)
			smallData.load(t, vc)
			for from := 0; from < largeValues; from += 50 {
				cmds := make(valkeygo.Commands, 0, 50)
				for i := from; i < from+50; i++ {
					cmds = append(cmds, vc.B().Set().Key("large-"+strconv.Itoa(i)).Value(largeValue).Build())
				}
				for _, res := range vc.DoMulti(context.Background(), cmds...) {
					if err := res.Error(); err != nil {
						t.Fatal(err)
					}
				}
			}

			load, after, began, done := scaleUnderLoad(t, key, 5, 20*time.Minute)
			took := done.Sub(began)
			lost, acked := load.lost(t, vc)
			missing := smallData.missing(t, clusterClient(t, key))
			primaryIDs := func(c *cachev2.Cache) []string {
				var ids []string
				for _, n := range c.Status.Nodes {
					if n.Role == cachev2.RolePrimary {
						ids = append(ids, n.ID)
					}
				}
				return ids
			}
			failedOver := 0
			for _, id := range primaryIDs(before) {
				if !slices.Contains(primaryIDs(after), id) {
					failedOver++
				}
			}
			t.Logf("run %d: 3 × 1 → 5 × 1 with %d values of 1 MiB: %s; client: %d requests, %d failed, longest failing stretch %s; "+
				"%d of the 3 first primaries failed over; %d of %d load keys lost their last acknowledged write; %d of %d reference keys missing",
				run, largeValues, took.Round(100*time.Millisecond), load.requests, load.failures, load.longestOutage.Round(time.Millisecond),
				failedOver, lost, acked, missing, smallData.keys)
			deleteAllCaches(t, ns)
		})
	}
}

// A primary of a 3 × 1 Cluster Cache lost under a client writing and reading all along, three
// ways: its server killed (SIGKILL) and restarted in place as a new node, and its pod deleted,
// on the newest release, whose server hands its shard over on SIGTERM, and on the newest 8.x,
// whose pod's preStop hook does. It logs, per run, the time until the Cache is Ready again, the
// client's failures and longest failing stretch, and the keys lost.
func TestMeasurePrimaryLoss(t *testing.T) {
	runs := measureRuns(t)
	startOperator(t, "a", "", clusterCheckInterval)
	older := valkeys[len(valkeys)-2].Version
	for _, loss := range []struct{ how, version string }{
		{"server killed", valkeyVersion}, {"pod deleted", valkeyVersion}, {"pod deleted", older},
	} {
		how := loss.how
		if loss.version != valkeyVersion {
			how += " on " + loss.version
		}
		for run := 1; run <= runs; run++ {
			t.Run(fmt.Sprintf("%s, run %d", how, run), func(t *testing.T) {
				ns := newNamespace(t)
				key := newClusterCacheOf(t, ns, "loss", 3, 1, loss.version)
				c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
				primaryPod, primary := podOfRole(t, c, cachev2.RolePrimary)
				load := &upgradeLoad{}
				ctx, stop := context.WithCancel(context.Background())
				var wg sync.WaitGroup
				vc := clusterClient(t, key)
				// The client serves before the loss: it is measured from a cluster that answers.
				if err := vc.Do(ctx, vc.B().Set().Key("before-the-loss").Value("1").Build()).Error(); err != nil {
					t.Fatal(err)
				}
				wg.Go(func() { load.run(ctx, vc) })
				began := time.Now()
				if loss.how == "server killed" {
					if err := crashServer(ns, primaryPod.Name); err != nil {
						t.Fatal(err)
					}
				} else if err := admin.Delete(context.Background(), primaryPod); err != nil {
					t.Fatal(err)
				}
				waitNewReplicaOn(t, key, primaryPod.Name, primary.ID, 6)
				took := time.Since(began)
				stop()
				wg.Wait()
				lost, acked := load.lost(t, vc)
				t.Logf("%s, run %d: Ready again after %s; client: %d requests, %d failed, longest failing stretch %s; %d of %d keys lost their last acknowledged write",
					how, run, took.Round(100*time.Millisecond), load.requests, load.failures, load.longestOutage.Round(time.Millisecond), lost, acked)
				deleteAllCaches(t, ns)
			})
		}
	}
}

// The drain of the Kubernetes node that holds a primary of a 3 × 1 Cluster Cache, as `kubectl
// drain` does it, under a client writing and reading all along: the node cordoned, then each of
// the Cache's pods on it evicted, an eviction the Cache's PodDisruptionBudget refuses retried at
// once (kubectl drain waits 5 s: this is the drain that disrupts soonest), until none is left
// there and the Cache is Ready again with every pod in sync. It logs, per run, how long that
// took, how many pods were evicted, the client's failures and longest failing stretch, and the
// keys lost.
func TestMeasureNodeDrain(t *testing.T) {
	runs := measureRuns(t)
	startOperator(t, "a", "", clusterCheckInterval)
	ctx := context.Background()
	for run := 1; run <= runs; run++ {
		t.Run(fmt.Sprintf("run %d", run), func(t *testing.T) {
			ns := newNamespace(t)
			key := newClusterCache(t, ns, "drained", 3, 1)
			c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
			primaryPod, _ := podOfRole(t, c, cachev2.RolePrimary)
			node := &corev1.Node{}
			if err := admin.Get(ctx, client.ObjectKey{Name: primaryPod.Spec.NodeName}, node); err != nil {
				t.Fatal(err)
			}
			setUnschedulable := func(on bool) {
				patch := fmt.Sprintf(`{"spec":{"unschedulable":%t}}`, on)
				if err := admin.Patch(ctx, node, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
					t.Fatal(err)
				}
			}
			load := &upgradeLoad{}
			loadCtx, stop := context.WithCancel(ctx)
			var wg sync.WaitGroup
			vc := clusterClient(t, key)
			if err := vc.Do(loadCtx, vc.B().Set().Key("before-the-drain").Value("1").Build()).Error(); err != nil {
				t.Fatal(err)
			}
			wg.Go(func() { load.run(loadCtx, vc) })
			began := time.Now()
			setUnschedulable(true)
			t.Cleanup(func() { setUnschedulable(false) })
			evicted := 0
			testenv.WaitFor(t, 5*time.Minute, "the node drained and the Cache Ready with every pod in sync", func() (bool, string) {
				left := 0
				for _, pod := range cachePods(t, key) {
					if pod.Spec.NodeName != node.Name {
						continue
					}
					left++
					if pod.DeletionTimestamp == nil {
						switch err := evict(&pod); {
						case err == nil:
							evicted++
						case !apierrors.IsTooManyRequests(err):
							t.Fatal(err)
						}
					}
				}
				c, err := getCache(t, key)
				if err != nil {
					return false, err.Error()
				}
				ok, why := settled(c)
				ready, _ := readyPods(t, key, node.Name)
				return left == 0 && ok && ready == 6, fmt.Sprintf("%d pods left on %s, %d of 6 ready; %s", left, node.Name, ready, why)
			})
			took := time.Since(began)
			stop()
			wg.Wait()
			lost, acked := load.lost(t, vc)
			t.Logf("run %d: drained (%d pods evicted) and Ready again after %s; client: %d requests, %d failed, longest failing stretch %s; %d of %d keys lost their last acknowledged write",
				run, evicted, took.Round(100*time.Millisecond), load.requests, load.failures, load.longestOutage.Round(time.Millisecond), lost, acked)
			deleteAllCaches(t, ns)
		})
	}
}

// peakMemory samples, until stop, the memory of the operator (resident) and of the pod of a
// backup's Job (its high-water mark) as the kubelet's cAdvisor would, in MiB.
type peakMemory struct {
	mu              sync.Mutex
	operator, agent float64
}

func samplePeakMemory(ctx context.Context, operator *testenv.Operator, namespace, job string) *peakMemory {
	peak := &peakMemory{}
	go func() {
		// A sample every 50 ms until stopped: the kubelet's cAdvisor samples too.
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			if sizes, err := testenv.MemoryMiB(operator.PID(), "VmRSS"); err == nil {
				peak.mu.Lock()
				peak.operator = max(peak.operator, sizes["VmRSS"])
				peak.mu.Unlock()
			}
			var pods corev1.PodList
			if err := admin.List(ctx, &pods, client.InNamespace(namespace), client.MatchingLabels{batchv1.JobNameLabel: job}); err == nil {
				for _, pod := range pods.Items {
					if pid, err := serverPID(namespace, pod.Name); err == nil {
						if sizes, err := testenv.MemoryMiB(pid, "VmHWM"); err == nil {
							peak.mu.Lock()
							peak.agent = max(peak.agent, sizes["VmHWM"])
							peak.mu.Unlock()
						}
					}
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return peak
}

func (p *peakMemory) read() (operator, agent float64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.operator, p.agent
}

// The throughput of a backup and a restore of data that does not compress, as a client sees it
// (from the object's creation to Completed, from the Cache's to Ready), in MB/s and keys/s, and
// the memory of the operator and of the backup's agent meanwhile.
func TestMeasureBackupThroughput(t *testing.T) {
	runs := measureRuns(t)
	operator := startOperator(t, "a", "", clusterCheckInterval)
	type sample struct{ backupMBs, backupKeys, restoreMBs, restoreKeys, operatorMiB, agentMiB float64 }
	var samples []sample
	for run := 1; run <= runs; run++ {
		t.Run(fmt.Sprintf("run %d", run), func(t *testing.T) {
			namespace := newNamespace(t)
			store := newBackupStore(t, namespace)
			replicas := int32(1)
			cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "sessions", Namespace: namespace},
				Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 3, ReplicasPerShard: &replicas, Version: valkeyVersion, Memory: resource.MustParse("1Gi")}}
			if err := admin.Create(context.Background(), cache); err != nil {
				t.Fatal(err)
			}
			key := client.ObjectKeyFromObject(cache)
			waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
			largeData.load(t, clusterClient(t, key))

			ctx, stop := context.WithCancel(context.Background())
			peak := samplePeakMemory(ctx, operator, namespace, "bench-backup")
			start := time.Now()
			b := waitBackup(t, newBackup(t, namespace, "bench", key.Name, store.location), cachev1alpha1.BackupCompleted, 10*time.Minute)
			backup := time.Since(start)
			stop()
			if b.Status.Keys != int64(largeData.keys) {
				t.Fatalf("the backup holds %d keys, want %d", b.Status.Keys, largeData.keys)
			}

			recreateFromBackup(t, key, b.Name, func(c *cachev2.Cache) { c.Spec = cache.Spec })
			start = time.Now()
			restored := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 10*time.Minute)
			restore := time.Since(start)
			assertRestored(t, restored, largeData.keys)
			operatorMiB, agentMiB := peak.read()
			s := sample{
				backupMBs: float64(b.Status.Bytes) / 1e6 / backup.Seconds(), backupKeys: float64(b.Status.Keys) / backup.Seconds(),
				restoreMBs: float64(b.Status.Bytes) / 1e6 / restore.Seconds(), restoreKeys: float64(b.Status.Keys) / restore.Seconds(),
				operatorMiB: operatorMiB, agentMiB: agentMiB,
			}
			samples = append(samples, s)
			t.Logf("run %d: %d keys, %d bytes of RDB; backup %s (%.0f MB/s, %.0f keys/s), restore to Ready %s (%.0f MB/s, %.0f keys/s); peak memory: operator %.0f MiB, backup agent %.0f MiB",
				run, b.Status.Keys, b.Status.Bytes, backup.Round(100*time.Millisecond), s.backupMBs, s.backupKeys,
				restore.Round(100*time.Millisecond), s.restoreMBs, s.restoreKeys, operatorMiB, agentMiB)
		})
	}
	if len(samples) != runs {
		return
	}
	// The median, and the worst: the lowest throughput, the highest memory.
	spread := func(name string, worstIsHigh bool, of func(sample) float64) string {
		values := make([]float64, 0, runs)
		for _, s := range samples {
			values = append(values, of(s))
		}
		slices.Sort(values)
		worst := values[0]
		if worstIsHigh {
			worst = values[runs-1]
		}
		return fmt.Sprintf("%s median %.0f, worst %.0f", name, values[runs/2], worst)
	}
	t.Logf("%d runs: %s; %s; %s; %s; %s; %s", runs,
		spread("backup MB/s", false, func(s sample) float64 { return s.backupMBs }),
		spread("backup keys/s", false, func(s sample) float64 { return s.backupKeys }),
		spread("restore MB/s", false, func(s sample) float64 { return s.restoreMBs }),
		spread("restore keys/s", false, func(s sample) float64 { return s.restoreKeys }),
		spread("operator MiB", true, func(s sample) float64 { return s.operatorMiB }),
		spread("agent MiB", true, func(s sample) float64 { return s.agentMiB }))
}
