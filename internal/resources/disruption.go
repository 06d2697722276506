package resources

import (
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
)

// PodDisruptionBudget is a Cache's PodDisruptionBudget: a voluntary disruption, such as a node
// drain's eviction, takes at most one of the Cache's pods at a time, and none while any of them
// is not ready. One per Cache rather than one per shard: which pods make a shard changes with
// every failover, and a budget's selector cannot follow it. So a drain takes the Cache's pods
// one by one, each only once the one before is back: a Cluster node is ready only once, as a
// replica, it is in sync with its primary (readiness.ClusterNodeReady), so a shard is never left without a
// replica in sync when its primary goes, and the primary hands over to it first (handOver).
//
// A pod that is not ready may always be evicted (AlwaysAllow): it serves no client and holds no
// shard's copy in sync, so its eviction takes nothing away. Kubernetes' default lets it go only
// while the rest are healthy, so two pods that cannot become ready (a replica that can never
// sync, and another) would each block the other's eviction, and a drain of their nodes, for good.
func PodDisruptionBudget(cache *cachev2.Cache) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{
		ObjectMeta: metav1.ObjectMeta{Name: cache.Name, Namespace: cache.Namespace, Labels: Labels(cache)},
		Spec: policyv1.PodDisruptionBudgetSpec{
			Selector:                   &metav1.LabelSelector{MatchLabels: SelectorLabels(cache)},
			MaxUnavailable:             ptr.To(intstr.FromInt32(1)),
			UnhealthyPodEvictionPolicy: ptr.To(policyv1.AlwaysAllow),
		},
	}
}

// MergePodDisruptionBudget makes dst, a stored budget or a new empty one, match desired in the
// fields the operator owns: its labels, selector, the pods it lets go at once and which it lets
// go whatever the budget.
func MergePodDisruptionBudget(dst, desired *policyv1.PodDisruptionBudget) {
	mergeLabels(&dst.Labels, desired.Labels)
	dst.Spec.Selector = desired.Spec.Selector
	dst.Spec.MinAvailable = nil
	dst.Spec.MaxUnavailable = desired.Spec.MaxUnavailable
	dst.Spec.UnhealthyPodEvictionPolicy = desired.Spec.UnhealthyPodEvictionPolicy
}

// PodDisruptionBudgetUpToDate reports whether merging desired into pdb changes nothing. pdb may
// be the informer's copy, reduced by StripPodDisruptionBudget.
func PodDisruptionBudgetUpToDate(pdb, desired *policyv1.PodDisruptionBudget) bool {
	merged := pdb.DeepCopy()
	MergePodDisruptionBudget(merged, desired)
	return equality.Semantic.DeepEqual(merged, pdb)
}

// StripPodDisruptionBudget reduces a budget to what the reconciler reads of it: which object it
// is, whose, and its spec; not its status, which the disruption controller rewrites as pods come
// and go.
func StripPodDisruptionBudget(pdb *policyv1.PodDisruptionBudget) *policyv1.PodDisruptionBudget {
	return &policyv1.PodDisruptionBudget{TypeMeta: pdb.TypeMeta, ObjectMeta: CachedMeta(pdb.ObjectMeta), Spec: *pdb.Spec.DeepCopy()}
}
