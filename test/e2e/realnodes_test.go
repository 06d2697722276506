//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	harnessimages "example.com/cache-operator/test/harness/images"
	"example.com/cache-operator/test/harness/localcluster"
	"example.com/cache-operator/test/harness/testenv"
)

// The operator as users install it, from its image, in a cluster of its own with three real nodes
// (installCluster), made for these subtests and deleted after them, so that its nodes do not
// share the machine with the tests that come after: an install brings CRDs and webhooks of its
// own, which the other tests' cluster has pointed at the operators they run on the machine.
func TestTheOperatorAsUsersInstallIt(t *testing.T) {
	// Beside the others, the first: it shares nothing with their cluster, and takes minutes.
	besideSlot(t, true)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	previous, err := previousReleaseImage()
	if err != nil {
		t.Fatal(err)
	}
	installCluster = newRealCluster(installClusterName(), installNodes)
	installCluster.Images = append(slices.Clone(images), previous.archive)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		if err := installCluster.Delete(ctx); err != nil {
			t.Error("deleting the cluster the operator was installed in:", err)
		}
	})
	if err := installCluster.Create(ctx, 0); err != nil {
		t.Fatal("making the cluster to install the operator in:", err)
	}
	t.Run("Helm", helmInstalledOperatorRunsACacheInRealContainers)
	t.Run("kustomize", kustomizeInstalledOperatorHandsOverBetweenItsPods)
	t.Run("helm upgrade", func(t *testing.T) { helmUpgradeFromTheLatestReleaseRestartsNoCachePod(t, previous.chart) })
}

// previousRelease is the release this one upgrades from (hack/previous-release's latest), as
// Helm installs it: its chart, and its operator's image (tagged previousTag), built from this
// repository's history.
type previousRelease struct {
	chart, archive string
}

// previousTag tags the previous release's image: it has the same release tag as this one's,
// since none has been published yet.
const previousTag = "previous"

func previousReleaseImage() (previousRelease, error) {
	r, err := builtRelease("latest")
	if err != nil {
		return previousRelease{}, err
	}
	img, err := harnessimages.Operator(r.source, testenv.BinDir(), previousTag)
	if err != nil {
		return previousRelease{}, err
	}
	archive := filepath.Join(workdir, "previous-operator.tar")
	if _, err := harnessimages.WriteFile(archive, img); err != nil {
		return previousRelease{}, err
	}
	return previousRelease{chart: filepath.Join(r.source, "charts", "cache-operator"), archive: archive}, nil
}

// `helm upgrade` from the previous release, run as docs/upgrade.md says (its values reset
// to this chart's defaults, but for the image's tag, which the previous release had to set),
// restarts no cache pod: a Valkey Cluster that the previous release's operator made keeps every
// pod (same UID, no container restarted) and its keys, and the new operator, in pods of this
// release's image, leads and makes a new Cache Ready.
func helmUpgradeFromTheLatestReleaseRestartsNoCachePod(t *testing.T, previousChart string) {
	kubectl := func(args ...string) string { return realKubectl(t, args...) }
	c := installCluster
	helm(t, c, "install", "cache-operator", previousChart, "--namespace", localcluster.OperatorNamespace, "--create-namespace",
		"--set", "image.tag="+previousTag, "--wait", "--timeout", "5m")
	t.Cleanup(func() {
		helm(t, c, "uninstall", "cache-operator", "--namespace", localcluster.OperatorNamespace, "--wait")
	})
	const ns = "upgraded"
	newRealNamespace(t, ns)
	if err := c.Apply(context.Background(), `apiVersion: cache.example.com/v2
kind: Cache
metadata: {name: upgraded, namespace: upgraded}
spec: {mode: Cluster, shards: 1, replicasPerShard: 1, version: "`+valkeyVersion+`", memory: 64Mi}
`); err != nil {
		t.Fatal(err)
	}
	kubectl("wait", "--namespace", ns, "cache/upgraded", "--for=condition=Ready", "--timeout=5m")
	kubectl("exec", "--namespace", ns, "upgraded-0", "-c", "valkey", "--", "valkey-cli", "-c", "set", "before-the-upgrade", "kept")
	pods := func() string {
		return kubectl("get", "pods", "--namespace", ns, "-l", "app.kubernetes.io/instance=upgraded", "-o",
			`jsonpath={range .items[*]}{.metadata.name} {.metadata.uid} {.status.containerStatuses[*].restartCount}{"\n"}{end}`)
	}
	before := pods()

	helm(t, c, "upgrade", "cache-operator", filepath.Join(testenv.Root(), "charts", "cache-operator"), "--namespace", localcluster.OperatorNamespace,
		"--reset-then-reuse-values", "--set", "image.tag="+harnessimages.DefaultOperatorTag, "--wait", "--timeout", "5m")
	kubectl("rollout", "status", "--namespace", localcluster.OperatorNamespace, "deployment/cache-operator", "--timeout=5m")
	if image := kubectl("get", "deployment", "--namespace", localcluster.OperatorNamespace, "cache-operator", "-o",
		"jsonpath={.spec.template.spec.containers[0].image}"); !strings.HasSuffix(image, ":"+harnessimages.DefaultOperatorTag) {
		t.Fatalf("after the upgrade the operator runs %s", image)
	}
	// The new operator leads, and works: a Cache made now becomes Ready.
	leaderPod(t)
	if err := c.Apply(context.Background(), `apiVersion: cache.example.com/v2
kind: Cache
metadata: {name: after, namespace: upgraded}
spec: {mode: Standalone, shards: 1, version: "`+valkeyVersion+`", memory: 64Mi}
`); err != nil {
		t.Fatal(err)
	}
	kubectl("wait", "--namespace", ns, "cache/after", "--for=condition=Ready", "--timeout=3m")
	kubectl("wait", "--namespace", ns, "cache/upgraded", "--for=condition=Ready", "--timeout=1m")
	if after := pods(); after != before {
		t.Errorf("the upgrade restarted cache pods: before\n%s\nafter\n%s", before, after)
	}
	if got := kubectl("exec", "--namespace", ns, "upgraded-0", "-c", "valkey", "--", "valkey-cli", "-c", "get", "before-the-upgrade"); got != "kept" {
		t.Errorf("after the upgrade the key written before reads %q", got)
	}
}

