package controller

import (
	"context"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev2 "example.com/cache-operator/api/v2"
)

// staleReadRetryAfter is when a pass that found the Cache from before our own last write, or
// did not find a child it created, looks again, should the event of that write not have
// enqueued it sooner.
const staleReadRetryAfter = time.Second

// currentCache reads the Cache key from the informer: nil if it is gone, and not current if it
// is a version our own writes replaced (see ownWrites).
func (r *CacheReconciler) currentCache(ctx context.Context, key types.NamespacedName) (*cachev2.Cache, bool, error) {
	var cache cachev2.Cache
	if err := r.Get(ctx, key, &cache); err != nil {
		if apierrors.IsNotFound(err) {
			r.ownWrites.forget(key)
			r.ownCreations.forget(key)
			return nil, false, nil
		}
		return nil, false, err
	}
	if r.ownWrites.stale(key, cache.ResourceVersion) {
		log.FromContext(ctx).V(1).Info("Waiting for the informer to show our last write")
		return &cache, false, nil
	}
	return &cache, true, nil
}

// writeCache makes write, a write of ours to cache that updates it in place, and remembers the
// version it replaced. A write the API server found to change nothing keeps the version and
// sends no event to wait for, so it is not remembered.
func (r *CacheReconciler) writeCache(cache *cachev2.Cache, write func() error) error {
	replaced := cache.ResourceVersion
	if err := write(); err != nil {
		return err
	}
	if cache.ResourceVersion != replaced {
		r.ownWrites.wrote(client.ObjectKeyFromObject(cache), replaced)
	}
	return nil
}

// ownWrites remembers, per Cache, the resourceVersions that the reconciler's own writes to it
// replaced, until the informer shows a version that is none of them. A pass that reads one of
// them is working from a Cache older than our last write: its status update would fail with a
// conflict, and its other writes would be based on a spec or status we have already moved past.
// Such a pass is dropped; the watch event of our write is on its way and enqueues the Cache
// again. This and ownCreations are all the reconciler keeps between passes, and both only ever
// make a pass wait: forgetting them (a restart) costs a conflict, never a wrong write.
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

// creationSeenWithin is how long a child the reconciler created is expected to take to reach its
// informer. A creation not seen by then is forgotten, in case the child was deleted before the
// informer saw it, and the next pass creates it again.
const creationSeenWithin = time.Minute

// ownCreations remembers the children the reconciler created until its informer shows them. A
// pass that runs before then, brought by the event of the Cache's other child, would try to
// create the child again: a create rejected with AlreadyExists, counted as a conflict, and a read
// from the API server to recover. It waits for the creation's event instead, as a pass that reads
// a Cache from before our own write does (ownWrites).
//
// Children are keyed by name and then kind: a Cache's Service and StatefulSet share its name, so
// what is remembered of a Cache is forgotten at once when it is gone.
type ownCreations struct {
	mu      sync.Mutex
	created map[types.NamespacedName]map[string]time.Time
}

// add records that the reconciler created the child of this kind and name at time now.
func (c *ownCreations) add(kind string, name types.NamespacedName, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.created == nil {
		c.created = map[types.NamespacedName]map[string]time.Time{}
	}
	if c.created[name] == nil {
		c.created[name] = map[string]time.Time{}
	}
	c.created[name][kind] = now
}

// pending reports whether the reconciler created the child of this kind and name less than
// creationSeenWithin before now and its informer has not shown it since (seen).
func (c *ownCreations) pending(kind string, name types.NamespacedName, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.created[name][kind]
	if ok && now.Sub(at) >= creationSeenWithin {
		c.drop(kind, name)
		return false
	}
	return ok
}

// seen forgets the creation of the child of this kind and name, once its informer shows it.
func (c *ownCreations) seen(kind string, name types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.drop(kind, name)
}

// forget drops the creations of every child of this name, once their Cache is gone: no pass
// will look for them again.
func (c *ownCreations) forget(name types.NamespacedName) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.created, name)
	c.release()
}

// drop forgets one creation; the caller holds mu.
func (c *ownCreations) drop(kind string, name types.NamespacedName) {
	delete(c.created[name], kind)
	if len(c.created[name]) == 0 {
		delete(c.created, name)
	}
	c.release()
}

// release lets go of the map once it is empty: a Go map keeps the size it grew to, which after a
// fleet created at once is two entries per Cache.
func (c *ownCreations) release() {
	if len(c.created) == 0 {
		c.created = nil
	}
}
