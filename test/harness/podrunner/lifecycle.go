package podrunner

import (
	"context"
	"fmt"
	"os"
	"sync"
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

// supervise runs the pod for as long as it lives, as the kubelet does: its init containers one
// after the other, each to completion, then its containers side by side, each on its own
// (runContainer). Once none of them will run again (restartPolicy Never or OnFailure), the pod
// ends: Succeeded if every container exited with 0, else Failed.
func (r *Runner) supervise(ctx context.Context, b *sandbox) {
	for _, c := range b.init {
		if !r.runToCompletion(ctx, b, c) {
			return
		}
	}
	r.mu.Lock()
	b.initialized = true
	r.mu.Unlock()
	var containers sync.WaitGroup
	for _, c := range b.main {
		containers.Go(func() { r.runContainer(ctx, b, c) })
	}
	containers.Wait()
	if r.isTerminating(b) || ctx.Err() != nil {
		return
	}
	phase := corev1.PodSucceeded
	r.mu.Lock()
	for _, c := range b.main {
		if c.last == nil || c.last.ExitCode != 0 {
			phase = corev1.PodFailed
		}
	}
	r.mu.Unlock()
	r.finish(ctx, b, phase)
}

// runToCompletion runs an init container until it exits with 0, restarting it after the
// kubelet's back-off when it fails, unless the pod's restartPolicy is Never: then the pod fails.
// It reports whether the pod may go on.
func (r *Runner) runToCompletion(ctx context.Context, b *sandbox, c *container) bool {
	if !r.configured(ctx, b, c) {
		return false
	}
	log := r.Log.WithValues("pod", b.pod, "initContainer", c.name)
	backoff := time.Duration(0)
	p := r.start(b, c, false)
	for {
		r.reportOrLog(ctx, b)
		if p != nil {
			select {
			case <-p.exited:
			case <-b.stopping:
			case <-ctx.Done():
			}
		}
		if r.isTerminating(b) || ctx.Err() != nil {
			return false
		}
		ended := r.recordExit(c, p)
		log.Info("The pod's init container exited", "exitCode", ended.ExitCode, "reason", ended.Reason, "message", ended.Message)
		if ended.ExitCode == 0 {
			return true
		}
		if b.restartPolicy == corev1.RestartPolicyNever {
			r.finish(ctx, b, corev1.PodFailed)
			return false
		}
		if !r.backOff(ctx, b, c, ended, &backoff) {
			return false
		}
		r.refreshEnv(ctx, c)
		p = r.start(b, c, true)
	}
}

// refreshEnv makes the container's environment and command line again from the Secrets and
// ConfigMaps as they are now, as the kubelet does for each start of a container: a restart in
// place sees a Secret's new value. If they cannot be made now (a Secret gone), the container
// keeps the ones it had, and the log says so.
func (r *Runner) refreshEnv(ctx context.Context, c *container) {
	if c.spec == nil || c.refusal != "" || c.configError != "" {
		return
	}
	sources := r.sourcesOf(ctx, c.pod)
	fresh := *c
	if err := fresh.prepare(r, c.pod, c.spec, sources, nil); err != nil {
		r.Log.Info("Restarting the container with its previous environment", "pod", c.pod.Name, "container", c.name, "error", err.Error())
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	c.binary, c.args, c.env = fresh.binary, fresh.args, fresh.env
}

// runContainer runs one of the pod's containers for as long as the pod lives: it probes each run
// (readiness, reported in the pod's status; liveness, whose failure stops the run) and, when a
// run ends, restarts the container in place, after the kubelet's back-off, if the pod's restart
// policy says so.
func (r *Runner) runContainer(ctx context.Context, b *sandbox, c *container) {
	if !r.configured(ctx, b, c) {
		return
	}
	log := r.Log.WithValues("pod", b.pod, "container", c.name)
	backoff := time.Duration(0)
	p := r.start(b, c, false)
	for {
		r.reportOrLog(ctx, b)
		if p != nil {
			stopLiveness := r.probeLiveness(ctx, b, c, p)
			r.probeReadiness(ctx, b, c, p)
			stopLiveness()
		}
		if r.isTerminating(b) || ctx.Err() != nil {
			return
		}
		ended := r.recordExit(c, p)
		log.Info("The pod's container exited", "exitCode", ended.ExitCode, "reason", ended.Reason, "message", ended.Message)
		// As the kubelet does when a container ends, whether it restarts or not: the pod is not
		// ready, and the container has terminated.
		r.reportOrLog(ctx, b)
		if !restarts(b.restartPolicy, ended.ExitCode) {
			return
		}
		if !r.backOff(ctx, b, c, ended, &backoff) {
			return
		}
		r.refreshEnv(ctx, c)
		p = r.start(b, c, true)
		log.Info("Restarted the pod's container in place", "restartCount", c.restartCount(r))
	}
}

// configured reports whether the container's configuration could be made. One that could not
// (configError) waits, reported as CreateContainerConfigError, until the pod is deleted.
func (r *Runner) configured(ctx context.Context, b *sandbox, c *container) bool {
	if c.configError == "" {
		return true
	}
	r.mu.Lock()
	c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CreateContainerConfigError", Message: c.configError}}
	r.mu.Unlock()
	r.reportOrLog(ctx, b)
	select {
	case <-b.stopping:
	case <-ctx.Done():
	}
	return false
}

// backOff waits as the kubelet does before it restarts a container whose run ended: not at all
// the first time, or after a run long enough to start the back-off over; otherwise the current
// back-off, reported as CrashLoopBackOff. It reports false if the pod went away meanwhile.
func (r *Runner) backOff(ctx context.Context, b *sandbox, c *container, ended corev1.ContainerStateTerminated, backoff *time.Duration) bool {
	switch ran := ended.FinishedAt.Sub(ended.StartedAt.Time); {
	case ran >= restartBackoffReset:
		*backoff = 0
	case *backoff > 0:
		r.mu.Lock()
		c.state = corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "CrashLoopBackOff",
			Message: fmt.Sprintf("back-off %s restarting failed container=%s pod=%s", *backoff, c.name, b.pod.Name)}}
		r.mu.Unlock()
		r.reportOrLog(ctx, b)
		select {
		case <-ctx.Done():
			return false
		case <-b.stopping:
			return false
		case <-time.After(*backoff):
		}
	}
	*backoff = min(max(2**backoff, restartBackoffInitial), restartBackoffMax)
	return true
}

