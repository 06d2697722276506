package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
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

	if ok, n := g.admit(key("b"), sets, nil, now); !ok || n != 1 {
		t.Fatalf("b with one rollout in progress of 2: admitted %v with %d in progress, want admitted with 1", ok, n)
	}
	// The informer does not show b rolling yet: b still counts, so c waits.
	if ok, n := g.admit(key("c"), sets, nil, now); ok || n != 2 {
		t.Fatalf("c after b was admitted: admitted %v with %d in progress, want queued behind 2", ok, n)
	}
	// a is done; the informer now shows b rolling: c goes.
	sets[0], sets[1] = statefulSet("a", false), statefulSet("b", true)
	if ok, n := g.admit(key("c"), sets, nil, now.Add(time.Second)); !ok || n != 1 {
		t.Fatalf("c once a was done: admitted %v with %d in progress, want admitted with 1", ok, n)
	}
	// Starts the informer never shows (their writes failed) count until recentStart has passed.
	sets[1] = statefulSet("b", false)
	if ok, n := g.admit(key("d"), sets, nil, now.Add(2*time.Second)); !ok || n != 1 {
		t.Fatalf("d with c's start recent: admitted %v with %d in progress, want admitted with 1", ok, n)
	}
	if ok, n := g.admit(key("a"), sets, nil, now.Add(3*time.Second)); ok || n != 2 {
		t.Fatalf("a with c's and d's starts recent: admitted %v with %d in progress, want queued behind 2", ok, n)
	}
	if ok, n := g.admit(key("a"), sets, nil, now.Add(recentStart+3*time.Second)); !ok || n != 0 {
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

func TestAStalledRolloutHoldsNoPlaceOfTheLimit(t *testing.T) {
	g := &RolloutGate{Limit: 1}
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: "shop", Name: name} }
	sets := []appsv1.StatefulSet{statefulSet("a", true), statefulSet("b", false)}
	if ok, n := g.admit(key("b"), sets, nil, time.Now()); ok || n != 1 {
		t.Fatalf("b behind a's rollout: admitted %v with %d in progress, want queued behind 1", ok, n)
	}
	if ok, n := g.admit(key("b"), sets, map[client.ObjectKey]bool{key("a"): true}, time.Now()); !ok || n != 0 {
		t.Fatalf("b once a's rollout stalled: admitted %v with %d in progress, want admitted with 0", ok, n)
	}
}

// rollingStatefulSet is a StatefulSet of 3 pods that its controller has seen, updated of which
// run its new template.
func rollingStatefulSet(updated int32) *appsv1.StatefulSet {
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a", Generation: 2}}
	sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: 2, Replicas: 3, ReadyReplicas: 2, UpdatedReplicas: updated,
		CurrentRevision: "a-1", UpdateRevision: "a-2"}
	return sts
}

func TestARolloutIsReportedStalledOnlyOnceNoPodHasComeToTheNewTemplateForTheDeadline(t *testing.T) {
	g := &RolloutGate{ProgressDeadline: time.Minute}
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a", Generation: 4}}
	start := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	progressing := func(status *cachev2.CacheStatus) *metav1.Condition {
		return meta.FindStatusCondition(status.Conditions, cachev2.ConditionProgressing)
	}

	var status cachev2.CacheStatus
	if due := g.trackProgress(cache, rollingStatefulSet(0), &status, start); due != time.Minute {
		t.Errorf("a rollout that starts: look again in %s, want the deadline, 1m", due)
	}
	if c := progressing(&status); c == nil || c.Status != metav1.ConditionTrue || status.Rollout == nil || !status.Rollout.ProgressedAt.Time.Equal(start) {
		t.Fatalf("a rollout that starts: %+v, rollout %+v; want Progressing=True, progressed at its start", c, status.Rollout)
	}
	// One more pod runs the new template 50 s later: the deadline counts from then.
	g.trackProgress(cache, rollingStatefulSet(1), &status, start.Add(50*time.Second))
	if due := g.trackProgress(cache, rollingStatefulSet(1), &status, start.Add(90*time.Second)); due != 20*time.Second {
		t.Errorf("40 s after the last progress: look again in %s, want 20s", due)
	}
	if c := progressing(&status); c.Status != metav1.ConditionTrue {
		t.Fatalf("40 s after the last progress: %+v, want Progressing=True", c)
	}
	if due := g.trackProgress(cache, rollingStatefulSet(1), &status, start.Add(110*time.Second)); due != 0 {
		t.Errorf("past the deadline: look again in %s, want no timer", due)
	}
	if c := progressing(&status); c.Status != metav1.ConditionFalse || c.Reason != cachev2.ReasonProgressDeadlineExceeded {
		t.Fatalf("past the deadline: %+v, want Progressing=False/%s", c, cachev2.ReasonProgressDeadlineExceeded)
	}
	// A pass at a later time writes nothing new: the condition's text does not move with the clock.
	before := *status.DeepCopy()
	g.trackProgress(cache, rollingStatefulSet(1), &status, start.Add(time.Hour))
	if !equality.Semantic.DeepEqual(before, status) {
		t.Errorf("a later pass on a stalled rollout changed the status (-before +after):\n%s", cmp.Diff(before, status))
	}
	// It moves again, then ends.
	g.trackProgress(cache, rollingStatefulSet(2), &status, start.Add(2*time.Hour))
	if c := progressing(&status); c.Status != metav1.ConditionTrue {
		t.Fatalf("a stalled rollout that moves again: %+v, want Progressing=True", c)
	}
	done := rollingStatefulSet(3)
	done.Status.CurrentRevision = "a-2"
	g.trackProgress(cache, done, &status, start.Add(2*time.Hour))
	if c := progressing(&status); c != nil || status.Rollout != nil {
		t.Errorf("a finished rollout: %+v, rollout %+v; want neither", c, status.Rollout)
	}
}

func TestANewStatefulSetOrAStaleStatusIsNoRolloutProgress(t *testing.T) {
	g := &RolloutGate{}
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a", Generation: 1}}
	fresh := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "a", Generation: 1}}
	var status cachev2.CacheStatus
	if g.trackProgress(cache, fresh, &status, time.Now()); status.Rollout != nil || len(status.Conditions) != 0 {
		t.Errorf("a StatefulSet its controller has not seen yet: %+v, want no rollout", status)
	}
	// A template just written: the status still counts the pods against the earlier one.
	stale := rollingStatefulSet(3)
	stale.Generation, stale.Status.CurrentRevision = 3, "a-2"
	status.Rollout = &cachev2.RolloutStatus{UpdatedReplicas: 3, ProgressedAt: metav1.Now()}
	before := *status.DeepCopy()
	if g.trackProgress(cache, stale, &status, time.Now()); !equality.Semantic.DeepEqual(before, status) {
		t.Errorf("a status behind the StatefulSet's generation changed the record:\n%s", cmp.Diff(before, status))
	}
}
