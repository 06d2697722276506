//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/catalog"
	"example.com/cache-operator/test/harness/testenv"
)

// readyHistory records every Ready condition a Cache is stored with, from a watch, so that a
// test sees states that last only a moment.
type readyHistory struct {
	mu     sync.Mutex
	states []string
	// watched is the resourceVersion of the Cache as the watch last delivered it.
	watched string
}

func watchReady(t *testing.T, key client.ObjectKey) *readyHistory {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := admin.Watch(ctx, &cachev2.CacheList{}, client.InNamespace(key.Namespace),
		client.MatchingFields{"metadata.name": key.Name})
	if err != nil {
		t.Fatal(err)
	}
	h := &readyHistory{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*cachev2.Cache)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			h.mu.Lock()
			if ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady); ready != nil {
				h.states = append(h.states, fmt.Sprintf("gen=%d observed=%d %s/%s %s",
					c.Generation, c.Status.ObservedGeneration, ready.Status, ready.Reason, ready.Message))
			}
			h.watched = c.ResourceVersion
			h.mu.Unlock()
		}
	}()
	t.Cleanup(func() { w.Stop(); cancel(); <-done })
	return h
}

// saw reports whether some recorded state matches one of the given ones.
func (h *readyHistory) saw(states ...string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.ContainsFunc(h.states, func(s string) bool { return slices.Contains(states, s) })
}

// caughtUp waits until the watch has delivered the Cache as it is stored now. A test that waited
// on a read of the Cache can be ahead of the watch, which delivers in order but late: once caught
// up, the history holds every state before the one the test read.
func (h *readyHistory) caughtUp(t *testing.T, key client.ObjectKey) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, "the watch of "+key.String()+" to catch up", func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.watched == c.ResourceVersion, fmt.Sprintf("watched resourceVersion %q, stored %q", h.watched, c.ResourceVersion)
	})
}

func (h *readyHistory) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(h.states, "\n")
}

func TestWorkedExampleScaleThreeToFive(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	startOperator(t, "a", etcd.Endpoint)
	ctx := context.Background()
	key := client.ObjectKey{Namespace: "default", Name: "orders-cache"}
	if err := cluster.Kubectl(ctx, "apply", "-f", filepath.Join(testenv.Root(), "config", "samples", "cache_v2_standalone.yaml")); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cluster.Kubectl(ctx, "delete", "cache/orders-cache", "--namespace", "default", "--wait", "--timeout=60s")
	})
	if err := cluster.Kubectl(ctx, "wait", "--for=condition=Ready", "cache/orders-cache", "--timeout=60s"); err != nil {
		t.Fatal(err)
	}
	before, err := getCache(t, key)
	if err != nil {
		t.Fatal(err)
	}
	history := watchReady(t, key)

	if err := cluster.Kubectl(ctx, "patch", "cache/orders-cache", "--type", "merge", "-p", `{"spec":{"shards":5}}`); err != nil {
		t.Fatal(err)
	}
	if err := cluster.Kubectl(ctx, "wait", "--for=condition=Ready", "cache/orders-cache", "--timeout=60s"); err != nil {
		t.Fatal(err)
	}

	after, err := getCache(t, key)
	if err != nil {
		t.Fatal(err)
	}
	gen := before.Generation + 1
	if after.Generation != gen {
		t.Errorf("generation went from %d to %d, want one step", before.Generation, after.Generation)
	}
	testenv.WaitFor(t, 30*time.Second, "Ready for the 5-replica spec", func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
		ok, why := settled(c)
		return ok && ready.Reason == cachev2.ReasonAllReplicasReady && ready.Message == "5/5 replicas ready" &&
			c.Status.ReadyReplicas == 5, why
	})
	history.caughtUp(t, key)
	progressing := func(n int) string {
		return fmt.Sprintf("gen=%d observed=%d False/Progressing %d/5 replicas ready", gen, gen, n)
	}
	if !history.saw(progressing(3), progressing(4)) {
		t.Errorf("the Cache never reported Progressing 3/5 or 4/5 for generation %d; it went through:\n%s", gen, history)
	}

	for _, name := range []string{"orders-cache-3", "orders-cache-4"} {
		var pod corev1.Pod
		if err := admin.Get(ctx, client.ObjectKey{Namespace: "default", Name: name}, &pod); err != nil {
			t.Errorf("pod %s: %v", name, err)
			continue
		}
		if !podReady(&pod) {
			t.Errorf("pod %s is not Ready", name)
		}
	}
	assertNodesServe(t, key, after.Spec.Memory)
}

