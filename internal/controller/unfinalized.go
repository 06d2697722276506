package controller

import (
	"context"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/catalog"
)

// unfinalizedDeletions are the Caches that went without their finalizer's pass: the informer's
// last view of each carries the finalizer and no deletion timestamp. The API server deletes a
// Cache at once when it had no finalizer as the deletion began, even if a pass added one
// meanwhile: its storage checks the deletion's preconditions again, not the finalizers
// (k8s.io/apiserver's Store.Delete and conditionalDelete). The pass that added it goes on to
// register the Cache, and no pass would ever deregister it (seen in the crash storm: a Cache
// deleted as its second pass ran). A Cache finalized by a pass leaves a last view with a
// deletion timestamp, and is not remembered.
type unfinalizedDeletions struct {
	mu   sync.Mutex
	keys map[types.NamespacedName]bool
}

// deletedUnfinalized is the event handler that remembers such a Cache and brings the pass that
// deregisters it; the For handler's pass may come first and find it not yet remembered.
type deletedUnfinalized struct {
	handler.TypedFuncs[client.Object, ctrl.Request]
	deletions *unfinalizedDeletions
}

func (h deletedUnfinalized) Delete(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
	if e.Object.GetDeletionTimestamp() != nil || !controllerutil.ContainsFinalizer(e.Object, cachev2.Finalizer) {
		return
	}
	key := client.ObjectKeyFromObject(e.Object)
	h.deletions.mu.Lock()
	if h.deletions.keys == nil {
		h.deletions.keys = map[types.NamespacedName]bool{}
	}
	h.deletions.keys[key] = true
	h.deletions.mu.Unlock()
	q.Add(ctrl.Request{NamespacedName: key})
}

// deregisterUnfinalized removes the records of a Cache that is gone, if it went without its
// finalizer's pass; it is forgotten once that succeeds.
func (r *CacheReconciler) deregisterUnfinalized(ctx context.Context, key types.NamespacedName) error {
	r.unfinalized.mu.Lock()
	gone := r.unfinalized.keys[key]
	r.unfinalized.mu.Unlock()
	if !gone {
		return nil
	}
	if r.Catalog != nil {
		if err := r.Catalog.Deregister(ctx, catalog.Key{Namespace: key.Namespace, Name: key.Name}); err != nil {
			return err
		}
		log.FromContext(ctx).Info("Deregistered a Cache deleted without its finalizer's pass")
	}
	r.unfinalized.mu.Lock()
	delete(r.unfinalized.keys, key)
	r.unfinalized.mu.Unlock()
	return nil
}
