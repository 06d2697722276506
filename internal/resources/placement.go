package resources

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
)

// spreadOut asks the scheduler to spread a Cache's pods evenly over the nodes and over the zones,
// so that losing one machine, or one zone, loses as little of the cache as possible: with a pod
// per node, no node holds a shard's primary and its replica (where the scheduler must put two on
// one node, the operator keeps them in different shards, see topology.attachReplicas). The
// constraints are soft: pods are scheduled on fewer nodes or zones rather than left pending. They
// cost the scheduler no more than the preferred pod anti-affinity they replace (docs/benchmark.md,
// Placement), and count only the nodes the pods may run on (spec.pod.nodeSelector).
func spreadOut(cache *cachev2.Cache) []corev1.TopologySpreadConstraint {
	selector := &metav1.LabelSelector{MatchLabels: SelectorLabels(cache)}
	return []corev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: selector},
		{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: selector},
	}
}
