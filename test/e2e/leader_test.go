//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/test/harness/localcluster"
	"example.com/cache-operator/test/harness/testenv"
)

// waitLeader waits until o holds the Lease.
func waitLeader(t *testing.T, o *testenv.Operator) {
	t.Helper()
	testenv.WaitFor(t, 2*leaseDuration+10*time.Second, "operator "+o.Name+" to lead", func() (bool, string) {
		return isLeader(t, o), "not leading"
	})
}

func reconciles(t *testing.T, o *testenv.Operator) float64 {
	return testenv.Sum(o.Metrics(t), "controller_runtime_reconcile_total", map[string]string{"controller": controller.ControllerName})
}

// leaseHolder is the identity that holds the leader election Lease; empty once it was released.
func leaseHolder(t *testing.T) string {
	t.Helper()
	var lease coordinationv1.Lease
	key := client.ObjectKey{Namespace: localcluster.OperatorNamespace, Name: leaderElectionID}
	if err := admin.Get(context.Background(), key, &lease); err != nil {
		t.Fatal(err)
	}
	return ptr.Deref(lease.Spec.HolderIdentity, "")
}

// handover changes the Cache's spec and measures the time from since until its status
// reflects the change, that is until some operator has reconciled it.
func handover(t *testing.T, key client.ObjectKey, replicas int, since time.Time) time.Duration {
	t.Helper()
	gen := patchCache(t, key, fmt.Sprintf(`{"spec":{"shards":%d}}`, replicas)).Generation
	testenv.WaitFor(t, 2*time.Minute, "the change to be reconciled", func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		return c.Status.ObservedGeneration >= gen, fmt.Sprintf("observedGeneration %d, want %d", c.Status.ObservedGeneration, gen)
	})
	return time.Since(since)
}

func TestLeaderElectionWithTwoReplicas(t *testing.T) {
	a := startOperator(t, "a", "")
	waitLeader(t, a)
	b := startOperator(t, "b", "")
	ns := newNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "orders-cache"}
	newCache(t, ns, "orders-cache")
	waitSettled(t, ns, startTimeout)

	// Only the leader reconciles.
	if reconciles(t, a) == 0 {
		t.Error("the leader made no reconciles")
	}
	if isLeader(t, b) || reconciles(t, b) != 0 {
		t.Errorf("the standby leads (%v) or reconciles (%v times)", isLeader(t, b), reconciles(t, b))
	}

	// SIGKILL: the Lease is left to expire, and the standby takes over after it. How long that
	// takes depends on the machine; it is reported, and bounded only by handover's timeout.
	killed := time.Now()
	a.Stop(t, syscall.SIGKILL)
	took := handover(t, key, 4, killed)
	t.Logf("handover after SIGKILL of the leader: %s (lease duration %s)", took.Round(time.Millisecond), leaseDuration)
	waitLeader(t, b)

	// SIGTERM: the leader releases the Lease on its way out; no waiting for it to expire.
	c := startOperator(t, "c", "")
	t.Cleanup(func() { deleteAllCaches(t, ns) }) // while an operator runs
	testenv.WaitFor(t, time.Minute, "operator c to be up", func() (bool, string) { return c.Metrics(t) != nil, "no metrics yet" })
	held := leaseHolder(t)
	terminated := time.Now()
	b.Stop(t, syscall.SIGTERM)
	// Released on the way out (or already taken by c): c need not wait for it to expire.
	if holder := leaseHolder(t); holder == held {
		t.Errorf("after the leader's SIGTERM the Lease is still held by it (%q), want it released", holder)
	}
	took = handover(t, key, 5, terminated)
	t.Logf("handover after SIGTERM of the leader: %s (lease duration %s)", took.Round(time.Millisecond), leaseDuration)
	waitLeader(t, c)

	// A leader frozen past its renew deadline (SIGSTOP) loses the Lease to the standby and,
	// once it runs again, exits rather than go on as a second writer.
	d := startOperator(t, "d", "")
	testenv.WaitFor(t, time.Minute, "operator d to be up", func() (bool, string) { return d.Metrics(t) != nil, "no metrics yet" })
	c.Signal(syscall.SIGSTOP)
	waitLeader(t, d)
	c.Signal(syscall.SIGCONT)
	select {
	case <-c.Exited:
	case <-time.After(renewDeadline + 10*time.Second):
		t.Fatal("the deposed leader kept running after it lost its Lease")
	}
	if c.ExitErr == nil {
		t.Error("the deposed leader exited with status 0, want a failure")
	}
	if !strings.Contains(c.Logs(t), "leader election lost") {
		t.Error("the deposed leader did not log that it lost the election")
	}
	handover(t, key, 3, time.Now())
}
