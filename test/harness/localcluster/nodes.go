package localcluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/clientcmd"

	"example.com/cache-operator/test/harness/realnode"
)

// The real nodes of a cluster (RealNodes): each a kubelet with its own containerd and runc, and
// kube-proxy, in network and mount namespaces of its own (package realnode), linked to the
// machine by a bridge in a block of 198.18.0.0/15 of the cluster's own. The API server stays on
// the machine, and reaches them, as they reach it, across the bridge.

// nodesDir holds the real nodes' directories and what the cluster made for them (nodesState).
func (c *Cluster) nodesDir() string {
	return filepath.Join(c.Workdir, "clusters", c.Name, "nodes")
}

// nodesState is what a cluster with real nodes made on the machine, as its creation recorded it,
// for whoever deletes or restarts it, from whatever process.
type nodesState struct {
	// Block is the cluster's network block.
	Block int
	// RunCgroup is the cgroup the nodes' cgroups are under; MadeCgroups are the cgroups made
	// for it, in every hierarchy.
	RunCgroup   string
	MadeCgroups []string
}

func (c *Cluster) stateFile() string { return filepath.Join(c.nodesDir(), "state.json") }

// state reads the cluster's nodesState; false for a cluster without real nodes.
func (c *Cluster) state() (nodesState, bool, error) {
	var state nodesState
	content, err := os.ReadFile(c.stateFile())
	if errors.Is(err, os.ErrNotExist) {
		return state, false, nil
	}
	if err == nil {
		err = json.Unmarshal(content, &state)
	}
	return state, err == nil, err
}

// Plan is the addressing of the cluster's real nodes, pods and Services; false for a cluster
// without real nodes.
func (c *Cluster) Plan() (realnode.Plan, bool, error) {
	state, ok, err := c.state()
	return realnode.Plan{Block: state.Block}, ok, err
}

// createWithRealNodes claims a network block, creates the control plane so that the nodes and
// the pods reach its API server on the block's bridge, and starts the nodes. What it made is gone
// again if it fails.
func (c *Cluster) createWithRealNodes(ctx context.Context, extraArgs []string) (err error) {
	if c.RealNodes > realnode.MaxNodes {
		return fmt.Errorf("a local cluster has at most %d real nodes, not %d", realnode.MaxNodes, c.RealNodes)
	}
	p, err := realnode.ClaimBlock()
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			// With a context of its own: the caller's may be why this failed.
			cleanup, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if c.Exists() {
				err = errors.Join(err, c.Delete(cleanup))
			}
			err = errors.Join(err, p.TearDownHost())
		}
	}()
	if err := os.MkdirAll(c.Workdir, 0o700); err != nil {
		return err
	}
	// kwokctl names its serving certificate's addresses only in its configuration file.
	config := c.kwokctlConfig()
	if err := os.WriteFile(config, []byte(fmt.Sprintf(`apiVersion: config.kwok.x-k8s.io/v1alpha1
kind: KwokctlConfiguration
options:
  kubeApiserverCertSANs: [%q, %q]
`, p.HostIP(), p.APIServiceIP())), 0o600); err != nil {
		return err
	}
	args := append([]string{
		"--config", config,
		// Pods reach the API server through the kubernetes Service, whose endpoint is this.
		"--extra-args", "kube-apiserver=advertise-address=" + p.HostIP().String(),
		"--extra-args", "kube-apiserver=service-cluster-ip-range=" + p.ServiceCIDR().String(),
		// The API server reaches a webhook's Service at a pod's address, which the machine routes
		// to the nodes, rather than at its Service address, which only the nodes' kube-proxy
		// translates (package doc).
		"--extra-args", "kube-apiserver=enable-aggregator-routing=true",
		// The machine does not resolve the nodes' names.
		"--extra-args", "kube-apiserver=kubelet-preferred-address-types=InternalIP",
		// kwokctl slows the node lifecycle controller down for kwok's nodes (a node NotReady
		// after 3m20s); real nodes get Kubernetes' own defaults, as on a production cluster.
		"--extra-args", "kube-controller-manager=node-monitor-period=5s",
		"--extra-args", "kube-controller-manager=node-monitor-grace-period=50s",
	}, extraArgs...)
	if err := c.create(ctx, args); err != nil {
		return err
	}
	state := nodesState{Block: p.Block}
	if state.RunCgroup, err = realnode.RunCgroup(c.Name); err != nil {
		return err
	}
	state.MadeCgroups, err = realnode.MakeRunCgroup(state.RunCgroup)
	if err := errors.Join(err, c.writeState(state)); err != nil {
		return err
	}
	if err := p.SetUpHost(c.RealNodes); err != nil {
		return err
	}
	if err := c.startNodes(ctx, state); err != nil {
		return err
	}
	return c.installDNS(ctx, p)
}

func (c *Cluster) writeState(state nodesState) error {
	content, err := json.Marshal(state)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(c.nodesDir(), 0o700); err != nil {
		return err
	}
	return os.WriteFile(c.stateFile(), content, 0o600)
}

