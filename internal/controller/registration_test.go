//go:build integration

package controller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clientv3 "go.etcd.io/etcd/client/v3"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/catalog"
	"example.com/cache-operator/internal/metrics"
	"example.com/cache-operator/test/harness/testenv"
)

var testLayout = catalog.Layout{Prefix: "/skydns", Zone: "caches.example.internal", TTL: 30}

// countingKV counts the requests that write to etcd.
type countingKV struct {
	clientv3.KV
	writes *atomic.Int64
}

func (k countingKV) Put(ctx context.Context, key, val string, opts ...clientv3.OpOption) (*clientv3.PutResponse, error) {
	k.writes.Add(1)
	return k.KV.Put(ctx, key, val, opts...)
}

func (k countingKV) Delete(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.DeleteResponse, error) {
	k.writes.Add(1)
	return k.KV.Delete(ctx, key, opts...)
}

func (k countingKV) Txn(ctx context.Context) clientv3.Txn {
	k.writes.Add(1)
	return k.KV.Txn(ctx)
}

// newCatalog is the catalogue on a real etcd, as the operator uses it, with its writes counted.
func newCatalog(t *testing.T, endpoint string) (catalog.Catalog, *atomic.Int64) {
	t.Helper()
	c, err := catalog.EtcdConfig{Endpoints: []string{endpoint}, DialTimeout: time.Second}.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	var writes atomic.Int64
	c.KV = countingKV{KV: c.KV, writes: &writes}
	return metrics.InstrumentCatalog(&catalog.Etcd{Client: c, Layout: testLayout, Timeout: time.Second}), &writes
}

// records is what etcd holds for the namespace's orders-cache.
func records(t *testing.T, etcd *testenv.Etcd, namespace string) map[string]string {
	t.Helper()
	c := etcd.Client(t)
	defer c.Close() //nolint:errcheck
	return testenv.KeyValues(t, c, testLayout.Dir(catalog.Key{Namespace: namespace, Name: "orders-cache"}))
}

func wantRecords(namespace string, replicas int) map[string]string {
	want := map[string]string{}
	for i := range replicas {
		key := fmt.Sprintf("/skydns/internal/example/caches/%s/orders-cache/node-%d", namespace, i)
		want[key] = fmt.Sprintf(`{"host":"orders-cache-%d.orders-cache.%s.svc.cluster.local","port":6379,"ttl":30}`, i, namespace)
	}
	return want
}

func assertRecords(t *testing.T, etcd *testenv.Etcd, namespace string, replicas int) {
	t.Helper()
	got, want := records(t, etcd, namespace), wantRecords(namespace, replicas)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("catalogue holds\n%v\nwant\n%v", got, want)
	}
}

func scale(t *testing.T, namespace string, replicas int32) *cachev2.Cache {
	t.Helper()
	c := getCache(t, namespace)
	patch := client.RawPatch(client.Merge.Type(), fmt.Appendf(nil, `{"spec":{"shards":%d}}`, replicas))
	if err := k8s.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}
	return c
}

func deleteCache(t *testing.T, namespace string) {
	t.Helper()
	if err := k8s.Delete(context.Background(), getCache(t, namespace)); err != nil {
		t.Fatal(err)
	}
}

func isGone(t *testing.T, namespace string) bool {
	t.Helper()
	var c cachev2.Cache
	err := k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "orders-cache"}, &c)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

// A new Cache's first pass creates its Service and StatefulSet and writes nothing else, so that
// a fleet created at once has all its StatefulSets before any Cache's other writes. The next
// pass, which the children's creation brings, adds the finalizer, registers the Cache and
// writes its status.
func TestFirstPassOnlyCreatesTheChildren(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	cat, _ := newCatalog(t, etcd.Endpoint)
	ns := newNamespace(t)
	cache := newCache(t, ns)
	r := newReconciler(k8s, cat)

	if err := reconcile(r, cache); err != nil {
		t.Fatal(err)
	}
	assertOneOfEachChild(t, ns)
	if c := getCache(t, ns); c.ResourceVersion != cache.ResourceVersion {
		t.Errorf("the first pass wrote the Cache: finalizers %v, status %+v", c.Finalizers, c.Status)
	}
	if got := records(t, etcd, ns); len(got) != 0 {
		t.Errorf("the first pass registered the Cache: %v", got)
	}

	if err := reconcile(r, cache); err != nil {
		t.Fatal(err)
	}
	if !controllerutil.ContainsFinalizer(getCache(t, ns), cachev2.Finalizer) {
		t.Error("no finalizer after the second pass")
	}
	assertRecords(t, etcd, ns, 3)
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
}

