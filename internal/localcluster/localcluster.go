// Package localcluster runs a local Kubernetes cluster with kwokctl from the toolchain's own
// binaries (hack/toolchain.sh): a real etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, with kwok playing the kubelet of simulated nodes. It needs no container
// runtime and starts in seconds. `make run`, the end-to-end tests and the benchmark share it.
package localcluster

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Cluster is one kwokctl cluster.
type Cluster struct {
	// Name tells clusters in the same Workdir apart.
	Name string
	// Workdir holds the cluster's configuration, kubeconfig, data and component logs.
	Workdir string
	// BinDir holds the toolchain's binaries: etcd, kube-*, kubectl, kwok, kwokctl.
	BinDir string
}

// DefaultWorkdir keeps local clusters in the user's cache, outside any checkout.
func DefaultWorkdir() (string, error) {
	dir, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(dir, "cache-operator", "kwok"), nil
}

// Kubeconfig is the path of the cluster's admin kubeconfig.
func (c *Cluster) Kubeconfig() string {
	return filepath.Join(c.Workdir, "clusters", c.Name, "kubeconfig.yaml")
}

// Logs is the directory of the cluster components' logs (and of the audit log, if enabled).
func (c *Cluster) Logs() string {
	return filepath.Join(c.Workdir, "clusters", c.Name, "logs")
}

// Exists reports whether the cluster was created (it may be stopped, after a reboot say).
func (c *Cluster) Exists() bool {
	_, err := os.Stat(c.Kubeconfig())
	return err == nil
}

// Create creates and starts the cluster with the given number of simulated nodes. Extra
// arguments go to `kwokctl create cluster`, such as --kube-audit-policy FILE.
func (c *Cluster) Create(ctx context.Context, nodes int, extraArgs ...string) error {
	args := []string{"create", "cluster",
		"--runtime", "binary",
		"--etcd-binary", c.bin("etcd"),
		"--kube-apiserver-binary", c.bin("kube-apiserver"),
		"--kube-controller-manager-binary", c.bin("kube-controller-manager"),
		"--kube-scheduler-binary", c.bin("kube-scheduler"),
		"--kwok-controller-binary", c.bin("kwok"),
		// Client rate limits in the control plane would make it, not the operator, the
		// bottleneck of anything we measure.
		"--disable-qps-limits",
		"--wait", "2m",
	}
	if err := c.kwokctl(ctx, append(args, extraArgs...)...); err != nil {
		return err
	}
	return c.ScaleNodes(ctx, nodes)
}

// Start starts the processes of a cluster that exists but is not running.
func (c *Cluster) Start(ctx context.Context) error {
	return c.kwokctl(ctx, "start", "cluster", "--wait", "2m")
}

// Running reports whether the cluster's API server answers.
func (c *Cluster) Running(ctx context.Context) bool {
	return c.Kubectl(ctx, "get", "--raw", "/readyz") == nil
}

// ScaleNodes sets the number of simulated nodes.
func (c *Cluster) ScaleNodes(ctx context.Context, nodes int) error {
	return c.kwokctl(ctx, "scale", "node", "--replicas", strconv.Itoa(nodes))
}

// Delete stops the cluster and removes everything it stored.
func (c *Cluster) Delete(ctx context.Context) error {
	return c.kwokctl(ctx, "delete", "cluster")
}

// Kubectl runs the toolchain's kubectl against the cluster as its admin, with output on
// standard error.
func (c *Cluster) Kubectl(ctx context.Context, args ...string) error {
	_, err := c.KubectlOutput(ctx, args...)
	return err
}

// KubectlOutput runs kubectl like Kubectl and returns its standard output.
func (c *Cluster) KubectlOutput(ctx context.Context, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, c.bin("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
	cmd.Stdout, cmd.Stderr = &out, os.Stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %v: %w", args, err)
	}
	return out.String(), nil
}

// OperatorNamespace and OperatorServiceAccount are where config/rbac grants the operator its
// permissions.
const (
	OperatorNamespace      = "cache-operator-system"
	OperatorServiceAccount = "cache-operator"
)

// InstallOperatorAccess installs, from the repository at root, the CRDs and the operator's
// ServiceAccount with the RBAC generated from its markers.
func (c *Cluster) InstallOperatorAccess(ctx context.Context, root string) error {
	ns, err := c.KubectlOutput(ctx, "create", "namespace", OperatorNamespace, "--dry-run=client", "-o", "yaml")
	if err != nil {
		return err
	}
	if err := c.kubectlStdin(ctx, ns, "apply", "--server-side", "-f", "-"); err != nil {
		return err
	}
	for _, dir := range []string{"crd", "rbac"} {
		if err := c.Kubectl(ctx, "apply", "--server-side", "-k", filepath.Join(root, "config", dir)); err != nil {
			return err
		}
	}
	return c.Kubectl(ctx, "wait", "--for=condition=Established", "crd/caches.cache.example.com", "--timeout=60s")
}

// WriteOperatorKubeconfig writes a kubeconfig that authenticates as the operator's
// ServiceAccount with a token, so that a process using it can do exactly what the generated
// RBAC grants, like the operator in a pod.
func (c *Cluster) WriteOperatorKubeconfig(ctx context.Context, path string) error {
	token, err := c.KubectlOutput(ctx, "create", "token", OperatorServiceAccount,
		"--namespace", OperatorNamespace, "--duration", "24h")
	if err != nil {
		return err
	}
	cfg, err := clientcmd.LoadFromFile(c.Kubeconfig())
	if err != nil {
		return err
	}
	current := cfg.Contexts[cfg.CurrentContext]
	if current == nil {
		return fmt.Errorf("%s has no current context", c.Kubeconfig())
	}
	cfg.AuthInfos = map[string]*clientcmdapi.AuthInfo{OperatorServiceAccount: {Token: strings.TrimSpace(token)}}
	current.AuthInfo = OperatorServiceAccount
	return clientcmd.WriteToFile(*cfg, path)
}

func (c *Cluster) kubectlStdin(ctx context.Context, stdin string, args ...string) error {
	cmd := exec.CommandContext(ctx, c.bin("kubectl"), append([]string{"--kubeconfig", c.Kubeconfig()}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kubectl %v: %w", args, err)
	}
	return nil
}

func (c *Cluster) kwokctl(ctx context.Context, args ...string) error {
	cmd := exec.CommandContext(ctx, c.bin("kwokctl"), append([]string{"--name", c.Name}, args...)...)
	cmd.Env = append(os.Environ(),
		"KWOK_WORKDIR="+c.Workdir,
		// kwokctl would download kubectl for its own use; give it ours.
		"KWOK_KUBECTL_BINARY="+c.bin("kubectl"),
	)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("kwokctl %v: %w", args, err)
	}
	return nil
}

func (c *Cluster) bin(name string) string {
	return filepath.Join(c.BinDir, name)
}
