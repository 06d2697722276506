package podrunner

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// container is one container of a pod: its command line on the pod's IP, in the pod's data
// directory, and what the runner knows of its runs.
type container struct {
	name, image string
	ip          string
	// port is the container's first port, where its server accepts connections (0 if it
	// declares none); ports are its named ports, for probes that name one.
	port  int32
	ports map[string]int32
	// binary and args are the command line, expanded and on the pod's IP; env is its
	// environment; dir is its working directory; refusal, when set, is why the runner cannot
	// run it.
	binary  string
	args    []string
	env     []string
	dir     string
	logPath string
	refusal string
	// configError, when set, is why the container's configuration cannot be made (a Secret it
	// takes a variable from is missing): it waits, as the kubelet's CreateContainerConfigError.
	configError string
	// terminationLog is where the container's termination message file is, here.
	terminationLog string
	// mounts are where the container sees its volumes, and the directories here that stand for
	// them: paths under them in its command line and its probes' and hook's are moved there.
	mounts []mount

	// pod and spec are the pod and the container's spec as the pod started, from which a
	// restart makes its environment again (refreshEnv).
	pod  *corev1.Pod
	spec *corev1.Container

	readiness, liveness *corev1.Probe
	// preStop is the command the container's preStop hook execs before it is stopped, if any.
	preStop []string

	// Guarded by the runner's lock: the current process (nil for a container that has not
	// started, or could not: startErr says why), how often it was restarted, how its last run
	// and the run before ended, its current state as reported, and whether it is ready.
	proc           *process
	startErr       string
	restarts       int32
	last, previous *corev1.ContainerStateTerminated
	state          corev1.ContainerState
	ready          bool
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

// newContainer prepares one container of the pod, or, with refusal set, says why it cannot run:
// refused is the pod's own reason, if any.
func (r *Runner) newContainer(pod *corev1.Pod, b *sandbox, c *corev1.Container, sources envSources, refused error) *container {
	ct := &container{
		name: c.Name, image: c.Image, ip: b.ip, ports: map[string]int32{},
		dir: b.dataDir(), logPath: filepath.Join(b.dir, c.Name+".log"),
		terminationLog: filepath.Join(b.dir, c.Name+".termination-log"),
		readiness:      c.ReadinessProbe, liveness: c.LivenessProbe, pod: pod, spec: c, mounts: mountsOf(c, b.volumes),
		state: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "PodInitializing"}},
	}
	if len(c.Ports) > 0 {
		ct.port = c.Ports[0].ContainerPort
	}
	for _, p := range c.Ports {
		if p.Name != "" {
			ct.ports[p.Name] = p.ContainerPort
		}
	}
	if err := ct.prepare(r, pod, c, sources, refused); errors.As(err, new(configError)) {
		ct.configError = err.Error()
	} else if err != nil {
		ct.refusal = fmt.Sprintf("container %s: %v", c.Name, err)
	}
	return ct
}

func (ct *container) prepare(r *Runner, pod *corev1.Pod, c *corev1.Container, sources envSources, refused error) error {
	if refused != nil {
		return refused
	}
	if hook := c.Lifecycle; hook != nil {
		switch {
		case hook.PostStart != nil:
			return errors.New("it has a postStart hook, which the runner does not run")
		case hook.PreStop != nil && hook.PreStop.Exec == nil:
			return errors.New("its preStop hook does not exec a command, the only kind the runner runs")
		case hook.PreStop != nil:
			ct.preStop = hook.PreStop.Exec.Command
		}
	}
	if c.WorkingDir != "" && c.WorkingDir != dataMountPath {
		return fmt.Errorf("it works in %s: the runner knows only the image's own %s", c.WorkingDir, dataMountPath)
	}
	env, err := containerEnv(pod, c, sources)
	if err != nil {
		return err
	}
	ct.binary, ct.args, err = r.command(c.Image, ct.ip, onHostPaths(expandAll(commandLine(c), env), ct.mounts))
	if err != nil {
		return err
	}
	// The kubelet mounts the termination message file at its path in the container; here the
	// path is given in the arguments, and stands for the file in the pod's directory.
	if path := c.TerminationMessagePath; path != "" {
		for i, arg := range ct.args {
			ct.args[i] = strings.ReplaceAll(arg, path, ct.terminationLog)
		}
	}
	ct.env = r.processEnv(ct.ip)
	for name, value := range env {
		ct.env = append(ct.env, name+"="+value)
	}
	return nil
}

