// Package controller holds the Cache reconciler: a level-triggered loop that re-reads a Cache and
// its children on every pass and converges them on the spec. All it keeps between passes is
// which versions of a Cache its own writes replaced (ownWrites) and which children it created
// (ownCreations), so as not to act on a read from before them.
package controller

import (
	"context"
	"time"

	"golang.org/x/time/rate"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/catalog"
	"example.com/cache-operator/internal/resources"
)

// CacheReconciler makes the StatefulSet, headless Service and PodDisruptionBudget of each Cache,
// and the Secrets of one with auth, match its spec, lists the Cache's nodes in the external
// catalogue, and reports what it observes in the Cache's status.
type CacheReconciler struct {
	client.Client
	// APIReader reads from the API server, bypassing the informer cache: for the whole
	// StatefulSet or Service before an update, since the cache keeps only part of each.
	APIReader client.Reader
	// Recorder records the events that tell a user about catalogue failures.
	Recorder events.EventRecorder

	// Images are the images the Caches' pods run.
	Images resources.Images
	// Catalog is the external service catalogue; nil runs without one, and then no Cache gets
	// a finalizer.
	Catalog catalog.Catalog
	// ClusterDomain is the cluster's DNS domain, part of each node's name in the catalogue.
	ClusterDomain string
	// ClusterCheckInterval is how often the servers of a ready Cluster Cache are asked whether
	// it is still ready.
	ClusterCheckInterval time.Duration
	// KeyByKeySlotMigration moves a Cluster's slots key by key even where every server could move
	// them with atomic slot migration (Valkey 9).
	KeyByKeySlotMigration bool
	// Rollouts bounds how many Caches roll a new pod template out at once; nil bounds nothing.
	Rollouts *RolloutGate

	ownWrites    ownWrites
	ownCreations ownCreations
	unfinalized  unfinalizedDeletions
}

// +kubebuilder:rbac:groups=cache.example.com,resources=caches,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=cache.example.com,resources=caches/status,verbs=update
// +kubebuilder:rbac:groups=cache.example.com,resources=caches/finalizers,verbs=update
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// Reconcile converges one Cache. It is called with a key and no reason: whatever changed, it
// reads the current state and does what is needed. Errors go back to the work queue, which
// retries with exponential backoff; no pass waits or retries in place.
func (r *CacheReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	cache, current, err := r.currentCache(ctx, req.NamespacedName)
	switch {
	case err != nil:
		return ctrl.Result{}, err // unreadable
	case cache == nil:
		return ctrl.Result{}, r.deregisterUnfinalized(ctx, req.NamespacedName) // already gone
	}
	if !current {
		// The event of our last write enqueues the Cache again; the timer is a backstop.
		return ctrl.Result{RequeueAfter: staleReadRetryAfter}, nil
	}

	if !cache.DeletionTimestamp.IsZero() {
		// The garbage collector deletes the owned StatefulSet and Service; only the catalogue
		// record is ours to clean up.
		return ctrl.Result{}, r.finalize(ctx, cache)
	}

	// The phases in the order in which each needs the ones before it. A restored Cache's pods
	// wait for its backup, and every pod for the certificates and the credentials that it
	// mounts or loads at its start, with which the operator then speaks to its server. A
	// Cluster's servers are asked who they are before the children change, so that a scale-in
	// removes no pod whose server still holds slots. The finalizer goes on, and the catalogue
	// lists the Cache, once its children exist; the Cluster's or the Replicated Cache's step
	// follows, then everything the status reports, written last and once.
	p := &pass{cache: cache}
	for _, phase := range []phase{
		r.restorePhase,
		r.certificatesPhase,
		r.credentialsPhase,
		r.membersPhase,
		r.childrenPhase,
		r.registrationPhase,
		r.clusterPhase,
		r.replicatedPhase,
		r.statusPhase,
		r.rolloutPhase,
		r.servingPhase,
		r.podsPhase,
		r.restoreCheckPhase,
		r.writeStatusPhase,
	} {
		if result, err := phase(ctx, p); result != nil {
			return *result, err
		}
	}
	return p.result()
}

// soonest is the sooner of two requeue intervals, where 0 is none.
func soonest(a, b time.Duration) time.Duration {
	if a == 0 || b != 0 && b < a {
		return b
	}
	return a
}

// ControllerName names the controller in its metrics' controller label, which the alerts and the
// dashboard select on: it is set, not derived from the kind, so that it stays put.
const ControllerName = "cache"

// SetupWithManager registers the reconciler with the manager: Caches are watched, but for the
// echoes of the reconciler's own writes (ownWrites), those with work pending first at a start
// (pendingFirst), and so are the StatefulSets and Services they own, each change of which
// enqueues the owning Cache; and the index the rollout gate reads by.
func (r *CacheReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, maxConcurrentReconciles int) error {
	if err := indexRollingOut(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&cachev2.Cache{}, builder.WithPredicates(r.notAnEcho())).
		Watches(&cachev2.Cache{}, pendingFirst{}).
		Watches(&cachev2.Cache{}, deletedUnfinalized{deletions: &r.unfinalized}).
		Owns(&appsv1.StatefulSet{}).
		Owns(&corev1.Service{}).
		// The disruption controller rewrites a budget's status as pods come and go: only a
		// change of its spec, or its deletion, is the Cache's business.
		Owns(&policyv1.PodDisruptionBudget{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// The CA published for clients, made again at once if deleted by hand.
		Owns(&corev1.ConfigMap{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(cacheOfCredentials)).
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(cacheOfPod), replicatedPodChanged).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles, RateLimiter: retryBackoff()}).
		Complete(routineConflicts{r})
}

// retryBackoff is how soon a Cache whose pass failed is tried again: as with controller-runtime's
// default, 5 ms doubling per failure, and never more than 10 retries a second in all; but at
// most a minute apart rather than 16 minutes, so that a Cache waits at most a minute more once
// what failed (the catalogue, say) is back, however long it was gone.
func retryBackoff() workqueue.TypedRateLimiter[ctrl.Request] {
	return workqueue.NewTypedMaxOfRateLimiter(
		workqueue.NewTypedItemExponentialFailureRateLimiter[ctrl.Request](5*time.Millisecond, time.Minute),
		&workqueue.TypedBucketRateLimiter[ctrl.Request]{Limiter: rate.NewLimiter(rate.Limit(10), 100)},
	)
}
