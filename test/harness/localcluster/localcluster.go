// Package localcluster runs a local Kubernetes cluster with kwokctl from the toolchain's own
// binaries (hack/toolchain.sh): a real etcd, kube-apiserver, kube-controller-manager and
// kube-scheduler, and either real nodes or simulated ones. `make run`, the end-to-end tests and
// the benchmark share it.
//
// Real nodes (RealNodes, package realnode) are kubelets with containerd and runc that run the
// pods as containers of images built here (BuildImages), with CoreDNS for the cluster's names; the
// package doc of realnode says how such a cluster differs from a production one. Simulated nodes
// are kwok's, for the benchmark of thousands of Caches, where no container runs: kwok plays their
// kubelet and starts in seconds. Their pods get addresses on the loopback interface (PodCIDR), so
// that nothing ever sends traffic off the machine, and nothing runs behind them.
package localcluster

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/yaml"

	"example.com/cache-operator/internal/conversionwebhook"
)

// Cluster is one kwokctl cluster.
type Cluster struct {
	// Name tells clusters in the same Workdir apart.
	Name string
	// Workdir holds the cluster's configuration, kubeconfig, data and component logs.
	Workdir string
	// BinDir holds the toolchain's binaries: etcd, kube-*, kubectl, kwok, kwokctl.
	BinDir string
	// RealNodes is how many real nodes the cluster has (package realnode): a kubelet each, with
	// containerd and runc, that runs its pods as containers of the Images. The cluster then
	// has no simulated nodes. Otherwise kwok marks the pods Running and Ready with nothing
	// behind them, which is what a benchmark of thousands of Caches needs.
	RealNodes int
	// IsolatedNodes of the RealNodes, the last ones, are kept for pods that tolerate
	// IsolatedTaint: a test that takes whole nodes down (a drain, a stopped kubelet) takes
	// these, and no pod of another test is on them.
	IsolatedNodes int
	// NodeBinary runs a real node: `NodeBinary node SPECFILE` calls realnode.Run (hack/localcluster).
	NodeBinary string
	// Images are the image archives every real node imports when it starts (BuildImages): it
	// reaches no registry.
	Images []string
}

// PodCIDR is where kwok takes pod IPs from: a loopback range, which needs no set-up, since every
// address of 127.0.0.0/8 is on the loopback interface.
const PodCIDR = "127.64.0.0/16"

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

