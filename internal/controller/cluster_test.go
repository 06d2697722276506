package controller

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/topology"
)

// With every pod ready the pods' verdict is True, and the cluster's, unchanged since the last
// pass, False: the stored condition must come out as it was, transition time included, or every
// pass would write the status and so start the next one at once.
func TestAClusterStillFormingKeepsItsReadyTransitionTime(t *testing.T) {
	long := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	cache := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Spec:       cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 1},
		Status: cachev2.CacheStatus{Conditions: []metav1.Condition{{
			Type: cachev2.ConditionReady, Status: metav1.ConditionFalse, Reason: cachev2.ReasonClusterForming,
			Message: "cannot ask pod-0 for its cluster state", ObservedGeneration: 1, LastTransitionTime: long,
		}}},
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: appsv1.StatefulSetStatus{
		ObservedGeneration: 1, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1,
	}}

	health := topology.Health{Problem: topology.Forming, Message: "cannot ask pod-0 for its cluster state"}
	status := observedStatus(cache, sts, nil, false, reportCluster(topology.Want{Shards: 1}, nil, health, 1))

	ready := meta.FindStatusCondition(status.Conditions, cachev2.ConditionReady)
	if ready.Status != metav1.ConditionFalse || !ready.LastTransitionTime.Equal(&long) {
		t.Errorf("Ready is %s since %v, want False since %v", ready.Status, ready.LastTransitionTime, long)
	}
}
