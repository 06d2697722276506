package realnode

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/yaml"
)

// Spec is one node, as Run needs it; Start writes it into the node's directory.
type Spec struct {
	// Name is the node's name, its kubelet's hostname.
	Name string
	// Index is the node's number in its cluster, which places it in the Plan.
	Index int
	// Plan is the cluster's addressing.
	Plan Plan
	// Nodes is how many nodes the cluster has, for the routes to the others' pods.
	Nodes int
	// Dir is the node's own directory: its /var/lib, /var/log, configuration and log files.
	Dir string
	// BinDir holds the toolchain's binaries: containerd, runc, kubelet, kube-proxy, nft, cni-bin.
	BinDir string
	// APIServer is the API server's URL as the nodes reach it, on Plan.HostIP.
	APIServer string
	// CAFile verifies the API server; CertFile and KeyFile are the client certificate the node's
	// kubelet and kube-proxy authenticate with.
	CAFile, CertFile, KeyFile string
	// CgroupRoot is the cgroup, in every hierarchy, under which the node puts its daemons and
	// its pods: under the cgroup of whatever made the cluster.
	CgroupRoot string
	// Labels are the Node's labels (its zone, say), and Taints the taints it registers with.
	Labels map[string]string
	Taints []corev1.Taint
	// Images are image archives (OCI layouts) imported into the node's containerd at start: the
	// node reaches no registry.
	Images []string
	// SandboxImage is the pause image, one of Images.
	SandboxImage string
}

// Paths inside the node's mount namespace, where Run mounts its own directories: the node's
// programs find their state where a node's would be, and nothing they write reaches the machine's.
const (
	containerdSocket = "/run/containerd/containerd.sock"
	cniConfDir       = "/var/lib/cni-conf"
)

// NodeIP is the node's address.
func (s *Spec) NodeIP() string { return s.Plan.NodeIP(s.Index).String() }

// file is a path in the node's directory.
func (s *Spec) file(name string) string { return filepath.Join(s.Dir, name) }

// containerdConfig is containerd's configuration (version 3, containerd 2.x): the CRI with runc
// from the toolchain, CNI from the toolchain's plugins, and the sandbox image that was imported.
func (s *Spec) containerdConfig() string {
	return fmt.Sprintf(`version = 3
root = "/var/lib/containerd"
state = "/run/containerd"

[grpc]
  address = %q

# Its default, /opt/containerd, is the machine's.
[plugins."io.containerd.internal.v1.opt"]
  path = "/var/lib/containerd-opt"

[plugins."io.containerd.cri.v1.images".pinned_images]
  sandbox = %q

[plugins."io.containerd.cri.v1.runtime"]
  # The node's processes lack CAP_SYS_RESOURCE on these machines: a container that asked for a
  # lower OOM score adjustment than its runtime's would fail to start.
  restrict_oom_score_adj = true

[plugins."io.containerd.cri.v1.runtime".containerd]
  default_runtime_name = "runc"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"

[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc.options]
  BinaryName = %q
  SystemdCgroup = false

[plugins."io.containerd.cri.v1.runtime".cni]
  bin_dirs = [%q]
  conf_dir = %q
  # containerd brings a pod's loopback interface up itself, as it would with the CNI loopback
  # plugin, without starting that program at each pod's start and end: process starts are what
  # a pod costs its node most on these machines.
  use_internal_loopback = true
`, containerdSocket, s.SandboxImage, filepath.Join(s.BinDir, "runc"), filepath.Join(s.BinDir, "cni-bin"), cniConfDir)
}

// cniConfig is the pods' network: a bridge in the node's network namespace, whose address is the
// pods' gateway, and a route for the local clusters' range only: no default route, so that a pod
// reaches nothing outside the machine's bridges.
func (s *Spec) cniConfig() ([]byte, error) {
	return json.MarshalIndent(map[string]any{
		"cniVersion": "1.0.0",
		"name":       "cache-operator",
		"plugins": []any{map[string]any{
			"type":        "bridge",
			"bridge":      "cni0",
			"isGateway":   true,
			"hairpinMode": true,
			"ipam": map[string]any{
				"type":   "host-local",
				"ranges": []any{[]any{map[string]any{"subnet": s.Plan.PodCIDR(s.Index).String(), "gateway": s.Plan.PodGateway(s.Index).String()}}},
				"routes": []any{map[string]any{"dst": Range}},
			},
		}},
	}, "", "  ")
}

