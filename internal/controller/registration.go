package controller

import (
	"context"
	"errors"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/catalog"
	"example.com/cache-operator/internal/metrics"
	"example.com/cache-operator/internal/resources"
)

// Reasons of the events the reconciler records about the catalogue.
const (
	EventRegistrationFailed     = "RegistrationFailed"
	EventDeregistrationFailed   = "DeregistrationFailed"
	EventCatalogRecordAbandoned = "CatalogRecordAbandoned"
)

var errNoCatalog = errors.New("the operator runs without a catalogue (no --catalog-endpoints), so it cannot deregister")

func catalogKey(cache *cachev2.Cache) catalog.Key {
	return catalog.Key{Namespace: cache.Namespace, Name: cache.Name}
}

// register lists the Cache's wanted nodes in the catalogue. It returns the Registered condition
// to report, nil when there is no catalogue, and the error to retry on.
func (r *CacheReconciler) register(ctx context.Context, cache *cachev2.Cache) (*metav1.Condition, error) {
	if r.Catalog == nil {
		return nil, nil
	}
	key := catalogKey(cache)
	nodes := catalog.StatefulSetNodes(key, cache.Spec.Nodes(), r.ClusterDomain, resources.Port)
	var unconfirmed error
	changed, err := r.Catalog.Sync(ctx, key, nodes, func(ctx context.Context) error {
		unconfirmed = r.confirmNotDeleted(ctx, cache)
		return unconfirmed
	})
	switch {
	case unconfirmed != nil:
		// The API server's answer, not the catalogue's: the Registered condition stays as it is.
		return nil, unconfirmed
	case err != nil:
		msg := fmt.Sprintf("Listing the cache in the catalogue failed: %v", err)
		r.Recorder.Eventf(cache, nil, corev1.EventTypeWarning, EventRegistrationFailed, "Register", "%s", msg)
		return &metav1.Condition{
			Type:               cachev2.ConditionRegistered,
			Status:             metav1.ConditionFalse,
			Reason:             cachev2.ReasonCatalogUnavailable,
			ObservedGeneration: cache.Generation,
			Message:            msg,
		}, fmt.Errorf("registering in the catalogue: %w", err)
	case changed:
		log.FromContext(ctx).Info("Registered in the catalogue", "nodes", len(nodes))
	}
	return &metav1.Condition{
		Type:               cachev2.ConditionRegistered,
		Status:             metav1.ConditionTrue,
		Reason:             cachev2.ReasonRegistered,
		ObservedGeneration: cache.Generation,
		Message:            fmt.Sprintf("%d nodes listed in the catalogue", len(nodes)),
	}, nil
}

// errDeletedMeanwhile ends a pass that would have registered a Cache that is gone, or being
// deleted, by the time its records are written.
var errDeletedMeanwhile = errors.New("the Cache is gone or being deleted, though this pass saw it live: its records are not written")

// confirmNotDeleted asks the API server, just before the catalogue is written, whether the Cache
// is still there, the same one (a Cache made again under its name may not have the finalizer
// yet), and not being deleted. A pass can act on a view of the Cache from before its
// deletion: an informer's first list may come from the API server's watch cache, which can still
// hold a Cache whose finalizer an operator before this one removed. No pass would deregister it
// again, so its records must never be written: a check after the write leaves them behind if the
// operator is killed in between, or if the write reports failure but was applied (both seen in
// the crash storm, as records of a deleted Cache left behind). A Cache being deleted counts as
// gone too: its finalizer may be on its way out in a request of an operator killed after
// deregistering it. A Cache deleted after this check keeps its finalizer until a later pass of
// this operator deregisters it, unless its deletion began before the finalizer went on, which
// the API server then deletes past (unfinalized.go); two leaders at once are the one case left,
// and the sweep (catalogsweep.go) removes what that leaves.
func (r *CacheReconciler) confirmNotDeleted(ctx context.Context, cache *cachev2.Cache) error {
	live := &cachev2.Cache{}
	err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(cache), live)
	switch {
	case apierrors.IsNotFound(err) || err == nil && (live.UID != cache.UID || !live.DeletionTimestamp.IsZero()):
		return errDeletedMeanwhile
	case err != nil:
		return fmt.Errorf("checking that the Cache to register still exists: %w", err)
	}
	return nil
}

