//go:build e2e

package e2e

import (
	"context"
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/catalog"
	"example.com/cache-operator/test/harness/testenv"
)

func TestKillBetweenCreatingTheStatefulSetAndWritingStatus(t *testing.T) {
	runBeside(t, 1)
	etcd := testenv.StartEtcd(t)
	first := startOperator(t, "first", etcd.Endpoint)
	ns := newNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "orders-cache"}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sets, err := admin.Watch(ctx, &appsv1.StatefulSetList{}, client.InNamespace(ns))
	if err != nil {
		t.Fatal(err)
	}

	newCache(t, ns, "orders-cache")
	for ev := range sets.ResultChan() {
		if ev.Type == watch.Added {
			first.Stop(t, syscall.SIGKILL)
			break
		}
	}
	c, err := getCache(t, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the operator when its StatefulSet appeared; status written by then: %v", c.Status.ObservedGeneration != 0)

	startOperator(t, "second", etcd.Endpoint)
	t.Cleanup(func() { deleteAllCaches(t, ns) }) // while the second operator runs
	waitSettled(t, ns, 2*time.Minute)
	assertChildrenAndRecords(t, etcd, ns, map[string]int32{"orders-cache": 3})
}

var stormSeed = flag.Uint64("storm-seed", 0, "seed of the crash storm's random steps; 0 takes one from the clock (the test logs the seed it used)")

// A storm of creates, scales and deletes over 8 Caches, with the operator SIGKILLed and
// restarted at random moments, must end converged: every Cache Ready, one StatefulSet and
// Service per Cache and none for a deleted one, no stuck finalizer, and exactly the live
// Caches' records in the catalogue.
func TestCrashStormConverges(t *testing.T) {
	runBeside(t, 1)
	// Few enough Caches, of few enough pods (one each at first), that the real nodes start them
	// all at once: what the storm tests is the operator's bookkeeping across kills, not how many
	// pods a node starts.
	const caches, steps, kills, mostShards = 8, 40, 4, 3
	seed := *stormSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("random seed %d: replay with -args -storm-seed=%d", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))

	etcd := testenv.StartEtcd(t)
	op := startOperator(t, "storm-0", etcd.Endpoint)
	ns := newNamespace(t)
	killAt := map[int]bool{}
	for len(killAt) < kills {
		killAt[rng.IntN(steps)] = true
	}

	alive := map[string]int32{}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	restarts := 0
	for step := range steps {
		<-tick.C
		switch {
		case step < caches:
			name := fmt.Sprintf("cache-%02d", step)
			newOneNodeCache(t, ns, name)
			alive[name] = 1
		case rng.IntN(4) == 0 && len(alive) > caches/2:
			name := pick(rng, alive)
			if err := admin.Delete(context.Background(), &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}); err != nil {
				t.Fatal(err)
			}
			delete(alive, name)
		default:
			name := pick(rng, alive)
			replicas := int32(1 + rng.IntN(mostShards))
			patchCache(t, client.ObjectKey{Namespace: ns, Name: name}, fmt.Sprintf(`{"spec":{"shards":%d}}`, replicas))
			alive[name] = replicas
		}
		if killAt[step] {
			op.Stop(t, syscall.SIGKILL)
			restarts++
			op = startOperator(t, fmt.Sprintf("storm-%d", restarts), etcd.Endpoint)
		}
	}
	t.Cleanup(func() { deleteAllCaches(t, ns) }) // while the last operator runs

	testenv.WaitFor(t, 3*time.Minute, "exactly the live Caches to remain", func() (bool, string) {
		var list cachev2.CacheList
		if err := admin.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		var names []string
		for _, c := range list.Items {
			names = append(names, c.Name)
		}
		return slices.Equal(names, slices.Sorted(maps.Keys(alive))), fmt.Sprintf("%d Caches: %v", len(names), names)
	})
	waitSettled(t, ns, 3*time.Minute)
	assertChildrenAndRecords(t, etcd, ns, alive)
}

func pick(rng *rand.Rand, alive map[string]int32) string {
	names := slices.Sorted(maps.Keys(alive))
	return names[rng.IntN(len(names))]
}

// assertChildrenAndRecords waits until the namespace holds one StatefulSet and one Service per
// live Cache and nothing else (the garbage collector takes a moment), and checks that the
// catalogue lists exactly the live Caches' nodes.
func assertChildrenAndRecords(t *testing.T, etcd *testenv.Etcd, namespace string, alive map[string]int32) {
	t.Helper()
	want := map[string]int{}
	for name := range alive {
		want[name] = 1
	}
	testenv.WaitFor(t, time.Minute, "one StatefulSet and Service per live Cache", func() (bool, string) {
		sets, svcs := children(t, namespace)
		return maps.Equal(sets, want) && maps.Equal(svcs, want), fmt.Sprintf("StatefulSets %v, Services %v", sets, svcs)
	})

	wantRecords := map[string]string{}
	for name, replicas := range alive {
		key := catalog.Key{Namespace: namespace, Name: name}
		maps.Copy(wantRecords, e2eLayout.Records(key, catalog.StatefulSetNodes(key, replicas, "cluster.local", 6379)))
	}
	c := etcd.Client(t)
	defer c.Close() //nolint:errcheck
	nsDir := "/skydns/internal/example/caches/" + namespace + "/"
	testenv.WaitFor(t, 30*time.Second, "the catalogue to list exactly the live Caches", func() (bool, string) {
		got := testenv.KeyValues(t, c, nsDir)
		var extra, missing []string
		for key, value := range got {
			if wantRecords[key] != value {
				extra = append(extra, key)
			}
		}
		for key := range wantRecords {
			if _, ok := got[key]; !ok {
				missing = append(missing, key)
			}
		}
		slices.Sort(extra)
		slices.Sort(missing)
		return len(extra)+len(missing) == 0, fmt.Sprintf("%d records, want %d; not wanted or wrong: %v; missing: %v", len(got), len(wantRecords), extra, missing)
	})
}