func TestCatalogFollowsTheCacheAndUnchangedPassesWriteNothing(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	cat, etcdWrites := newCatalog(t, etcd.Endpoint)
	ns := newNamespace(t)
	cache := newCache(t, ns)
	firstPass(t, cache)

	if err := reconcile(newReconciler(k8s, cat), cache); err != nil {
		t.Fatal(err)
	}
	if !controllerutil.ContainsFinalizer(getCache(t, ns), cachev2.Finalizer) {
		t.Error("no finalizer on a registered Cache")
	}
	assertRecords(t, etcd, ns, 3)
	registered := meta.FindStatusCondition(getCache(t, ns).Status.Conditions, cachev2.ConditionRegistered)
	if registered == nil || registered.Status != metav1.ConditionTrue || registered.Reason != cachev2.ReasonRegistered {
		t.Errorf("Registered = %+v, want True/Registered", registered)
	}

	etcdWrites.Store(0)
	counting, apiWrites := countingWrites(k8s)
	for range 10 {
		if err := reconcile(newReconciler(counting, cat), cache); err != nil {
			t.Fatal(err)
		}
	}
	if etcdWrites.Load() != 0 || apiWrites.Load() != 0 {
		t.Errorf("ten unchanged passes wrote %d times to etcd and %d times to the API server, want 0 and 0",
			etcdWrites.Load(), apiWrites.Load())
	}

	for _, replicas := range []int32{5, 2} {
		scale(t, ns, replicas)
		if err := reconcile(newReconciler(k8s, cat), cache); err != nil {
			t.Fatal(err)
		}
		assertRecords(t, etcd, ns, int(replicas))
	}
}

// registeredByAManager starts an etcd and a manager with the catalogue on it, creates a Cache
// and waits until its three records are there.
func registeredByAManager(t *testing.T) (*testenv.Etcd, string) {
	t.Helper()
	etcd := testenv.StartEtcd(t)
	cat, _ := newCatalog(t, etcd.Endpoint)
	ns := newNamespace(t)
	startManager(t, ns, cat)
	newCache(t, ns)
	waitFor(t, "three records", func() (bool, string) {
		got := records(t, etcd, ns)
		return len(got) == 3, fmt.Sprint(got)
	})
	return etcd, ns
}

func TestDeletionDeregistersThenReleasesTheCache(t *testing.T) {
	etcd, ns := registeredByAManager(t)

	deleteCache(t, ns)

	waitFor(t, "the Cache to be gone", func() (bool, string) { return isGone(t, ns), "still there" })
	if got := records(t, etcd, ns); len(got) != 0 {
		t.Errorf("records left behind: %v", got)
	}
}

// registeredByAPass makes a Cache and registers it with one pass of a reconciler of its own,
// with a catalogue on a new etcd.
func registeredByAPass(t *testing.T) (etcd *testenv.Etcd, cat catalog.Catalog, ns string, cache *cachev2.Cache) {
	t.Helper()
	etcd = testenv.StartEtcd(t)
	cat, _ = newCatalog(t, etcd.Endpoint)
	ns = newNamespace(t)
	cache = newCache(t, ns)
	firstPass(t, cache)
	if err := reconcile(newReconciler(k8s, cat), cache); err != nil {
		t.Fatal(err)
	}
	return etcd, cat, ns, cache
}

func TestCrashBetweenDeregisteringAndReleasingConverges(t *testing.T) {
	etcd, cat, ns, cache := registeredByAPass(t)
	deleteCache(t, ns)
	// The process dies after deregistering, before its finalizer patch reaches the API server.
	crashing := interceptor.NewClient(k8s, interceptor.Funcs{
		Patch: func(context.Context, client.WithWatch, client.Object, client.Patch, ...client.PatchOption) error {
			return errors.New("process killed")
		},
	})

	if err := reconcile(newReconciler(crashing, cat), cache); err == nil {
		t.Fatal("reconcile succeeded although removing the finalizer failed")
	}
	if got := records(t, etcd, ns); len(got) != 0 {
		t.Errorf("records left after deregistering: %v", got)
	}
	if !controllerutil.ContainsFinalizer(getCache(t, ns), cachev2.Finalizer) {
		t.Fatal("the finalizer is gone although its removal failed")
	}

	// The next pass deregisters again (nothing is there: success) and releases the Cache.
	if err := reconcile(newReconciler(k8s, cat), cache); err != nil {
		t.Fatalf("the pass after the crash: %v", err)
	}
	if !isGone(t, ns) {
		t.Error("the Cache is still there")
	}
}