// kwokctlConfig is the configuration file kwokctl creates a cluster with real nodes from.
func (c *Cluster) kwokctlConfig() string {
	return filepath.Join(c.Workdir, c.Name+"-kwokctl.yaml")
}

// nodeSpecs are the cluster's real nodes.
func (c *Cluster) nodeSpecs(state nodesState) ([]*realnode.Spec, error) {
	p := realnode.Plan{Block: state.Block}
	kubeconfig, err := clientcmd.LoadFromFile(c.Kubeconfig())
	if err != nil {
		return nil, err
	}
	ctx := kubeconfig.Contexts[kubeconfig.CurrentContext]
	if ctx == nil {
		return nil, fmt.Errorf("%s has no current context", c.Kubeconfig())
	}
	server, err := url.Parse(kubeconfig.Clusters[ctx.Cluster].Server)
	if err != nil {
		return nil, err
	}
	server.Host = p.HostIP().String() + ":" + server.Port()
	pki := filepath.Join(c.Workdir, "clusters", c.Name, "pki")
	specs := make([]*realnode.Spec, c.RealNodes)
	for i := range specs {
		name := fmt.Sprintf("node-%d", i)
		specs[i] = &realnode.Spec{
			Name: name, Index: i, Plan: p, Nodes: c.RealNodes,
			Dir:       filepath.Join(c.nodesDir(), name),
			BinDir:    c.BinDir,
			APIServer: server.String(),
			// kwokctl's one certificate, for every component: the nodes authenticate as the
			// cluster's admin (package doc).
			CAFile: filepath.Join(pki, "ca.crt"), CertFile: filepath.Join(pki, "admin.crt"), KeyFile: filepath.Join(pki, "admin.key"),
			CgroupRoot:   filepath.Join(state.RunCgroup, name),
			Labels:       map[string]string{corev1.LabelTopologyZone: Zones[i%len(Zones)]},
			Images:       c.Images,
			SandboxImage: SandboxImage,
		}
		if i >= c.RealNodes-c.IsolatedNodes {
			specs[i].Labels[IsolatedTaint.Key] = IsolatedTaint.Value
			specs[i].Taints = []corev1.Taint{IsolatedTaint}
		}
	}
	return specs, nil
}

// IsolatedTaint is the taint of the cluster's IsolatedNodes, which carry it as a label too: a pod
// that should run there tolerates it and selects the label.
var IsolatedTaint = corev1.Taint{Key: "e2e.cache.example.com/isolated", Value: "true", Effect: corev1.TaintEffectNoSchedule}

// startNodes starts every real node that does not run, and waits until all are Ready.
func (c *Cluster) startNodes(ctx context.Context, state nodesState) error {
	specs, err := c.nodeSpecs(state)
	if err != nil {
		return err
	}
	var stopped []*realnode.Spec
	for _, spec := range specs {
		if !spec.Running() {
			stopped = append(stopped, spec)
		}
	}
	if err := realnode.CheckInotifyRoom(len(stopped)); err != nil {
		return err
	}
	for _, spec := range stopped {
		// What a node that died left (its containers, its link) goes first: a new one could not
		// see it.
		if err := spec.Stop(ctx); err != nil {
			return err
		}
		if _, err := realnode.Start(spec, c.NodeBinary); err != nil {
			return err
		}
	}
	// The kubelet registers its Node some seconds after it starts.
	wait, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var registered []string
	for {
		out, err := c.KubectlOutput(wait, "get", "nodes", "-l", "!type", "-o", "jsonpath={.items[*].metadata.name}")
		if registered = strings.Fields(out); err == nil && len(registered) == len(specs) {
			break
		}
		select {
		case <-wait.Done():
			return fmt.Errorf("the real nodes did not register (%d of %d did: %v): %w%s", len(registered), len(specs), registered, wait.Err(),
				unregisteredLogs(specs, registered))
		case <-time.After(time.Second):
		}
	}
	return c.Kubectl(wait, "wait", "node", "-l", "!type", "--for=condition=Ready", "--timeout=3m")
}

// unregisteredLogs are the last lines of the logs of the nodes that did not register, for the
// error that says so: the logs are in the run's directory, which a failed set-up removes.
func unregisteredLogs(specs []*realnode.Spec, registered []string) string {
	var b strings.Builder
	for _, spec := range specs {
		if slices.Contains(registered, spec.Name) {
			continue
		}
		for _, name := range []string{"node.log", "kubelet.log", "containerd.log"} {
			log, err := os.ReadFile(filepath.Join(spec.Dir, "logs", name))
			if err != nil {
				continue
			}
			lines := strings.Split(strings.TrimSpace(string(log)), "\n")
			fmt.Fprintf(&b, "\n%s's %s, last lines:\n  %s", spec.Name, name, strings.Join(lines[max(len(lines)-5, 0):], "\n  "))
		}
	}
	return b.String()
}