// restarts reports whether the kubelet restarts a container that exited with the given code under
// the pod's restart policy.
func restarts(policy corev1.RestartPolicy, exitCode int32) bool {
	switch policy {
	case corev1.RestartPolicyNever:
		return false
	case corev1.RestartPolicyOnFailure:
		return exitCode != 0
	case corev1.RestartPolicyAlways:
	}
	return true // Always, the default
}

// start starts a run of the container, in the same pod, IP and directory as any run before it;
// again counts it as a restart. It returns nil if the container could not start (its startErr
// says why), or the pod is going away.
func (r *Runner) start(b *sandbox, c *container, again bool) *process {
	r.mu.Lock()
	defer r.mu.Unlock()
	if b.terminating {
		return nil
	}
	if again {
		c.restarts++
	}
	p, err := c.launch(&r.work)
	if err != nil {
		r.Log.Error(err, "Could not start the pod's container", "pod", b.pod, "container", c.name)
	}
	return p
}

func (c *container) restartCount(r *Runner) int32 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return c.restarts
}

// recordExit keeps how the container's run ended, for its state and then its lastState, and
// returns it. A container that could not be started at all ends at once with exit code 128.
func (r *Runner) recordExit(c *container, p *process) corev1.ContainerStateTerminated {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := time.Now()
	ended := corev1.ContainerStateTerminated{ExitCode: 128, Reason: "StartError", Message: c.startErr,
		StartedAt: metaTime(now), FinishedAt: metaTime(now)}
	if p != nil {
		ended = corev1.ContainerStateTerminated{ExitCode: exitCode(p.exitErr), Reason: "Error", Message: errString(p.exitErr),
			StartedAt: metaTime(p.started), FinishedAt: metaTime(now)}
		if message := c.terminationMessage(); message != "" {
			ended.Message = message
		}
		if ended.ExitCode == 0 {
			ended.Reason = "Completed"
		}
	}
	c.previous, c.last, c.ready = c.last, &ended, false
	c.state = corev1.ContainerState{Terminated: ended.DeepCopy()}
	return ended
}