// The operator, installed by its Helm chart from its image as a user installs it, to manage one
// namespace (watchNamespaces), runs a Valkey Cluster whose pods are containers on real nodes, in
// that namespace, which enforces the restricted Pod Security Standard: every node of it serves,
// `kubectl exec` and `kubectl logs` reach its containers, which run as a user other than root,
// and a client in the cluster reaches the Cache by its Service's DNS name. Its ServiceAccount may
// read Secrets in that namespace and in its own only.
func helmInstalledOperatorRunsACacheInRealContainers(t *testing.T) {
	ctx := context.Background()
	c := installCluster
	kubectl := func(args ...string) string { return realKubectl(t, args...) }
	const ns = "shop"
	// Before the install, which grants the operator its role there; removed before the operator
	// is, which its Caches' finalizers wait for (cleanups run last first).
	kubectl("create", "namespace", ns)
	installByHelm(t, c, "--set", "watchNamespaces={"+ns+"}")
	deleteRealNamespaceAtEnd(t, ns)
	for namespace, want := range map[string]string{ns: "yes", localcluster.OperatorNamespace: "yes", "default": "no", "kube-system": "no"} {
		got, _ := c.KubectlOutput(ctx, "auth", "can-i", "list", "secrets", "--namespace", namespace,
			"--as", "system:serviceaccount:"+localcluster.OperatorNamespace+":cache-operator")
		if strings.TrimSpace(got) != want {
			t.Errorf("may the operator list the Secrets of %s? %q, want %s", namespace, got, want)
		}
	}
	// Three quarters of the chart's default memory limit, 256Mi.
	if logs := kubectl("logs", "--namespace", localcluster.OperatorNamespace, "deployment/cache-operator"); !strings.Contains(logs,
		`"msg":"Set the Go runtime's memory limit","bytes":201326592`) {
		t.Errorf("the operator's log does not say it set the Go runtime's memory limit to 192 MiB:\n%s", logs)
	}
	kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
	if err := c.Apply(ctx, fmt.Sprintf(`apiVersion: cache.example.com/v2
kind: Cache
metadata: {name: shop, namespace: %s}
spec: {mode: Cluster, shards: 3, replicasPerShard: 1, version: "`+valkeyVersion+`", memory: 64Mi}
`, ns)); err != nil {
		t.Fatal(err)
	}
	kubectl("wait", "--namespace", ns, "cache/shop", "--for=condition=Ready", "--timeout=5m")

	for i := range 6 {
		pod := fmt.Sprintf("shop-%d", i)
		if state := kubectl("exec", "--namespace", ns, pod, "-c", "valkey", "--", "valkey-cli", "cluster", "info"); !strings.Contains(state, "cluster_state:ok") {
			t.Errorf("%s reports %q, want cluster_state:ok", pod, state)
		}
	}
	if uid := kubectl("exec", "--namespace", ns, "shop-0", "-c", "valkey", "--", "id", "-u"); uid == "0" {
		t.Error("the Valkey container runs as root")
	}
	if logs := kubectl("logs", "--namespace", ns, "shop-0", "-c", "valkey"); !strings.Contains(logs, "Ready to accept connections") {
		t.Errorf("the Valkey container's log does not say it is ready:\n%s", logs)
	}

	// A client pod in the cluster, as the restricted standard allows, writes through the Cache's
	// Service name and follows the cluster's redirects to the pods' addresses.
	if err := c.Apply(ctx, fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata: {name: client, namespace: %s}
spec:
  restartPolicy: Never
  securityContext: {runAsNonRoot: true, runAsUser: 999, seccompProfile: {type: RuntimeDefault}}
  containers:
  - name: client
    image: valkey/valkey:%s
    command: [sh, -c, 'for k in a b c d e f; do valkey-cli -c -h shop.%s.svc.cluster.local set $k v-$k || exit 1; done; valkey-cli -c -h shop.%s.svc get f']
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, ns, valkeyVersion, ns, ns)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the client pod to finish", func() (bool, string) {
		phase, err := c.KubectlOutput(ctx, "get", "pod", "client", "--namespace", ns, "-o", "jsonpath={.status.phase}")
		return err == nil && (phase == "Succeeded" || phase == "Failed"), phase
	})
	if out := kubectl("logs", "--namespace", ns, "client"); !strings.HasSuffix(out, "v-f") {
		t.Errorf("the client in the cluster did not write and read back through the Service's name:\n%s", out)
	}

	// A server killed in its container is restarted in place by the kubelet, in the same pod with
	// the same address, and the Cache heals with the keys written before.
	before := kubectl("get", "pod", "--namespace", ns, "shop-0", "-o", "jsonpath={.metadata.uid} {.status.podIP}")
	restarts := valkeyRestarts(t, ns, "shop-0")
	id := kubectl("get", "pod", "--namespace", ns, "shop-0", "-o", `jsonpath={.status.containerStatuses[?(@.name=="valkey")].containerID}`)
	if err := c.SignalContainer(id, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "shop-0's server to be restarted in its pod", func() (bool, string) {
		now := valkeyRestarts(t, ns, "shop-0")
		return now > restarts, fmt.Sprintf("%d restarts, %d before", now, restarts)
	})
	if after := kubectl("get", "pod", "--namespace", ns, "shop-0", "-o", "jsonpath={.metadata.uid} {.status.podIP}"); after != before {
		t.Errorf("shop-0 (UID and IP) was %s and is %s after its server's restart, want the same pod", before, after)
	}
	testenv.WaitFor(t, 3*time.Minute, "every node of the Cache to serve again", func() (bool, string) {
		for i := range 6 {
			state, err := c.KubectlOutput(ctx, "exec", "--namespace", ns, fmt.Sprintf("shop-%d", i), "-c", "valkey", "--", "valkey-cli", "cluster", "info")
			if err != nil || !strings.Contains(state, "cluster_state:ok") {
				return false, fmt.Sprintf("shop-%d: %v %s", i, err, state)
			}
		}
		return true, ""
	})
	kubectl("wait", "--namespace", ns, "cache/shop", "--for=condition=Ready", "--timeout=3m")
	for _, k := range []string{"a", "b", "c", "d", "e", "f"} {
		if got := kubectl("exec", "--namespace", ns, "shop-1", "-c", "valkey", "--", "valkey-cli", "-c", "get", k); got != "v-"+k {
			t.Errorf("after shop-0's restart, %s = %q, want v-%s", k, got, k)
		}
	}
}

