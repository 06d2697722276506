// Package podrunner stands in for the kubelet's container runtime on a local cluster whose Valkey
// pods kwok leaves to it (localcluster.Cluster.RealValkey). For each Valkey pod that kwok has
// started on one of its nodes, it runs the container's own command line as a real process on the
// pod's loopback IP: valkey-server, or the image's shell (sh -c) that ends in it. It behaves like
// the kubelet in what the operator depends on:
//   - a container that exits is restarted in place, as restartPolicy Always asks: same pod, same
//     IP, same data directory (the pod's emptyDir), with restartCount and lastState.terminated
//     (reason, exit code) in the pod's status and the kubelet's back-off between restarts (at
//     once, then 10 s doubling to 5 min, reported as CrashLoopBackOff); under Never or
//     OnFailure a finished container ends the pod (Failed or Succeeded), and a pod is replaced
//     only when it is deleted;
//   - the readiness probe decides the pod's Ready condition, and the liveness probe, after its
//     failure threshold, stops the container (SIGTERM, then SIGKILL after the grace period) and
//     it restarts;
//   - a deleted pod's container gets SIGTERM and the pod's grace period before SIGKILL, and then
//     the deletion completes.
//
// What still differs from a kubelet:
//   - only pods of one container, of an image the runner knows (images: Valkey's, whose
//     valkey-server and valkey-cli are the toolchain's and whose sh is the machine's, with the
//     toolchain first in its PATH), with probes that exec one of its programs or open a TCP
//     connection; no init containers and no sidecars. What it cannot run it refuses with the
//     reason, as a container that cannot start (restarted with the back-off);
//   - the runner appends --bind and --bind-source-addr with the pod's IP to the command line,
//     since every pod shares the machine's loopback interface; a shell entrypoint must pass its
//     arguments on to the server;
//   - the first readiness probe runs as soon as the server accepts connections rather than at
//     some point within the first period, so that tests do not wait out a period per pod;
//   - no resource limits: a server over its memory limit is not OOM-killed;
//   - the servers run as long as the runner: a runner that stops stops them all.
package podrunner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	// those.
	BinDir string
	// Workdir holds a directory per pod: the server's data directory, standing in for the
	// pod's emptyDir, and its log.
	Workdir string
	// Log receives what happens to each pod.
	Log logr.Logger

	mu sync.Mutex
	// servers are the pods by pod UID, from their start until they are gone.
	servers  map[types.UID]*server
	startups []time.Duration
	work     sync.WaitGroup
}

// Run runs Valkey pods until ctx is done, then kills every server it started, waits for them
// to exit and removes their directories.
func (r *Runner) Run(ctx context.Context) error {
	factory := informers.NewSharedInformerFactoryWithOptions(r.Client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.LabelSelector = resources.LabelName + "=" + resources.AppName
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
	<-ctx.Done()
	factory.Shutdown()

	r.mu.Lock()
	for _, s := range r.servers {
		s.stopTerminating()
		if s.proc != nil {
			s.proc.kill()
		}
	}
	r.mu.Unlock()
	// Every process is reaped, and every goroutine done, before the directories go.
	r.work.Wait()
	return os.RemoveAll(r.Workdir)
}

// Crash kills the server of the named pod with SIGKILL, as a crash or the kernel's OOM killer
// would: the container then restarts in place.
func (r *Runner) Crash(namespace, name string) error {
	return r.Signal(namespace, name, syscall.SIGKILL)
}

// Signal sends sig to the server of the named pod: SIGSTOP, say, for a server that hangs and
// ignores SIGTERM.
func (r *Runner) Signal(namespace, name string, sig syscall.Signal) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.servers {
		if s.pod.Namespace == namespace && s.pod.Name == name && s.proc != nil && s.proc.running() {
			return s.proc.cmd.Process.Signal(sig)
		}
	}
	return fmt.Errorf("no server runs for pod %s/%s", namespace, name)
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

// sync acts on one pod's current state: start the server of a pod kwok has started, stop the
// server of a pod being deleted.
func (r *Runner) sync(ctx context.Context, pod *corev1.Pod) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.servers == nil {
		r.servers = map[types.UID]*server{}
	}
	s, known := r.servers[pod.UID]
	switch {
	case pod.DeletionTimestamp != nil:
		if !known {
			// Never started (or started by an earlier runner, whose servers died with it).
			s = &server{pod: podKey(pod), uid: pod.UID, stopping: make(chan struct{})}
			r.servers[pod.UID] = s
		}
		if !s.terminating {
			s.stopTerminating()
			r.goWork(func() { r.terminate(ctx, s, gracePeriod(pod)) })
		}
	case !known && pod.Status.Phase == corev1.PodRunning && pod.Status.PodIP != "":
		s, err := r.newServer(pod)
		if err == nil {
			_, err = s.launch(&r.work)
		}
		if err != nil {
			// Reported like a container that exits at once, and restarted with the same back-off.
			r.Log.Error(err, "Could not start the pod's container", "pod", podKey(pod))
			if s == nil {
				c := pod.Spec.Containers[0]
				s = &server{pod: podKey(pod), uid: pod.UID, containerName: c.Name, image: c.Image, stopping: make(chan struct{})}
			}
			s.startErr = err.Error()
		}
		r.servers[pod.UID] = s
		r.goWork(func() { r.supervise(ctx, s, pod) })
	}
}

// stopTerminating marks the server's pod deleted, so that its container is not restarted and its
// status no longer reported. Call it with the runner's lock held.
func (s *server) stopTerminating() {
	if !s.terminating {
		s.terminating = true
		close(s.stopping)
	}
}

// forget drops a pod that is gone from the API, killing its server if something deleted the
// pod without waiting for it (a forced deletion). Run still waits for that server to exit.
func (r *Runner) forget(uid types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s, ok := r.servers[uid]; ok {
		s.stopTerminating() // gone, not failed: nothing to report
		p := s.proc
		delete(r.servers, uid)
		r.goWork(func() {
			if p != nil {
				p.kill()
				<-p.exited
			}
			_ = os.RemoveAll(r.podDir(uid))
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

func (r *Runner) recordStartup(d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.startups = append(r.startups, d)
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
