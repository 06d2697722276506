// Package controller holds the Cache reconciler: a level-triggered loop that re-reads a Cache and
// its children on every pass and converges them on the spec, keeping nothing in memory between
// passes.
package controller

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"

	cachev1 "example.com/cache-operator/api/v1"
)

// CacheReconciler makes the StatefulSet and headless Service of each Cache match its spec and
// reports what it observes in the Cache's status.
type CacheReconciler struct {
	client.Client

	// ImageRepository is the repository of the Valkey image; the Cache's version is the tag.
	ImageRepository string
}

// +kubebuilder:rbac:groups=cache.example.com,resources=caches,verbs=get;list;watch
// +kubebuilder:rbac:groups=cache.example.com,resources=caches/status,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update

// Reconcile converges one Cache. It is called with a key and no reason: whatever changed, it
// reads the current state and does what is needed. Errors go back to the work queue, which
// retries with exponential backoff; no pass waits or retries in place.
func (r *CacheReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	var cache cachev1.Cache
	if err := r.Get(ctx, req.NamespacedName, &cache); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err) // already gone
	}

	if !cache.DeletionTimestamp.IsZero() {
		// The garbage collector deletes the owned StatefulSet and Service.
		return ctrl.Result{}, nil
	}

	// The Service first: the StatefulSet's pods get their DNS names from it.
	if err := r.ensureService(ctx, &cache); err != nil {
		return ctrl.Result{}, fmt.Errorf("ensuring Service: %w", err)
	}
	sts, err := r.ensureStatefulSet(ctx, &cache)
	if err != nil {
		return ctrl.Result{}, fmt.Errorf("ensuring StatefulSet: %w", err)
	}

	// No requeue while the StatefulSet converges: every change to its status enqueues the
	// Cache again through the owner reference.
	if err := r.updateStatus(ctx, &cache, sts); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating status: %w", err)
	}
	return ctrl.Result{}, nil
}

// SetupWithManager registers the reconciler with the manager: Caches are watched, and so are the
// StatefulSets and Services they own, each change of which enqueues the owning Cache.
func (r *CacheReconciler) SetupWithManager(mgr ctrl.Manager, maxConcurrentReconciles int) error {
	return ctrl.NewControllerManagedBy(mgr).
		For(&cachev1.Cache{}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles}).
		Complete(r)
}
