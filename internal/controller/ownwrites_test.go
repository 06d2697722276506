package controller

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/event"

	cachev2 "example.com/cache-operator/api/v2"
)

func TestOwnWritesAreStaleUntilTheInformerShowsAVersionPastThem(t *testing.T) {
	var w ownWrites
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	b := types.NamespacedName{Namespace: "ns", Name: "b"}
	if w.stale(a, "1") {
		t.Fatal("a Cache never written is stale")
	}
	w.wrote(a, "1", "2") // finalizer added over version 1
	w.wrote(a, "2", "3") // then status written over version 2
	for _, rv := range []string{"1", "2"} {
		if !w.stale(a, rv) {
			t.Errorf("version %s, which our writes replaced, is not stale", rv)
		}
	}
	if w.stale(b, "2") {
		t.Error("another Cache's version counts as stale")
	}
	if w.stale(a, "4") {
		t.Error("a version none of our writes replaced is stale")
	}
	if w.stale(a, "2") {
		t.Error("once a newer version is read, the replaced ones are still remembered")
	}
	w.wrote(b, "7", "8")
	w.forget(b)
	if w.stale(b, "7") || w.echo(b, "8") {
		t.Error("a forgotten Cache's versions are still remembered")
	}
}

// The events of our own writes are dropped, those of anyone else's are not, and neither is one a
// pass waits for: a pass that read the version before our write asked to be enqueued again by it.
func TestTheEchoOfAnOwnWriteIsDroppedUnlessAPassWaitsForIt(t *testing.T) {
	var w ownWrites
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	w.wrote(a, "1", "2") // finalizer
	w.wrote(a, "2", "3") // status
	if w.echo(a, "5") {
		t.Error("a version someone else stored is taken for an echo")
	}
	if !w.echo(a, "2") || !w.echo(a, "3") {
		t.Error("the events of our two writes are not echoes")
	}
	if w.echo(a, "3") {
		t.Error("a version's event counts as an echo twice")
	}
	if w.stale(a, "3") || w.caches != nil {
		t.Errorf("after the echoes and a read past them, something is remembered: %v", w.caches)
	}

	w.wrote(a, "5", "6")
	if !w.stale(a, "5") {
		t.Fatal("setup: version 5, which our write replaced, is not stale")
	}
	if w.echo(a, "6") {
		t.Error("the event a stale pass waits for is dropped as an echo")
	}
	if w.stale(a, "6") || w.caches != nil {
		t.Errorf("once the pass reads past our write, something is remembered: %v", w.caches)
	}
}

