//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "example.com/cache-operator/api/v1"
	"example.com/cache-operator/test/harness/testenv"
)

// Serving v2 only (config/v2-only, the chart's serveV1=false) is for clusters whose clients have
// all moved to v2. A running operator goes on reconciling every Cache through v2, those made
// through v1 before too; v1 requests get NotFound rather than an answer; and serving v1 again
// gives v1 clients their Caches back, changes made meanwhile included.
func TestServingV2OnlyKeepsEveryCacheWorking(t *testing.T) {
	ctx := context.Background()
	o := startOperator(t, "a", "")
	waitWebhookServes(t, o) // to convert the Cache made through v1
	ns := newNamespace(t)
	madeThroughV1 := &cachev1.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "legacy-cache", Namespace: ns},
		Spec:       cachev1.CacheSpec{Replicas: 1, Version: valkeyVersion, Memory: resource.MustParse("64Mi")},
	}
	if err := admin.Create(ctx, madeThroughV1); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(madeThroughV1)

	serveV1 := func() error { return cluster.ServeWebhooksAt(ctx, testenv.Root(), webhooks.Port()) }
	// The tests after this one need v1 served, however this one ends.
	t.Cleanup(func() {
		if err := serveV1(); err != nil {
			t.Error(err)
		}
	})
	if err := cluster.ServeV2Only(ctx, testenv.Root()); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "a read through v1 to be refused", func() (bool, string) {
		err := readThroughV1(key)
		return apierrors.IsNotFound(err) || meta.IsNoMatchError(err), fmt.Sprint(err)
	})

	newCache(t, ns, "orders-cache")
	patchCache(t, key, `{"spec":{"shards":2}}`)
	waitSettled(t, ns, 3*time.Minute)
	noErrorLogged(t, o, "by an operator that was running when v1 stopped being served")

	if err := serveV1(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, "a v1 client to read its Cache, scaled, again", func() (bool, string) {
		var c cachev1.Cache
		if err := admin.Get(ctx, key, &c); err != nil {
			return false, err.Error()
		}
		return c.Spec.Replicas == 2, fmt.Sprintf("replicas %d", c.Spec.Replicas)
	})
}