func TestCatalogDownDuringDeletionKeepsTheCacheAndSaysWhy(t *testing.T) {
	etcd, ns := registeredByAManager(t)
	errorsBefore := counterValue(t, "cache_operator_catalog_operation_errors_total", "deregister")

	etcd.Stop(t)
	deleteCache(t, ns)

	// The condition says why the Cache stays.
	waitFor(t, "Registered=False CatalogUnavailable", func() (bool, string) {
		c := getCache(t, ns)
		cond := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionRegistered)
		ok := c.DeletionTimestamp != nil && cond != nil && cond.Status == metav1.ConditionFalse &&
			cond.Reason == cachev2.ReasonCatalogUnavailable && strings.Contains(cond.Message, "stays Terminating")
		return ok, fmt.Sprintf("%+v", cond)
	})
	// So does an event.
	waitFor(t, "a DeregistrationFailed event", func() (bool, string) {
		var list eventsv1.EventList
		if err := k8s.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			if e.Reason == EventDeregistrationFailed && e.Regarding.Name == "orders-cache" && e.Type == "Warning" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none DeregistrationFailed", len(list.Items))
	})
	// And the metrics an alert reads.
	if after := counterValue(t, "cache_operator_catalog_operation_errors_total", "deregister"); after <= errorsBefore {
		t.Errorf("deregister errors went from %v to %v, want an increase", errorsBefore, after)
	}
	terminating, oldest := terminatingMetrics(t, ns)
	if terminating != 1 || oldest <= 0 {
		t.Errorf("cache_operator_caches_terminating = %v, oldest age = %v; want the one stuck Cache counted", terminating, oldest)
	}
	if isGone(t, ns) {
		t.Fatal("the Cache was deleted although its record could not be removed")
	}

	// The catalogue comes back: deletion completes with no manual step.
	etcd.Start(t)
	waitFor(t, "the Cache to be gone", func() (bool, string) { return isGone(t, ns), "still there" })
	if got := records(t, etcd, ns); len(got) != 0 {
		t.Errorf("records left behind: %v", got)
	}
}

func TestAbandonAnnotationReleasesACacheWhoseCatalogIsGone(t *testing.T) {
	// A catalogue that never answers: nothing listens on this endpoint.
	gone, _ := newCatalog(t, "http://127.0.0.1:1")
	ns := newNamespace(t)
	cache := newCache(t, ns)
	firstPass(t, cache)
	r := newReconciler(k8s, gone)
	if err := reconcile(r, cache); err == nil {
		t.Fatal("registration in an unreachable catalogue succeeded")
	}
	deleteCache(t, ns)
	if err := reconcile(r, cache); err == nil || isGone(t, ns) {
		t.Fatalf("deletion went through without deregistering (reconcile: %v)", err)
	}

	c := getCache(t, ns)
	patch := client.MergeFrom(c.DeepCopy())
	c.Annotations = map[string]string{cachev2.AnnotationAbandonCatalogRecord: "true"}
	if err := k8s.Patch(context.Background(), c, patch); err != nil {
		t.Fatal(err)
	}

	if err := reconcile(r, cache); err != nil {
		t.Fatalf("reconcile with the escape hatch: %v", err)
	}
	if !isGone(t, ns) {
		t.Error("the Cache is still there")
	}
	if !hasEvent(r.Recorder.(*events.FakeRecorder), EventCatalogRecordAbandoned) {
		t.Error("no event says that the record was left behind")
	}
}

func TestWithoutACatalogThereIsNoFinalizer(t *testing.T) {
	ns := newNamespace(t)
	cache := newCache(t, ns)
	firstPass(t, cache)
	if err := reconcile(newReconciler(k8s, nil), cache); err != nil {
		t.Fatal(err)
	}
	c := getCache(t, ns)
	if meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady) == nil {
		t.Fatal("the second pass wrote no status")
	}
	if len(c.Finalizers) != 0 {
		t.Errorf("finalizers = %v, want none", c.Finalizers)
	}
	if meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionRegistered) != nil {
		t.Error("a Registered condition without a catalogue")
	}

	deleteCache(t, ns)
	if !isGone(t, ns) {
		t.Error("the Cache was not deleted at once")
	}
}

func hasEvent(r *events.FakeRecorder, reason string) bool {
	for {
		select {
		case e := <-r.Events:
			if strings.Contains(e, reason) {
				return true
			}
		default:
			return false
		}
	}
}

