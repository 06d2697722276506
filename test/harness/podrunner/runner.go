// Package podrunner stands in for the kubelet's container runtime on a local cluster whose Valkey
// pods kwok leaves to it (localcluster.Cluster.RealValkey). For each such pod that kwok has given
// an IP, it runs the pod's containers' own command lines as real processes on the pod's loopback
// IP: valkey-server, valkey-cli, or the image's shell (sh -c), and the operator's own binary for
// a container of the operator's image (a backup's Job). It behaves like the kubelet in what the
// operator depends on:
//   - init containers run one after the other, each to completion, before the pod's containers
//     (the pod Pending and not Initialized meanwhile); one that fails is restarted with the
//     back-off below, or under restartPolicy Never fails the pod;
//   - the pod's containers run side by side, each restarted on its own; the pod is Ready when
//     every one is;
//   - a container that exits is restarted in place, as restartPolicy Always asks: same pod, same
//     IP, same data directory (the pod's emptyDir, shared by its containers), with restartCount
//     and lastState.terminated (reason, exit code) in the pod's status and the kubelet's back-off
//     between restarts (at once, then 10 s doubling to 5 min, reported as CrashLoopBackOff);
//     under Never, or OnFailure after an exit code 0, a container that ends stays ended, and once
//     none runs the pod ends, Succeeded if every container exited with 0, else Failed (so a Job's
//     pod completes or fails, and the Job with it); a pod is replaced only when it is deleted;
//   - the readiness probe decides a container's readiness (one without a probe is ready while it
//     runs), and the liveness probe, after its failure threshold, stops the container (its
//     preStop hook, SIGTERM, then SIGKILL after the grace period) and it restarts;
//   - a deleted pod's containers run their preStop hook (a command exec'd in the container),
//     then get SIGTERM, and SIGKILL once the pod's grace period, which the hook counts against,
//     is over (2 s more for a hook that took it all); then the deletion completes;
//   - environment variables from literal values, pod fields and keys of Secrets and ConfigMaps,
//     read again for each start of a container, so that a restart in place sees a Secret's new
//     value; a container whose Secret, ConfigMap or key is missing (and not optional) at the
//     pod's start waits, reported as CreateContainerConfigError;
//   - Secret volumes: the Secret's keys (or the items named) as files with the volume's modes,
//     written before the pod's containers start, and updated in place while the pod runs when
//     the Secret changes, as the kubelet's atomic writer does (a ..data link switched to a new
//     directory in one rename), so that a server told to read its certificate again reads the
//     new one; a Secret or key that is missing, and not optional, keeps the pod's containers
//     from starting;
//   - what a run writes to its termination message file is its terminated state's message (at
//     most 4096 bytes).
//
// What still differs from a kubelet:
//   - only containers of an image the runner knows (images: Valkey's, whose valkey-server and
//     valkey-cli are the toolchain's and whose sh is the machine's, with the toolchain first in
//     its PATH; the operator's, whose binary the runner is given; the metrics exporter's, whose
//     redis_exporter is Debian's build of the default image's release, whatever the image's
//     tag), with probes that exec one of its programs or open a TCP connection,
//     and preStop hooks that exec one (no postStart hooks, no HTTP or sleep hooks); no init
//     containers that restart always (native sidecars: run a sidecar as one of the pod's
//     containers). What it cannot run it refuses with the reason, as a container that cannot
//     start (restarted with the back-off);
//   - every pod shares the machine's loopback interface, so the runner puts each program on the
//     pod's IP itself: it appends --bind and --bind-source-addr with the pod's IP to a server's
//     command line (a shell entrypoint must pass its arguments on to the server), and makes the
//     pod's IP valkey-cli's default host, in a command line and in a container's or a hook's
//     shell script alike, and gives the pod's IP for the hosts of redis_exporter's
//     --web.listen-address and --redis.addr. A script that calls localhost or 127.0.0.1 by name,
//     expecting its own pod, reaches the machine instead;
//   - every emptyDir volume is the pod's one data directory, every container's working
//     directory; a Secret volume is a directory of its own; other kinds of volume (the service
//     account's token among them) are not mounted. A container sees none at its mount path: the
//     runner moves a path under a mount in its command line and in its probes' and hook's
//     commands (/data/valkey.sock, /tls/tls.crt: as an argument or inside one, a URL or a
//     script) to the directory that stands for the volume, and a program must not build such a
//     path itself. A Unix socket's path so moved must stay within the system's limit (108 bytes);
//   - a Secret volume is brought up to date every 2 s, where the kubelet takes up to a minute
//     and more (its sync period and its cache): a test does not wait that out, and an operator
//     that must wait for it is not tested waiting that long;
//   - the first readiness probe runs as soon as the server accepts connections rather than at
//     some point within the first period, so that tests do not wait out a period per pod;
//   - no resource limits: a server over its memory limit is not OOM-killed, and one over its
//     CPU limit is not throttled;
//   - the termination message file is not mounted at its path: a program must be told its path
//     in its arguments, where the runner puts the file's place in the pod's directory instead;
//   - a container that waits for a missing Secret or ConfigMap, or a pod for a Secret volume's
//     Secret, waits for good, reported as CreateContainerConfigError (the kubelet reports a
//     volume it cannot mount as ContainerCreating, with a FailedMount event): the kubelet would
//     start it once it appears; and one restarted in place after its Secret went keeps the
//     values it had, where the kubelet would wait;
//   - the processes run as long as the runner: a runner that stops stops them all.
package podrunner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"example.com/cache-operator/internal/resources"
)