// The operator installed by kustomize (config/default) from its image runs as two replicas in
// pods, one of which leads: when its pod goes, the other takes over through the API server's
// Lease and carries a change to a Cache through, its conversion webhook reached through its
// Service.
func kustomizeInstalledOperatorHandsOverBetweenItsPods(t *testing.T) {
	ctx := context.Background()
	c := installCluster
	kubectl := func(args ...string) string { return realKubectl(t, args...) }
	// The install leaves the operator's namespace to the user (README); another test may have
	// left it.
	if err := c.Apply(ctx, "apiVersion: v1\nkind: Namespace\nmetadata: {name: "+localcluster.OperatorNamespace+"}\n"); err != nil {
		t.Fatal(err)
	}
	kubectl("apply", "--server-side", "-k", filepath.Join(testenv.Root(), "config", "default"))
	t.Cleanup(func() {
		_ = c.Kubectl(ctx, "delete", "-k", filepath.Join(testenv.Root(), "config", "default"), "--wait=true", "--timeout=2m")
		_ = c.Kubectl(ctx, "delete", "namespace", localcluster.OperatorNamespace, "--wait=true", "--timeout=2m")
	})
	kubectl("rollout", "status", "--namespace", localcluster.OperatorNamespace, "deployment/cache-operator", "--timeout=5m")
	leader := leaderPod(t)

	newRealNamespace(t, "orders")
	// Written as v1: the API server converts it through the webhook in the operator's pods.
	if err := c.Apply(ctx, `apiVersion: cache.example.com/v1
kind: Cache
metadata: {name: orders, namespace: orders}
spec: {replicas: 1, version: "`+valkeyVersion+`", memory: 64Mi}
`); err != nil {
		t.Fatal(err)
	}
	kubectl("wait", "--namespace", "orders", "cache/orders", "--for=condition=Ready", "--timeout=5m")

	kubectl("delete", "pod", "--namespace", localcluster.OperatorNamespace, leader, "--wait=false")
	testenv.WaitFor(t, 2*time.Minute, "another pod to lead", func() (bool, string) {
		holder := realLeaseHolder()
		return holder != "" && !strings.HasPrefix(holder, leader+"_"), holder
	})
	// Through v1 again, so that the webhook converts it too.
	v1 := "caches.v1.cache.example.com/orders"
	before := kubectl("get", "--namespace", "orders", v1, "-o", "jsonpath={.metadata.generation}")
	kubectl("patch", "--namespace", "orders", v1, "--type=merge", "-p", `{"spec":{"replicas":2}}`)
	generation := kubectl("get", "--namespace", "orders", v1, "-o", "jsonpath={.metadata.generation}")
	if generation == before {
		t.Fatalf("the patch left the Cache at generation %s", generation)
	}
	kubectl("wait", "--namespace", "orders", "cache/orders", "--for=jsonpath={.status.observedGeneration}="+generation, "--timeout=3m")
	kubectl("wait", "--namespace", "orders", "cache/orders", "--for=condition=Ready", "--timeout=5m")
	if ready := kubectl("get", "--namespace", "orders", "statefulset/orders", "-o", "jsonpath={.status.readyReplicas}"); ready != "2" {
		t.Errorf("the new leader's Cache has %s ready pods, want 2", ready)
	}
}

