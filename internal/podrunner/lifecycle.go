package podrunner

import (
	"context"
	"fmt"
	"os"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// The kubelet's back-off between restarts of a container that keeps exiting: the first restart at
// once, then 10 s, doubling up to 5 minutes; a run that lasted 10 minutes starts it over.
const (
	restartBackoffInitial = 10 * time.Second
	restartBackoffMax     = 5 * time.Minute
	restartBackoffReset   = 10 * time.Minute
)

// supervise runs the pod's container for as long as the pod lives, as the kubelet does: it probes
// each run (readiness, reported in the pod's status; liveness, whose failure restarts the
// container) and, when a run ends, restarts the container in place, after the kubelet's
// back-off, if the pod's restart policy says so; otherwise it reports the pod finished.
func (r *Runner) supervise(ctx context.Context, s *server, pod *corev1.Pod) {
	log := r.Log.WithValues("pod", s.pod)
	container := &pod.Spec.Containers[0]
	backoff := time.Duration(0)
	for {
		p := r.current(s)
		if p != nil {
			stopLiveness := r.probeLiveness(ctx, s, p, container.LivenessProbe, gracePeriod(pod))
			r.probeReadiness(ctx, s, p, container.ReadinessProbe)
			stopLiveness()
		}
		if r.isTerminating(s) || ctx.Err() != nil {
			return
		}
		ended := r.recordExit(s, p)
		log.Info("The pod's container exited", "exitCode", ended.ExitCode, "reason", ended.Reason, "message", ended.Message)
		if !restarts(pod.Spec.RestartPolicy, ended.ExitCode) {
			if err := retry(ctx, func() error { return r.reportFinished(ctx, s, ended) }); err != nil {
				log.Error(err, "Could not report the pod finished")
			}
			return
		}
		// As the kubelet does before it restarts the container: the pod is not ready, and its
		// container has terminated.
		if err := r.reportContainer(ctx, s, false, corev1.ContainerState{Terminated: &ended}); err != nil {
			log.Error(err, "Could not report the container's exit")
		}
		switch ran := ended.FinishedAt.Sub(ended.StartedAt.Time); {
		case ran >= restartBackoffReset:
			backoff = 0
		case backoff > 0:
			if err := r.reportWaiting(ctx, s, "CrashLoopBackOff",
				fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", backoff, s.containerName, s.pod.Name)); err != nil {
				log.Error(err, "Could not report the container's back-off")
			}
			select {
			case <-ctx.Done():
				return
			case <-s.stopping:
				return
			case <-time.After(backoff):
			}
		}
		backoff = min(max(2*backoff, restartBackoffInitial), restartBackoffMax)
		if count, err := r.restart(s); err != nil {
			log.Error(err, "Could not restart the pod's container")
		} else {
			log.Info("Restarted the pod's container in place", "restartCount", count)
		}
	}
}

// restarts reports whether the kubelet restarts a container that exited with the given code under
// the pod's restart policy.
func restarts(policy corev1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	}
	return true // Always, the default
}

// current is the server's running process, or its last one; nil if it never started.
func (r *Runner) current(s *server) *process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return s.proc
}

// recordExit keeps how the container's run ended, for the container's lastState, and returns it.
// A container that could not be started at all ends at once with exit code 128.
func (r *Runner) recordExit(s *server, p *process) corev1.ContainerStateTerminated {
	r.mu.Lock()
	defer r.mu.Unlock()
	if p == nil {
		s.last = &corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: s.startErr}
		now := time.Now()
		s.last.StartedAt.Time, s.last.FinishedAt.Time = now, now
		return *s.last
	}
	code := exitCode(p.exitErr)
	reason := "Error"
	if code == 0 {
		reason = "Completed"
	}
	s.last = &corev1.ContainerStateTerminated{ExitCode: code, Reason: reason, Message: errString(p.exitErr)}
	s.last.StartedAt.Time, s.last.FinishedAt.Time = p.started, time.Now()
	return *s.last
}

// restart starts the container again in the same pod, same IP, same directory, and returns
// how often it has been restarted.
func (r *Runner) restart(s *server) (int32, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if s.terminating {
		return s.restarts, nil
	}
	s.restarts++
	if _, err := s.launch(&r.work); err != nil {
		s.proc, s.startErr = nil, err.Error()
		return s.restarts, err
	}
	return s.restarts, nil
}

// probeReadiness runs the readiness probe against the process until it exits or the pod is
// deleted, and reports the result in the pod's status. The first result is reported whatever the
// pod says: the pod may have been started by an earlier runner, whose server died with it, or
// by an earlier run of the container.
func (r *Runner) probeReadiness(ctx context.Context, s *server, p *process, probe *corev1.Probe) {
	log := r.Log.WithValues("pod", s.pod)
	if probe == nil {
		probe = &corev1.Probe{}
	}
	reported, known, everReady := false, false, false
	successes, failures := 0, 0
	s.waitAccepting(ctx, p)
	for p.running() {
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
		if (!known || ready != reported) && p.running() && !r.isTerminating(s) {
			if err := r.reportRunning(ctx, s, p, ready); err != nil {
				log.Error(err, "Could not report readiness")
			} else {
				reported, known = ready, true
				log.Info("Reported the pod's readiness", "ready", ready, "probe", errString(probeErr))
			}
		}
		if reported && !everReady {
			everReady = true
			r.recordStartup(time.Since(p.started))
		}
		select {
		case <-ctx.Done():
			return
		case <-p.exited:
		case <-time.After(time.Duration(max(probe.PeriodSeconds, 1)) * time.Second):
		}
	}
}

// probeLiveness runs the liveness probe against the process, from its first period on, until
// the process exits or stop is called; after FailureThreshold failures in a row it stops the
// process as the kubelet does (SIGTERM, then SIGKILL after the grace period), which supervise
// then restarts.
func (r *Runner) probeLiveness(ctx context.Context, s *server, p *process, probe *corev1.Probe, grace time.Duration) (stop func()) {
	if probe == nil {
		return func() {}
	}
	ctx, stop = context.WithCancel(ctx)
	r.goWork(func() {
		failures := 0
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.exited:
				return
			case <-time.After(time.Duration(max(probe.InitialDelaySeconds, 0))*time.Second + time.Duration(max(probe.PeriodSeconds, 1))*time.Second):
			}
			if ok, err := r.probe(ctx, s, probe); ok {
				failures = 0
				continue
			} else if failures++; failures < int(max(probe.FailureThreshold, 1)) {
				continue
			} else {
				r.Log.Info("The liveness probe failed: stopping the container to restart it", "pod", s.pod, "probe", errString(err))
			}
			stopProcess(ctx, p, grace)
			return
		}
	})
	return stop
}

// stopProcess stops a process as the kubelet stops a container: SIGTERM, then SIGKILL once the
// grace period is over.
func stopProcess(ctx context.Context, p *process, grace time.Duration) {
	if !p.running() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(grace):
		p.kill()
		<-p.exited
	case <-ctx.Done():
	}
}

// terminate stops a deleted pod's container as the kubelet would, SIGTERM and then SIGKILL after
// the grace period, and then completes the deletion.
func (r *Runner) terminate(ctx context.Context, s *server, grace time.Duration) {
	if p := r.current(s); p != nil {
		stopProcess(ctx, p, grace)
		if ctx.Err() != nil {
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
