//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/valkey-io/valkey-go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/testenv"
)

// cachePods lists the pods of a Cache, in order of their names.
func cachePods(t *testing.T, key client.ObjectKey) []corev1.Pod {
	t.Helper()
	var list corev1.PodList
	if err := admin.List(context.Background(), &list, client.InNamespace(key.Namespace),
		client.MatchingLabels{resources.LabelInstance: key.Name}); err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(list.Items, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
	return list.Items
}

// node connects to the Valkey server of a pod.
func node(t *testing.T, pod *corev1.Pod) valkey.Client {
	t.Helper()
	return testenv.Valkey(t, pod.Status.PodIP, resources.Port)
}

// runIDs are the run_ids of a Cache's servers by pod name: a server's run_id is new each time it
// starts.
func runIDs(t *testing.T, key client.ObjectKey) map[string]string {
	t.Helper()
	ids := map[string]string{}
	for _, pod := range cachePods(t, key) {
		ids[pod.Name] = testenv.ValkeyInfo(t, node(t, &pod), "server", "run_id")
	}
	return ids
}

// assertNodesServe checks every node of a Cache: it answers PING, stores and returns a key, and
// keeps data in 3/4 of the Cache's memory with LRU eviction.
func assertNodesServe(t *testing.T, key client.ObjectKey, memory resource.Quantity) {
	t.Helper()
	ctx := context.Background()
	pods := cachePods(t, key)
	if len(pods) == 0 {
		t.Fatalf("%s has no pods", key)
	}
	for _, pod := range pods {
		v := node(t, &pod)
		if got, err := v.Do(ctx, v.B().Ping().Build()).ToString(); err != nil || got != "PONG" {
			t.Errorf("%s: PING answered %q, %v", pod.Name, got, err)
			continue
		}
		if err := v.Do(ctx, v.B().Set().Key("greeting").Value("hello from "+pod.Name).Build()).Error(); err != nil {
			t.Errorf("%s: SET: %v", pod.Name, err)
		}
		if got, err := v.Do(ctx, v.B().Get().Key("greeting").Build()).ToString(); err != nil || got != "hello from "+pod.Name {
			t.Errorf("%s: GET returned %q, %v", pod.Name, got, err)
		}
		if got, want := testenv.ValkeyConfig(t, v, "maxmemory"), strconv.FormatInt(resources.MaxMemory(memory), 10); got != want {
			t.Errorf("%s: maxmemory is %s, want %s (3/4 of %s)", pod.Name, got, want, memory.String())
		}
		if got := testenv.ValkeyConfig(t, v, "maxmemory-policy"); got != resources.EvictionPolicy {
			t.Errorf("%s: maxmemory-policy is %s, want %s", pod.Name, got, resources.EvictionPolicy)
		}
	}
}

// watchPodDeletions records the names of the namespace's pods as they are deleted, in order.
func watchPodDeletions(t *testing.T, namespace string) func() []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	w, err := admin.Watch(ctx, &corev1.PodList{}, client.InNamespace(namespace))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var deleted []string
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ev := range w.ResultChan() {
			if pod, ok := ev.Object.(*corev1.Pod); ok && ev.Type == watch.Deleted {
				mu.Lock()
				deleted = append(deleted, pod.Name)
				mu.Unlock()
			}
		}
	}()
	t.Cleanup(func() { w.Stop(); cancel(); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(deleted)
	}
}

// A change of version or memory rolls every node once, highest ordinal first; each comes back as
// a new server (a new run_id) with the new spec in force.
func TestSpecChangeRestartsEveryNodeOnceHighestOrdinalFirst(t *testing.T) {
	for _, change := range []struct {
		name, patch, image string
		memory             resource.Quantity
	}{
		{"version", `{"spec":{"version":"8.1.2"}}`, "valkey/valkey:8.1.2", resource.MustParse("64Mi")},
		{"memory", `{"spec":{"memory":"96Mi"}}`, "valkey/valkey:8.1.1", resource.MustParse("96Mi")},
	} {
		t.Run(change.name, func(t *testing.T) {
			startOperator(t, "a", "")
			ns := newNamespace(t)
			key := client.ObjectKey{Namespace: ns, Name: "orders-cache"}
			newCache(t, ns, key.Name)
			waitSettled(t, ns, time.Minute)
			before := runIDs(t, key)
			history := watchReady(t, key)
			deleted := watchPodDeletions(t, ns)

			gen := patchCache(t, key, change.patch).Generation
			waitRolledOut(t, key, 2*time.Minute)

			if want := []string{"orders-cache-2", "orders-cache-1", "orders-cache-0"}; !slices.Equal(deleted(), want) {
				t.Errorf("pods were replaced in the order %v, want %v", deleted(), want)
			}
			for _, pod := range cachePods(t, key) {
				c := pod.Spec.Containers[0]
				if c.Image != change.image || !c.Resources.Limits.Memory().Equal(change.memory) {
					t.Errorf("%s runs %s with a memory limit of %s, want %s with %s",
						pod.Name, c.Image, c.Resources.Limits.Memory(), change.image, change.memory.String())
				}
			}
			after := runIDs(t, key)
			for name, id := range before {
				if after[name] == id {
					t.Errorf("%s still runs the server it ran before the change (run_id %s)", name, id)
				}
			}
			assertNodesServe(t, key, change.memory)
			h := history.String()
			if !strings.Contains(h, fmt.Sprintf("gen=%d observed=%d False/Progressing", gen, gen)) {
				t.Errorf("the Cache never reported Progressing during the rollout; it went through:\n%s", h)
			}
		})
	}
}

