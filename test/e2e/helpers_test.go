//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"

	"example.com/cache-operator/test/harness/testenv"
)

// newNamespace creates a namespace for one test. When the test ends, its Caches are deleted
// and waited for while the test's operator still runs (cleanups run last-registered first, so
// call this after starting the operator), so no finalizer is left for the next test's operator.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "e2e-"}}
	if s := scopeOf(t); s != nil {
		ns = &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: s.nextNamespace(t)}}
	}
	if err := admin.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		deleteAllCaches(t, ns.Name)
		_ = admin.Delete(context.Background(), ns)
	})
	return ns.Name
}

// newRestrictedNamespace is newNamespace enforcing the restricted Pod Security Standard: a pod
// that does not meet it is refused, and its StatefulSet makes none.
func newRestrictedNamespace(t *testing.T) string {
	t.Helper()
	ns := newNamespace(t)
	namespace := &corev1.Namespace{}
	if err := admin.Get(context.Background(), client.ObjectKey{Name: ns}, namespace); err != nil {
		t.Fatal(err)
	}
	namespace.Labels["pod-security.kubernetes.io/enforce"] = "restricted"
	if err := admin.Update(context.Background(), namespace); err != nil {
		t.Fatal(err)
	}
	return ns
}

// deleteAllCaches deletes the namespace's Caches and waits until they are gone, which takes a
// running operator when they carry its finalizer.
func deleteAllCaches(t *testing.T, namespace string) {
	t.Helper()
	ctx := context.Background()
	if err := admin.DeleteAllOf(ctx, &cachev2.Cache{}, client.InNamespace(namespace)); err != nil {
		t.Errorf("deleting the Caches of %s: %v", namespace, err)
	}
	testenv.WaitFor(t, time.Minute, "the Caches of "+namespace+" to be gone", func() (bool, string) {
		var list cachev2.CacheList
		if err := admin.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return false, err.Error()
		}
		return len(list.Items) == 0, fmt.Sprintf("%d left", len(list.Items))
	})
}

// newCache creates a Standalone Cache of three nodes of the newest Valkey.
func newCache(t *testing.T, namespace, name string) *cachev2.Cache {
	t.Helper()
	return newStandaloneCache(t, namespace, name, 3, valkeyVersion)
}

// newCacheOf is newCache with the Valkey version given.
func newCacheOf(t *testing.T, namespace, name, version string) *cachev2.Cache {
	t.Helper()
	return newStandaloneCache(t, namespace, name, 3, version)
}

// newOneNodeCache is newCache with one node, for a test of the operator's bookkeeping, its API
// or its metrics, which more nodes show nothing more of: each pod costs its node a few
// CPU-seconds to start and stop, and the tier is bound by the machine's cores.
func newOneNodeCache(t *testing.T, namespace, name string) *cachev2.Cache {
	t.Helper()
	return newStandaloneCache(t, namespace, name, 1, valkeyVersion)
}

// newStandaloneCache creates a Standalone Cache of the given nodes and Valkey version.
func newStandaloneCache(t *testing.T, namespace, name string, shards int32, version string) *cachev2.Cache {
	t.Helper()
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
		Spec:       cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: shards, Version: version, Memory: resource.MustParse("64Mi")},
	}
	if err := admin.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	return c
}

func getCache(t *testing.T, key client.ObjectKey) (*cachev2.Cache, error) {
	t.Helper()
	var c cachev2.Cache
	err := admin.Get(context.Background(), key, &c)
	return &c, err
}

// settled reports whether a Cache is Ready and its status describes its current generation.
func settled(c *cachev2.Cache) (bool, string) {
	ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
	if ready == nil {
		return false, fmt.Sprintf("%s: no Ready condition", c.Name)
	}
	ok := ready.Status == metav1.ConditionTrue && c.Status.ObservedGeneration == c.Generation &&
		ready.ObservedGeneration == c.Generation
	return ok, fmt.Sprintf("%s: generation %d, observedGeneration %d, Ready %s %q",
		c.Name, c.Generation, c.Status.ObservedGeneration, ready.Status, ready.Message)
}