// Runner runs the Valkey pods of one cluster. Run it once; it keeps no state outside its own
// process and Workdir, and stops everything it started when Run returns.
type Runner struct {
	// Client reads the pods and reports their status, as a kubelet's credentials would.
	Client kubernetes.Interface
	// BinDir holds valkey-server and valkey-cli (hack/toolchain.sh valkey). Pods run only
	// those, and the operator's own binary.
	BinDir string
	// OperatorBinary is the operator's binary, which a container of the operator's image runs
	// (a backup's Job); empty, such a container cannot start.
	OperatorBinary string
	// Workdir holds a directory per pod: its data directory, standing in for the pod's
	// emptyDir, and a log per container.
	Workdir string
	// Log receives what happens to each pod.
	Log logr.Logger

	mu sync.Mutex
	// pods are the pods' sandboxes by pod UID, from their start until they are gone.
	pods     map[types.UID]*sandbox
	startups []time.Duration
	work     sync.WaitGroup
}

// Apps are the values of the app.kubernetes.io/name label of the pods the runner runs: the
// Caches' servers, and the backups' Jobs.
var Apps = []string{resources.AppName, resources.BackupAppName}

// Run runs Valkey pods until ctx is done, then kills every server it started, waits for them
// to exit and removes their directories.
func (r *Runner) Run(ctx context.Context) error {
	if err := r.writePodPrograms(); err != nil {
		return err
	}
	factory := informers.NewSharedInformerFactoryWithOptions(r.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = fmt.Sprintf("%s in (%s)", resources.LabelName, strings.Join(Apps, ","))
		}))
	pods := factory.Core().V1().Pods().Informer()
	_, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.sync(ctx, obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { r.sync(ctx, obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if gone, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = gone.Obj
			}
			if pod, ok := obj.(*corev1.Pod); ok {
				r.forget(pod.UID)
			}
		},
	})
	if err != nil {
		return err
	}
	factory.Start(ctx.Done())
	r.goWork(func() { r.syncSecretVolumes(ctx) })
	<-ctx.Done()
	factory.Shutdown()

	r.mu.Lock()
	for _, b := range r.pods {
		b.stopTerminating()
		for _, p := range b.processes() {
			p.kill()
		}
	}
	r.mu.Unlock()
	// Every process is reaped, and every goroutine done, before the directories go.
	r.work.Wait()
	return os.RemoveAll(r.Workdir)
}

// Crash kills the server of the named pod (its first container) with SIGKILL, as a crash or the
// kernel's OOM killer would: the container then restarts in place.
func (r *Runner) Crash(namespace, name string) error {
	return r.Signal(namespace, name, syscall.SIGKILL)
}

// Signal sends sig to the server of the named pod (its first container): SIGSTOP, say, for a
// server that hangs and ignores SIGTERM.
func (r *Runner) Signal(namespace, name string, sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := r.serverProcess(namespace, name)
	if err != nil {
		return err
	}
	return p.cmd.Process.Signal(sig)
}