func podReady(pod *corev1.Pod) bool {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func TestDeletionRemovesChildrenRecordsAndFinalizer(t *testing.T) {
	runBeside(t, 1)
	etcd := testenv.StartEtcd(t)
	startOperator(t, "a", etcd.Endpoint)
	ns := newNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "orders-cache"}
	c := newCache(t, ns, "orders-cache")
	waitSettled(t, ns, startTimeout)
	etcdClient := etcd.Client(t)
	defer etcdClient.Close() //nolint:errcheck
	dir := catalogDir(key)
	if got := testenv.KeyValues(t, etcdClient, dir); len(got) != 3 {
		t.Fatalf("catalogue holds %v, want three records", got)
	}

	if err := admin.Delete(context.Background(), c); err != nil {
		t.Fatal(err)
	}

	testenv.WaitFor(t, startTimeout, "the Cache, its children and its pods to be gone", func() (bool, string) {
		_, err := getCache(t, key)
		sets, svcs := children(t, ns)
		var pods corev1.PodList
		if err := admin.List(context.Background(), &pods, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		return isNotFound(err) && len(sets) == 0 && len(svcs) == 0 && len(pods.Items) == 0,
			fmt.Sprintf("cache: %v, StatefulSets %v, Services %v, %d pods", err, sets, svcs, len(pods.Items))
	})
	if got := testenv.KeyValues(t, etcdClient, dir); len(got) != 0 {
		t.Errorf("records left behind: %v", got)
	}
}

// e2eLayout is the catalogue layout of the operator's default flags.
var e2eLayout = catalog.Layout{Prefix: "/skydns", Zone: "caches.example.internal", TTL: 30}

func catalogDir(key client.ObjectKey) string {
	return e2eLayout.Dir(catalog.Key{Namespace: key.Namespace, Name: key.Name})
}

// An operator scoped to some namespaces (--watch-namespaces) manages their Caches and nothing
// else: a Cache in another namespace gets no status, no finalizer and no children, and the
// sweep leaves that namespace's catalogue records, while one in its own namespace, of a Cache
// that is gone, is swept. The backups' admission, which answers for every namespace, still
// admits a backup of a Cache outside the scope and refuses one of no Cache.
func TestAnOperatorScopedToItsNamespacesLeavesOthersAlone(t *testing.T) {
	runBeside(t, 1)
	ctx := context.Background()
	etcd := testenv.StartEtcd(t)
	operator := startOperator(t, "a", etcd.Endpoint, "--catalog-sweep-interval", "1s")
	ns := newNamespace(t)
	outside := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-outside-"}}
	if err := admin.Create(ctx, outside); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), outside) })
	other := newCache(t, outside.Name, "orders-cache")
	cat := &catalog.Etcd{Client: etcd.Client(t), Layout: e2eLayout, Timeout: 5 * time.Second}
	goneInside := catalog.Key{Namespace: ns, Name: "gone"}
	goneOutside := catalog.Key{Namespace: outside.Name, Name: "gone"}
	for _, key := range []catalog.Key{goneInside, goneOutside} {
		if _, err := cat.Sync(ctx, key, catalog.StatefulSetNodes(key, 1, "cluster.local", 6379), nil); err != nil {
			t.Fatal(err)
		}
	}

	newCache(t, ns, "orders-cache")
	waitSettled(t, ns, startTimeout)
	testenv.WaitFor(t, time.Minute, "the records of the Cache gone from the operator's namespace swept", func() (bool, string) {
		got := testenv.KeyValues(t, etcd.Client(t), e2eLayout.Dir(goneInside))
		return len(got) == 0, fmt.Sprintf("%d records", len(got))
	})

	c, err := getCache(t, client.ObjectKeyFromObject(other))
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Status.Conditions) > 0 || len(c.Finalizers) > 0 {
		t.Errorf("the Cache outside the operator's namespaces was touched: finalizers %v, conditions %+v", c.Finalizers, c.Status.Conditions)
	}
	if sets, svcs := children(t, outside.Name); len(sets)+len(svcs) > 0 {
		t.Errorf("the Cache outside the operator's namespaces got children: StatefulSets %v, Services %v", sets, svcs)
	}
	if got := testenv.KeyValues(t, etcd.Client(t), e2eLayout.Dir(goneOutside)); len(got) == 0 {
		t.Errorf("the sweep removed the records of a Cache outside the operator's namespaces")
	}

	location := cachev1alpha1.BucketLocation{Endpoint: "127.0.0.1:9", Bucket: "backups", CredentialsSecret: "bucket-credentials"}
	backup := &cachev1alpha1.CacheBackup{ObjectMeta: metav1.ObjectMeta{Namespace: outside.Name, Name: "nightly"},
		Spec: cachev1alpha1.CacheBackupSpec{CacheName: other.Name, Storage: location}}
	if err := admin.Create(ctx, backup); err != nil {
		t.Errorf("a backup of a Cache outside the operator's namespaces was refused: %v", err)
	}
	typo := &cachev1alpha1.CacheBackup{ObjectMeta: metav1.ObjectMeta{Namespace: outside.Name, Name: "typo"},
		Spec: cachev1alpha1.CacheBackupSpec{CacheName: "ordres-cache", Storage: location}}
	if err := admin.Create(ctx, typo); err == nil || !strings.Contains(err.Error(), "does not exist in namespace "+outside.Name) {
		t.Errorf("a backup of no Cache outside the operator's namespaces was admitted (%v); want it refused", err)
	}
	noErrorLogged(t, operator, "scoped to its namespaces")
}