// installByHelm installs the operator in installCluster with its Helm chart, from its image, until
// the test ends.
func installByHelm(t *testing.T, c *localcluster.Cluster, values ...string) {
	t.Helper()
	helm(t, c, append([]string{"install", "cache-operator", filepath.Join(testenv.Root(), "charts", "cache-operator"),
		"--namespace", localcluster.OperatorNamespace, "--create-namespace", "--wait", "--timeout", "5m"}, values...)...)
	t.Cleanup(func() {
		helm(t, c, "uninstall", "cache-operator", "--namespace", localcluster.OperatorNamespace, "--wait")
	})
}

// newRealNamespace makes a namespace in installCluster, gone (with its Caches) before the test ends.
func newRealNamespace(t *testing.T, name string) {
	t.Helper()
	realKubectl(t, "create", "namespace", name)
	deleteRealNamespaceAtEnd(t, name)
}

// deleteRealNamespaceAtEnd deletes a namespace of installCluster, with its Caches, when the test
// ends.
func deleteRealNamespaceAtEnd(t *testing.T, name string) {
	t.Cleanup(func() {
		_ = installCluster.Kubectl(context.Background(), "delete", "namespace", name, "--wait=true", "--timeout=2m")
	})
}

// valkeyRestarts is how many times the Valkey container of a pod in installCluster was restarted.
func valkeyRestarts(t *testing.T, namespace, pod string) int {
	t.Helper()
	n, err := strconv.Atoi(realKubectl(t, "get", "pod", "--namespace", namespace, pod, "-o",
		`jsonpath={.status.containerStatuses[?(@.name=="valkey")].restartCount}`))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// leaderPod is the operator's pod that holds its leader election Lease in installCluster.
func leaderPod(t *testing.T) string {
	t.Helper()
	var pod string
	testenv.WaitFor(t, 2*time.Minute, "one of the operator's pods to lead", func() (bool, string) {
		holder := realLeaseHolder()
		name, _, ok := strings.Cut(holder, "_")
		pods := realKubectl(t, "get", "pods", "--namespace", localcluster.OperatorNamespace, "-o", "jsonpath={.items[*].metadata.name}")
		pod = name
		return ok && slices.Contains(strings.Fields(pods), name), fmt.Sprintf("holder %q, pods %s", holder, pods)
	})
	return pod
}

// realLeaseHolder is the holder of the operator's leader election Lease in installCluster: the leader's
// pod name, an underscore and a unique suffix.
func realLeaseHolder() string {
	out, _ := installCluster.KubectlOutput(context.Background(), "get", "lease", "--namespace", localcluster.OperatorNamespace,
		"cache-operator.cache.example.com", "-o", "jsonpath={.spec.holderIdentity}")
	return out
}

// realKubectl runs kubectl against installCluster and returns its output, failing the test if it
// fails.
func realKubectl(t *testing.T, args ...string) string {
	t.Helper()
	out, err := installCluster.KubectlOutput(context.Background(), args...)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return strings.TrimSpace(out)
}

// helm runs the toolchain's helm against cluster c.
func helm(t *testing.T, c *localcluster.Cluster, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(testenv.BinDir(), "helm"), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
}
