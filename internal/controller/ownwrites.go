package controller

import (
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
)

// writeCache makes write, a write of ours to cache that updates it in place, and remembers the
// version it replaced.
func (r *CacheReconciler) writeCache(cache *cachev2.Cache, write func() error) error {
	replaced := cache.ResourceVersion
	if err := write(); err != nil {
		return err
	}
	r.ownWrites.wrote(client.ObjectKeyFromObject(cache), replaced)
	return nil
}

// ownWrites remembers, per Cache, the resourceVersions that the reconciler's own writes to it
// replaced, until the informer shows a version that is none of them. A pass that reads one of
// them is working from a Cache older than our last write: its status update would fail with a
// conflict, and its other writes would be based on a spec or status we have already moved past.
// Such a pass is dropped; the watch event of our write is on its way and enqueues the Cache
// again. This is the one thing the reconciler keeps between passes, and it only ever makes a
// pass wait: forgetting it (a restart) costs a conflict, never a wrong write.
//
// resourceVersions are compared for equality only; the API server does not promise an order.
type ownWrites struct {
	mu       sync.Mutex
	replaced map[types.NamespacedName][]string
}

// wrote records that a write of ours replaced version rv of the Cache key.
func (w *ownWrites) wrote(key types.NamespacedName, rv string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.replaced == nil {
		w.replaced = map[types.NamespacedName][]string{}
	}
	w.replaced[key] = append(w.replaced[key], rv)
}

// stale reports whether version rv of the Cache key is one our own writes have replaced. A
// version that is not means the informer has caught up with them, and they are forgotten.
func (w *ownWrites) stale(key types.NamespacedName, rv string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if slices.Contains(w.replaced[key], rv) {
		return true
	}
	delete(w.replaced, key)
	return false
}

// forget drops what is remembered of the Cache key, once it is gone.
func (w *ownWrites) forget(key types.NamespacedName) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.replaced, key)
}