// The catalogue down when the operator starts delays only what needs it: the operator starts,
// a Cache is created and serves, Registered says CatalogUnavailable meanwhile, and once etcd is
// back the Cache's records are written and Registered turns True, the operator running all
// along.
func TestACatalogueDownAtStartDelaysOnlyTheRegistration(t *testing.T) {
	runBeside(t, 1)
	etcd := testenv.StartEtcd(t)
	etcd.Stop(t)
	operator := startOperator(t, "a", etcd.Endpoint)
	ns := newNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "orders-cache"}
	newCache(t, ns, key.Name)
	registered := func(c *cachev2.Cache) *metav1.Condition {
		return meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionRegistered)
	}
	c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonAllReplicasReady, 2*time.Minute)
	testenv.WaitFor(t, time.Minute, "Registered=False CatalogUnavailable", func() (bool, string) {
		var err error
		if c, err = getCache(t, key); err != nil {
			return false, err.Error()
		}
		cond := registered(c)
		return cond != nil && cond.Status == metav1.ConditionFalse && cond.Reason == cachev2.ReasonCatalogUnavailable, fmt.Sprintf("%+v", cond)
	})

	etcd.Start(t)
	testenv.WaitFor(t, 2*time.Minute, "Registered=True once the catalogue is back", func() (bool, string) {
		var err error
		if c, err = getCache(t, key); err != nil {
			return false, err.Error()
		}
		cond := registered(c)
		return cond != nil && cond.Status == metav1.ConditionTrue, fmt.Sprintf("%+v", cond)
	})
	if got := testenv.KeyValues(t, etcd.Client(t), catalogDir(key)); len(got) != 3 {
		t.Errorf("catalogue holds %v, want three records", got)
	}
	select {
	case <-operator.Exited:
		t.Errorf("the operator exited while the catalogue was down")
	default:
	}
}
