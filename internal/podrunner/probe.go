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

// waitAccepting returns once the server accepts connections on its port, or its process has
// exited.
func (s *server) waitAccepting(ctx context.Context, p *process) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for p.running() {
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(s.ip, strconv.Itoa(int(s.port))), time.Second); err == nil {
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

// probe runs one probe of the pod's container: a TCP connection to one of its ports, or a
// command, of which the runner runs valkey-cli only. In a pod the command would run in the pod's
// network namespace, where valkey-cli's default host, 127.0.0.1, is the server; here the runner
// tells valkey-cli the pod's IP instead. A pod with no probe passes.
func (r *Runner) probe(ctx context.Context, s *server, probe *corev1.Probe) (bool, error) {
	timeout := time.Duration(max(probe.TimeoutSeconds, 1)) * time.Second
	switch {
	case probe.ProbeHandler == (corev1.ProbeHandler{}):
		return true, nil
	case probe.TCPSocket != nil:
		port, err := s.portOf(probe.TCPSocket.Port.String())
		if err != nil {
			return false, err
		}
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(s.ip, strconv.Itoa(int(port))), timeout)
		if err != nil {
			return false, err
		}
		return true, conn.Close()
	case probe.Exec == nil:
		return false, errors.New("the runner runs only probes that exec a command or open a TCP connection")
	}
	binary, err := r.binary(s.image, probe.Exec.Command)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	args := append([]string{"-h", s.ip}, probe.Exec.Command[1:]...)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = r.processEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("%w: %s", err, out)
	}
	return true, nil
}

// portOf is the container's port that a probe names, by name or by number.
func (s *server) portOf(port string) (int32, error) {
	if n, err := strconv.ParseInt(port, 10, 32); err == nil {
		return int32(n), nil
	}
	if n, ok := s.ports[port]; ok {
		return n, nil
	}
	return 0, fmt.Errorf("the container has no port named %q", port)
}
