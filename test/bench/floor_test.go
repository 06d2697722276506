//go:build bench

package bench

import (
	"context"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/cache-operator/internal/resources"
)

// floorNamespace holds the floor phase's objects, apart from the Caches'.
const floorNamespace = "floor"

// FloorPhase is the floor the operator is measured against: the same StatefulSets and Services
// that it makes for the Caches of the create phase, built by its own builders and created
// directly, on the same cluster, with no operator running.
type FloorPhase struct {
	AllReadySeconds float64 `json:"allReadySeconds"`
}

// floor creates the objects, waits until every StatefulSet has all its replicas ready, then
// removes them and waits until they and their pods are gone, so that they weigh nothing on the
// operator's phases.
func (b *bench) floor(t *testing.T, n int) FloorPhase {
	ctx := context.Background()
	if err := b.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNamespace}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	parallel(t, n, func(i int) error {
		c := benchCache(floorNamespace, i)
		if err := b.admin.Create(ctx, resources.Service(c)); err != nil {
			return err
		}
		return b.admin.Create(ctx, resources.StatefulSet(c, resources.DefaultImageRepository))
	})
	// Listed from the API server's watch cache (resourceVersion 0): the create phase watches,
	// and consistent lists of 10,000 whole StatefulSets several times a second are load that
	// the floor would pay and the operator not. (A 10,000 run that polled with consistent lists
	// ended with the API server holding 17 GiB, most of it buffers of etcd range reads.)
	fromCache := &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: "0"}}
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, *timeout, true, func(ctx context.Context) (bool, error) {
		var list appsv1.StatefulSetList
		if err := b.admin.List(ctx, &list, client.InNamespace(floorNamespace), fromCache); err != nil {
			return false, nil
		}
		ready := 0
		for _, sts := range list.Items {
			want := ptr.Deref(sts.Spec.Replicas, 1)
			if sts.Status.ObservedGeneration == sts.Generation && sts.Status.ReadyReplicas == want && sts.Status.UpdatedReplicas == want {
				ready++
			}
		}
		return ready == n, nil
	})
	if err != nil {
		t.Fatalf("the floor's StatefulSets did not all become ready: %v", err)
	}
	phase := FloorPhase{AllReadySeconds: time.Since(start).Seconds()}

	if err := b.admin.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNamespace}}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, time.Second, *timeout, true, func(ctx context.Context) (bool, error) {
		err := b.admin.Get(ctx, client.ObjectKey{Name: floorNamespace}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the floor's namespace was not removed: %v", err)
	}
	return phase
}
