package controller

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
)

func statusTestCache(replicas int32) *cachev2.Cache {
	return &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-cache", Namespace: "default", Generation: 5},
		Spec:       cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: replicas, Version: "8.1.1", Memory: resource.MustParse("256Mi")},
	}
}

func TestReadyCondition(t *testing.T) {
	for _, tc := range []struct {
		name        string
		want        int32
		generation  int64
		status      appsv1.StatefulSetStatus
		wantStatus  metav1.ConditionStatus
		wantReason  string
		wantMessage string
	}{{
		name: "just created", want: 3, generation: 1,
		status:     appsv1.StatefulSetStatus{},
		wantStatus: metav1.ConditionFalse, wantReason: cachev2.ReasonProgressing, wantMessage: "0/3 replicas ready",
	}, {
		name: "all ready", want: 3, generation: 1,
		status:     appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 3},
		wantStatus: metav1.ConditionTrue, wantReason: cachev2.ReasonAllReplicasReady, wantMessage: "3/3 replicas ready",
	}, {
		name: "scaling up", want: 5, generation: 2,
		status:     appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 4, ReadyReplicas: 3, UpdatedReplicas: 4},
		wantStatus: metav1.ConditionFalse, wantReason: cachev2.ReasonProgressing, wantMessage: "3/5 replicas ready",
	}, {
		name: "scaling down, extra pods still there", want: 2, generation: 2,
		status:     appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 3},
		wantStatus: metav1.ConditionFalse, wantReason: cachev2.ReasonProgressing, wantMessage: "removing nodes: 3 running, scaling down to 2",
	}, {
		name: "StatefulSet controller has not seen our last change yet", want: 3, generation: 2,
		status:     appsv1.StatefulSetStatus{ObservedGeneration: 1, Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 3},
		wantStatus: metav1.ConditionFalse, wantReason: cachev2.ReasonProgressing, wantMessage: "3/3 replicas ready",
	}, {
		name: "rolling out a new version", want: 3, generation: 2,
		status: appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 3, ReadyReplicas: 3, UpdatedReplicas: 1,
			CurrentRevision: "orders-cache-a", UpdateRevision: "orders-cache-b"},
		wantStatus: metav1.ConditionFalse, wantReason: cachev2.ReasonProgressing,
		wantMessage: "3/3 replicas ready, 1/3 updated to the current spec",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cache := statusTestCache(tc.want)
			sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: tc.generation}, Status: tc.status}

			got := readyCondition(cache, sts)

			if got.Status != tc.wantStatus || got.Reason != tc.wantReason || got.Message != tc.wantMessage {
				t.Errorf("Ready = %s/%s %q, want %s/%s %q",
					got.Status, got.Reason, got.Message, tc.wantStatus, tc.wantReason, tc.wantMessage)
			}
			if got.ObservedGeneration != cache.Generation {
				t.Errorf("condition observedGeneration = %d, want the Cache's generation %d", got.ObservedGeneration, cache.Generation)
			}
		})
	}
}

func TestObservedStatusMovesTheTransitionTimeOnlyOnAFlip(t *testing.T) {
	cache := statusTestCache(5)
	long := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	cache.Status.Conditions = []metav1.Condition{
		{Type: cachev2.ConditionReady, Status: metav1.ConditionFalse, Reason: cachev2.ReasonProgressing,
			Message: "3/5 replicas ready", ObservedGeneration: 5, LastTransitionTime: long},
		{Type: "Scheduled", Status: metav1.ConditionTrue, Reason: "Scheduled", LastTransitionTime: long},
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 2}}

	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 5, ReadyReplicas: 4, UpdatedReplicas: 5}
	progressing := observedStatus(cache, sts, nil, resources.TemplateCurrent, nil)
	ready := meta.FindStatusCondition(progressing.Conditions, cachev2.ConditionReady)
	if ready.Message != "4/5 replicas ready" || !ready.LastTransitionTime.Equal(&long) {
		t.Errorf("still progressing: got %q at %v, want the new message and the old transition time %v",
			ready.Message, ready.LastTransitionTime, long)
	}

	sts.Status.ReadyReplicas = 5
	done := observedStatus(cache, sts, nil, resources.TemplateCurrent, nil)
	ready = meta.FindStatusCondition(done.Conditions, cachev2.ConditionReady)
	if ready.Status != metav1.ConditionTrue || ready.LastTransitionTime.Equal(&long) {
		t.Errorf("flipped to ready: got %s at %v, want True with a new transition time", ready.Status, ready.LastTransitionTime)
	}
	if meta.FindStatusCondition(done.Conditions, "Scheduled") == nil {
		t.Error("another condition was dropped")
	}
	if done.ObservedGeneration != 5 || done.ReadyReplicas != 5 || done.Replicas != 5 {
		t.Errorf("status = %+v, want observedGeneration 5 and 5/5 replicas", done)
	}
	if done.Selector != "app.kubernetes.io/instance=orders-cache,app.kubernetes.io/name=valkey" {
		t.Errorf("selector = %q", done.Selector)
	}
	if len(cache.Status.Conditions) != 2 || cache.Status.Conditions[0].Status != metav1.ConditionFalse {
		t.Error("observedStatus changed the Cache it was given; it must be a pure function")
	}
}

func TestSlotsMovedCountsFromTheStoredStatus(t *testing.T) {
	for _, tc := range []struct {
		name                      string
		storedToMove, storedMoved int32
		toMove, want              int32
	}{
		{"an operation starts", 0, 900, 6553, 0},
		{"a batch moved", 6553, 0, 5529, 1024},
		{"another batch", 5529, 1024, 4505, 2048},
		{"the same pass again, as after a conflict", 5529, 1024, 5529, 1024},
		{"the plan grows (scaled out further)", 4505, 2048, 7000, 2048},
		{"done", 1000, 5553, 0, 6553},
		{"idle: the last total stays", 0, 6553, 0, 6553},
	} {
		got := slotsMoved(cachev2.CacheStatus{SlotsToMove: tc.storedToMove, SlotsMoved: tc.storedMoved}, tc.toMove)
		if got != tc.want {
			t.Errorf("%s: slotsMoved = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// A Cluster's StatefulSet keeps leaving pods while a scale-in drains, and its pods are restarted
// by the operator (OnDelete): the pods count against the StatefulSet's replicas, and an older
// revision does not hold Ready back (the cluster's verdict says Upgrading).
func TestReadyConditionOfAClusterCountsTheStatefulSetsPods(t *testing.T) {
	cache := statusTestCache(3)
	cache.Spec.Mode, cache.Spec.ReplicasPerShard = cachev2.ModeCluster, new(int32)
	sts := &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Generation: 4},
		Spec:       appsv1.StatefulSetSpec{Replicas: new(int32)},
		Status: appsv1.StatefulSetStatus{ObservedGeneration: 4, Replicas: 5, ReadyReplicas: 5, UpdatedReplicas: 0,
			CurrentRevision: "a", UpdateRevision: "b"},
	}
	*sts.Spec.Replicas = 5
	if cond := readyCondition(cache, sts); cond.Status != metav1.ConditionTrue {
		t.Errorf("Ready %s %s %q, want True while 5 of 5 pods are ready", cond.Status, cond.Reason, cond.Message)
	}
}
