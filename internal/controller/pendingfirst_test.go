package controller

import (
	"context"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"

	cachev2 "example.com/cache-operator/api/v2"
)

// At a start, the Caches in the informer's first list come out of the queue with those that have
// work pending first, each kind in the order listed; after the start, every new Cache is
// enqueued as usual. The queue and For's handler are controller-runtime's own.
func TestAtAStartCachesWithWorkPendingComeFirst(t *testing.T) {
	ready := []metav1.Condition{{Type: cachev2.ConditionReady, Status: metav1.ConditionTrue}}
	now := metav1.Now()
	cache := func(name string, generation, observed int64, conditions []metav1.Condition) *cachev2.Cache {
		return &cachev2.Cache{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Generation: generation},
			Status:     cachev2.CacheStatus{ObservedGeneration: observed, Conditions: conditions},
		}
	}
	deleting := cache("deleting", 1, 1, ready)
	deleting.DeletionTimestamp, deleting.Finalizers = &now, []string{"x"}
	listed := []*cachev2.Cache{
		cache("settled-1", 2, 2, ready),
		cache("created-while-down", 1, 0, nil),
		cache("settled-2", 1, 1, ready),
		cache("changed-while-down", 3, 2, ready),
		cache("resharding", 1, 1, []metav1.Condition{{Type: cachev2.ConditionReady, Status: metav1.ConditionFalse}}),
		deleting,
	}

	q := priorityqueue.New[ctrl.Request]("test")
	defer q.ShutDown()
	handlers := []handler.EventHandler{&handler.EnqueueRequestForObject{}, pendingFirst{}}
	enqueue := func(c *cachev2.Cache, initial bool) {
		for _, h := range handlers {
			h.Create(context.Background(), event.CreateEvent{Object: c, IsInInitialList: initial}, q)
		}
	}
	for _, c := range listed {
		enqueue(c, true)
	}
	enqueue(cache("created-after-start", 1, 0, nil), false)

	want := []string{"created-while-down", "changed-while-down", "resharding", "deleting", "created-after-start", "settled-1", "settled-2"}
	for i, name := range want {
		got := make(chan ctrl.Request)
		go func() { item, _ := q.Get(); got <- item }()
		select {
		case item := <-got:
			if item.Name != name {
				t.Fatalf("item %d out of the queue is %s, want %s", i, item.Name, name)
			}
			q.Done(item)
		case <-time.After(10 * time.Second):
			t.Fatalf("item %d (%s) never came out of the queue", i, name)
		}
	}
	if n := q.Len(); n != 0 {
		t.Errorf("%d more items in the queue, each Cache should be in it once", n)
	}
}
