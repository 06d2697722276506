package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1 "example.com/cache-operator/api/v1"
	"example.com/cache-operator/internal/resources"
)

// ensureChildren makes the Cache's Service and StatefulSet match its spec. The Service comes
// first: the StatefulSet's pods get their DNS names from it.
func (r *CacheReconciler) ensureChildren(ctx context.Context, cache *cachev1.Cache) (*appsv1.StatefulSet, error) {
	if err := r.ensureService(ctx, cache); err != nil {
		return nil, fmt.Errorf("ensuring Service: %w", err)
	}
	sts, err := r.ensureStatefulSet(ctx, cache)
	if err != nil {
		return nil, fmt.Errorf("ensuring StatefulSet: %w", err)
	}
	return sts, nil
}

func (r *CacheReconciler) ensureStatefulSet(ctx context.Context, cache *cachev1.Cache) (*appsv1.StatefulSet, error) {
	desired := resources.StatefulSet(cache, r.ImageRepository)
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Name: desired.Name, Namespace: desired.Namespace}}
	err := r.ensureChild(ctx, cache, sts, func() { resources.MergeStatefulSet(sts, desired) })
	return sts, err
}

func (r *CacheReconciler) ensureService(ctx context.Context, cache *cachev1.Cache) error {
	desired := resources.Service(cache)
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: desired.Name, Namespace: desired.Namespace}}
	return r.ensureChild(ctx, cache, svc, func() { resources.MergeService(svc, desired) })
}

// ensureChild creates child, or updates it when merging the owned fields changed any of them,
// and makes the Cache its controller so the garbage collector removes it with the Cache. The
// read comes from the informer cache and may be stale: the child's name is the Cache's, so a
// create that races with an earlier one fails with AlreadyExists instead of making a second
// child, and an update from a stale copy fails with a conflict; both go back to the queue.
func (r *CacheReconciler) ensureChild(ctx context.Context, cache *cachev1.Cache, child client.Object, merge func()) error {
	op, err := controllerutil.CreateOrUpdate(ctx, r.Client, child, func() error {
		merge()
		return controllerutil.SetControllerReference(cache, child, r.Scheme())
	})
	if op != controllerutil.OperationResultNone {
		gvk, _ := r.GroupVersionKindFor(child)
		log.FromContext(ctx).Info("Wrote child", "kind", gvk.Kind, "name", child.GetName(), "operation", op)
	}
	return err
}
