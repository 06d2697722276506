package podrunner

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// server is one pod as the runner keeps it, from its start until the pod is gone: its sandbox
// (the IP and the directory that holds the data volume and the log), which lasts as long as the
// pod, and its container's current process, which a restart replaces in place.
type server struct {
	pod           types.NamespacedName
	uid           types.UID
	containerName string
	image         string
	ip            string
	// port is the container's first port, where the server accepts connections; ports are its
	// named ports, for probes that name one.
	port  int32
	ports map[string]int32
	// binary and args are the container's command line, expanded and with the pod's IP to
	// listen on; env is its environment; dataDir is its working directory.
	binary  string
	args    []string
	env     []string
	dataDir string
	logPath string

	// Guarded by the runner's lock: the current process (nil for a container that never
	// started, with startErr saying why), how often the container was restarted and how its last run ended, and whether
	// the pod's deletion was seen (terminating, with stopping closed).
	proc        *process
	startErr    string
	restarts    int32
	last        *corev1.ContainerStateTerminated
	terminating bool
	stopping    chan struct{}
}

// process is one run of a container.
type process struct {
	cmd *exec.Cmd
	// exited is closed once the process has exited; exitErr is then why.
	exited  chan struct{}
	exitErr error
	started time.Time
}

func (p *process) running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

func (p *process) kill() {
	if p.running() {
		_ = p.cmd.Process.Kill()
	}
}

// dataMountPath is where the Valkey image keeps its data, its working directory: the pod's
// data volume is mounted there, and the runner runs the server in the pod's own directory
// instead.
const dataMountPath = "/data"

// newServer prepares the sandbox of a pod that kwok has started: the container's command line as
// the pod spec has it, with the pod's IP to listen on and to connect from (connections to other
// servers, the cluster bus, must leave from the pod's IP, or the peers would see them come from
// 127.0.0.1), and the pod's directory. Its container is started by launch.
func (r *Runner) newServer(pod *corev1.Pod) (*server, error) {
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
	binary, err := r.binary(c.Image, argv)
	if err != nil {
		return nil, fmt.Errorf("container %s: %w", c.Name, err)
	}
	s := &server{
		pod: podKey(pod), uid: pod.UID, containerName: c.Name, image: c.Image,
		ip: pod.Status.PodIP, port: c.Ports[0].ContainerPort, ports: map[string]int32{},
		binary: binary,
		// Appended to the command line: a shell entrypoint passes its arguments on to the
		// server ("$@").
		args:     append(argv[1:len(argv):len(argv)], "--bind", pod.Status.PodIP, "--bind-source-addr", pod.Status.PodIP),
		env:      r.processEnv(),
		dataDir:  filepath.Join(r.podDir(pod.UID), "data"),
		logPath:  filepath.Join(r.podDir(pod.UID), "valkey.log"),
		stopping: make(chan struct{}),
	}
	for _, p := range c.Ports {
		if p.Name != "" {
			s.ports[p.Name] = p.ContainerPort
		}
	}
	for name, value := range env {
		s.env = append(s.env, name+"="+value)
	}
	if err := os.MkdirAll(s.dataDir, 0o700); err != nil {
		return nil, err
	}
	return s, nil
}

// launch starts a run of the server's container, in the pod's directory, which a restart keeps
// as the kubelet keeps an emptyDir: the process sees what the previous run left there. Reaping
// the process counts in reaping, which Run waits on. Call it with the runner's lock held.
func (s *server) launch(reaping *sync.WaitGroup) (*process, error) {
	logFile, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close() //nolint:errcheck // the child has its own copy
	cmd := exec.Command(s.binary, s.args...)
	cmd.Dir, cmd.Env = s.dataDir, s.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A runner that dies, even by SIGKILL, takes its servers with it. (Linux sends the signal
	// when the thread that started the child ends; Go ends threads only with the process.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &process{cmd: cmd, exited: make(chan struct{}), started: time.Now()}
	reaping.Add(1)
	go func() {
		defer reaping.Done()
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	s.proc = p
	return p, nil
}

// commandLine is what the container runs: its command and arguments; with no command, the
// arguments alone, since the Valkey image's entrypoint runs its arguments as a command.
func commandLine(c *corev1.Container) []string {
	return append(append([]string(nil), c.Command...), c.Args...)
}

// processEnv is the environment every process the runner starts gets, before the container's
// own: the runner's PATH, which the toolchain's wrappers need, behind the toolchain's directory,
// where a container's shell finds the image's programs.
func (r *Runner) processEnv() []string {
	return []string{"PATH=" + r.BinDir + string(os.PathListSeparator) + os.Getenv("PATH")}
}
