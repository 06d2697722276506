//go:build integration

package controller

import (
	"fmt"
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/cache-operator/internal/resources"
)

// The rollout gate counts the StatefulSets rolling out from the informer, which keeps them
// encoded and finds those rolling out by an index (indexRollingOut), on a real API server.
func TestTheGateCountsTheRolloutsTheInformersIndexHolds(t *testing.T) {
	ns := newNamespace(t)
	reader := startManager(t, ns, nil)
	key := func(name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }
	setRolling := func(name string, rolling bool) {
		t.Helper()
		var sts appsv1.StatefulSet
		if err := k8s.Get(t.Context(), key(name), &sts); err != nil {
			t.Fatal(err)
		}
		sts.Status = appsv1.StatefulSetStatus{ObservedGeneration: sts.Generation, Replicas: 1, UpdatedReplicas: 1}
		if rolling {
			sts.Status.UpdatedReplicas = 0
		}
		if err := k8s.Status().Update(t.Context(), &sts); err != nil {
			t.Fatal(err)
		}
	}
	for name, rolling := range map[string]bool{"a": true, "b": true, "c": false} {
		labels := map[string]string{"app": name}
		sts := &appsv1.StatefulSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{resources.LabelManagedBy: resources.ManagedBy}},
			Spec: appsv1.StatefulSetSpec{Replicas: ptr.To[int32](1), Selector: &metav1.LabelSelector{MatchLabels: labels},
				Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
					Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "valkey", Image: "valkey"}}}}},
		}
		if err := k8s.Create(t.Context(), sts); err != nil {
			t.Fatal(err)
		}
		setRolling(name, rolling)
	}
	indexed := func(want ...string) func() (bool, string) {
		return func() (bool, string) {
			var sets appsv1.StatefulSetList
			if err := reader.List(t.Context(), &sets, client.MatchingFields{rollingOutField: rollingOut}); err != nil {
				return false, err.Error()
			}
			var names []string
			for _, sts := range sets.Items {
				names = append(names, sts.Name)
			}
			slices.Sort(names)
			return slices.Equal(names, want), fmt.Sprintf("the index holds %v", names)
		}
	}
	waitFor(t, "a and b indexed as rolling out", indexed("a", "b"))

	gate := &RolloutGate{Limit: 2, Reader: reader}
	if admitted, err := gate.Admit(t.Context(), key("c")); admitted || err != nil {
		t.Fatalf("c with a and b rolling out, at most 2: admitted %v (%v), want it to wait", admitted, err)
	}
	setRolling("b", false)
	waitFor(t, "only a indexed as rolling out", indexed("a"))
	if admitted, err := gate.Admit(t.Context(), key("c")); !admitted || err != nil {
		t.Fatalf("c once b was done: admitted %v (%v), want admitted", admitted, err)
	}
}
