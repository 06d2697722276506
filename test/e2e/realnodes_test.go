//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/test/harness/localcluster"
	"example.com/cache-operator/test/harness/testenv"
)

// The operator, installed by its Helm chart from its image as a user installs it, runs a Valkey
// Cluster whose pods are containers on real nodes, in a namespace that enforces the restricted
// Pod Security Standard: every node of it serves, `kubectl exec` and `kubectl logs` reach its
// containers, which run as a user other than root, and a client in the cluster reaches the
// Cache by its Service's DNS name.
func TestHelmInstalledOperatorRunsACacheInRealContainers(t *testing.T) {
	ctx := context.Background()
	c := realCluster
	kubectl := func(args ...string) string {
		t.Helper()
		out, err := c.KubectlOutput(ctx, args...)
		if err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		return strings.TrimSpace(out)
	}
	helm(t, c, "install", "cache-operator", filepath.Join(testenv.Root(), "charts", "cache-operator"),
		"--namespace", localcluster.OperatorNamespace, "--create-namespace", "--wait", "--timeout", "5m")
	t.Cleanup(func() {
		helm(t, c, "uninstall", "cache-operator", "--namespace", localcluster.OperatorNamespace, "--wait")
	})

	const ns = "shop"
	kubectl("create", "namespace", ns)
	kubectl("label", "namespace", ns, "pod-security.kubernetes.io/enforce=restricted")
	t.Cleanup(func() { _ = c.Kubectl(ctx, "delete", "namespace", ns, "--wait=false") })
	if err := c.Apply(ctx, fmt.Sprintf(`apiVersion: cache.example.com/v2
kind: Cache
metadata: {name: shop, namespace: %s}
spec: {mode: Cluster, shards: 3, replicasPerShard: 1, version: "8.1.1", memory: 64Mi}
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
    image: valkey/valkey:8.1.1
    command: [sh, -c, 'for k in a b c d e f; do valkey-cli -c -h shop.%s.svc.cluster.local set $k v-$k || exit 1; done; valkey-cli -c -h shop.%s.svc get f']
    securityContext: {allowPrivilegeEscalation: false, capabilities: {drop: [ALL]}}
`, ns, ns, ns)); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the client pod to finish", func() (bool, string) {
		phase, err := c.KubectlOutput(ctx, "get", "pod", "client", "--namespace", ns, "-o", "jsonpath={.status.phase}")
		return err == nil && (phase == "Succeeded" || phase == "Failed"), phase
	})
	if out := kubectl("logs", "--namespace", ns, "client"); !strings.HasSuffix(out, "v-f") {
		t.Errorf("the client in the cluster did not write and read back through the Service's name:\n%s", out)
	}
}

// helm runs the toolchain's helm against cluster c.
func helm(t *testing.T, c *localcluster.Cluster, args ...string) {
	t.Helper()
	out, err := exec.Command(filepath.Join(testenv.BinDir(), "helm"), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("helm %v: %v\n%s", args, err, out)
	}
}
