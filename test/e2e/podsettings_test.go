//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/test/harness/testenv"
)

// A Cache's pod settings reach its pods as a real control plane admits and schedules them (the
// PriorityClass resolved to its value, the nodeSelector and toleration honoured), and its Valkey
// settings its servers; a change of them rolls out as a change of version does: every pod gets
// the new label and every server the new eviction policy, the Cluster stays whole and keeps its
// keys.
func TestPodSettingsReachThePodsAndTheirChangeRollsOut(t *testing.T) {
	runBeside(t, 1)
	ctx := context.Background()
	startOperator(t, "a", "", clusterCheckInterval)
	ns := newNamespace(t)
	class := &schedulingv1.PriorityClass{ObjectMeta: metav1.ObjectMeta{Name: "caches-" + ns}, Value: 1000}
	if err := admin.Create(ctx, class); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), class) })
	cache := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "sessions", Namespace: ns},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 1, ReplicasPerShard: ptr.To[int32](1),
			Version: valkeyVersion, Memory: resource.MustParse("64Mi"),
			Pod: &cachev2.PodSettings{
				CPU:               &cachev2.CPU{Request: ptr.To(resource.MustParse("50m")), Limit: ptr.To(resource.MustParse("500m"))},
				NodeSelector:      map[string]cachev2.LabelValue{corev1.LabelOSStable: "linux"},
				Tolerations:       []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "caches", Effect: corev1.TaintEffectNoSchedule}},
				PriorityClassName: class.Name,
				Labels:            map[string]cachev2.LabelValue{"team": "checkout"},
				Annotations:       map[string]string{"example.com/owner": "checkout"},
			},
			Config: &cachev2.ValkeyConfig{MaxmemoryPolicy: "allkeys-lfu"}},
	}
	if err := admin.Create(ctx, cache); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(cache)
	waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	for _, pod := range cachePods(t, key) {
		spec, c := pod.Spec, pod.Spec.Containers[0]
		if spec.NodeSelector[corev1.LabelOSStable] != "linux" || len(spec.Tolerations) == 0 || spec.PriorityClassName != class.Name ||
			ptr.Deref(spec.Priority, 0) != 1000 || pod.Labels["team"] != "checkout" || pod.Annotations["example.com/owner"] != "checkout" ||
			c.Resources.Requests.Cpu().String() != "50m" || c.Resources.Limits.Cpu().String() != "500m" {
			t.Errorf("pod %s: nodeSelector %v, tolerations %v, priority class %q (%v), labels %v, annotations %v, CPU %s/%s",
				pod.Name, spec.NodeSelector, spec.Tolerations, spec.PriorityClassName, spec.Priority, pod.Labels, pod.Annotations,
				c.Resources.Requests.Cpu(), c.Resources.Limits.Cpu())
		}
	}
	writeKeys(t, key, 100)

	patchCache(t, key, `{"spec":{"pod":{"labels":{"team":"payments"}},"config":{"maxmemoryPolicy":"volatile-lru"}}}`)
	testenv.WaitFor(t, 3*time.Minute, "every pod relabelled and the Cluster Ready", func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		pods := cachePods(t, key)
		relabelled := 0
		for _, pod := range pods {
			if pod.Labels["team"] == "payments" && pod.DeletionTimestamp == nil && podReady(&pod) {
				relabelled++
			}
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
		return relabelled == 2 && len(pods) == 2 && ready != nil && ready.Status == metav1.ConditionTrue &&
				ready.Reason == cachev2.ReasonClusterReady && ready.ObservedGeneration == c.Generation,
			fmt.Sprintf("%d of %d pods relabelled and ready; Ready %+v", relabelled, len(pods), ready)
	})
	assertShape(t, key, 1, 1)
	assertKeysRead(t, key, 100)
	assertEvictionPolicy(t, key, "volatile-lru")
}

// assertEvictionPolicy checks that every server of the Cache evicts by the policy given.
func assertEvictionPolicy(t *testing.T, key client.ObjectKey, want string) {
	t.Helper()
	for _, pod := range cachePods(t, key) {
		c := testenv.Valkey(t, pod.Status.PodIP, resources.Port)
		got, err := c.Do(context.Background(), c.B().ConfigGet().Parameter("maxmemory-policy").Build()).AsStrMap()
		if err != nil {
			t.Fatalf("%s: %v", pod.Name, err)
		}
		if got["maxmemory-policy"] != want {
			t.Errorf("%s evicts by %q, want %q", pod.Name, got["maxmemory-policy"], want)
		}
	}
}