// PID is the process ID of one of the cluster's components (etcd, kube-apiserver,
// kube-scheduler, ...), from the file kwokctl keeps it in.
func (c *Cluster) PID(component string) (int, error) {
	b, err := os.ReadFile(filepath.Join(c.Workdir, "clusters", c.Name, "pids", component+".pid"))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// Exists reports whether the cluster was created (it may be stopped, after a reboot say). It
// asks for the cluster's configuration, which kwokctl writes at creation and needs to start it:
// a kubeconfig alone may be any kubectl's, run with KUBECONFIG pointing there after a delete.
func (c *Cluster) Exists() bool {
	_, err := os.Stat(c.kwokConfig())
	return err == nil
}

// Create creates and starts the cluster with the given number of simulated nodes. Extra
// arguments go to `kwokctl create cluster`, such as --kube-audit-policy FILE.
func (c *Cluster) Create(ctx context.Context, nodes int, extraArgs ...string) error {
	if c.RealNodes > 0 {
		return c.createWithRealNodes(ctx, extraArgs)
	}
	if err := c.create(ctx, extraArgs); err != nil {
		return err
	}
	return c.addNodes(ctx, nodes)
}

func (c *Cluster) create(ctx context.Context, extraArgs []string) error {
	args := []string{"create", "cluster",
		"--runtime", "binary",
		"--etcd-binary", c.bin("etcd"),
		"--kube-apiserver-binary", c.bin("kube-apiserver"),
		"--kube-controller-manager-binary", c.bin("kube-controller-manager"),
		"--kube-scheduler-binary", c.bin("kube-scheduler"),
		// Client rate limits in the control plane would make it, not the operator, the
		// bottleneck of anything we measure.
		"--disable-qps-limits",
		// The controller manager makes the directory it looks for FlexVolume plugins in: by
		// default the machine's /usr/libexec/kubernetes.
		"--extra-args", "kube-controller-manager=flex-volume-plugin-dir=" + filepath.Join(c.Workdir, "clusters", c.Name, "volume-plugins"),
		"--wait", "2m",
	}
	if c.RealNodes > 0 {
		// kwok would take the real nodes for its own, and give their pods addresses of its own.
		args = append(args, "--disable", "kwok-controller")
	} else {
		args = append(args, "--kwok-controller-binary", c.bin("kwok"),
			// kwok's own option, not a configuration file: a KwokConfiguration that sets only the
			// CIDR takes every other option's default away, and the kwok controller exits.
			"--extra-args", "kwok-controller=cidr="+PodCIDR)
	}
	return c.kwokctl(ctx, append(args, extraArgs...)...)
}

// Start starts the processes of a cluster that exists but is not running, and its real nodes
// that do not run.
func (c *Cluster) Start(ctx context.Context) error {
	if err := c.kwokctl(ctx, "start", "cluster", "--wait", "2m"); err != nil {
		return err
	}
	state, ok, err := c.state()
	if err != nil || !ok {
		return err
	}
	return c.restartNodes(ctx, state)
}

// Stop stops the processes of the cluster and keeps what it stored.
func (c *Cluster) Stop(ctx context.Context) error {
	return c.kwokctl(ctx, "stop", "cluster")
}

// Running reports whether the cluster's API server answers.
func (c *Cluster) Running(ctx context.Context) bool {
	return c.Kubectl(ctx, "get", "--raw", "/readyz") == nil
}

// nodeAllocatable is what each simulated node offers: what `kwokctl scale node` gives its
// nodes, so that pods spread over nodes as they did before the nodes were made here, and a disk
// (ephemeral storage), which those lack and a real node has: a cache pod requests its memory's
// worth, and would otherwise fit on none.
var nodeAllocatable = corev1.ResourceList{
	corev1.ResourceCPU:              resource.MustParse("32"),
	corev1.ResourceMemory:           resource.MustParse("256Gi"),
	corev1.ResourcePods:             resource.MustParse("110"),
	corev1.ResourceEphemeralStorage: resource.MustParse("1Ti"),
}

// Zones are the zones of the simulated nodes (topology.kubernetes.io/zone): kwok-node-i is in
// Zones[i % 3], so that placement across zones is exercised as on a cloud's nodes.
var Zones = []string{"zone-a", "zone-b", "zone-c"}

// addNodes adds simulated nodes kwok-node-0 to kwok-node-<n-1>, in Zones in turn. They are made
// here rather than by `kwokctl scale node`, whose nodes carry a private-range podCIDR that kwok
// would take pod IPs from instead of PodCIDR. kwok marks them ready.
func (c *Cluster) addNodes(ctx context.Context, n int) error {
	list := corev1.List{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "List"}}
	for i := range n {
		name := fmt.Sprintf("kwok-node-%d", i)
		node := &corev1.Node{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
			ObjectMeta: metav1.ObjectMeta{
				Name: name,
				// kwok manages the nodes that carry this annotation.
				Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
				Labels: map[string]string{
					corev1.LabelHostname: name, corev1.LabelOSStable: "linux", corev1.LabelArchStable: "amd64", "type": "kwok",
					corev1.LabelTopologyZone: Zones[i%len(Zones)],
				},
			},
			Status: corev1.NodeStatus{Allocatable: nodeAllocatable, Capacity: nodeAllocatable},
		}
		list.Items = append(list.Items, runtime.RawExtension{Object: node})
	}
	manifest, err := json.Marshal(list)
	if err != nil {
		return err
	}
	return c.kubectlStdin(ctx, string(manifest), "apply", "--server-side", "-f", "-")
}

// Delete stops the cluster and its real nodes, and removes everything they stored and everything
// they made on the machine.
func (c *Cluster) Delete(ctx context.Context) error {
	// The control plane goes even if a node does not: what is left of the nodes stays listed in
	// the cluster's directory only if that is kept, so keep it then.
	if err := c.stopNodes(ctx); err != nil {
		return errors.Join(err, c.kwokctl(ctx, "stop", "cluster"))
	}
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
		// Forced: tests edit the RBAC to take permissions away, and the install is what the operator
		// needs.
		if err := c.Kubectl(ctx, "apply", "--server-side", "--force-conflicts", "-k", filepath.Join(root, "config", dir)); err != nil {
			return err
		}
	}
	return c.Kubectl(ctx, "wait", "--for=condition=Established", "crd/"+conversionwebhook.CRDName, "crd/cachebackups.cache.example.com", "crd/cachebackupschedules.cache.example.com", "--timeout=60s")
}

