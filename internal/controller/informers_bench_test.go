package controller

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/packedinformer"
	"example.com/cache-operator/internal/resources"
)

// BenchmarkInformerCopies reports the heap the operator's informers keep for the objects it makes
// for each Cache with auth and TLS (B/cache), by kind, as the informers keep them: cut down by
// InformerOptions' transforms, and encoded for packedKinds ("packed"), or not ("unpacked", for
// comparison). The objects are the operator's own builders', given the metadata the API server
// adds, and go through a real informer from a list, as they do at the operator's start.
//
//	go test ./internal/controller -run '^$' -bench InformerCopies -benchtime 3x
func BenchmarkInformerCopies(b *testing.B) {
	const caches = 1000
	objects := childrenOfCaches(b, caches)
	options := InformerOptions("")
	for _, packing := range []struct {
		name  string
		kinds []packedinformer.Object
	}{{"packed", packedKinds}, {"unpacked", nil}} {
		for _, kind := range objects {
			b.Run(packing.name+"/"+kind.name, func(b *testing.B) {
				var perCache float64
				for b.Loop() {
					perCache = float64(informerHeap(b, options, packing.kinds, kind.list)) / caches
				}
				b.ReportMetric(perCache, "B/cache")
			})
		}
	}
}

// kindOfChildren is one kind of the objects childrenOfCaches makes: list lists them afresh, as
// a client decodes a list from the API server.
type kindOfChildren struct {
	name string
	list func() k8sruntime.Object
}

// childrenOfCaches are the objects the operator makes for n Standalone Caches with auth and
// TLS, as the API server stores them, by kind.
func childrenOfCaches(b *testing.B, n int) []kindOfChildren {
	b.Helper()
	scheme := NewScheme()
	now := time.Now()
	var secrets corev1.SecretList
	var configMaps corev1.ConfigMapList
	var services corev1.ServiceList
	var budgets policyv1.PodDisruptionBudgetList
	var sets appsv1.StatefulSetList
	for i := range n {
		cache := &cachev2.Cache{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cache-%05d", i), Namespace: "bench", UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", i))},
			Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: "8.1.1", Memory: resource.MustParse("64Mi"),
				Auth: &cachev2.Auth{RotationGracePeriod: &metav1.Duration{Duration: 10 * time.Minute}},
				TLS:  &cachev2.TLS{CertificateValidity: &metav1.Duration{Duration: 90 * 24 * time.Hour}}},
		}
		app := resources.AppSecret(cache)
		acl, _ := resources.NextACL(cache, resources.ReadACL(nil), string(app.Data[resources.AppPasswordKey]), now)
		certs, _, err := resources.NextCertificates(cache, "cluster.local", []net.IP{net.IPv4(198, 18, byte(i>>8), byte(i))}, resources.Certificates{}, resources.NodesReport{}, now)
		if err != nil {
			b.Fatal(err)
		}
		children := []client.Object{app, resources.ACLSecret(cache, acl), resources.TLSSecret(cache, certs.TLS), resources.CASecret(cache, certs.CA),
			resources.CAConfigMap(cache, certs.TLS[resources.TLSCAKey]), resources.Service(cache), resources.PodDisruptionBudget(cache),
			resources.StatefulSet(cache, resources.DefaultImages)}
		for j, child := range children {
			if err := controllerutil.SetControllerReference(cache, child, scheme); err != nil {
				b.Fatal(err)
			}
			child.SetUID(types.UID(fmt.Sprintf("00000000-0000-0000-%04d-%012d", j, i)))
			child.SetResourceVersion(fmt.Sprint(100_000 + i*len(children) + j))
			child.SetCreationTimestamp(metav1.NewTime(now))
			switch c := child.(type) {
			case *corev1.Secret:
				secrets.Items = append(secrets.Items, *c)
			case *corev1.ConfigMap:
				configMaps.Items = append(configMaps.Items, *c)
			case *corev1.Service:
				services.Items = append(services.Items, *c)
			case *policyv1.PodDisruptionBudget:
				budgets.Items = append(budgets.Items, *c)
			case *appsv1.StatefulSet:
				sets.Items = append(sets.Items, *c)
			}
		}
	}
	return []kindOfChildren{
		{"secrets", encodedList(b, &secrets, &corev1.SecretList{})},
		{"configmaps", encodedList(b, &configMaps, &corev1.ConfigMapList{})},
		{"services", encodedList(b, &services, &corev1.ServiceList{})},
		{"poddisruptionbudgets", encodedList(b, &budgets, &policyv1.PodDisruptionBudgetList{})},
		{"statefulsets", encodedList(b, &sets, &appsv1.StatefulSetList{})},
	}
}

// encodedList is a function that decodes list from its protobuf encoding into a new object of
// into's type, as the operator's client decodes what the API server sends.
func encodedList(b *testing.B, list, into interface {
	k8sruntime.Object
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}) func() k8sruntime.Object {
	encoded, err := list.Marshal()
	if err != nil {
		b.Fatal(err)
	}
	return func() k8sruntime.Object {
		decoded := into.DeepCopyObject().(interface {
			k8sruntime.Object
			Unmarshal([]byte) error
		})
		if err := decoded.Unmarshal(encoded); err != nil {
			b.Fatal(err)
		}
		return decoded
	}
}

// informerHeap is the heap an informer keeps once it holds what list lists, packing the kinds
// given, with the transform options gives its kind.
func informerHeap(b *testing.B, options cache.Options, packed []packedinformer.Object, list func() k8sruntime.Object) uint64 {
	b.Helper()
	items, err := meta.ExtractList(list())
	if err != nil || len(items) == 0 {
		b.Fatal("no objects listed", err)
	}
	example := items[0].DeepCopyObject()
	transform := options.DefaultTransform
	for obj, byObject := range options.ByObject {
		if fmt.Sprintf("%T", obj) == fmt.Sprintf("%T", example) && byObject.Transform != nil {
			transform = byObject.Transform
		}
	}
	listed := false
	lw := listOnce{&toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (k8sruntime.Object, error) {
			listed = true
			return list(), nil
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
	}}
	before := liveHeap()
	informer := packedinformer.For(packed...)(lw, example, 0, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
	if err := informer.SetTransform(transform); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		informer.RunWithContext(ctx)
		close(stopped)
	}()
	// Stopped before the next measure starts, whose heap it would be in otherwise.
	defer func() {
		cancel()
		<-stopped
	}()
	if !toolscache.WaitForCacheSync(ctx.Done(), informer.HasSynced) || !listed {
		b.Fatal("the informer never synced")
	}
	return liveHeap() - before
}

// listOnce lists and then watches, as an API server does that does not stream its list.
type listOnce struct{ *toolscache.ListWatch }

func (listOnce) IsWatchListSemanticsUnSupported() bool { return true }

// liveHeap is the heap live after two collections: the second empties the sync.Pools (the
// packed informers' compressors), which hold what is not the objects' and not per Cache.
func liveHeap() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