// ensureFinalizer adds the finalizer when the operator runs with a catalogue. A merge patch
// replaces the whole finalizers list, so it carries the resourceVersion it read: a finalizer
// someone else added meanwhile makes it fail with a conflict instead of being dropped.
func (r *CacheReconciler) ensureFinalizer(ctx context.Context, cache *cachev2.Cache) error {
	if r.Catalog == nil {
		return nil
	}
	patch := client.MergeFromWithOptions(cache.DeepCopy(), client.MergeFromWithOptimisticLock{})
	if !controllerutil.AddFinalizer(cache, cachev2.Finalizer) {
		return nil
	}
	return r.writeCache(cache, func() error { return r.Patch(ctx, cache, patch) })
}

// finalize runs when a Cache is being deleted: it removes the Cache's catalogue record, then
// the finalizer, which lets the deletion complete. It may run again after a crash between the
// two steps; deregistering what is already gone is success. Until deregistration succeeds the
// Cache stays Terminating, and the Registered condition and an event say why.
func (r *CacheReconciler) finalize(ctx context.Context, cache *cachev2.Cache) error {
	if !controllerutil.ContainsFinalizer(cache, cachev2.Finalizer) {
		return nil
	}
	if cache.Annotations[cachev2.AnnotationAbandonCatalogRecord] == "true" {
		r.Recorder.Eventf(cache, nil, corev1.EventTypeWarning, EventCatalogRecordAbandoned, "Deregister",
			"Released without deregistering, as the %s annotation asks: the catalogue record of %s/%s is left behind",
			cachev2.AnnotationAbandonCatalogRecord, cache.Namespace, cache.Name)
	} else if err := r.deregister(ctx, cache); err != nil {
		return err
	}

	patch := client.MergeFromWithOptions(cache.DeepCopy(), client.MergeFromWithOptimisticLock{})
	controllerutil.RemoveFinalizer(cache, cachev2.Finalizer)
	if err := r.writeCache(cache, func() error { return r.Patch(ctx, cache, patch) }); err != nil {
		return fmt.Errorf("removing finalizer: %w", err)
	}
	metrics.ForgetFailovers(cache.Namespace, cache.Name)
	log.FromContext(ctx).Info("Released the Cache for deletion")
	return nil
}

func (r *CacheReconciler) deregister(ctx context.Context, cache *cachev2.Cache) error {
	err := errNoCatalog
	if r.Catalog != nil {
		err = r.Catalog.Deregister(ctx, catalogKey(cache))
	}
	if err == nil {
		return nil
	}
	msg := fmt.Sprintf("Removing the cache from the catalogue failed: %v", err)
	r.Recorder.Eventf(cache, nil, corev1.EventTypeWarning, EventDeregistrationFailed, "Deregister", "%s", msg)
	cond := metav1.Condition{
		Type:               cachev2.ConditionRegistered,
		Status:             metav1.ConditionFalse,
		Reason:             cachev2.ReasonCatalogUnavailable,
		ObservedGeneration: cache.Generation,
		Message: fmt.Sprintf("%s. The Cache stays Terminating until this succeeds; to leave the record behind "+
			"instead, annotate it %s=true", msg, cachev2.AnnotationAbandonCatalogRecord),
	}
	if serr := r.writeCondition(ctx, cache, cond); serr != nil {
		return errors.Join(fmt.Errorf("deregistering: %w", err), serr)
	}
	return fmt.Errorf("deregistering: %w", err)
}
