//go:build bench

package bench

import (
	"context"
	"strconv"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/cache-operator/internal/resources"
)

// floorNamespace holds the floor phase's objects, apart from the Caches'.
const floorNamespace = "floor"

// FloorPhase is the floor the operator is measured against: the same StatefulSets, Services and
// PodDisruptionBudgets that it makes for the Caches of the create phase, built by its own builders and created
// directly, on the same cluster, with no operator running.
type FloorPhase struct {
	AllReadySeconds float64 `json:"allReadySeconds"`
}

// LoadedFloorPhase is the floor measured again while the benchmark keeps Cores of CPU busy.
// On a machine whose cores the control plane already saturates, as two are, it tells how much
// of the operator's ratio to the floor is its CPU share rather than a lag of its own: give the
// round the cores the operator and what it causes take, and compare.
type LoadedFloorPhase struct {
	Cores           float64 `json:"cores"`
	AllReadySeconds float64 `json:"allReadySeconds"`
}

func (b *bench) loadedFloor(t *testing.T, cores float64) *LoadedFloorPhase {
	stop := burnCPU(func(time.Duration) float64 { return cores })
	defer stop()
	return &LoadedFloorPhase{Cores: cores, AllReadySeconds: b.floor(t, *caches, 0, 0).AllReadySeconds}
}

// SpreadFloorPhase is the floor measured again with its objects created evenly over
// SpreadSeconds rather than as fast as the API server takes them. The operator makes its
// StatefulSets as its first passes get to each Cache, over tens of seconds at 1,000: this round
// tells how much of its ratio to the floor is that later arrival.
type SpreadFloorPhase struct {
	SpreadSeconds   float64 `json:"spreadSeconds"`
	AllReadySeconds float64 `json:"allReadySeconds"`
}

func (b *bench) spreadFloor(t *testing.T, spread time.Duration) *SpreadFloorPhase {
	return &SpreadFloorPhase{SpreadSeconds: spread.Seconds(), AllReadySeconds: b.floor(t, *caches, spread, 0).AllReadySeconds}
}

// ReplayFloorPhase is the floor measured again while the benchmark takes, moment by moment, the
// CPU that the operator and its catalogue took in the round before's create phase. Here they
// share two cores with the control plane, which in a cluster they do not: the operator runs on a
// node of its own, and the catalogue is a service elsewhere. Against its round's floor, this
// round tells how much of the ratio is that CPU, taken from the StatefulSet controller, the
// scheduler and kwok; what is left is the operator's load on the API server and its pace.
type ReplayFloorPhase struct {
	// CPUSeconds is the CPU time replayed.
	CPUSeconds      float64 `json:"cpuSeconds"`
	AllReadySeconds float64 `json:"allReadySeconds"`
}

func (b *bench) replayFloor(t *testing.T, cpu CPUCurve) *ReplayFloorPhase {
	stop := burnCPU(cpu.cores)
	defer stop()
	return &ReplayFloorPhase{CPUSeconds: cpu.total(), AllReadySeconds: b.floor(t, *caches, 0, 0).AllReadySeconds}
}

// WritesFloorPhase is the floor measured again while the benchmark makes Writes more writes per
// StatefulSet, to a ConfigMap of its own made beside it: about as many as the operator makes
// on top of the floor's objects (the Cache's creation, its finalizer, two status writes).
// Against the floor of the same round, it tells how much of the operator's ratio is the API
// server's extra write load rather than how the operator paces its work.
type WritesFloorPhase struct {
	Writes          int     `json:"writes"`
	AllReadySeconds float64 `json:"allReadySeconds"`
}

func (b *bench) writesFloor(t *testing.T, writes int) *WritesFloorPhase {
	return &WritesFloorPhase{Writes: writes, AllReadySeconds: b.floor(t, *caches, 0, writes).AllReadySeconds}
}

// floor creates the objects, evenly over the time given (0: as fast as they go), each with the
// number of writes to a ConfigMap of its own given (see WritesFloorPhase), waits until
// every StatefulSet has all its replicas ready, then removes them and waits until they and their
// pods are gone, so that they weigh nothing on the operator's phases.
func (b *bench) floor(t *testing.T, n int, spread time.Duration, writes int) FloorPhase {
	ctx := context.Background()
	if err := b.admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNamespace}}); err != nil {
		t.Fatal(err)
	}
	b.timeline.floorRoundStarted()
	defer b.timeline.floorRoundEnded()
	allReady, stopWatching := b.watchFloorReady(t, n)
	start := time.Now()
	parallelOver(t, n, spread, func(i int) error {
		c := benchCache(floorNamespace, i)
		if err := b.admin.Create(ctx, resources.Service(c)); err != nil {
			return err
		}
		if err := b.admin.Create(ctx, resources.StatefulSet(c, resources.DefaultImages)); err != nil {
			return err
		}
		if err := b.admin.Create(ctx, resources.PodDisruptionBudget(c)); err != nil {
			return err
		}
		return writeConfigMap(ctx, b.admin, c.Name, writes)
	})
	select {
	case <-allReady:
	case <-time.After(*timeout):
		t.Fatalf("the floor's StatefulSets did not all become ready within %s", *timeout)
	}
	phase := FloorPhase{AllReadySeconds: time.Since(start).Seconds()}
	stopWatching()

	if err := b.admin.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: floorNamespace}}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, *timeout, true, func(ctx context.Context) (bool, error) {
		err := b.admin.Get(ctx, client.ObjectKey{Name: floorNamespace}, &corev1.Namespace{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the floor's namespace was not removed: %v", err)
	}
	return phase
}

// writeConfigMap makes that many writes to a ConfigMap named name in the floor's namespace:
// its creation, then updates.
func writeConfigMap(ctx context.Context, c client.Client, name string, writes int) error {
	if writes == 0 {
		return nil
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: floorNamespace},
		Data: map[string]string{"write": "1"}}
	if err := c.Create(ctx, cm); err != nil {
		return err
	}
	for i := 2; i <= writes; i++ {
		cm.Data["write"] = strconv.Itoa(i)
		if err := c.Update(ctx, cm); err != nil {
			return err
		}
	}
	return nil
}

// watchFloorReady watches the floor's StatefulSets, as the create phase watches the Caches'
// (polling lists of 10,000 whole StatefulSets would be load that the floor pays and the operator
// not), draws them on the timeline as they become ready, and closes the channel once n of them
// have every replica ready. Stop the watch with the function returned.
func (b *bench) watchFloorReady(t *testing.T, n int) (<-chan struct{}, context.CancelFunc) {
	t.Helper()
	var mu sync.Mutex
	ready := map[string]bool{}
	allReady := make(chan struct{})
	stop := watchNamespace(t, b.cfg, floorNamespace, func(obj any) {
		sts, ok := obj.(*appsv1.StatefulSet)
		if !ok || !statefulSetReady(sts) {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if !ready[sts.Name] {
			ready[sts.Name] = true
			b.timeline.floorReadyChanged(len(ready))
			if len(ready) == n {
				close(allReady)
			}
		}
	}, &appsv1.StatefulSet{})
	return allReady, stop
}
