package backupcontroller

import (
	"context"
	"fmt"
	"path"
	"strings"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/resources"
)

// follow records how the backup's Job goes: Running while it runs, and once it ended, Completed
// with the sizes its agent reported, or Failed with its reason.
func (r *Reconciler) follow(ctx context.Context, b *cachev1alpha1.CacheBackup, job *batchv1.Job, status *cachev1alpha1.CacheBackupStatus) error {
	ended, failed := jobEnded(job)
	if status.Phase != cachev1alpha1.BackupRunning {
		// The pass that created the Job did not record it: the Job's arguments say what it does.
		if err := recordFromJob(b, status, job); err != nil {
			return err
		}
	}
	pod, err := r.agentPod(ctx, job)
	if err != nil {
		return err
	}
	if !ended {
		// A pod that cannot start (its Secret or a key of it missing, its image not pulled)
		// would wait for the Job's deadline: the backup fails now, with the kubelet's reason.
		if waiting := agentState(pod).Waiting; waiting != nil && resources.CannotStart(waiting.Reason) {
			setPhase(b, status, cachev1alpha1.BackupFailed, cachev1alpha1.ReasonBackupFailed,
				fmt.Sprintf("the backup's pod cannot start: %s: %s", waiting.Reason, waiting.Message))
		}
		return nil
	}
	message := ""
	if ended := agentState(pod).Terminated; ended != nil {
		message = strings.TrimSpace(ended.Message)
	}
	if failed != "" {
		if message == "" {
			message = failed
		}
		setPhase(b, status, cachev1alpha1.BackupFailed, cachev1alpha1.ReasonBackupFailed, message)
		return nil
	}
	result, err := backup.ParseResult(message)
	if err != nil {
		// The objects and the manifest are whole (the agent ended well), only the sizes are
		// unknown: a pod removed before the operator read it.
		setPhase(b, status, cachev1alpha1.BackupCompleted, cachev1alpha1.ReasonSnapshotsStored,
			"every shard's RDB and the manifest are stored; their sizes are unknown: the Job's pod is gone")
		return nil
	}
	status.Bytes, status.Keys = result.Bytes, result.Keys
	if result.ValkeyVersion != "" {
		status.ValkeyVersion = result.ValkeyVersion // what the servers reported
	}
	status.RDBFormat = int32(result.RDBFormat) //nolint:gosec // an RDB's version has three digits
	reason, done := cachev1alpha1.ReasonSnapshotsStored, "stored"
	if b.Spec.ImportPath != "" {
		// What the manifest lists is the backup: the mode and version it was taken of, its shards.
		reason, done = cachev1alpha1.ReasonManifestRead, "imported from the manifest"
		status.CacheMode = string(cachev2.ModeStandalone)
		if result.Cluster {
			status.CacheMode = string(cachev2.ModeCluster)
		}
		status.Shards = nil
		for _, s := range result.Shards {
			status.Shards = append(status.Shards, cachev1alpha1.BackupShard{Name: s.Name, Source: s.Source})
		}
	}
	location, backupPath := backup.PlaceOf(b)
	for _, s := range result.Shards {
		for i := range status.Shards {
			if status.Shards[i].Name == s.Name {
				status.Shards[i].Bytes, status.Shards[i].Keys, status.Shards[i].Slots, status.Shards[i].Memory = s.Bytes, s.Keys, s.Slots, s.Memory
				status.Shards[i].Object = path.Join(location.Prefix, backupPath, s.Name+".rdb")
			}
		}
	}
	setPhase(b, status, cachev1alpha1.BackupCompleted, reason,
		fmt.Sprintf("%d shards, %d keys, %d bytes, %s at %s", len(status.Shards), result.Keys, result.Bytes, done, status.Location))
	return nil
}

// recordFromJob records the backup Running from what its Job's arguments say it does.
func recordFromJob(b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus, job *batchv1.Job) error {
	container := job.Spec.Template.Spec.Containers[0]
	if b.Spec.ImportPath != "" {
		place, err := backup.ParsePlace(backup.InspectCommand, container.Args)
		if err != nil {
			return fmt.Errorf("reading the place of Job %s: %w", job.Name, err)
		}
		recordImporting(b, status, place)
		return nil
	}
	plan, err := backup.ParsePlan(container.Args)
	if err != nil {
		return fmt.Errorf("reading the plan of Job %s: %w", job.Name, err)
	}
	recordRunning(b, status, plan)
	return nil
}

// jobEnded reports whether the Job (nil: none) ended, and if it failed, how, from its conditions.
func jobEnded(job *batchv1.Job) (ended bool, failed string) {
	if job == nil {
		return false, ""
	}
	for _, c := range job.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			continue
		}
		switch c.Type {
		case batchv1.JobComplete:
			return true, ""
		case batchv1.JobFailed:
			return true, fmt.Sprintf("the Job failed: %s: %s", c.Reason, c.Message)
		case batchv1.JobSuspended, batchv1.JobFailureTarget, batchv1.JobSuccessCriteriaMet:
			// On the way to an end that Complete or Failed then says.
		}
	}
	return false, ""
}

// agentPod is the backup Job's pod, read from the API server (the operator caches no such pods),
// or nil. The Job runs one pod: it never retries.
func (r *Reconciler) agentPod(ctx context.Context, job *batchv1.Job) (*corev1.Pod, error) {
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(job.Namespace), client.MatchingLabels{batchv1.JobNameLabel: job.Name}); err != nil {
		return nil, err
	}
	if len(pods.Items) == 0 {
		return nil, nil
	}
	return &pods.Items[0], nil
}

// agentState is the state of the agent's container: when it ended, what it wrote (its Result,
// or why it failed) is the state's message.
func agentState(pod *corev1.Pod) corev1.ContainerState {
	if pod != nil {
		for _, c := range pod.Status.ContainerStatuses {
			if c.Name == resources.BackupContainerName {
				return c.State
			}
		}
	}
	return corev1.ContainerState{}
}

// lost fails a Running backup whose Job is gone: deleted by someone before it ended. The
// informer may not have seen a Job just created, so the API server is asked first.
func (r *Reconciler) lost(ctx context.Context, b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus) error {
	job := &batchv1.Job{}
	err := r.APIReader.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: resources.BackupJobName(b)}, job)
	switch {
	case err == nil && !metav1.IsControlledBy(job, b):
		foreignJob(b, status, job) // one the informer does not show: without the label
		return nil
	case !apierrors.IsNotFound(err):
		return err // there after all (nil): its informer event comes next
	}
	setLost(b, status)
	return nil
}

// setLost fails a backup whose Job was deleted before it ended.
func setLost(b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus) {
	setPhase(b, status, cachev1alpha1.BackupFailed, cachev1alpha1.ReasonJobLost,
		fmt.Sprintf("Job %s was deleted before it ended; the backup is not one to restore from: make another CacheBackup", resources.BackupJobName(b)))
}
