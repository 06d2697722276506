//go:build integration

package controller

import (
	"context"
	"os"
	"sync/atomic"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/catalog"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/test/harness/testenv"
)

// The tests of this package share one real etcd and kube-apiserver. Each test works in a
// namespace of its own, and a manager a test starts only watches that namespace, so tests
// never see each other's objects.
var (
	restConfig *rest.Config
	// k8s talks to the API server directly, with no cache: what it reads is what is stored.
	k8s client.WithWatch
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr)))
	testenv.Main(m, func(cfg *rest.Config) (err error) {
		restConfig = cfg
		k8s, err = client.NewWithWatch(cfg, client.Options{Scheme: NewScheme()})
		return err
	})
}

func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "test-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// newCache creates a Cache of three replicas as a user would and returns it as stored.
func newCache(t *testing.T, namespace string) *cachev2.Cache {
	t.Helper()
	return newCacheWith(t, namespace, nil)
}

// newCacheWith is newCache with the spec set as set says before the Cache is created (nil: as
// newCache makes it), for what may be set only then.
func newCacheWith(t *testing.T, namespace string, set func(*cachev2.CacheSpec)) *cachev2.Cache {
	t.Helper()
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-cache", Namespace: namespace},
		Spec:       cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 3, Version: "8.1.1", Memory: resource.MustParse("256Mi")},
	}
	if set != nil {
		set(&c.Spec)
	}
	if err := k8s.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

// newReconciler is a reconciler as cmd/main.go builds it, on client c (for reads through the
// cache and around it), with the catalogue cat (nil: none) and an event recorder that keeps
// events in memory.
func newReconciler(c client.Client, cat catalog.Catalog) *CacheReconciler {
	return &CacheReconciler{
		Client:        c,
		APIReader:     c,
		Recorder:      events.NewFakeRecorder(100),
		Images:        resources.DefaultImages,
		Catalog:       cat,
		ClusterDomain: "cluster.local",
	}
}

// firstPass runs a new Cache's first pass, which creates its children and writes nothing else
// (see Reconcile), so that the pass a test makes next is the one that adds the finalizer,
// registers the Cache and writes its status.
func firstPass(t *testing.T, c *cachev2.Cache) {
	t.Helper()
	if err := reconcile(newReconciler(k8s, nil), c); err != nil {
		t.Fatal(err)
	}
}

func reconcile(r *CacheReconciler, c *cachev2.Cache) error {
	_, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(c)})
	return err
}

// startManager runs the operator's manager, as cmd/main.go sets it up, on one namespace until
// the test ends, and returns its client, which reads the informers. Each call starts with empty
// informer caches, like a freshly started operator.
func startManager(t *testing.T, namespace string, cat catalog.Catalog) client.Client {
	t.Helper()
	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:     NewScheme(),
		Cache:      InformerOptions("", namespace),
		Metrics:    metricsserver.Options{BindAddress: "0"},
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	r := newReconciler(mgr.GetClient(), cat)
	r.APIReader = mgr.GetAPIReader()
	r.Recorder = mgr.GetEventRecorder("cache-operator")
	if err := r.SetupWithManager(t.Context(), mgr, 2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	return mgr.GetClient()
}

// waitFor waits for cond with a timeout generous for a loaded machine.
func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, what, cond)
}

// countingWrites wraps c so that every request that would change something stored is counted.
func countingWrites(c client.WithWatch) (client.WithWatch, *atomic.Int64) {
	var n atomic.Int64
	return interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			n.Add(1)
			return c.Create(ctx, obj, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			n.Add(1)
			return c.Update(ctx, obj, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, obj client.Object, p client.Patch, opts ...client.PatchOption) error {
			n.Add(1)
			return c.Patch(ctx, obj, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			n.Add(1)
			return c.Delete(ctx, obj, opts...)
		},
		DeleteAllOf: func(ctx context.Context, c client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			n.Add(1)
			return c.DeleteAllOf(ctx, obj, opts...)
		},
		Apply: func(ctx context.Context, c client.WithWatch, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			n.Add(1)
			return c.Apply(ctx, obj, opts...)
		},
		SubResourceCreate: func(ctx context.Context, c client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			n.Add(1)
			return c.SubResource(sub).Create(ctx, obj, subObj, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			n.Add(1)
			return c.SubResource(sub).Update(ctx, obj, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, obj client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			n.Add(1)
			return c.SubResource(sub).Patch(ctx, obj, p, opts...)
		},
	}), &n
}

func getCache(t *testing.T, namespace string) *cachev2.Cache {
	t.Helper()
	var c cachev2.Cache
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "orders-cache"}, &c); err != nil {
		t.Fatal(err)
	}
	return &c
}

func getStatefulSet(t *testing.T, namespace string) *appsv1.StatefulSet {
	t.Helper()
	var sts appsv1.StatefulSet
	if err := k8s.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: "orders-cache"}, &sts); err != nil {
		t.Fatal(err)
	}
	return &sts
}

// setStatefulSetReady plays the StatefulSet controller, which envtest does not run: it reports
// that the controller saw the current spec and that `ready` pods of it are ready.
func setStatefulSetReady(t *testing.T, namespace string, ready int32) {
	t.Helper()
	sts := getStatefulSet(t, namespace)
	sts.Status = appsv1.StatefulSetStatus{
		ObservedGeneration: sts.Generation,
		Replicas:           ready,
		ReadyReplicas:      ready,
		AvailableReplicas:  ready,
		CurrentReplicas:    ready,
		UpdatedReplicas:    ready,
	}
	if err := k8s.Status().Update(context.Background(), sts); err != nil {
		t.Fatal(err)
	}
}

// assertOneOfEachChild checks that the namespace holds exactly one StatefulSet and one Service.
func assertOneOfEachChild(t *testing.T, namespace string) {
	t.Helper()
	var sets appsv1.StatefulSetList
	var services corev1.ServiceList
	for _, list := range []client.ObjectList{&sets, &services} {
		if err := k8s.List(context.Background(), list, client.InNamespace(namespace)); err != nil {
			t.Fatal(err)
		}
	}
	if len(sets.Items) != 1 || len(services.Items) != 1 {
		t.Errorf("namespace %s holds %d StatefulSets and %d Services, want one of each", namespace, len(sets.Items), len(services.Items))
	}
}