// PID is the process ID of the named pod's first container while it runs: a measurement reads
// its memory from /proc, as the kubelet's cAdvisor would.
func (r *Runner) PID(namespace, name string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	p, err := r.serverProcess(namespace, name)
	if err != nil {
		return 0, err
	}
	return p.cmd.Process.Pid, nil
}

// serverProcess is the running process of the named pod's first container. r.mu is held.
func (r *Runner) serverProcess(namespace, name string) (*process, error) {
	for _, b := range r.pods {
		if b.pod.Namespace == namespace && b.pod.Name == name && len(b.main) > 0 {
			if p := b.serverContainer().proc; p != nil && p.running() {
				return p, nil
			}
		}
	}
	return nil, fmt.Errorf("no server runs for pod %s/%s", namespace, name)
}

// StartupSummary says what starting a pod has cost so far: the time from starting its server
// to reporting the pod Ready, over the pods that became ready.
func (r *Runner) StartupSummary() string {
	r.mu.Lock()
	startups := slices.Clone(r.startups)
	r.mu.Unlock()
	if len(startups) == 0 {
		return "no pod became ready"
	}
	slices.Sort(startups)
	at := func(q float64) time.Duration { return startups[int(q*float64(len(startups)-1))] }
	return fmt.Sprintf("%d pods from server start to Ready: p50 %s, p90 %s, max %s",
		len(startups), at(0.5), at(0.9), startups[len(startups)-1])
}

// sync acts on one pod's current state: run a pod that kwok has given an IP and that has not
// ended, stop the containers of a pod being deleted.
func (r *Runner) sync(ctx context.Context, pod *corev1.Pod) {
	// Read before the lock, for a pod about to start: the Secrets and ConfigMaps its containers
	// take variables from.
	var sources envSources
	if pod.DeletionTimestamp == nil && pod.Status.PodIP != "" && !r.known(pod.UID) {
		sources = r.sourcesOf(ctx, pod)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pods == nil {
		r.pods = map[types.UID]*sandbox{}
	}
	b, known := r.pods[pod.UID]
	switch {
	case pod.DeletionTimestamp != nil:
		if !known {
			// Never started (or started by an earlier runner, whose processes died with it).
			b = &sandbox{pod: podKey(pod), uid: pod.UID, dir: r.podDir(pod.UID), stopping: make(chan struct{})}
			r.pods[pod.UID] = b
		}
		if !b.terminating {
			b.stopTerminating()
			r.goWork(func() { r.terminate(ctx, b, gracePeriod(pod)) })
		}
	case !known && pod.Status.PodIP != "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed:
		b := r.newSandbox(pod, sources)
		r.pods[pod.UID] = b
		r.goWork(func() { r.supervise(ctx, b) })
	}
}

// known reports whether the runner has a sandbox for the pod.
func (r *Runner) known(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.pods[uid]
	return ok
}

// forget drops a pod that is gone from the API, killing its processes if something deleted the
// pod without waiting for them (a forced deletion). Run still waits for them to exit.
func (r *Runner) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b, ok := r.pods[uid]; ok {
		b.stopTerminating() // gone, not failed: nothing to report
		running := b.processes()
		delete(r.pods, uid)
		r.goWork(func() {
			for _, p := range running {
				p.kill()
				<-p.exited
			}
			_ = os.RemoveAll(b.dir)
		})
	}
}

func (r *Runner) goWork(f func()) {
	r.work.Add(1)
	go func() {
		defer r.work.Done()
		f()
	}()
}

func (r *Runner) podDir(uid types.UID) string {
	return filepath.Join(r.Workdir, string(uid))
}

func podKey(pod *corev1.Pod) types.NamespacedName {
	return types.NamespacedName{Namespace: pod.Namespace, Name: pod.Name}
}

// gracePeriod is how long a deleted pod's server has between SIGTERM and SIGKILL: what the
// deletion asked for, else what the pod says, else Kubernetes' default.
func gracePeriod(pod *corev1.Pod) time.Duration {
	switch {
	case pod.DeletionGracePeriodSeconds != nil:
		return time.Duration(*pod.DeletionGracePeriodSeconds) * time.Second
	case pod.Spec.TerminationGracePeriodSeconds != nil:
		return time.Duration(*pod.Spec.TerminationGracePeriodSeconds) * time.Second
	}
	return corev1.DefaultTerminationGracePeriodSeconds * time.Second
}