// ServeWebhooksAt applies the Cache CRD and the validating webhook configuration of the
// repository at root with their webhooks at https://localhost:port instead of the webhook
// Service: a local cluster has no kube-proxy to reach a Service, so the operators, which run
// beside it rather than in it, serve the webhooks on loopback (see OperatorWebhookArgs). They are
// applied as kubectl applies the install, so that applying the install again points the webhooks
// back at the Service.
func (c *Cluster) ServeWebhooksAt(ctx context.Context, root string, port int) error {
	manifest, err := c.KubectlOutput(ctx, "kustomize", filepath.Join(root, "config", "crd"))
	if err != nil {
		return err
	}
	var crd map[string]any
	for doc := range strings.SplitSeq(manifest, "\n---\n") {
		if err := yaml.Unmarshal([]byte(doc), &crd); err != nil {
			return fmt.Errorf("reading the CRDs: %w", err)
		}
		if name, _, _ := unstructured.NestedString(crd, "metadata", "name"); name == conversionwebhook.CRDName {
			break
		}
		crd = nil
	}
	if crd == nil {
		return fmt.Errorf("config/crd has no %s", conversionwebhook.CRDName)
	}
	url := fmt.Sprintf("https://localhost:%d/convert", port)
	if err := unstructured.SetNestedMap(crd, map[string]any{"url": url}, "spec", "conversion", "webhook", "clientConfig"); err != nil {
		return err
	}
	local, err := yaml.Marshal(crd)
	if err != nil {
		return err
	}
	if err := c.kubectlStdin(ctx, string(local), "apply", "--server-side", "--force-conflicts", "-f", "-"); err != nil {
		return err
	}
	return c.serveValidationAt(ctx, root, port)
}

// serveValidationAt applies the validating webhook configuration of the repository at root with
// each webhook's path at https://localhost:port.
func (c *Cluster) serveValidationAt(ctx context.Context, root string, port int) error {
	manifest, err := os.ReadFile(filepath.Join(root, "config", "webhook", "validating.yaml"))
	if err != nil {
		return err
	}
	var config map[string]any
	if err := yaml.Unmarshal(manifest, &config); err != nil {
		return fmt.Errorf("reading the validating webhook configuration: %w", err)
	}
	webhooks, _, _ := unstructured.NestedSlice(config, "webhooks")
	for _, w := range webhooks {
		path, _, _ := unstructured.NestedString(w.(map[string]any), "clientConfig", "service", "path")
		w.(map[string]any)["clientConfig"] = map[string]any{"url": fmt.Sprintf("https://localhost:%d%s", port, path)}
	}
	if err := unstructured.SetNestedSlice(config, webhooks, "webhooks"); err != nil {
		return err
	}
	local, err := yaml.Marshal(config)
	if err != nil {
		return err
	}
	return c.kubectlStdin(ctx, string(local), "apply", "--server-side", "--force-conflicts", "-f", "-")
}

// ServeV2Only stops serving the deprecated v1 of the Cache CRD, with the patch that the install
// of the repository at root makes for it (config/v2-only). ServeWebhooksAt serves v1 again.
func (c *Cluster) ServeV2Only(ctx context.Context, root string) error {
	return c.Kubectl(ctx, "patch", "customresourcedefinition", conversionwebhook.CRDName, "--type=json",
		"--patch-file", filepath.Join(root, "config", "v2-only", "crd", "unserve-v1.yaml"))
}

// OperatorWebhookArgs are the flags that make an operator running beside a local cluster serve
// the conversion webhook on 127.0.0.1:port, with a certificate for localhost kept in a Secret of
// OperatorNamespace.
func OperatorWebhookArgs(port int) []string {
	return []string{
		"--webhook-bind-host=127.0.0.1",
		fmt.Sprintf("--webhook-port=%d", port),
		"--webhook-dns-name=localhost",
		"--webhook-cert-namespace=" + OperatorNamespace,
	}
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

// Apply applies the manifest to the cluster, as its admin, server-side.
func (c *Cluster) Apply(ctx context.Context, manifest string) error {
	return c.kubectlStdin(ctx, manifest, "apply", "--server-side", "-f", "-")
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

// EtcdEndpoint is the client URL of the cluster's own etcd, where the API server stores
// objects: for tests that must see how an object is stored, not how the API server serves it.
func (c *Cluster) EtcdEndpoint() (string, error) {
	config, err := os.ReadFile(c.kwokConfig())
	if err != nil {
		return "", err
	}
	for _, doc := range bytes.Split(config, []byte("\n---\n")) {
		var obj struct {
			Kind    string `json:"kind"`
			Options struct {
				EtcdPort int `json:"etcdPort"`
			} `json:"options"`
		}
		if err := yaml.Unmarshal(doc, &obj); err == nil && obj.Kind == "KwokctlConfiguration" && obj.Options.EtcdPort != 0 {
			return fmt.Sprintf("http://127.0.0.1:%d", obj.Options.EtcdPort), nil
		}
	}
	return "", fmt.Errorf("%s names no etcd port", c.kwokConfig())
}

// kwokConfig is the configuration kwokctl wrote for the cluster when it created it.
func (c *Cluster) kwokConfig() string {
	return filepath.Join(c.Workdir, "clusters", c.Name, "kwok.yaml")
}

func (c *Cluster) bin(name string) string {
	return filepath.Join(c.BinDir, name)
}