func counterValue(t *testing.T, name, operation string) float64 {
	t.Helper()
	families, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			if labelValue(m, "operation") == operation {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("metric %s{operation=%q} is not exported", name, operation)
	return 0
}

func labelValue(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// terminatingMetrics collects the Caches metrics from the API server's view of one namespace: the
// test's own, so that other tests' Caches are not counted.
func terminatingMetrics(t *testing.T, namespace string) (count, oldestAge float64) {
	t.Helper()
	registry := prometheus.NewRegistry()
	registry.MustRegister(metrics.NewCachesCollector(client.NewNamespacedClient(k8s, namespace), func() bool { return true }))
	families, err := registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		switch f.GetName() {
		case "cache_operator_caches_terminating":
			count = f.GetMetric()[0].GetGauge().GetValue()
		case "cache_operator_oldest_terminating_cache_age_seconds":
			oldestAge = f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return count, oldestAge
}

// A pass that acts on a view of the Cache from before its deletion (a new operator's first list,
// served from the API server's watch cache) never writes its records: the operator before had
// deregistered it and was killed with the patch that removes its finalizer still on its way.
// Once that lands no pass would finalize the Cache again, so a record written, even one removed
// again right after, is left behind for good if the operator dies between the two or the write
// reports a failure it did not have. Nor does it write them once the Cache is gone and another
// is made under its name, which has no finalizer until its own pass adds it.
func TestAPassOnAViewFromBeforeTheDeletionLeavesNoRecord(t *testing.T) {
	for _, madeAgain := range []bool{false, true} {
		t.Run(fmt.Sprintf("made again %t", madeAgain), func(t *testing.T) {
			etcd, cat, ns, _ := registeredByAPass(t)
			stale := getCache(t, ns)
			// The operator before deregisters the deleted Cache; its finalizer patch has not landed.
			deleteCache(t, ns)
			if err := cat.Deregister(context.Background(), catalog.Key{Namespace: ns, Name: stale.Name}); err != nil {
				t.Fatal(err)
			}
			if madeAgain {
				// It lands; a Cache of the same name is made, which no pass has seen yet.
				if err := reconcile(newReconciler(k8s, cat), stale); err != nil || !isGone(t, ns) {
					t.Fatalf("finalizing the Cache: %v", err)
				}
				newCache(t, ns)
			}

			staleView := interceptor.NewClient(k8s, interceptor.Funcs{
				Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
					if cache, ok := obj.(*cachev2.Cache); ok {
						stale.DeepCopyInto(cache)
						return nil
					}
					return c.Get(ctx, key, obj, opts...)
				},
			})
			// A new operator: a catalogue client of its own.
			fresh, writes := newCatalog(t, etcd.Endpoint)
			r := newReconciler(staleView, fresh)
			r.APIReader = k8s
			if err := reconcile(r, stale); err != nil {
				t.Errorf("the pass on the view from before the deletion: %v", err)
			}
			if n := writes.Load(); n != 0 {
				t.Errorf("the pass on a view from before the deletion wrote to the catalogue %d times", n)
			}
			if got := records(t, etcd, ns); len(got) != 0 {
				t.Errorf("records left by the pass on a view from before the deletion: %v", got)
			}
		})
	}
}

// A Cache that the API server deleted past its finalizer (the deletion began before a pass added
// the finalizer, and went ahead: the API server checks the finalizers once, as a deletion
// begins) is deregistered by the pass its deletion brings. Its last view carries the finalizer
// and no deletion timestamp; that of a Cache finalized as usual has a deletion timestamp, and
// its deletion deregisters nothing more.
func TestACacheDeletedPastItsFinalizerIsDeregistered(t *testing.T) {
	etcd, cat, ns, _ := registeredByAPass(t)
	last := getCache(t, ns)
	if !controllerutil.ContainsFinalizer(last, cachev2.Finalizer) {
		t.Fatal("the registered Cache has no finalizer")
	}
	// Gone from the API server without a pass of ours.
	gone := last.DeepCopy()
	controllerutil.RemoveFinalizer(gone, cachev2.Finalizer)
	if err := k8s.Update(context.Background(), gone); err != nil {
		t.Fatal(err)
	}
	deleteCache(t, ns)

	r := newReconciler(k8s, cat)
	handler := deletedUnfinalized{deletions: &r.unfinalized}
	queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[ctrl.Request]())
	defer queue.ShutDown()
	finalized := last.DeepCopy()
	finalized.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	handler.Delete(context.Background(), event.DeleteEvent{Object: finalized}, queue)
	if err := reconcile(r, last); err != nil {
		t.Fatal(err)
	}
	if got := records(t, etcd, ns); len(got) == 0 || queue.Len() != 0 {
		t.Fatalf("after the deletion of a Cache finalized as usual: %d records, %d passes queued; want them kept, none", len(got), queue.Len())
	}

	handler.Delete(context.Background(), event.DeleteEvent{Object: last}, queue)
	if queue.Len() != 1 {
		t.Fatalf("%d passes queued by the deletion past the finalizer, want 1", queue.Len())
	}
	if err := reconcile(r, last); err != nil {
		t.Fatal(err)
	}
	if got := records(t, etcd, ns); len(got) != 0 {
		t.Errorf("records left of a Cache deleted past its finalizer: %v", got)
	}
}
