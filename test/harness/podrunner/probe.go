package podrunner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// waitAccepting returns once the container's server accepts connections on its first port, or
// its process has exited; at once if it declares no port.
func (c *container) waitAccepting(ctx context.Context, p *process) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for c.port != 0 && p.running() {
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(c.ip, strconv.Itoa(int(c.port))), time.Second); err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-p.exited:
		case <-tick.C:
		}
	}
}

// probe runs one probe of a container: a TCP connection to one of its ports, or a command of its
// image, put on the pod's IP as the runner puts its programs (images). A container with no
// probe passes.
func (r *Runner) probe(ctx context.Context, c *container, probe *corev1.Probe) (bool, error) {
	timeout := time.Duration(max(probe.TimeoutSeconds, 1)) * time.Second
	switch {
	case probe.ProbeHandler == (corev1.ProbeHandler{}):
		return true, nil
	case probe.TCPSocket != nil:
		port, err := c.portOf(probe.TCPSocket.Port.String())
		if err != nil {
			return false, err
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(c.ip, strconv.Itoa(int(port))), timeout)
		if err != nil {
			return false, err
		}
		return true, conn.Close()
	case probe.Exec == nil:
		return false, errors.New("the runner runs only probes that exec a command or open a TCP connection")
	}
	if _, err := r.execIn(ctx, c, probe.Exec.Command, timeout); err != nil {
		return false, err
	}
	return true, nil
}

// execIn runs a command of the container's image, put on the pod's IP as the runner puts its
// programs (images), as the kubelet execs a probe's or a hook's command in the container, and
// returns its output.
func (r *Runner) execIn(ctx context.Context, c *container, command []string, timeout time.Duration) ([]byte, error) {
	binary, args, err := r.command(c.image, c.ip, onHostPaths(command, c.mounts))
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Dir, cmd.Env = c.dir, c.env // the container's, as the kubelet execs a command in the container
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%w: %s", err, out)
	}
	return out, nil
}

// portOf is the container's port that a probe names, by name or by number.
func (c *container) portOf(port string) (int32, error) {
	if n, err := strconv.ParseInt(port, 10, 32); err == nil {
		return int32(n), nil
	}
	if n, ok := c.ports[port]; ok {
		return n, nil
	}
	return 0, fmt.Errorf("the container has no port named %q", port)
}
