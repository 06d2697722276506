//go:build integration

package controller

import (
	"context"
	"testing"

	"k8s.io/client-go/tools/events"

	"example.com/cache-operator/internal/catalog"
	"example.com/cache-operator/test/harness/testenv"
)

// Records left behind by a Cache that went (the escape hatch, an operator that was gone) are
// removed once it was missing at two sweeps, with an event; a Cache that exists keeps its own,
// and a sweep of a catalogue that is down removes nothing and is tried again.
func TestTheSweepRemovesTheRecordsOfCachesThatAreGone(t *testing.T) {
	etcd := testenv.StartEtcd(t)
	cat, _ := newCatalog(t, etcd.Endpoint)
	ns := newNamespace(t)
	newCache(t, ns) // orders-cache
	ctx := context.Background()
	live, gone := catalog.Key{Namespace: ns, Name: "orders-cache"}, catalog.Key{Namespace: ns, Name: "carts-cache"}
	for _, key := range []catalog.Key{live, gone} {
		if _, err := cat.Sync(ctx, key, catalog.StatefulSetNodes(key, 2, "cluster.local", 6379), nil); err != nil {
			t.Fatal(err)
		}
	}
	recorder := events.NewFakeRecorder(10)
	sweeper := &CatalogSweeper{Catalog: cat, Cached: k8s, Live: k8s, Recorder: recorder}
	admin := etcd.Client(t)
	defer admin.Close() //nolint:errcheck
	held := func(key catalog.Key) int { return len(testenv.KeyValues(t, admin, testLayout.Dir(key))) }

	sweeper.sweep(ctx)
	if held(gone) != 2 || held(live) != 2 || hasEvent(recorder, EventCatalogRecordSwept) {
		t.Fatalf("after one sweep: %d records of the Cache that is gone, %d of the one that exists; want both kept until the second", held(gone), held(live))
	}

	// The catalogue down at the second sweep: nothing happens, and the Cache stays missing.
	etcd.Stop(t)
	sweeper.sweep(ctx)
	etcd.Start(t)

	sweeper.sweep(ctx)
	if held(gone) != 0 || held(live) != 2 {
		t.Errorf("after the second sweep: %d records of the Cache that is gone, %d of the one that exists; want 0 and 2", held(gone), held(live))
	}
	if !hasEvent(recorder, EventCatalogRecordSwept) {
		t.Error("no event says the records were removed")
	}
}
