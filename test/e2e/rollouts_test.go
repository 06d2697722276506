//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/test/harness/testenv"
)

// One change touches 4 Caches at once (their memory, with consent to restart their nodes
// empty); with --max-concurrent-rollouts=2 no more than two roll out at any moment, as the
// StatefulSets' own status tells, the others wait with PodTemplateCurrent=False/RolloutQueued,
// and every one gets the change in the end.
func TestAChangeToManyCachesRollsOutAFewAtATime(t *testing.T) {
	runBeside(t, 1)
	const caches, limit = 4, 2
	ctx := context.Background()
	startOperator(t, "a", "", fmt.Sprintf("--max-concurrent-rollouts=%d", limit))
	ns := newNamespace(t)
	for i := range caches {
		newOneNodeCacheRestartedAtWill(t, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("cache-%02d", i)})
	}
	waitSettled(t, ns, 3*time.Minute)

	most, queued := watchRollouts(t, ns)
	for i := range caches {
		patchCache(t, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("cache-%02d", i)}, `{"spec":{"memory":"80Mi"}}`)
	}
	testenv.WaitFor(t, 5*time.Minute, "every Cache rolled out with 80Mi and Ready", func() (bool, string) {
		var sets appsv1.StatefulSetList
		if err := admin.List(ctx, &sets, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		done := 0
		for _, sts := range sets.Items {
			limits := sts.Spec.Template.Spec.Containers[0].Resources.Limits
			if limits.Memory().String() == "80Mi" && !resources.RollingOut(&sts) && sts.Status.ReadyReplicas == 1 {
				done++
			}
		}
		return done == caches, fmt.Sprintf("%d of %d rolled out", done, caches)
	})
	waitSettled(t, ns, startTimeout)
	t.Logf("at most %d StatefulSets rolling out at once; %d Caches seen queued", most(), len(queued()))
	if most() > limit {
		t.Errorf("%d StatefulSets rolled out at once, with a limit of %d", most(), limit)
	}
	if len(queued()) == 0 {
		t.Errorf("no Cache ever said RolloutQueued")
	}
}

// A rollout that never moves, a version no image exists for, holds its place of
// --max-concurrent-rollouts=1 only until the progress deadline: then its Cache says
// Progressing=False/ProgressDeadlineExceeded, and another Cache's change, queued behind it until
// then, rolls out. Its Ready names the pod that cannot pull its image.
func TestARolloutThatNeverMovesIsReportedAndFreesItsPlace(t *testing.T) {
	runBeside(t, 1)
	ctx := context.Background()
	startOperator(t, "a", "", "--max-concurrent-rollouts=1", "--rollout-progress-deadline=20s")
	ns := newNamespace(t)
	stuck, next := client.ObjectKey{Namespace: ns, Name: "stuck"}, client.ObjectKey{Namespace: ns, Name: "next"}
	for _, key := range []client.ObjectKey{stuck, next} {
		newOneNodeCacheRestartedAtWill(t, key)
	}
	waitSettled(t, ns, 3*time.Minute)
	_, queued := watchRollouts(t, ns)

	patchCache(t, stuck, fmt.Sprintf(`{"spec":{"version":%q}}`, missingVersion))
	waitProgressing(t, stuck, metav1.ConditionTrue, cachev2.ReasonRollingOut)
	patchCache(t, next, `{"spec":{"memory":"80Mi"}}`)
	testenv.WaitFor(t, time.Minute, "next to wait behind stuck's rollout", func() (bool, string) {
		return slices.Contains(queued(), next.Name), fmt.Sprintf("queued: %v", queued())
	})
	c := waitProgressing(t, stuck, metav1.ConditionFalse, cachev2.ReasonProgressDeadlineExceeded)
	if c.Status.Rollout == nil || c.Status.Rollout.UpdatedReplicas != 1 {
		t.Errorf("stuck's rollout is %+v, want 1 pod on the new template", c.Status.Rollout)
	}
	testenv.WaitFor(t, 3*time.Minute, "next rolled out with 80Mi and Ready", func() (bool, string) {
		c, err := getCache(t, next)
		if err != nil {
			return false, err.Error()
		}
		ok, why := settled(c)
		return ok && c.Spec.Memory.String() == "80Mi" && c.Status.Rollout == nil &&
			meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionProgressing) == nil, why
	})
	// What a user who looks at the pod sees: it cannot get its image.
	var pod corev1.Pod
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ns, Name: "stuck-0"}, &pod); err != nil {
		t.Fatal(err)
	}
	if cs := serverStatus(&pod); cs == nil || cs.State.Waiting == nil || !slices.Contains([]string{"ErrImagePull", "ImagePullBackOff"}, cs.State.Waiting.Reason) {
		t.Errorf("stuck-0's containers are %+v, want the server's waiting for its image", pod.Status.ContainerStatuses)
	}
	// And what the Cache says: which pod, and why, as its kubelet reports it.
	c = waitReadyAs(t, stuck, metav1.ConditionFalse, cachev2.ReasonPodsCannotStart, 3*time.Minute)
	if msg := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady).Message; !strings.Contains(msg, "stuck-0") || !strings.Contains(msg, missingVersion) {
		t.Errorf("stuck's Ready says %q; want the pod, and the image it cannot pull", msg)
	}
}