// kubeconfig is how the node's kubelet and kube-proxy reach the API server.
func (s *Spec) kubeconfig() ([]byte, error) {
	return yaml.Marshal(map[string]any{
		"apiVersion": "v1",
		"kind":       "Config",
		"clusters": []any{map[string]any{"name": "local", "cluster": map[string]any{
			"server": s.APIServer, "certificate-authority": s.CAFile,
		}}},
		"users": []any{map[string]any{"name": "node", "user": map[string]any{
			"client-certificate": s.CertFile, "client-key": s.KeyFile,
		}}},
		"contexts":        []any{map[string]any{"name": "local", "context": map[string]any{"cluster": "local", "user": "node"}}},
		"current-context": "local",
	})
}

// kubeletConfig is the kubelet's configuration.
func (s *Spec) kubeletConfig() ([]byte, error) {
	config := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		// These machines mount cgroup v1 hierarchies, and run no systemd.
		"failCgroupV1": false,
		"cgroupDriver": "cgroupfs",
		"cgroupRoot":   s.CgroupRoot,
		// The kubelet would set kernel tunables of the machine's; Run gives it files of its own
		// in their place, and it must not refuse to start over them.
		"protectKernelDefaults":    false,
		"failSwapOn":               false,
		"containerRuntimeEndpoint": "unix://" + containerdSocket,
		"address":                  s.NodeIP(),
		"healthzBindAddress":       "127.0.0.1",
		"readOnlyPort":             0,
		// The API server of a local cluster connects to kubelets with no client certificate, as
		// kwokctl starts it: the kubelet serves exec, logs and port-forward to anyone who reaches
		// it, which is only the machine, on its bridge.
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": true},
			"webhook":   map[string]any{"enabled": false},
			"x509":      map[string]any{"clientCAFile": s.CAFile},
		},
		"authorization": map[string]any{"mode": "AlwaysAllow"},
		"clusterDNS":    []string{s.Plan.DNSServiceIP().String()},
		"clusterDomain": "cluster.local",
		// The machine's resolvers are outside: pods resolve only the cluster's names.
		"resolvConf": s.file("resolv.conf"),
		// Images come from archives, not a registry: one collected could never come back.
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		// The nodes share one disk with the machine: evict on what a full disk would break only.
		"evictionHard": map[string]string{
			"memory.available": "100Mi", "nodefs.available": "2%", "nodefs.inodesFree": "2%", "imagefs.available": "2%",
		},
		"serializeImagePulls": false,
		// Its default, under /usr/libexec, is the machine's.
		"volumePluginDir": "/var/lib/kubelet/volume-plugins",
		"maxPods":         110,
	}
	if len(s.Taints) > 0 {
		config["registerWithTaints"] = s.Taints
	}
	return yaml.Marshal(config)
}

// kubeProxyConfig is kube-proxy's configuration: nftables, in the node's network namespace, and
// none of the machine's conntrack settings touched.
func (s *Spec) kubeProxyConfig() ([]byte, error) {
	return yaml.Marshal(map[string]any{
		"apiVersion":       "kubeproxy.config.k8s.io/v1alpha1",
		"kind":             "KubeProxyConfiguration",
		"mode":             "nftables",
		"clientConnection": map[string]any{"kubeconfig": s.file("kubeconfig")},
		"hostnameOverride": s.Name,
		"bindAddress":      s.NodeIP(),
		"clusterCIDR":      s.Plan.ClusterCIDR().String(),
		// The machine's own address is in the cluster range: without this, a connection from
		// the machine to a Service would reach a pod on another node, whose answer would come
		// back past the node that translated the address.
		"masqueradeAll":      true,
		"healthzBindAddress": "127.0.0.1:10256",
		"metricsBindAddress": "127.0.0.1:10249",
		"conntrack": map[string]any{
			"maxPerCore": 0, "min": 0, "tcpEstablishedTimeout": "0s", "tcpCloseWaitTimeout": "0s",
		},
	})
}

// labels is Labels as the kubelet's --node-labels takes them.
func (s *Spec) labels() string {
	var pairs []string
	for _, k := range slices.Sorted(maps.Keys(s.Labels)) {
		pairs = append(pairs, k+"="+s.Labels[k])
	}
	return strings.Join(pairs, ",")
}
