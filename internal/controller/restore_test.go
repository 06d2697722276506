package controller

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
)

// While a restore holds Ready False, a pass whose pods are all up (Ready True before the gate)
// writes nothing new: Ready keeps the time it went False.
func TestARestoreHoldsReadyFalseWithoutANewTransitionEachPass(t *testing.T) {
	cache := &cachev2.Cache{}
	long := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	checking := restoreCondition(cache, cachev2.ReasonRestoring, "checking")
	stored := []metav1.Condition{
		{Type: cachev2.ConditionReady, Status: metav1.ConditionFalse, Reason: cachev2.ReasonRestoring, Message: "checking", LastTransitionTime: long},
		{Type: cachev2.ConditionRestored, Status: metav1.ConditionFalse, Reason: cachev2.ReasonRestoring, Message: "checking", LastTransitionTime: long},
	}
	status := cachev2.CacheStatus{Conditions: []metav1.Condition{stored[0], stored[1]}}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: cachev2.ConditionReady, Status: metav1.ConditionTrue, Reason: cachev2.ReasonAllReplicasReady})
	withRestore(&status, stored, checking)
	ready := meta.FindStatusCondition(status.Conditions, cachev2.ConditionReady)
	if ready.Status != metav1.ConditionFalse || ready.Reason != cachev2.ReasonRestoring || !ready.LastTransitionTime.Equal(&long) {
		t.Errorf("Ready is %+v, want False %s since %v", ready, cachev2.ReasonRestoring, long)
	}

	verified := restoreCondition(cache, cachev2.ReasonRestoreVerified, "done")
	withRestore(&status, stored, verified)
	if !meta.IsStatusConditionTrue(status.Conditions, cachev2.ConditionRestored) {
		t.Errorf("Restored is %+v, want True", meta.FindStatusCondition(status.Conditions, cachev2.ConditionRestored))
	}
}

// A backup loads into its own version or a later one only.
func TestOlderVersion(t *testing.T) {
	for _, c := range []struct {
		a, b  string
		older bool
	}{{"8.0.1", "8.1.1", true}, {"8.1.1", "8.1.1", false}, {"9.0.0", "8.1.1", false}, {"8.1.10", "8.1.9", false}, {"7.2.4", "8.0.0", true}} {
		if got := olderVersion(c.a, c.b); got != c.older {
			t.Errorf("olderVersion(%s, %s) = %v, want %v", c.a, c.b, got, c.older)
		}
	}
}