// waitRolledOut waits until the Cache's StatefulSet runs its latest template on every pod, every
// pod is Ready and the Cache is Ready for its current generation.
func waitRolledOut(t *testing.T, key client.ObjectKey, timeout time.Duration) {
	t.Helper()
	testenv.WaitFor(t, timeout, "the rollout to finish", func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		if ok, why := settled(c); !ok {
			return false, why
		}
		var sts appsv1.StatefulSet
		if err := admin.Get(context.Background(), key, &sts); err != nil {
			return false, err.Error()
		}
		s := sts.Status
		return s.ObservedGeneration == sts.Generation && s.CurrentRevision == s.UpdateRevision &&
				s.UpdatedReplicas == c.Spec.Nodes() && s.ReadyReplicas == c.Spec.Nodes(),
			fmt.Sprintf("StatefulSet: %d updated, %d ready, revision %s → %s", s.UpdatedReplicas, s.ReadyReplicas, s.CurrentRevision, s.UpdateRevision)
	})
}

// A node whose server crashes makes the Cache not Ready until the StatefulSet has replaced the
// pod and the new, empty server answers.
func TestCrashedNodeMakesTheCacheNotReadyUntilReplaced(t *testing.T) {
	startOperator(t, "a", "")
	ns := newNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "orders-cache"}
	c := newCache(t, ns, key.Name)
	waitSettled(t, ns, time.Minute)
	crashed := cachePods(t, key)[1]
	v := node(t, &crashed)
	if err := v.Do(context.Background(), v.B().Set().Key("lost").Value("with the node").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	history := watchReady(t, key)

	if err := runner.Crash(ns, crashed.Name); err != nil {
		t.Fatal(err)
	}

	testenv.WaitFor(t, time.Minute, "the crash to be reported", func() (bool, string) {
		return history.saw(fmt.Sprintf("gen=%d observed=%d False/%s 2/3 replicas ready",
			c.Generation, c.Generation, cachev2.ReasonProgressing)), history.String()
	})
	waitSettled(t, ns, time.Minute)
	replacement := cachePods(t, key)[1]
	if replacement.UID == crashed.UID {
		t.Fatalf("pod %s was not replaced", crashed.Name)
	}
	// A new pod is a new server with an empty data directory, as with an emptyDir volume.
	v = node(t, &replacement)
	if err := v.Do(context.Background(), v.B().Get().Key("lost").Build()).Error(); !valkey.IsValkeyNil(err) {
		t.Errorf("the replacement of %s has the crashed server's key (GET: %v)", crashed.Name, err)
	}
	assertNodesServe(t, key, c.Spec.Memory)
}

// A deleted pod's server gets SIGTERM and the pod's grace period to stop; one that does not stop
// in time (here, one stopped with SIGSTOP) is killed, and the deletion completes.
func TestDeletedPodsServerIsKilledAfterItsGracePeriod(t *testing.T) {
	startOperator(t, "a", "")
	ns := newNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "orders-cache"}
	newCache(t, ns, key.Name)
	waitSettled(t, ns, time.Minute)
	hung := cachePods(t, key)[2]
	if err := runner.Signal(ns, hung.Name, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}

	const grace = 3
	deleted := time.Now()
	if err := admin.Delete(context.Background(), &hung, client.GracePeriodSeconds(grace)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "the hung pod to be gone", func() (bool, string) {
		var pod corev1.Pod
		err := admin.Get(context.Background(), client.ObjectKeyFromObject(&hung), &pod)
		return isNotFound(err) || pod.UID != hung.UID, fmt.Sprintf("pod %s: %v", hung.Name, err)
	})
	if took := time.Since(deleted); took < grace*time.Second {
		t.Errorf("the pod was gone %s after its deletion, before its %ds grace period was over", took, grace)
	}
	waitSettled(t, ns, time.Minute)
	assertNodesServe(t, key, resource.MustParse("64Mi"))
}