// newOneNodeCacheRestartedAtWill creates a Standalone Cache of one node that consents to rollouts
// that empty it, so that a change of its version or memory rolls out at once.
func newOneNodeCacheRestartedAtWill(t *testing.T, key client.ObjectKey) {
	t.Helper()
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name,
			Annotations: map[string]string{cachev2.AnnotationRolloutEmptiesNodes: cachev2.RolloutEmptiesNodesAllowed}},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: valkeyVersion, Memory: resource.MustParse("64Mi")},
	}
	if err := admin.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

// waitProgressing waits until the Cache's Progressing condition has the status and reason, and
// returns the Cache.
func waitProgressing(t *testing.T, key client.ObjectKey, status metav1.ConditionStatus, reason string) *cachev2.Cache {
	t.Helper()
	var c *cachev2.Cache
	testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("%s to say Progressing=%s/%s", key.Name, status, reason), func() (bool, string) {
		var err error
		if c, err = getCache(t, key); err != nil {
			return false, err.Error()
		}
		cond := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionProgressing)
		return cond != nil && cond.Status == status && cond.Reason == reason, fmt.Sprintf("%+v", cond)
	})
	return c
}

// watchRollouts watches the namespace's StatefulSets and Caches until the test ends: most is the
// most StatefulSets seen rolling out at once (resources.RollingOut), queued the Caches seen with
// PodTemplateCurrent=False/RolloutQueued.
func watchRollouts(t *testing.T, namespace string) (most func() int, queued func() []string) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	sets, err := admin.Watch(ctx, &appsv1.StatefulSetList{}, client.InNamespace(namespace))
	if err != nil {
		t.Fatal(err)
	}
	caches, err := admin.Watch(ctx, &cachev2.CacheList{}, client.InNamespace(namespace))
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu      sync.Mutex
		rolling = map[string]bool{}
		peak    int
		waited  = map[string]bool{}
		wg      sync.WaitGroup
	)
	wg.Go(func() {
		for ev := range sets.ResultChan() {
			if sts, ok := ev.Object.(*appsv1.StatefulSet); ok && ev.Type != watch.Error {
				mu.Lock()
				rolling[sts.Name] = ev.Type != watch.Deleted && resources.RollingOut(sts)
				n := 0
				for _, r := range rolling {
					if r {
						n++
					}
				}
				peak = max(peak, n)
				mu.Unlock()
			}
		}
	})
	wg.Go(func() {
		for ev := range caches.ResultChan() {
			if c, ok := ev.Object.(*cachev2.Cache); ok {
				if cond := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionPodTemplateCurrent); cond != nil &&
					cond.Reason == cachev2.ReasonRolloutQueued {
					mu.Lock()
					waited[c.Name] = true
					mu.Unlock()
				}
			}
		}
	})
	t.Cleanup(func() { cancel(); sets.Stop(); caches.Stop(); wg.Wait() })
	return func() int {
			mu.Lock()
			defer mu.Unlock()
			return peak
		}, func() []string {
			mu.Lock()
			defer mu.Unlock()
			var names []string
			for name := range waited {
				names = append(names, name)
			}
			return names
		}
}
