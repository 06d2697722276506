//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/test/harness/testenv"
)

// `kubectl drain` of the node of a primary, as an administrator runs it before maintenance: the
// eviction API and the Cache's PodDisruptionBudget let the node's cache pods go one disruption at
// a time, the drain completes, the pods run elsewhere, and a client writing and reading all
// along loses no acknowledged write. It logs the client's failed requests and longest failing
// stretch. It drains a whole node, so it runs on the isolated nodes.
func TestKubectlDrainMovesACachesPodsUnderAClient(t *testing.T) {
	runOnIsolatedNodes(t)
	ctx := context.Background()
	key, primaryPod, load, stop := primaryUnderLoad(t, "drained")
	node := primaryPod.Spec.NodeName
	t.Cleanup(func() { _ = cluster.Kubectl(context.Background(), "uncordon", node) })
	// As an administrator runs it: kubectl retries an eviction the budget refuses every 5 s.
	if out, err := cluster.KubectlOutput(ctx, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data", "--timeout=5m"); err != nil {
		t.Fatalf("kubectl drain %s: %v\n%s", node, err, out)
	}
	testenv.WaitFor(t, 5*time.Minute, "the Cache Ready with its 6 pods ready, none on "+node, func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		ok, why := settled(c)
		ready, there := readyPods(t, key, node)
		return ok && ready == 6 && there == 0, fmt.Sprintf("%d of 6 pods ready, %d on %s; %s", ready, there, node, why)
	})
	lost, acked := stop()
	t.Logf("drain of %s: %d requests, %d failed (%s), longest failing stretch %s; %d of %d acknowledged keys lost",
		node, load.requests, load.failures, load.errorKinds(), load.longestOutage.Round(time.Millisecond), lost, acked)
	if lost > 0 {
		t.Errorf("%d acknowledged writes lost", lost)
	}
}

// A node whose kubelet stops answering (frozen, as a kubelet that hangs or a node cut off from
// the API server) goes NotReady once the control plane's grace period is past, and the control
// plane marks its pods not Ready, while their servers, which still run, go on serving. The Cache
// says so: Ready falls (Progressing, counting the pods ready), and rises again once the kubelet
// is back. A client writing and reading all along loses no acknowledged write. It stops a whole
// node's kubelet, so it runs on the isolated nodes.
func TestANodeWhoseKubeletStopsIsReportedAndItsServersKeepServing(t *testing.T) {
	runOnIsolatedNodes(t)
	ctx := context.Background()
	key, primaryPod, load, stop := primaryUnderLoad(t, "unreported")
	node := primaryPod.Spec.NodeName
	if err := cluster.SignalNodeDaemon(node, "kubelet", syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			if err := cluster.SignalNodeDaemon(node, "kubelet", syscall.SIGCONT); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(resume)
	testenv.WaitFor(t, 3*time.Minute, node+" NotReady and "+primaryPod.Name+" not Ready", func() (bool, string) {
		n := &corev1.Node{}
		if err := admin.Get(ctx, client.ObjectKey{Name: node}, n); err != nil {
			return false, err.Error()
		}
		pod := &corev1.Pod{}
		if err := admin.Get(ctx, client.ObjectKeyFromObject(primaryPod), pod); err != nil {
			return false, err.Error()
		}
		return !nodeReady(n) && !podReady(pod), fmt.Sprintf("node Ready %t, pod Ready %t", nodeReady(n), podReady(pod))
	})
	testenv.WaitFor(t, 2*time.Minute, "the Cache to report "+primaryPod.Name+" not Ready", func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
		return ready != nil && ready.Status == metav1.ConditionFalse, fmt.Sprintf("%+v", ready)
	})
	reported, _ := getCache(t, key)
	t.Logf("while %s is NotReady the Cache reports: %+v", node, reported.Status.Conditions)

	resume()
	waitReadyWithPods(t, key, 6, 3*time.Minute)
	lost, acked := stop()
	t.Logf("%s NotReady: %d requests, %d failed (%s), longest failing stretch %s; %d of %d acknowledged keys lost",
		node, load.requests, load.failures, load.errorKinds(), load.longestOutage.Round(time.Millisecond), lost, acked)
	if lost > 0 {
		t.Errorf("%d acknowledged writes lost", lost)
	}
}

// A server that hangs (stopped here, as one swapping or stuck would be) is taken out of its
// Service and its budget within its readiness probe's failures, so a drain cannot count it as a
// replica in sync and take its primary; once it answers again, its pod is ready and the Cache is
// Ready. The readiness agent gives up on the hung server before the probe's timeout (an exec
// probe's valkey-cli, waiting on the server, once kept the probe running, and the pod ready,
// for minutes).
func TestAHungServerIsNotReady(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "", clusterCheckInterval)
	key := newClusterCache(t, newNamespace(t), "hung", 1, 1)
	c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	waitOneDisruptionAllowed(t, key)
	replica, _ := podOfRole(t, c, cachev2.RoleReplica)
	pid, err := serverPID(replica.Namespace, replica.Name)
	if err != nil {
		t.Fatal(err)
	}
	// The server alone, not a probe that may be running in its container at that moment.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resume := func() { _ = syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(resume)
	// Three failed probes, 5 s apart, each answered within its 5 s timeout.
	testenv.WaitFor(t, time.Minute, replica.Name+" not ready, and its budget to count it", func() (bool, string) {
		pdb := &policyv1.PodDisruptionBudget{}
		if err := admin.Get(context.Background(), key, pdb); err != nil {
			return false, err.Error()
		}
		ready, _ := readyPods(t, key, "")
		return ready == 1 && pdb.Status.CurrentHealthy == 1 && pdb.Status.DisruptionsAllowed == 0,
			fmt.Sprintf("%d of 2 pods ready; budget %+v", ready, pdb.Status)
	})
	resume()
	waitReadyWithPods(t, key, 2, 2*time.Minute)
}

