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
	"example.com/cache-operator/test/harness/testenv"
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
	return serverInfo(t, key, "run_id")
}

// serverVersions is the Valkey version that each pod's server reports, by pod.
func serverVersions(t *testing.T, key client.ObjectKey) map[string]string {
	t.Helper()
	return serverInfo(t, key, "valkey_version")
}

// serverInfo is a field of INFO server of each of the Cache's servers, by pod.
func serverInfo(t *testing.T, key client.ObjectKey, field string) map[string]string {
	t.Helper()
	values := map[string]string{}
	for _, pod := range cachePods(t, key) {
		values[pod.Name] = testenv.ValkeyInfo(t, node(t, &pod), "server", field)
	}
	return values
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

// waitDeletions waits until the watch of watchPodDeletions has recorded n deletions, and returns
// those it has: the watch delivers late, so a test that waited on other reads can be ahead of it.
func waitDeletions(t *testing.T, deleted func() []string, n int) []string {
	t.Helper()
	testenv.WaitFor(t, 30*time.Second, fmt.Sprintf("the pod watch to see %d deletions", n), func() (bool, string) {
		d := deleted()
		return len(d) >= n, fmt.Sprintf("deletions seen: %v", d)
	})
	return deleted()
}

// A change of version (from the release before the newest: a real upgrade) or memory, consented to
// (a Standalone Cache has no replica to keep a node's keys: each node comes back empty), rolls
// every node once, highest ordinal first; each comes back as a new server (a new run_id) with the
// new spec in force.
func TestSpecChangeRestartsEveryNodeOnceHighestOrdinalFirst(t *testing.T) {
	t.Parallel() // and each case beside the others, with a scope of its own
	previous := valkeys[max(len(valkeys)-2, 0)].Version
	for _, change := range []struct {
		name, from, patch, image string
		memory                   resource.Quantity
	}{
		{"version", previous, fmt.Sprintf(`{"spec":{"version":%q}}`, valkeyVersion), "valkey/valkey:" + valkeyVersion, resource.MustParse("64Mi")},
		{"memory", valkeyVersion, `{"spec":{"memory":"96Mi"}}`, "valkey/valkey:" + valkeyVersion, resource.MustParse("96Mi")},
	} {
		t.Run(change.name, func(t *testing.T) {
			runBeside(t, 1)
			startOperator(t, "a", "")
			ns := newNamespace(t)
			key := client.ObjectKey{Namespace: ns, Name: "orders-cache"}
			newCacheOf(t, ns, key.Name, change.from)
			waitSettled(t, ns, startTimeout)
			before := runIDs(t, key)
			history := watchReady(t, key)
			deleted := watchPodDeletions(t, ns)

			patchCache(t, key, fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, cachev2.AnnotationRolloutEmptiesNodes, cachev2.RolloutEmptiesNodesAllowed))
			gen := patchCache(t, key, change.patch).Generation
			waitRolledOut(t, key, 2*time.Minute)

			want := []string{"orders-cache-2", "orders-cache-1", "orders-cache-0"}
			if got := waitDeletions(t, deleted, len(want)); !slices.Equal(got, want) {
				t.Errorf("pods were replaced in the order %v, want %v", got, want)
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
			for pod, version := range serverVersions(t, key) {
				if version != valkeyVersion {
					t.Errorf("%s runs Valkey %s, want %s", pod, version, valkeyVersion)
				}
			}
			assertNodesServe(t, key, change.memory)
			history.caughtUp(t, key)
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

// A node whose server crashes restarts in place, as the kubelet restarts a container: the same
// pod, with the same IP, its status counting the restart and saying how the last run ended; the
// server is empty (persistence is off) and the Cache is Ready again. (Whether the Cache's status
// shows the moment the pod was not ready depends on timing: the server is back within moments.)
func TestCrashedNodeRestartsInPlaceEmpty(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "")
	ns := newNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "orders-cache"}
	c := newCache(t, ns, key.Name)
	waitSettled(t, ns, startTimeout)
	crashed := cachePods(t, key)[1]
	v := node(t, &crashed)
	if err := v.Do(context.Background(), v.B().Set().Key("lost").Value("with the node").Build()).Error(); err != nil {
		t.Fatal(err)
	}

	if err := crashServer(ns, crashed.Name); err != nil {
		t.Fatal(err)
	}

	var restarted corev1.Pod
	testenv.WaitFor(t, time.Minute, "the crashed container restarted and Ready", func() (bool, string) {
		if err := admin.Get(context.Background(), client.ObjectKeyFromObject(&crashed), &restarted); err != nil {
			return false, err.Error()
		}
		cs := serverStatus(&restarted)
		return cs != nil && cs.RestartCount == 1 && podReady(&restarted), fmt.Sprintf("%+v", restarted.Status.ContainerStatuses)
	})
	if restarted.UID != crashed.UID || restarted.Status.PodIP != crashed.Status.PodIP {
		t.Errorf("pod %s was replaced (UID %s → %s, IP %s → %s), not restarted in place", crashed.Name,
			crashed.UID, restarted.UID, crashed.Status.PodIP, restarted.Status.PodIP)
	}
	if last := serverStatus(&restarted).LastTerminationState.Terminated; last == nil || last.ExitCode != 137 {
		t.Errorf("the container's last state is %+v, want terminated with exit code 137 (SIGKILL)", last)
	}
	waitSettled(t, ns, startTimeout)
	v = node(t, &restarted)
	if err := v.Do(context.Background(), v.B().Get().Key("lost").Build()).Error(); !valkey.IsValkeyNil(err) {
		t.Errorf("the restarted server of %s has the crashed server's key (GET: %v)", crashed.Name, err)
	}
	assertNodesServe(t, key, c.Spec.Memory)
}

// A deleted pod's server gets SIGTERM and the pod's grace period to stop; one that does not stop
// in time (here, one stopped with SIGSTOP) is killed, and the deletion completes.
func TestDeletedPodsServerIsKilledAfterItsGracePeriod(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "")
	ns := newNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "orders-cache"}
	newCache(t, ns, key.Name)
	waitSettled(t, ns, startTimeout)
	hung := cachePods(t, key)[2]
	if err := signalServer(ns, hung.Name, syscall.SIGSTOP); err != nil {
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
	// The Cache's Ready condition of before the deletion can still be there (the generation is the
	// same): the replacement pod, which assertNodesServe talks to, must be Ready itself.
	waitPodsReplaced(t, key, map[string]bool{string(hung.UID): true}, 3)
	waitSettled(t, ns, startTimeout)
	assertNodesServe(t, key, resource.MustParse("64Mi"))
}
