package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// ClaimBlock claims a free block of the local clusters' range for a new cluster, by creating
// the block's bridge: the kernel lets one process create it, so two clusters made at once never
// share a block. SetUpHost finishes what the machine needs; TearDownHost gives the block back.
func ClaimBlock() (Plan, error) {
	for block := range Blocks {
		p := Plan{Block: block}
		err := ip("link", "add", p.Bridge(), "type", "bridge")
		if err == nil {
			return p, nil
		}
		if !exists(p.Bridge()) {
			return Plan{}, err // not taken: failed
		}
	}
	return Plan{}, fmt.Errorf("all %d blocks of %s are taken by other local clusters (ip link show type bridge)", Blocks, Range)
}

// Reclaim claims the block again, for a cluster that had it before the machine lost its bridge
// (a reboot).
func (p Plan) Reclaim() error {
	return ip("link", "add", p.Bridge(), "type", "bridge")
}

// HostSetUp reports whether the machine has the block's bridge.
func (p Plan) HostSetUp() bool { return exists(p.Bridge()) }

// SetUpHost gives the machine its part of the block's network: its address on the bridge, the
// routes to the nodes' pods through the nodes, and before them a blackhole route for the whole
// local range, so that nothing for it ever leaves the machine, whatever else is up or down. No
// forwarding is needed on the machine: the nodes forward, in namespaces of their own.
func (p Plan) SetUpHost(nodes int) error {
	commands := [][]string{
		// Replaced, not added: one left by an earlier set-up of the block serves as well.
		{"route", "replace", "blackhole", Range, "metric", strconv.Itoa(p.BlackholeMetric())},
	}
	if err := disableIPv6(p.Bridge()); err != nil {
		return err
	}
	commands = append(commands,
		[]string{"addr", "add", fmt.Sprintf("%s/%d", p.HostIP(), p.LinkPrefix().Bits()), "dev", p.Bridge()},
		[]string{"link", "set", p.Bridge(), "up"},
	)
	for i := range nodes {
		commands = append(commands, []string{"route", "add", p.PodCIDR(i).String(), "via", p.NodeIP(i).String(), "dev", p.Bridge()})
	}
	for _, args := range commands {
		if err := ip(args...); err != nil {
			return err
		}
	}
	return nil
}

// TearDownHost removes what ClaimBlock and SetUpHost made on the machine: the bridge (and with it
// its address and routes) and the blackhole route. What is gone already is no error.
func (p Plan) TearDownHost() error {
	var errs []error
	if exists(p.Bridge()) {
		errs = append(errs, ip("link", "del", p.Bridge()))
	}
	if p.hasBlackhole() {
		errs = append(errs, ip("route", "del", "blackhole", Range, "metric", strconv.Itoa(p.BlackholeMetric())))
	}
	return errors.Join(errs...)
}

// hasBlackhole reports whether the machine has the block's blackhole route.
func (p Plan) hasBlackhole() bool {
	out, err := exec.Command("ip", "route", "show", "type", "blackhole", Range).Output()
	if err != nil {
		return true // try to delete it, and say why that fails
	}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if i := slices.Index(fields, "metric"); i >= 0 && i+1 < len(fields) && fields[i+1] == strconv.Itoa(p.BlackholeMetric()) {
			return true
		}
	}
	return false
}

// Start starts the node spec describes: binary (a program that calls Run for `node SPECFILE`)
// in a network and a mount namespace of their own and a session of its own, so that it outlives
// whatever started it, as a node outlives a client; then the link between the machine's bridge
// and the node, as the node's eth0. It returns the node's process ID.
func Start(spec *Spec, binary string) (int, error) {
	if err := os.MkdirAll(spec.file("logs"), 0o755); err != nil {
		return 0, err
	}
	content, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(spec.file("spec.json"), content, 0o600); err != nil {
		return 0, err
	}
	log, err := os.OpenFile(spec.file(filepath.Join("logs", "node.log")), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return 0, err
	}
	defer log.Close() //nolint:errcheck // the child has its own copy
	cmd := exec.Command(binary, "node", spec.file("spec.json"))
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
	if err := cmd.Start(); err != nil {
		return 0, fmt.Errorf("starting node %s: %w", spec.Name, err)
	}
	pid := cmd.Process.Pid
	if err := spec.removeHostLink(); err != nil {
		return pid, err
	}
	if err := os.WriteFile(spec.file("node.pid"), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		return pid, err
	}
	if err := cmd.Process.Release(); err != nil {
		return pid, err
	}
	link := spec.hostLink()
	if err := ip("link", "add", link, "type", "veth", "peer", "name", "eth0", "netns", strconv.Itoa(pid)); err != nil {
		return pid, err
	}
	if err := disableIPv6(link); err != nil {
		return pid, err
	}
	return pid, ip("link", "set", link, "master", spec.Plan.Bridge(), "up")
}

// Running reports whether the node's process runs: the process its node.pid names is still the
// node of this spec, not another that took its ID after a reboot, nor a zombie.
func (spec *Spec) Running() bool {
	p, err := pid(spec.file("node.pid"))
	if err != nil {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p))
	if err != nil || !strings.Contains(string(cmdline), "\x00"+spec.file("spec.json")+"\x00") {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
	return err == nil && !strings.Contains(string(stat), ") Z ")
}

// Stop ends the node and everything it started, its containers too, and removes its cgroups:
// what a machine's power going off does. Its directory stays.
func (spec *Spec) Stop(ctx context.Context) error {
	if p, err := pid(spec.file("node.pid")); err == nil && spec.Running() {
		// Before it joins its cgroup, the node is only there.
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	return errors.Join(RemoveCgroup(ctx, spec.CgroupRoot), spec.removeHostLink())
}

// hostLink is the machine's end of the link to the node.
func (spec *Spec) hostLink() string { return fmt.Sprintf("%sn%d", spec.Plan.Bridge(), spec.Index) }

// removeHostLink removes the link to the node, both its ends: the kernel removes it by itself
// only once it has finished tearing a stopped node's network namespace down, some time later.
func (spec *Spec) removeHostLink() error {
	if err := ip("link", "del", spec.hostLink()); err != nil && exists(spec.hostLink()) {
		return err
	}
	// Gone, whether by this or by the kernel.
	return nil
}

// disableIPv6 keeps an interface of the local cluster's from speaking IPv6: the link-local
// addresses and router solicitations a new interface starts with serve nothing here.
func disableIPv6(link string) error {
	err := os.WriteFile(filepath.Join("/proc/sys/net/ipv6/conf", link, "disable_ipv6"), []byte("1"), 0o644)
	if errors.Is(err, os.ErrNotExist) {
		return nil // a machine without IPv6
	}
	return err
}

func exists(link string) bool {
	_, err := os.Stat(filepath.Join("/sys/class/net", link))
	return err == nil
}

func ip(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %v: %w: %s", args, err, out)
	}
	return nil
}
