//go:build integration

package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
)

// An object that has the Cache's name and is not its own blocks the Cache for good: the user
// must see that, in Ready and in an event, and the Cache must recover once the object is gone.
func TestNameConflictIsReportedUntilTheObjectIsGone(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	foreign := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "orders-cache", Namespace: ns},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Port: 80}}},
	}
	if err := k8s.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	startManager(t, ns, nil)
	newCache(t, ns)

	waitFor(t, "Ready=False NameConflict naming the Service", func() (bool, string) {
		ready := meta.FindStatusCondition(getCache(t, ns).Status.Conditions, cachev2.ConditionReady)
		if ready == nil {
			return false, "no Ready condition"
		}
		return ready.Status == metav1.ConditionFalse && ready.Reason == cachev2.ReasonNameConflict &&
				strings.Contains(ready.Message, "Service named orders-cache"),
			fmt.Sprintf("Ready %s/%s %q", ready.Status, ready.Reason, ready.Message)
	})
	waitFor(t, "a NameConflict event", func() (bool, string) {
		var list eventsv1.EventList
		if err := k8s.List(ctx, &list, client.InNamespace(ns)); err != nil {
			return false, err.Error()
		}
		for _, e := range list.Items {
			if e.Reason == cachev2.ReasonNameConflict && e.Regarding.Name == "orders-cache" && e.Type == corev1.EventTypeWarning {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d events, none a NameConflict warning", len(list.Items))
	})

	if err := k8s.Delete(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
	assertOneOfEachChild(t, ns)
}

// A child whose managed-by label someone removed drops out of the operator's filtered informer;
// it is still the Cache's, and the operator takes it back rather than failing on it forever.
func TestChildWithoutItsLabelIsAdoptedBack(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	startManager(t, ns, nil)
	newCache(t, ns)
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")

	unlabel := client.RawPatch(client.Merge.Type(),
		[]byte(fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, resources.LabelManagedBy)))
	children := []client.Object{&appsv1.StatefulSet{}, &corev1.Service{}}
	for _, child := range children {
		child.SetName("orders-cache")
		child.SetNamespace(ns)
		if err := k8s.Patch(ctx, child, unlabel); err != nil {
			t.Fatal(err)
		}
	}

	waitFor(t, "both children labelled again", func() (bool, string) {
		for _, child := range children {
			if err := k8s.Get(ctx, client.ObjectKeyFromObject(child), child); err != nil {
				return false, err.Error()
			}
			if child.GetLabels()[resources.LabelManagedBy] != resources.ManagedBy {
				return false, fmt.Sprintf("%T has labels %v", child, child.GetLabels())
			}
		}
		return true, ""
	})
	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
	assertOneOfEachChild(t, ns)
}

// A Cache deleted and made again at once finds the children of the deleted one still there,
// waiting for the garbage collector; even one that lost its label, which the informer cannot
// see. It takes them over rather than reporting a conflict.
func TestChildOfADeletedCacheOfTheSameNameIsTakenOver(t *testing.T) {
	ns := newNamespace(t)
	ctx := context.Background()
	left := resources.Service(&cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "orders-cache", Namespace: ns}})
	delete(left.Labels, resources.LabelManagedBy)
	left.OwnerReferences = []metav1.OwnerReference{{APIVersion: cachev2.GroupVersion.String(), Kind: "Cache",
		Name: "orders-cache", UID: "uid-of-the-deleted-cache", Controller: ptr.To(true)}}
	if err := k8s.Create(ctx, left); err != nil {
		t.Fatal(err)
	}
	startManager(t, ns, nil)
	cache := newCache(t, ns)

	readyIs(t, ns, metav1.ConditionFalse, cachev2.ReasonProgressing, "0/3 replicas ready")
	assertOneOfEachChild(t, ns)
	var svc corev1.Service
	if err := k8s.Get(ctx, client.ObjectKeyFromObject(left), &svc); err != nil {
		t.Fatal(err)
	}
	if !metav1.IsControlledBy(&svc, cache) || svc.Labels[resources.LabelManagedBy] != resources.ManagedBy {
		t.Errorf("the Service left behind has owners %v and labels %v, want it the new Cache's", svc.OwnerReferences, svc.Labels)
	}
}