// startTimeout bounds the start or the removal of a Cache's few pods: seconds on a quiet
// machine, but beside three other tests on two cores a pod once waited more than a minute for
// the kubelet to start its containers.
const startTimeout = 3 * time.Minute

// waitSettled waits until every Cache of the namespace is Ready for its current generation.
func waitSettled(t *testing.T, namespace string, timeout time.Duration) {
	t.Helper()
	testenv.WaitFor(t, timeout, "every Cache in "+namespace+" to be Ready", func() (bool, string) {
		var list cachev2.CacheList
		if err := admin.List(context.Background(), &list, client.InNamespace(namespace)); err != nil {
			return false, err.Error()
		}
		for i := range list.Items {
			if ok, why := settled(&list.Items[i]); !ok {
				return false, why
			}
		}
		return true, ""
	})
}

// waitPodsReplaced waits until the Cache has n pods, none of them one of the old ones (by UID),
// and every one Ready. Pods replaced without a change to the spec leave the Cache's Ready
// condition of before in place until the operator looks again, so that condition alone does not
// show that the new pods are up.
func waitPodsReplaced(t *testing.T, key client.ObjectKey, old map[string]bool, n int) {
	t.Helper()
	testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("%d pods of %s, replaced and Ready", n, key), func() (bool, string) {
		pods := cachePods(t, key)
		for _, pod := range pods {
			if old[string(pod.UID)] || !podReady(&pod) {
				return false, pod.Name + " is old or not Ready"
			}
		}
		return len(pods) == n, fmt.Sprintf("%d pods", len(pods))
	})
}

func patchCache(t *testing.T, key client.ObjectKey, patch string) *cachev2.Cache {
	t.Helper()
	c := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace}}
	if err := admin.Patch(context.Background(), c, client.RawPatch(client.Merge.Type(), []byte(patch))); err != nil {
		t.Fatal(err)
	}
	return c
}

// children lists the StatefulSets and Services of a namespace, by name.
func children(t *testing.T, namespace string) (statefulSets, services map[string]int) {
	t.Helper()
	var sets appsv1.StatefulSetList
	var svcs corev1.ServiceList
	for _, list := range []client.ObjectList{&sets, &svcs} {
		if err := admin.List(context.Background(), list, client.InNamespace(namespace)); err != nil {
			t.Fatal(err)
		}
	}
	statefulSets, services = map[string]int{}, map[string]int{}
	for _, s := range sets.Items {
		statefulSets[s.Name]++
	}
	for _, s := range svcs.Items {
		services[s.Name]++
	}
	return statefulSets, services
}

func isNotFound(err error) bool { return apierrors.IsNotFound(err) }

// noErrorLogged fails the test for each error line in the operator's log so far, saying what the
// operator was doing.
func noErrorLogged(t *testing.T, o *testenv.Operator, while string) {
	t.Helper()
	for line := range strings.SplitSeq(o.Logs(t), "\n") {
		if strings.Contains(line, `"level":"error"`) {
			t.Errorf("error logged %s: %s", while, line)
		}
	}
}

// loopbackIPs are n addresses of the loopback interface for servers a test starts on the
// machine, none of them handed to another test in the last testenv.LoopbackIPs's worth: the
// tests run beside each other, and two that took the same addresses (testenv.LoopbackIPs gives
// the same ones to every caller of a process) started their servers on one address, and one
// failed to bind it. The addresses go round once all were taken, long after the servers of the
// first ones ended with their tests.
func loopbackIPs(n int) []string {
	loopback.Lock()
	defer loopback.Unlock()
	all := testenv.LoopbackIPs(loopbackPerRun)
	ips := make([]string, n)
	for i := range ips {
		ips[i] = all[loopback.next]
		loopback.next = (loopback.next + 1) % loopbackPerRun
	}
	return ips
}

// loopbackPerRun is how many loopback addresses testenv gives a process.
const loopbackPerRun = 254

// loopback is where loopbackIPs goes on from.
var loopback struct {
	sync.Mutex
	next int
}