// The echo of our write can arrive, and be dropped, between a pass's read of the version before
// it and the pass's look at whether that version is stale. The pass then reads again, and works
// from our write, rather than wait for an event that has already come and gone. The informer is
// a fake client here, since the real one cannot be made to deliver an event at that instant.
func TestAPassThatMissesTheEchoItWouldWaitForReadsAgain(t *testing.T) {
	ctx := context.Background()
	informer := fake.NewClientBuilder().WithScheme(NewScheme()).
		WithObjects(&cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a"}}).Build()
	r := &CacheReconciler{}
	key := types.NamespacedName{Namespace: "ns", Name: "a"}
	var before cachev2.Cache
	if err := informer.Get(ctx, key, &before); err != nil {
		t.Fatal(err)
	}
	// Our status write replaced the version the informer shows; the fake stores the next one
	// (checked where it stores it, below).
	shown, _ := strconv.Atoi(before.ResourceVersion)
	stored := strconv.Itoa(shown + 1)
	r.ownWrites.wrote(key, before.ResourceVersion, stored)

	echoDropped := false
	r.Client = interceptor.NewClient(informer, interceptor.Funcs{
		Get: func(ctx context.Context, c client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.Get(ctx, key, obj, opts...); err != nil || obj.GetResourceVersion() != before.ResourceVersion || echoDropped {
				return err
			}
			// Right after the pass's read, the informer takes in our write and hands on its event.
			after := before.DeepCopy()
			after.Status.ObservedGeneration = 1
			if err := c.Update(ctx, after); err != nil || after.ResourceVersion != stored {
				t.Fatalf("setup: storing version %s: %v (stored %s)", stored, err, after.ResourceVersion)
			}
			echoDropped = !r.notAnEcho().Update(event.UpdateEvent{ObjectOld: &before, ObjectNew: after})
			return nil
		},
	})

	cache, current, err := r.currentCache(ctx, key)
	if err != nil || !echoDropped {
		t.Fatalf("setup: read %v, echo dropped %t", err, echoDropped)
	}
	if !current || cache.ResourceVersion != stored {
		t.Errorf("the pass waits (current %t, version %s), for an echo already dropped", current, cache.ResourceVersion)
	}
}

// A stored version whose event never comes (an informer that relists sees only the latest) is
// not remembered for ever.
func TestOnlyTheLatestStoredVersionsAreRemembered(t *testing.T) {
	var w ownWrites
	a := types.NamespacedName{Namespace: "ns", Name: "a"}
	for v := range 10 {
		w.wrote(a, strconv.Itoa(v), strconv.Itoa(v+1))
	}
	if got := len(w.caches[a].stored); got != maxStoredRemembered {
		t.Errorf("%d stored versions remembered, want %d", got, maxStoredRemembered)
	}
	if !w.echo(a, "10") || w.echo(a, "1") {
		t.Error("the latest stored version is forgotten, or the oldest is kept")
	}
}

// A write is waited for only when it stored a new version: one the API server found to change
// nothing sends no event, and waiting for it would hold the Cache for good.
func TestOnlyAWriteThatStoredANewVersionIsWaitedFor(t *testing.T) {
	r := &CacheReconciler{}
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: "5"}}
	key := client.ObjectKeyFromObject(cache)

	if err := r.writeCache(cache, func() error { return errors.New("refused") }); err == nil {
		t.Fatal("the write's error was lost")
	}
	if err := r.writeCache(cache, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if r.ownWrites.stale(key, "5") {
		t.Error("after a failed write and one that stored nothing, version 5 is waited past")
	}
	if err := r.writeCache(cache, func() error { cache.ResourceVersion = "6"; return nil }); err != nil {
		t.Fatal(err)
	}
	if !r.ownWrites.echo(key, "6") {
		t.Error("the event of the write that stored version 6 is not taken for an echo")
	}
	if !r.ownWrites.stale(key, "5") || r.ownWrites.stale(key, "6") {
		t.Error("after a write that stored version 6, version 5 should be stale and 6 current")
	}
}

func TestOwnCreationsArePendingUntilSeenOrTooOld(t *testing.T) {
	var c ownCreations
	name := types.NamespacedName{Namespace: "ns", Name: "a"}
	now := time.Now()
	if c.pending("StatefulSet", name, now) {
		t.Fatal("a child never created is pending")
	}
	c.add("StatefulSet", name, now)
	if !c.pending("StatefulSet", name, now.Add(time.Second)) {
		t.Error("a child created a second ago and not seen is not pending")
	}
	if c.pending("Service", name, now) {
		t.Error("the Service of the same name counts as pending")
	}
	c.seen("StatefulSet", name)
	if c.pending("StatefulSet", name, now.Add(time.Second)) {
		t.Error("a child the informer has shown is still pending")
	}
	c.add("StatefulSet", name, now)
	if c.pending("StatefulSet", name, now.Add(creationSeenWithin)) {
		t.Error("a creation the informer never showed is pending for ever")
	}
	if c.pending("StatefulSet", name, now) {
		t.Error("a creation given up on is remembered")
	}
	if c.created != nil {
		t.Errorf("nothing is pending, and the map is kept: %v", c.created)
	}
}

// A Cache deleted between the pass that created its children and the next leaves nothing
// behind: no pass looks for its children again.
func TestOwnCreationsOfAGoneCacheAreForgotten(t *testing.T) {
	var c ownCreations
	name := types.NamespacedName{Namespace: "ns", Name: "a"}
	now := time.Now()
	c.add("Service", name, now)
	c.add("StatefulSet", name, now)
	c.forget(name)
	if c.pending("Service", name, now) || c.pending("StatefulSet", name, now) || c.created != nil {
		t.Errorf("the children of a gone Cache are remembered: %v", c.created)
	}
}
