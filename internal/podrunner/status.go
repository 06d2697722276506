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

// reportRunning reports the container's current run: running since the process started, ready
// or not, with the pod's Ready and ContainersReady conditions.
func (r *Runner) reportRunning(ctx context.Context, s *server, p *process, ready bool) error {
	return r.reportContainer(ctx, s, ready, corev1.ContainerState{
		Running: &corev1.ContainerStateRunning{StartedAt: metav1.NewTime(p.started)},
	})
}

// reportWaiting reports the container waiting to be restarted, as in CrashLoopBackOff.
func (r *Runner) reportWaiting(ctx context.Context, s *server, reason, message string) error {
	return r.reportContainer(ctx, s, false, corev1.ContainerState{
		Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: message},
	})
}

func (r *Runner) reportContainer(ctx context.Context, s *server, ready bool, state corev1.ContainerState) error {
	status, reason := corev1.ConditionFalse, "ContainersNotReady"
	if ready {
		status, reason = corev1.ConditionTrue, ""
	}
	now := metav1.Now()
	return r.patchStatus(ctx, s, map[string]any{
		"conditions": []map[string]any{
			condition(corev1.ContainersReady, status, reason, now),
			condition(corev1.PodReady, status, reason, now),
		},
		"containerStatuses": []corev1.ContainerStatus{r.containerStatus(s, ready, state)},
	})
}

// reportFinished ends the pod as the kubelet does when its restart policy keeps a container that
// has stopped from running again: Succeeded if it exited with 0, else Failed.
func (r *Runner) reportFinished(ctx context.Context, s *server, ended corev1.ContainerStateTerminated) error {
	phase, reason := corev1.PodFailed, "PodFailed"
	if ended.ExitCode == 0 {
		phase, reason = corev1.PodSucceeded, "PodCompleted"
	}
	now := metav1.Now()
	return r.patchStatus(ctx, s, map[string]any{
		"phase": phase,
		"conditions": []map[string]any{
			condition(corev1.ContainersReady, corev1.ConditionFalse, reason, now),
			condition(corev1.PodReady, corev1.ConditionFalse, reason, now),
		},
		"containerStatuses": []corev1.ContainerStatus{r.containerStatus(s, false, corev1.ContainerState{Terminated: &ended})},
	})
}

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

// containerStatus is the whole status of the pod's container, with how often it was restarted
// and how its last run ended: the list of container statuses is replaced, not merged, by a
// patch.
func (r *Runner) containerStatus(s *server, ready bool, state corev1.ContainerState) corev1.ContainerStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	status := corev1.ContainerStatus{
		Name:         s.containerName,
		Image:        s.image,
		Ready:        ready,
		Started:      ptr.To(state.Running != nil),
		State:        state,
		RestartCount: s.restarts,
	}
	if s.last != nil && state.Terminated == nil {
		status.LastTerminationState = corev1.ContainerState{Terminated: s.last.DeepCopy()}
	}
	return status
}

func condition(t corev1.PodConditionType, status corev1.ConditionStatus, reason string, now metav1.Time) map[string]any {
	c := map[string]any{"type": t, "status": status, "lastTransitionTime": now, "reason": nil}
	if reason != "" {
		c["reason"] = reason
	}
	return c
}

func (r *Runner) patchStatus(ctx context.Context, s *server, status map[string]any) error {
	patch, err := json.Marshal(map[string]any{
		"metadata": map[string]any{"uid": s.uid},
		"status":   status,
	})
	if err != nil {
		return err
	}
	_, err = r.Client.CoreV1().Pods(s.pod.Namespace).Patch(ctx, s.pod.Name, types.StrategicMergePatchType,
		patch, metav1.PatchOptions{}, "status")
	return err
}

// completeDeletion deletes the pod for good once its server has stopped, as the kubelet does:
// with no grace period left, and only the pod this server ran for.
func (r *Runner) completeDeletion(ctx context.Context, s *server) error {
	err := r.Client.CoreV1().Pods(s.pod.Namespace).Delete(ctx, s.pod.Name, metav1.DeleteOptions{
		GracePeriodSeconds: ptr.To[int64](0),
		Preconditions:      &metav1.Preconditions{UID: &s.uid},
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
