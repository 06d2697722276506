package controller

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// statefulSet is a StatefulSet of one pod, rolling a new template out or not.
func statefulSet(name string, rolling bool) appsv1.StatefulSet {
	sts := appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name, Generation: 2}}
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 1, UpdatedReplicas: 1}
	if rolling {
		sts.Status.UpdatedReplicas = 0
	}
	return sts
}

func TestTheGateAdmitsUpToItsLimitCountingWhatTheInformerDoesNotShowYet(t *testing.T) {
	g := &RolloutGate{Limit: 2}
	now := time.Now()
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: "shop", Name: name} }
	sets := []appsv1.StatefulSet{statefulSet("a", true), statefulSet("b", false), statefulSet("c", false), statefulSet("d", false)}

	if ok, n := g.admit(key("b"), sets, now); !ok || n != 1 {
		t.Fatalf("b with one rollout in progress of 2: admitted %v with %d in progress, want admitted with 1", ok, n)
	}
	// The informer does not show b rolling yet: b still counts, so c waits.
	if ok, n := g.admit(key("c"), sets, now); ok || n != 2 {
		t.Fatalf("c after b was admitted: admitted %v with %d in progress, want queued behind 2", ok, n)
	}
	// a is done; the informer now shows b rolling: c goes.
	sets[0], sets[1] = statefulSet("a", false), statefulSet("b", true)
	if ok, n := g.admit(key("c"), sets, now.Add(time.Second)); !ok || n != 1 {
		t.Fatalf("c once a was done: admitted %v with %d in progress, want admitted with 1", ok, n)
	}
	// Starts the informer never shows (their writes failed) count until recentStart has passed.
	sets[1] = statefulSet("b", false)
	if ok, n := g.admit(key("d"), sets, now.Add(2*time.Second)); !ok || n != 1 {
		t.Fatalf("d with c's start recent: admitted %v with %d in progress, want admitted with 1", ok, n)
	}
	if ok, n := g.admit(key("a"), sets, now.Add(3*time.Second)); ok || n != 2 {
		t.Fatalf("a with c's and d's starts recent: admitted %v with %d in progress, want queued behind 2", ok, n)
	}
	if ok, n := g.admit(key("a"), sets, now.Add(recentStart+3*time.Second)); !ok || n != 0 {
		t.Fatalf("a once those starts are old and the informer shows no rollout: admitted %v with %d in progress, want admitted with 0", ok, n)
	}
}

func TestANilOrUnlimitedGateAdmitsEverything(t *testing.T) {
	for _, g := range []*RolloutGate{nil, {Limit: 0}} {
		if ok, err := g.Admit(t.Context(), client.ObjectKey{Namespace: "shop", Name: "a"}); !ok || err != nil {
			t.Errorf("gate %+v: admitted %v, %v; want admitted", g, ok, err)
		}
	}
}