// probeReadiness runs the readiness probe against the process until it exits or the pod is
// deleted, and reports the result in the pod's status. The first result is reported whatever the
// pod says: the pod may have been started by an earlier runner, whose server died with it, or
// by an earlier run of the container. A container with no probe is ready once it runs.
func (r *Runner) probeReadiness(ctx context.Context, b *sandbox, c *container, p *process) {
	log := r.Log.WithValues("pod", b.pod, "container", c.name)
	probe := c.readiness
	if probe == nil {
		probe = &corev1.Probe{}
	}
	reported, known := false, false
	successes, failures := 0, 0
	c.waitAccepting(ctx, p)
	for p.running() {
		ok, probeErr := r.probe(ctx, c, probe)
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
		if (!known || ready != reported) && p.running() && !r.isTerminating(b) {
			r.mu.Lock()
			c.ready = ready
			r.mu.Unlock()
			if err := r.report(ctx, b); err != nil {
				log.Error(err, "Could not report readiness")
			} else {
				reported, known = ready, true
				log.Info("Reported the pod's readiness", "ready", ready, "probe", errString(probeErr))
			}
		}
		if reported {
			r.recordFirstReady(b, p)
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
// process as the kubelet does (SIGTERM, then SIGKILL after the grace period), which runContainer
// then restarts.
func (r *Runner) probeLiveness(ctx context.Context, b *sandbox, c *container, p *process) (stop func()) {
	probe := c.liveness
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
			if ok, err := r.probe(ctx, c, probe); ok {
				failures = 0
				continue
			} else if failures++; failures < int(max(probe.FailureThreshold, 1)) {
				continue
			} else {
				r.Log.Info("The liveness probe failed: stopping the container to restart it", "pod", b.pod, "container", c.name, "probe", errString(err))
			}
			r.stopContainer(ctx, b, c, p, b.grace)
			return
		}
	})
	return stop
}

// stopContainer stops a container's process as the kubelet kills a container, for a deletion or
// a failed liveness probe: its preStop hook first, if it has one, then SIGTERM, and SIGKILL once
// the grace period, which the hook's run counts against, is over (with the kubelet's two
// seconds more for a hook that used it all).
func (r *Runner) stopContainer(ctx context.Context, b *sandbox, c *container, p *process, grace time.Duration) {
	deadline := time.Now().Add(grace)
	if c.preStop != nil && p.running() {
		out, err := r.execIn(ctx, c, c.preStop, grace)
		r.Log.Info("Ran the preStop hook", "pod", b.pod, "container", c.name, "output", string(out), "error", errString(err))
	}
	stopProcess(ctx, p, max(time.Until(deadline), preStopExtension))
}

// preStopExtension is the time the kubelet still gives a container whose preStop hook took the
// whole grace period, between SIGTERM and SIGKILL.
const preStopExtension = 2 * time.Second

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

// terminate stops a deleted pod's containers as the kubelet would, all at once (stopContainer),
// and then completes the deletion.
func (r *Runner) terminate(ctx context.Context, b *sandbox, grace time.Duration) {
	r.mu.Lock()
	running := map[*process]*container{}
	for _, c := range b.started() {
		running[c.proc] = c
	}
	r.mu.Unlock()
	var stopping sync.WaitGroup
	for p, c := range running {
		stopping.Go(func() { r.stopContainer(ctx, b, c, p, grace) })
	}
	stopping.Wait()
	if ctx.Err() != nil {
		return
	}
	if err := retry(ctx, func() error { return r.completeDeletion(ctx, b) }); err != nil {
		r.Log.Error(err, "Could not complete the pod's deletion", "pod", b.pod)
		return
	}
	_ = os.RemoveAll(b.dir)
	r.Log.Info("Stopped the pod's containers and completed its deletion", "pod", b.pod)
}

// reportOrLog reports the pod's status, logging a failure: the next change reports it whole
// again.
func (r *Runner) reportOrLog(ctx context.Context, b *sandbox) {
	if err := r.report(ctx, b); err != nil {
		r.Log.Error(err, "Could not report the pod's status", "pod", b.pod)
	}
}

func (r *Runner) isTerminating(b *sandbox) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return b.terminating
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