// launch starts a run of the container in the pod's data directory, which a restart keeps as the
// kubelet keeps an emptyDir: the process sees what the previous run, and the pod's other
// containers, left there. Reaping the process counts in reaping, which Run waits on. Call it
// with the runner's lock held.
func (ct *container) launch(reaping *sync.WaitGroup) (*process, error) {
	if ct.refusal != "" {
		ct.proc, ct.startErr = nil, ct.refusal
		return nil, fmt.Errorf("%s", ct.refusal)
	}
	logFile, err := os.OpenFile(ct.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		ct.proc, ct.startErr = nil, err.Error()
		return nil, err
	}
	defer logFile.Close() //nolint:errcheck // the child has its own copy
	cmd := exec.Command(ct.binary, ct.args...)
	cmd.Dir, cmd.Env = ct.dir, ct.env
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// A runner that dies, even by SIGKILL, takes its processes with it. (Linux sends the signal
	// when the thread that started the child ends; Go ends threads only with the process.)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		ct.proc, ct.startErr = nil, err.Error()
		return nil, err
	}
	p := &process{cmd: cmd, exited: make(chan struct{}), started: time.Now()}
	reaping.Add(1)
	go func() {
		defer reaping.Done()
		p.exitErr = cmd.Wait()
		close(p.exited)
	}()
	ct.proc = p
	ct.state = corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metaTime(p.started)}}
	return p, nil
}

// maxTerminationMessage is how much of a termination message file the kubelet reports.
const maxTerminationMessage = 4096

// terminationMessage is what the container's run wrote to its termination message file, as the
// kubelet reports it once the run ended; the file is emptied for the next run.
func (ct *container) terminationMessage() string {
	message, err := os.ReadFile(ct.terminationLog)
	if err != nil {
		return ""
	}
	_ = os.Remove(ct.terminationLog)
	return string(message[:min(len(message), maxTerminationMessage)])
}

// commandLine is what the container runs: its command and arguments; with no command, the
// arguments alone, since the Valkey image's entrypoint runs its arguments as a command.
func commandLine(c *corev1.Container) []string {
	return append(append([]string(nil), c.Command...), c.Args...)
}

// processEnv is the environment every process the runner starts for a pod whose IP is ip gets,
// before the container's own: the runner's PATH, which the toolchain's wrappers need, behind the
// toolchain's directory, where a container's shell finds the image's programs, and before that
// the pods' own valkey-cli (writePodPrograms), which the pod's IP tells its default host.
func (r *Runner) processEnv(ip string) []string {
	return []string{
		"PATH=" + strings.Join([]string{r.podPrograms(), r.BinDir, os.Getenv("PATH")}, string(os.PathListSeparator)),
		podIPVariable + "=" + ip,
	}
}

// podIPVariable is the environment variable in which the runner tells a pod's processes their
// pod's IP, for the pods' own programs.
const podIPVariable = "PODRUNNER_POD_IP"

// podPrograms is the directory of the pods' own programs.
func (r *Runner) podPrograms() string { return filepath.Join(r.Workdir, "pod-programs") }

// writePodPrograms writes the pods' own programs: a valkey-cli whose default host is its pod's
// IP, as 127.0.0.1 is in a pod's own network, for a container's or a hook's shell script that
// calls valkey-cli with no host (a host given on its command line comes later and wins).
func (r *Runner) writePodPrograms() error {
	if err := os.MkdirAll(r.podPrograms(), 0o755); err != nil {
		return err
	}
	cli := "#!/bin/sh\nexec " + filepath.Join(r.BinDir, "valkey-cli") + ` -h "$` + podIPVariable + `" "$@"` + "\n"
	return os.WriteFile(filepath.Join(r.podPrograms(), "valkey-cli"), []byte(cli), 0o755) //nolint:gosec // a program
}
