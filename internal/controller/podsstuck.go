package controller

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
)

// podsCheckAfter is how long a Cache's Ready stays False, with some of its pods not ready,
// before the operator looks at the pods for a container that cannot start, and then how often it
// looks again while that lasts. The pods' containers' states reach no watch of the operator (it
// caches a Cluster's pods only, without them): a pod waiting on an image the nodes cannot pull
// changes nothing the operator sees, and the Cache would say "0/3 replicas ready" for good.
const podsCheckAfter = time.Minute

// checkPods puts in status.Ready what keeps the Cache's pods from starting, when Ready has been
// False for podsCheckAfter with some pod not ready, and says when to look again (0: no need).
func (r *CacheReconciler) checkPods(ctx context.Context, cache *cachev2.Cache, sts *appsv1.StatefulSet, status *cachev2.CacheStatus, now time.Time) (time.Duration, error) {
	ready := meta.FindStatusCondition(status.Conditions, cachev2.ConditionReady)
	if ready == nil || ready.Status != metav1.ConditionFalse || sts.Status.ReadyReplicas >= sts.Status.Replicas {
		return 0, nil
	}
	// The stored condition's transition time: the one computed now has none yet if it just fell.
	stored := meta.FindStatusCondition(cache.Status.Conditions, cachev2.ConditionReady)
	if stored == nil || stored.Status != metav1.ConditionFalse {
		return podsCheckAfter, nil
	}
	if wait := podsCheckAfter - now.Sub(stored.LastTransitionTime.Time); wait > 0 {
		return wait, nil
	}
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(cache.Namespace), client.MatchingLabels(resources.SelectorLabels(cache))); err != nil {
		return 0, fmt.Errorf("listing the Cache's pods: %w", err)
	}
	if why := podsStuck(pods.Items); why != "" {
		ready.Reason, ready.Message = cachev2.ReasonPodsCannotStart, why
	}
	return podsCheckAfter, nil
}

// podsStuck says which of the pods have a container that cannot start, and why, as the kubelet
// reports it; "" if none.
func podsStuck(pods []corev1.Pod) string {
	var stuck []string
	agentImage, valkeyImage := false, false // an image that cannot be pulled
	for _, pod := range pods {
		for _, c := range slices.Concat(pod.Status.InitContainerStatuses, pod.Status.ContainerStatuses) {
			if w := c.State.Waiting; w != nil && resources.CannotStart(w.Reason) {
				stuck = append(stuck, fmt.Sprintf("pod %s, container %s: %s: %s", pod.Name, c.Name, w.Reason, w.Message))
				image, agent := strings.Contains(w.Reason, "Image"), c.Name == resources.ReadinessContainerName || c.Name == resources.RestoreContainerName
				agentImage = agentImage || image && agent
				valkeyImage = valkeyImage || image && !agent
				break
			}
		}
	}
	if len(stuck) == 0 {
		return ""
	}
	slices.Sort(stuck)
	why := fmt.Sprintf("%d pods cannot start: %s", len(stuck), strings.Join(stuck, "; "))
	if valkeyImage {
		why += " (is spec.version a Valkey release, and can the nodes pull its image?)"
	}
	if agentImage {
		why += " (can the nodes pull the operator's image, --agent-image, which the readiness agent and the restore step run?)"
	}
	return why
}