// waitReadyWithPods waits until the Cache is Ready for its generation with that many pods ready.
func waitReadyWithPods(t *testing.T, key client.ObjectKey, pods int, timeout time.Duration) {
	t.Helper()
	testenv.WaitFor(t, timeout, fmt.Sprintf("the Cache Ready again with its %d pods ready", pods), func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		ok, why := settled(c)
		ready, _ := readyPods(t, key, "")
		return ok && ready == pods, fmt.Sprintf("%d of %d pods ready; %s", ready, pods, why)
	})
}

// Pods that cannot become ready never hold a drain for good: the Cache's budget lets a pod that
// is not ready be evicted whatever the others (unhealthyPodEvictionPolicy AlwaysAllow), where
// Kubernetes' default refuses it while another of the Cache's pods is not ready either. Two
// replicas can never sync (their primaries refuse the credentials they are given), both pods go
// not ready, and `kubectl drain` of one's node completes. The operator is stopped first, so that
// the budget alone decides and nothing mends the replicas. It drains a node, so it runs on the
// isolated nodes.
func TestADrainEvictsPodsThatCannotBecomeReady(t *testing.T) {
	runOnIsolatedNodes(t)
	ctx := context.Background()
	operator := startOperator(t, "a", "", clusterCheckInterval)
	key := newClusterCacheOf(t, newNamespace(t), "stuck", 3, 1, valkeyVersion, onIsolatedNodes)
	c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	waitOneDisruptionAllowed(t, key)
	operator.Stop(t, syscall.SIGKILL)
	var broken []*corev1.Pod
	for _, pod := range cachePods(t, key) {
		if i := slices.IndexFunc(c.Status.Nodes, func(n cachev2.ClusterNode) bool { return n.Pod == pod.Name && n.Role == cachev2.RoleReplica }); i >= 0 && len(broken) < 2 {
			do(t, &pod, func(b valkeygo.Builder) valkeygo.Completed {
				return b.ConfigSet().ParameterValue().ParameterValue("masteruser", "nobody").ParameterValue("masterauth", "wrong").Build()
			})
			do(t, &pod, func(b valkeygo.Builder) valkeygo.Completed { return b.ClientKill().TypeMaster().Build() })
			broken = append(broken, &pod)
		}
	}
	testenv.WaitFor(t, 2*time.Minute, fmt.Sprintf("%s and %s not ready, and the budget to count them", broken[0].Name, broken[1].Name), func() (bool, string) {
		pdb := &policyv1.PodDisruptionBudget{}
		if err := admin.Get(ctx, key, pdb); err != nil {
			return false, err.Error()
		}
		return pdb.Status.CurrentHealthy == 4 && pdb.Status.DisruptionsAllowed == 0, fmt.Sprintf("%+v", pdb.Status)
	})
	node := broken[0].Spec.NodeName
	t.Cleanup(func() { _ = cluster.Kubectl(context.Background(), "uncordon", node) })
	// The node may hold a ready pod of the Cache too, which the budget rightly keeps while two
	// are not ready: the drain is of the broken pod alone.
	if out, err := cluster.KubectlOutput(ctx, "drain", node, "--ignore-daemonsets", "--delete-emptydir-data",
		"--pod-selector", "statefulset.kubernetes.io/pod-name="+broken[0].Name, "--timeout=1m"); err != nil {
		t.Fatalf("kubectl drain %s of %s, which is not ready: %v\n%s", node, broken[0].Name, err, out)
	}
	pod := &corev1.Pod{}
	if err := admin.Get(ctx, client.ObjectKeyFromObject(broken[0]), pod); err == nil && pod.UID == broken[0].UID {
		t.Errorf("%s is still there after the drain of %s", broken[0].Name, node)
	}
}

// primaryUnderLoad makes a 3 × 1 Cluster Cache of that name on the isolated nodes, managed by an
// operator of the test's, and, once it is Ready, starts a client writing and reading through it
// (startLoad). It returns the Cache and the pod of one of its primaries.
func primaryUnderLoad(t *testing.T, name string) (client.ObjectKey, *corev1.Pod, *upgradeLoad, func() (lost, acked int)) {
	t.Helper()
	startOperator(t, "a", "", clusterCheckInterval)
	key := newClusterCacheOf(t, newNamespace(t), name, 3, 1, valkeyVersion, onIsolatedNodes)
	c := waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)
	primaryPod, _ := podOfRole(t, c, cachev2.RolePrimary)
	load, stop := startLoad(t, clusterClient(t, key))
	return key, primaryPod, load, stop
}

// readyPods counts the Cache's ready pods, and its pods on the named node.
func readyPods(t *testing.T, key client.ObjectKey, node string) (ready, onNode int) {
	t.Helper()
	for _, pod := range cachePods(t, key) {
		if podReady(&pod) {
			ready++
		}
		if pod.Spec.NodeName == node {
			onNode++
		}
	}
	return ready, onNode
}

// startLoad starts writing and reading through the client (upgradeLoad) until the function it
// returns stops it and counts the acknowledged writes lost.
func startLoad(t *testing.T, vc valkeygo.Client) (*upgradeLoad, func() (lost, acked int)) {
	t.Helper()
	load := &upgradeLoad{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { load.run(ctx, vc) })
	t.Cleanup(func() { cancel(); wg.Wait() })
	return load, func() (int, int) {
		cancel()
		wg.Wait()
		return load.lost(t, vc)
	}
}

// nodeReady reports whether the node's Ready condition is True.
func nodeReady(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}
