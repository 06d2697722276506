package podrunner

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// sandbox is one pod as the runner keeps it, from its start until the pod is gone: its IP and
// its directory, which hold for the pod's whole life, and its containers, whose processes a
// restart replaces in place.
type sandbox struct {
	pod           types.NamespacedName
	uid           types.UID
	ip            string
	dir           string
	restartPolicy corev1.RestartPolicy
	grace         time.Duration
	// init are the init containers, run one after the other to completion before main, the
	// pod's containers, start side by side.
	init, main []*container
	// volumes are the directories that stand for the pod's volumes, by name; secrets are its
	// Secret volumes, which the runner keeps up to date (syncSecretVolumes).
	volumes map[string]string
	secrets []*secretVolume

	// Guarded by the runner's lock: whether every init container has completed, the phase the
	// pod ended in (empty while it runs), when it was first ready, and whether the pod's
	// deletion was seen (terminating, with stopping closed).
	initialized bool
	finished    corev1.PodPhase
	everReady   bool
	terminating bool
	stopping    chan struct{}

	// reporting orders the pod's status reports: each is taken and sent under it, so that an
	// older report never lands after a newer one.
	reporting sync.Mutex
}

// dataMountPath is where the Valkey image keeps its data, its working directory: the pod's
// data volume is mounted there, and the runner runs each container in the pod's data directory
// instead.
const dataMountPath = "/data"

// newSandbox prepares the sandbox of a pod that kwok has given an IP: the pod's directory and
// each container's command line as the pod spec has it, on the pod's IP. A container that the
// runner cannot run is kept with the reason, which its start reports.
func (r *Runner) newSandbox(pod *corev1.Pod, sources envSources) *sandbox {
	b := &sandbox{
		pod: podKey(pod), uid: pod.UID, ip: pod.Status.PodIP, dir: r.podDir(pod.UID),
		restartPolicy: pod.Spec.RestartPolicy, grace: gracePeriod(pod), stopping: make(chan struct{}),
	}
	var refusal, mountErr error
	if ip := net.ParseIP(pod.Status.PodIP); ip == nil || !ip.IsLoopback() {
		refusal = fmt.Errorf("the pod's IP %s is not a loopback address: a server behind it would be "+
			"reached off this machine (a cluster made before pods got loopback IPs? `make local-cluster-down`)", pod.Status.PodIP)
	} else if err := os.MkdirAll(b.dataDir(), 0o700); err != nil {
		refusal = err
	} else if b.volumes, b.secrets, err = b.volumesOf(pod, sources); errors.As(err, new(configError)) {
		mountErr = err
	} else if err != nil {
		refusal = err
	}
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		b.init = append(b.init, r.newContainer(pod, b, c, sources, refusal))
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			b.init[i].refusal = fmt.Sprintf("init container %s restarts always (a sidecar): the runner runs sidecars as the pod's containers only", c.Name)
		}
	}
	for i := range pod.Spec.Containers {
		b.main = append(b.main, r.newContainer(pod, b, &pod.Spec.Containers[i], sources, refusal))
	}
	if mountErr != nil {
		// The kubelet starts no container of a pod whose volumes it cannot mount.
		for _, c := range append(b.init[:len(b.init):len(b.init)], b.main...) {
			if c.refusal == "" {
				c.configError = mountErr.Error()
			}
		}
	}
	return b
}

// dataDir is the pod's data volume, every container's working directory.
func (b *sandbox) dataDir() string { return filepath.Join(b.dir, "data") }

// serverContainer is the container a pod's server runs in, its first.
func (b *sandbox) serverContainer() *container { return b.main[0] }

// stopTerminating marks the pod deleted, so that no container of it is restarted and its status
// is no longer reported. Call it with the runner's lock held.
func (b *sandbox) stopTerminating() {
	if !b.terminating {
		b.terminating = true
		close(b.stopping)
	}
}

// started are the sandbox's containers whose process may still run. Call it with the runner's
// lock held.
func (b *sandbox) started() []*container {
	var started []*container
	for _, c := range append(b.init[:len(b.init):len(b.init)], b.main...) {
		if c.proc != nil {
			started = append(started, c)
		}
	}
	return started
}

// processes are the sandbox's processes that may still run. Call it with the runner's lock held.
func (b *sandbox) processes() []*process {
	var running []*process
	for _, c := range b.started() {
		running = append(running, c.proc)
	}
	return running
}
