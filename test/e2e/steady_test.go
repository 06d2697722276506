//go:build e2e

package e2e

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"example.com/cache-operator/test/harness/testenv"
)

// waitIdle waits until the operator has started its controller, reconciled at least
// minReconciles times and has nothing queued.
func waitIdle(t *testing.T, o *testenv.Operator, minReconciles float64) {
	t.Helper()
	testenv.WaitFor(t, time.Minute, "operator "+o.Name+" to drain its queue", func() (bool, string) {
		m := o.Metrics(t)
		if m == nil {
			return false, "metrics endpoint not up"
		}
		cache := map[string]string{"controller": "cache"}
		reconciles := testenv.Sum(m, "controller_runtime_reconcile_total", cache)
		depth := testenv.Sum(m, "workqueue_depth", map[string]string{"name": "cache"})
		active := testenv.Sum(m, "controller_runtime_active_workers", cache)
		return reconciles >= minReconciles && depth == 0 && active == 0,
			fmt.Sprintf("%v reconciles, queue depth %v, %v active workers", reconciles, depth, active)
	})
}

// Leader election renews its Lease with a write every retry period; these tests switch it off
// so that the operator's client metrics count the reconciler's writes alone.
func TestSteadyStateAndRestartMakeNoWrites(t *testing.T) {
	runBeside(t, 1)
	const caches = 5
	etcd := testenv.StartEtcd(t)
	first := startOperator(t, "first", etcd.Endpoint, "--leader-elect=false")
	ns := newNamespace(t)
	// One Cache of several nodes, whose status sums up its pods; the others of one node each.
	newCache(t, ns, "cache-0")
	for i := 1; i < caches; i++ {
		newOneNodeCache(t, ns, fmt.Sprintf("cache-%d", i))
	}
	waitSettled(t, ns, 2*time.Minute)
	waitIdle(t, first, caches)

	// Steady state: everything Ready, nothing to do, for 30 s.
	before := testenv.MutatingRequests(first.Metrics(t))
	window := time.NewTimer(30 * time.Second)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
observe:
	for {
		select {
		case <-window.C:
			break observe
		case <-tick.C:
			if now := testenv.MutatingRequests(first.Metrics(t)); now != before {
				t.Fatalf("with every Cache Ready the operator made %v mutating requests", now-before)
			}
		}
	}

	// Restart: the new process lists every Cache and reconciles each, and must write nothing.
	first.Stop(t, syscall.SIGTERM)
	second := startOperator(t, "second", etcd.Endpoint, "--leader-elect=false")
	t.Cleanup(func() { deleteAllCaches(t, ns) }) // while the second operator runs
	waitIdle(t, second, caches)
	if writes := testenv.MutatingRequests(second.Metrics(t)); writes != 0 {
		t.Errorf("after a restart with every Cache Ready the operator made %v mutating requests, want 0", writes)
	}
}
