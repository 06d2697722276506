package podrunner

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// server is the process of one pod's Valkey container.
type server struct {
	pod           types.NamespacedName
	uid           types.UID
	containerName string
	image         string
	ip            string
	// port is the container's port, where the server accepts connections.
	port int32
	cmd  *exec.Cmd
	// exited is closed once the process has exited (at once for a server never started);
	// exitErr is then why.
	exited  chan struct{}
	exitErr error
	// terminating is set, under the runner's lock, once the pod's deletion was seen.
	terminating bool
	started     time.Time
}

func (s *server) running() bool {
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

func (s *server) kill() {
	if s.running() {
		_ = s.cmd.Process.Kill()
	}
}

// dataMountPath is where the Valkey image keeps its data, its working directory: the pod's
// data volume is mounted there, and the runner runs the server in the pod's own directory
// instead.
const dataMountPath = "/data"

// start starts the server of a pod that kwok has started: the container's command line as the
// pod spec has it, with the pod's IP to listen on and to connect from. Connections to other
// servers (the cluster bus) must leave from the pod's IP too, or the peers would see them come
// from 127.0.0.1.
// Reaping the process counts in reaping, which Run waits on.
func (r *Runner) start(pod *corev1.Pod, reaping *sync.WaitGroup) (*server, error) {
	if ip := net.ParseIP(pod.Status.PodIP); ip == nil || !ip.IsLoopback() {
		return nil, fmt.Errorf("the pod's IP %s is not a loopback address: a server behind it would be "+
			"reached off this machine (a cluster made before pods got loopback IPs? `make local-cluster-down`)", pod.Status.PodIP)
	}
	if n := len(pod.Spec.Containers); n != 1 {
		return nil, fmt.Errorf("the pod has %d containers: the runner runs pods of one Valkey container", n)
	}
	c := &pod.Spec.Containers[0]
	if len(c.Ports) == 0 {
		return nil, fmt.Errorf("container %s declares no port", c.Name)
	}
	if c.WorkingDir != "" && c.WorkingDir != dataMountPath {
		return nil, fmt.Errorf("container %s works in %s: the runner knows only the image's own %s", c.Name, c.WorkingDir, dataMountPath)
	}
	env, err := containerEnv(pod, c)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	argv := expandAll(commandLine(c), env)
	binary, err := r.binary(argv)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	ip := pod.Status.PodIP
	dataDir := filepath.Join(r.podDir(pod.UID), "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	logFile, err := os.Create(filepath.Join(r.podDir(pod.UID), "valkey.log"))
	if err != nil {
		return nil, err
	}
	defer logFile.Close() //nolint:errcheck // the child has its own copy

	args := append(argv[1:len(argv):len(argv)], "--bind", ip, "--bind-source-addr", ip)
	cmd := exec.Command(binary, args...)
	cmd.Dir = dataDir
	cmd.Env = toolchainEnv()
	for name, value := range env {
		cmd.Env = append(cmd.Env, name+"="+value)
	}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A runner that dies, even by SIGKILL, takes its servers with it. (Linux sends the signal
	// when the thread that started the child ends; Go ends threads only with the process.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &server{pod: podKey(pod), uid: pod.UID, containerName: c.Name, image: c.Image, ip: ip, port: c.Ports[0].ContainerPort, cmd: cmd, exited: make(chan struct{}), started: time.Now()}
	reaping.Add(1)
	go func() {
		defer reaping.Done()
		s.exitErr = cmd.Wait()
		close(s.exited)
	}()
	r.Log.Info("Started the pod's server", "pod", s.pod, "ip", ip, "args", args)
	return s, nil
}

// commandLine is what the container runs: its command and arguments; with no command, the
// arguments alone, since the Valkey image's entrypoint runs its arguments as a command.
func commandLine(c *corev1.Container) []string {
	return append(append([]string(nil), c.Command...), c.Args...)
}

// toolchainEnv is the environment every process the runner starts gets, before the container's
// own: the runner's PATH, which the toolchain's wrappers need.
func toolchainEnv() []string {
	return []string{"PATH=" + os.Getenv("PATH")}
}

// binary is the toolchain's executable that argv names.
func (r *Runner) binary(argv []string) (string, error) {
	if len(argv) == 0 {
		return "", errors.New("it has no command")
	}
	binary := filepath.Join(r.BinDir, filepath.Base(argv[0]))
	if _, err := os.Stat(binary); err != nil {
		return "", fmt.Errorf("it runs %q, which the toolchain does not have: %w", argv[0], err)
	}
	return binary, nil
}

// supervise runs the pod's readiness probe against its server and reports the result in the
// pod's status, until the server exits or the pod is deleted. A server that exits on its own
// fails the pod.
func (r *Runner) supervise(ctx context.Context, s *server, pod *corev1.Pod) {
	log := r.Log.WithValues("pod", s.pod)
	probe := pod.Spec.Containers[0].ReadinessProbe
	if probe == nil {
		probe = &corev1.Probe{}
	}
	// The first result is reported whatever the pod says: the pod may have been started by an
	// earlier runner, whose server died with it.
	reported, known, everReady := false, false, false
	successes, failures := 0, 0
	s.waitAccepting(ctx)
	for s.running() {
		ok, probeErr := r.probe(ctx, s, probe)
		if ok {
			successes, failures = successes+1, 0
		} else {
			successes, failures = 0, failures+1
		}
		ready := reported
		switch {
		case ok && successes >= int(max(probe.SuccessThreshold, 1)):
			ready = true
		case !ok && failures >= int(max(probe.FailureThreshold, 1)):
			ready = false
		}
		if (!known || ready != reported) && s.running() && !r.isTerminating(s) {
			if err := r.reportReady(ctx, s, ready); err != nil {
				log.Error(err, "Could not report readiness")
			} else {
				reported, known = ready, true
				log.Info("Reported the pod's readiness", "ready", ready, "probe", errString(probeErr))
			}
		}
		if reported && !everReady {
			everReady = true
			r.recordStartup(time.Since(s.started))
		}
		select {
		case <-ctx.Done():
			return
		case <-s.exited:
		case <-time.After(time.Duration(max(probe.PeriodSeconds, 1)) * time.Second):
		}
	}
	if r.isTerminating(s) || ctx.Err() != nil {
		return
	}
	log.Info("The pod's server exited", "err", errString(s.exitErr))
	if err := retry(ctx, func() error { return r.reportFailed(ctx, s) }); err != nil {
		log.Error(err, "Could not report the pod failed")
	}
}

// waitAccepting returns once the server accepts connections on its port, or has exited.
func (s *server) waitAccepting(ctx context.Context) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for s.running() {
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(s.ip, strconv.Itoa(int(s.port))), time.Second); err == nil {
			_ = conn.Close()
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-s.exited:
		case <-tick.C:
		}
	}
}

// probe runs the readiness probe's command. In a pod it would run in the pod's network
// namespace, where valkey-cli's default host, 127.0.0.1, is the server; here the runner tells
// valkey-cli the pod's IP instead.
func (r *Runner) probe(ctx context.Context, s *server, probe *corev1.Probe) (bool, error) {
	if probe.ProbeHandler == (corev1.ProbeHandler{}) {
		return true, nil // no probe: ready once started, as with the kubelet
	}
	if probe.Exec == nil || len(probe.Exec.Command) == 0 || filepath.Base(probe.Exec.Command[0]) != "valkey-cli" {
		return false, errors.New("the runner runs only readiness probes that exec valkey-cli")
	}
	binary, err := r.binary(probe.Exec.Command)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(max(probe.TimeoutSeconds, 1))*time.Second)
	defer cancel()
	args := append([]string{"-h", s.ip}, probe.Exec.Command[1:]...)
	cmd := exec.CommandContext(ctx, binary, args...)
	cmd.Env = toolchainEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("%w: %s", err, out)
	}
	return true, nil
}

// terminate stops a deleted pod's server as the kubelet would, SIGTERM and then SIGKILL after
// the grace period, and then completes the deletion.
func (r *Runner) terminate(ctx context.Context, s *server, grace time.Duration) {
	if s.running() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited:
		case <-time.After(grace):
			s.kill()
			<-s.exited
		case <-ctx.Done():
			return
		}
	}
	if err := retry(ctx, func() error { return r.completeDeletion(ctx, s) }); err != nil {
		r.Log.Error(err, "Could not complete the pod's deletion", "pod", s.pod)
		return
	}
	_ = os.RemoveAll(r.podDir(s.uid))
	r.Log.Info("Stopped the pod's server and completed its deletion", "pod", s.pod)
}

func (r *Runner) isTerminating(s *server) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.terminating
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
