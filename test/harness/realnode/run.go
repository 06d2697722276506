package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Run is a node: containerd, the kubelet and kube-proxy, in the network and mount namespaces
// that Start made for it, until ctx is done. It first makes those namespaces the node's own:
// its /run, /var/lib and /var/log, files in place of the kernel settings the kubelet would
// change, its network once its link arrives, and its cgroup; what the node's programs do then
// stays inside. Its containers outlive it, as a node's outlive a kubelet's restart; Stop ends
// them.
func Run(ctx context.Context, spec *Spec) error {
	if err := mountOwnDirs(spec); err != nil {
		return fmt.Errorf("mounts: %w", err)
	}
	if err := joinCgroup(filepath.Join(spec.CgroupRoot, "system")); err != nil {
		return fmt.Errorf("cgroup: %w", err)
	}
	if err := configureNetwork(ctx, spec); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := writeConfigs(spec); err != nil {
		return err
	}
	exited := make(chan error, 3)
	containerd, err := spec.daemon("containerd", exited, "--config", spec.file("containerd.toml"))
	if err != nil {
		return err
	}
	defer containerd.stop()
	if err := waitForSocket(ctx, containerdSocket, exited); err != nil {
		return err
	}
	for _, archive := range spec.Images {
		if err := spec.command("ctr", "--address", containerdSocket, "--namespace", "k8s.io", "images", "import", archive).Run(); err != nil {
			return fmt.Errorf("importing %s: %w", archive, err)
		}
	}
	kubelet, err := spec.daemon("kubelet", exited, "--config", spec.file("kubelet.yaml"), "--kubeconfig", spec.file("kubeconfig"),
		"--hostname-override", spec.Name, "--node-ip", spec.NodeIP(), "--node-labels", spec.labels(), "--v", "1")
	if err != nil {
		return err
	}
	defer kubelet.stop()
	proxy, err := spec.daemon("kube-proxy", exited, "--config", spec.file("kube-proxy.yaml"), "--v", "1")
	if err != nil {
		return err
	}
	defer proxy.stop()
	select {
	case <-ctx.Done():
		return nil
	case err := <-exited:
		return err
	}
}

// kernelTunables are the settings the kubelet sets at start when they differ from what it
// wants: they are the machine's, not a network namespace's, so the node gets files of its own in
// their place.
var kernelTunables = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

// mountOwnDirs gives the node its own /run (a tmpfs), /var/lib and /var/log (directories of its
// own), and files in place of kernelTunables, in its mount namespace, which shares nothing with
// the machine's.
func mountOwnDirs(spec *Spec) error {
	if err := syscall.Mount("", "/", "", syscall.MS_REC|syscall.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making / private: %w", err)
	}
	if err := syscall.Mount("tmpfs", "/run", "tmpfs", 0, "mode=0755"); err != nil {
		return fmt.Errorf("/run: %w", err)
	}
	for _, dir := range []string{"lib", "log"} {
		own := spec.file("var-" + dir)
		if err := os.MkdirAll(own, 0o755); err != nil {
			return err
		}
		if err := syscall.Mount(own, "/var/"+dir, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("/var/%s: %w", dir, err)
		}
	}
	for _, tunable := range kernelTunables {
		proc := filepath.Join("/proc/sys", tunable)
		value, err := os.ReadFile(proc)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return err
		}
		own := spec.file(filepath.Join("sysctl", strings.ReplaceAll(tunable, "/", ".")))
		if err := os.MkdirAll(filepath.Dir(own), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(own, value, 0o644); err != nil {
			return err
		}
		if err := syscall.Mount(own, proc, "", syscall.MS_BIND, ""); err != nil {
			return fmt.Errorf("%s: %w", proc, err)
		}
	}
	return nil
}

// configureNetwork waits for the link Start moves into the node's network namespace (eth0), and
// gives it the node's address and routes to the other nodes' pods; the node forwards between its
// pods and that link, in its own namespace.
func configureNetwork(ctx context.Context, spec *Spec) error {
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if _, err := net.InterfaceByName("eth0"); err == nil {
			break
		}
		select {
		case <-wait.Done():
			return fmt.Errorf("no eth0 came: %w", wait.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	commands := [][]string{
		{"link", "set", "lo", "up"},
		{"addr", "add", fmt.Sprintf("%s/%d", spec.NodeIP(), spec.Plan.LinkPrefix().Bits()), "dev", "eth0"},
		{"link", "set", "eth0", "up"},
	}
	for j := range spec.Nodes {
		if j != spec.Index {
			commands = append(commands, []string{"route", "add", spec.Plan.PodCIDR(j).String(), "via", spec.Plan.NodeIP(j).String()})
		}
	}
	for _, args := range commands {
		if err := ip(args...); err != nil {
			return err
		}
	}
	// The network namespace's own setting, not the machine's.
	return os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644)
}

func writeConfigs(spec *Spec) error {
	cni, err := spec.cniConfig()
	if err != nil {
		return err
	}
	kubeconfig, err := spec.kubeconfig()
	if err != nil {
		return err
	}
	kubelet, err := spec.kubeletConfig()
	if err != nil {
		return err
	}
	proxy, err := spec.kubeProxyConfig()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(cniConfDir, 0o755); err != nil {
		return err
	}
	files := map[string][]byte{
		spec.file("containerd.toml"):                            []byte(spec.containerdConfig()),
		filepath.Join(cniConfDir, "10-cache-operator.conflist"): cni,
		spec.file("kubeconfig"):                                 kubeconfig,
		spec.file("kubelet.yaml"):                               kubelet,
		spec.file("kube-proxy.yaml"):                            proxy,
		spec.file("resolv.conf"):                                nil,
	}
	for path, content := range files {
		if err := os.WriteFile(path, content, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// command is one of the toolchain's programs, with the toolchain's binaries first on its PATH
// (containerd finds its shim there, kube-proxy nft), and nothing else of the environment it was
// started from: a proxy set there, say, would take the node's requests where the node cannot go.
func (spec *Spec) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(spec.BinDir, name), args...)
	cmd.Env = []string{"PATH=" + spec.BinDir + ":/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd
}

// daemon is one of the node's programs, running.
type daemon struct {
	cmd  *exec.Cmd
	done chan struct{}
}

// daemon starts one of the node's programs with its output in the node's logs directory; when it
// exits, it says so on exited.
func (spec *Spec) daemon(name string, exited chan<- error, args ...string) (*daemon, error) {
	if err := os.MkdirAll(spec.file("logs"), 0o755); err != nil {
		return nil, err
	}
	log, err := os.OpenFile(spec.file(filepath.Join("logs", name+".log")), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close() //nolint:errcheck // the child has its own copy
	d := &daemon{cmd: spec.command(name, args...), done: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = log, log
	if err := d.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	go func() {
		err := d.cmd.Wait()
		close(d.done)
		exited <- fmt.Errorf("%s exited: %w", name, err)
	}()
	return d, nil
}

// stop asks the daemon to stop, and kills it if it has not within a few seconds.
func (d *daemon) stop() {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(10 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
}

func waitForSocket(ctx context.Context, path string, exited <-chan error) error {
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if conn, err := net.Dial("unix", path); err == nil {
			return conn.Close()
		}
		select {
		case err := <-exited:
			return err
		case <-wait.Done():
			return fmt.Errorf("%s: %w", path, wait.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ReadSpec reads a node's Spec from the file Start wrote.
func ReadSpec(path string) (*Spec, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var spec Spec
	if err := json.Unmarshal(content, &spec); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &spec, nil
}

// pid reads a process ID from a file.
func pid(path string) (int, error) {
	content, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(content)))
}