// restartNodes starts the real nodes that do not run, after the machine lost the cluster's
// network (a reboot) or the nodes (make local-cluster-down of a cluster it did not fully make).
func (c *Cluster) restartNodes(ctx context.Context, state nodesState) error {
	p := realnode.Plan{Block: state.Block}
	if !p.HostSetUp() {
		if err := p.Reclaim(); err != nil {
			return err
		}
		if err := p.SetUpHost(c.RealNodes); err != nil {
			return err
		}
	}
	return c.startNodes(ctx, state)
}

// stopNodes stops every real node, its containers too, removes their cgroups and gives the
// network block back.
func (c *Cluster) stopNodes(ctx context.Context) error {
	state, ok, err := c.state()
	if err != nil || !ok {
		return err
	}
	specs, err := c.runningSpecs()
	if err != nil {
		return err
	}
	var errs []error
	for _, spec := range specs {
		errs = append(errs, spec.Stop(ctx))
	}
	errs = append(errs, realnode.RemoveCgroup(ctx, state.RunCgroup), realnode.RemoveMade(state.MadeCgroups))
	if err := os.Remove(c.kwokctlConfig()); err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	errs = append(errs, realnode.Plan{Block: state.Block}.TearDownHost())
	if err := errors.Join(errs...); err != nil {
		return err
	}
	// Done: a second delete must not take the block, which another cluster may have claimed by
	// then, for this one's.
	return os.Remove(c.stateFile())
}

// SignalContainer sends sig to every process of a container running on one of the real nodes,
// by the container ID its pod's status gives (containerd://ID): what a crash, or the kernel's OOM
// killer, does to it. It fails if no node runs the container.
func (c *Cluster) SignalContainer(containerID string, sig syscall.Signal) error {
	pids, err := c.ContainerProcesses(containerID)
	if err != nil {
		return err
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
	}
	return nil
}

// ContainerProcesses lists the processes of a container running on one of the real nodes, by the
// container ID its pod's status gives (containerd://ID), by process ID: a measurement reads their
// memory from /proc, as the kubelet's cAdvisor would. It fails if no node runs the container.
func (c *Cluster) ContainerProcesses(containerID string) ([]int, error) {
	var pids []int
	err := c.onContainersNode(containerID, func(spec *realnode.Spec, id string) (found bool, err error) {
		pids, err = spec.ContainerProcesses(id)
		return len(pids) > 0, err
	})
	slices.Sort(pids)
	return pids, err
}

// ContainerMemoryPeak is the most memory a container running on one of the real nodes has used,
// as its memory cgroup counts it against its limit, by the container ID its pod's status gives
// (containerd://ID). It fails if no node runs the container.
func (c *Cluster) ContainerMemoryPeak(containerID string) (int64, error) {
	var peak int64
	err := c.onContainersNode(containerID, func(spec *realnode.Spec, id string) (found bool, err error) {
		peak, found, err = spec.ContainerMemoryPeak(id)
		return found, err
	})
	return peak, err
}

// onContainersNode calls look with each real node and the container's ID without its runtime's
// prefix until look finds the container there, and fails if no node has it.
func (c *Cluster) onContainersNode(containerID string, look func(spec *realnode.Spec, id string) (found bool, err error)) error {
	_, id, ok := strings.Cut(containerID, "://")
	if !ok {
		return fmt.Errorf("container ID %q has no runtime prefix", containerID)
	}
	specs, err := c.runningSpecs()
	if err != nil {
		return err
	}
	for _, spec := range specs {
		found, err := look(spec, id)
		if err != nil || found {
			return err
		}
	}
	return fmt.Errorf("no real node of cluster %s runs container %s", c.Name, containerID)
}

// SignalNodeDaemon sends sig to a program of the named real node (kubelet, containerd,
// kube-proxy): SIGSTOP to its kubelet makes a node that stops reporting, NotReady once the
// control plane's grace period is past, while its containers run on; SIGCONT brings it back.
func (c *Cluster) SignalNodeDaemon(node, daemon string, sig syscall.Signal) error {
	specs, err := c.runningSpecs()
	if err != nil {
		return err
	}
	i := slices.IndexFunc(specs, func(spec *realnode.Spec) bool { return spec.Name == node })
	if i < 0 {
		return fmt.Errorf("cluster %s has no real node %s", c.Name, node)
	}
	return specs[i].SignalDaemon(daemon, sig)
}

// runningSpecs are the real nodes as they were started.
func (c *Cluster) runningSpecs() ([]*realnode.Spec, error) {
	entries, err := os.ReadDir(c.nodesDir())
	if err != nil {
		return nil, err
	}
	var specs []*realnode.Spec
	for _, entry := range entries {
		if !entry.IsDir() {
			continue
		}
		spec, err := realnode.ReadSpec(filepath.Join(c.nodesDir(), entry.Name(), "spec.json"))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		specs = append(specs, spec)
	}
	return specs, nil
}
