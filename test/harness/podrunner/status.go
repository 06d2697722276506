package podrunner

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os/exec"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// The runner reports a pod's status the way the kubelet does: a strategic merge patch of the
// status that also names the pod's UID, which the API server refuses to change, so that a report
// about a deleted pod never lands on its replacement of the same name.

// report sends the pod's whole status as the runner knows it: its phase (Pending while init
// containers run, then Running, and how it ended), its Initialized, ContainersReady and Ready
// conditions, and every container's status, with how often it was restarted and how its last
// run ended. Lists of statuses are replaced, not merged, by a patch; so each report is whole,
// and reports are sent in the order they are taken. Nothing is reported of a pod being deleted.
func (r *Runner) report(ctx context.Context, b *sandbox) error {
	b.reporting.Lock()
	defer b.reporting.Unlock()
	r.mu.Lock()
	if b.terminating {
		r.mu.Unlock()
		return nil
	}
	status := b.status()
	r.mu.Unlock()
	return r.patchStatus(ctx, b, status)
}

// finish ends the pod in the phase given, as the kubelet does when no container of it will run
// again, and reports it, retrying until the report lands: the pod would stay Running otherwise.
func (r *Runner) finish(ctx context.Context, b *sandbox, phase corev1.PodPhase) {
	r.mu.Lock()
	b.finished = phase
	r.mu.Unlock()
	if err := retry(ctx, func() error { return r.report(ctx, b) }); err != nil {
		r.Log.Error(err, "Could not report the pod finished", "pod", b.pod, "phase", phase)
	}
}

// status is the pod's status as a strategic merge patch. Call it with the runner's lock held.
func (b *sandbox) status() map[string]any {
	phase, ready, reason := corev1.PodRunning, b.initialized, "ContainersNotReady"
	for _, c := range b.main {
		ready = ready && c.ready
	}
	initialized, initReason := corev1.ConditionTrue, ""
	switch {
	case b.finished == corev1.PodSucceeded:
		phase, ready, reason = b.finished, false, "PodCompleted"
	case b.finished != "":
		phase, ready, reason = b.finished, false, "PodFailed"
	case !b.initialized:
		phase, initialized, initReason = corev1.PodPending, corev1.ConditionFalse, "ContainersNotInitialized"
	}
	readiness := corev1.ConditionFalse
	if ready {
		readiness, reason = corev1.ConditionTrue, ""
	}
	now := metav1.Now()
	status := map[string]any{
		"phase": phase,
		"conditions": []map[string]any{
			condition(corev1.PodInitialized, initialized, initReason, now),
			condition(corev1.ContainersReady, readiness, reason, now),
			condition(corev1.PodReady, readiness, reason, now),
		},
		"containerStatuses": containerStatuses(b.main),
	}
	if len(b.init) > 0 {
		status["initContainerStatuses"] = containerStatuses(b.init)
	}
	return status
}

// containerStatuses are the containers' statuses as the kubelet reports them. Call it with the
// runner's lock held.
func containerStatuses(containers []*container) []corev1.ContainerStatus {
	statuses := make([]corev1.ContainerStatus, len(containers))
	for i, c := range containers {
		statuses[i] = corev1.ContainerStatus{
			Name:         c.name,
			Image:        c.image,
			Ready:        c.ready,
			Started:      ptr.To(c.state.Running != nil),
			State:        *c.state.DeepCopy(),
			RestartCount: c.restarts,
		}
		// The run before the current one; while the current one has ended, the one before it.
		last := c.last
		if c.state.Terminated != nil {
			last = c.previous
		}
		if last != nil {
			statuses[i].LastTerminationState = corev1.ContainerState{Terminated: last.DeepCopy()}
		}
	}
	return statuses
}

// recordFirstReady counts, for StartupSummary, the time from the process's start to the pod's
// first Ready.
func (r *Runner) recordFirstReady(b *sandbox, p *process) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ready := b.initialized && !b.everReady
	for _, c := range b.main {
		ready = ready && c.ready
	}
	if ready {
		b.everReady = true
		r.startups = append(r.startups, time.Since(p.started))
	}
}

func metaTime(t time.Time) metav1.Time { return metav1.NewTime(t) }

// exitCode is a container's exit code as the kubelet reports it: 128 plus the signal's number
// for a process that a signal ended, and 128 for one that could not be started at all.
func exitCode(err error) int32 {
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		return 128
	}
	if exit == nil {
		return 0
	}
	if status, ok := exit.Sys().(syscall.WaitStatus); ok && status.Signaled() {
		return 128 + int32(status.Signal())
	}
	return int32(exit.ExitCode())
}

func condition(t corev1.PodConditionType, status corev1.ConditionStatus, reason string, now metav1.Time) map[string]any {
	c := map[string]any{"type": t, "status": status, "lastTransitionTime": now, "reason": nil}
	if reason != "" {
		c["reason"] = reason
	}
	return c
}

func (r *Runner) patchStatus(ctx context.Context, b *sandbox, status map[string]any) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": b.uid},
		"status":   status,
	})
	if err != nil {
		return err
	}
	_, err = r.Client.CoreV1().Pods(b.pod.Namespace).Patch(ctx, b.pod.Name, types.StrategicMergePatchType,
		patch, metav1.PatchOptions{}, "status")
	return err
}

// completeDeletion deletes the pod for good once its server has stopped, as the kubelet does:
// with no grace period left, and only the pod this server ran for.
func (r *Runner) completeDeletion(ctx context.Context, b *sandbox) error {
	err := r.Client.CoreV1().Pods(b.pod.Namespace).Delete(ctx, b.pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &b.uid},
	})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone already, or a new pod of the same name
	}
	return err
}

// retry calls report until it succeeds or ctx is done, backing off from 100 ms to 5 s: the
// kubelet's reports, of a failed container or of a finished deletion, are made once and must
// land, or the pod would stay Running, or Terminating, for good.
func retry(ctx context.Context, report func() error) error {
	backoff := wait.Backoff{Duration: 100 * time.Millisecond, Factor: 2, Steps: math.MaxInt32, Cap: 5 * time.Second}
	var last error
	err := wait.ExponentialBackoffWithContext(ctx, backoff, func(context.Context) (bool, error) {
		last = report()
		return last == nil, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}
