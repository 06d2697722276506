package controller

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	cachev2 "example.com/cache-operator/api/v2"
)

// pendingFirst puts the Caches that have work pending ahead of the settled ones when the operator
// starts or takes over. controller-runtime enqueues every object of an informer's first list at
// low priority, so that a restart's look at thousands of unchanged Caches does not hold back the
// events that follow it. But a Cache created, changed or deleted while no operator ran, or one
// in the middle of a Cluster operation, is in that list too, and would wait behind every settled
// Cache: at 10,000, for half a minute. This handler, beside the one For sets up, enqueues such a
// Cache again at the usual priority, which the queue keeps as the higher of the two.
type pendingFirst struct {
	handler.TypedFuncs[client.Object, ctrl.Request]
}

func (pendingFirst) Create(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[ctrl.Request]) {
	cache, ok := e.Object.(*cachev2.Cache)
	queue, priorities := q.(priorityqueue.PriorityQueue[ctrl.Request])
	if !ok || !priorities || !e.IsInInitialList || settled(cache) {
		return
	}
	queue.AddWithOpts(priorityqueue.AddOpts{}, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(cache)})
}

// settled reports whether a Cache has nothing pending that its status shows: its spec observed,
// Ready, and not being deleted.
func settled(cache *cachev2.Cache) bool {
	return cache.DeletionTimestamp == nil && cache.Status.ObservedGeneration == cache.Generation &&
		meta.IsStatusConditionTrue(cache.Status.Conditions, cachev2.ConditionReady)
}
