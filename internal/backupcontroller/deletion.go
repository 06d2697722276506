package backupcontroller

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/resources"
)

// deletionRetryInterval is how long after a failed removal of a backup's objects the next try
// starts: long enough not to hammer a bucket that is down, short enough to follow a fixed Secret.
const deletionRetryInterval = time.Minute

// removeObjects removes a deleted backup's objects from the bucket, one step a pass, and then
// lets the CacheBackup go: the backup's own Job is stopped first (objects it wrote after the
// removal would stay), then a Job of the operator's image deletes every object under the
// backup's path, its manifest first. A removal that fails is retried; in a namespace being
// deleted, where no Job can start, the objects are left and the backup goes. An imported
// backup's objects are the original's, and stay.
func (r *Reconciler) removeObjects(ctx context.Context, b *cachev1alpha1.CacheBackup) (ctrl.Result, error) {
	if !controllerutil.ContainsFinalizer(b, cachev1alpha1.BackupObjectsFinalizer) {
		return ctrl.Result{}, nil
	}
	if job, err := r.job(ctx, b); err != nil || (job != nil && metav1.IsControlledBy(job, b)) {
		if err == nil && job.DeletionTimestamp == nil {
			// Foreground: the Job stays until its pod is gone, and its deletion brings us back.
			err = r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationForeground), client.Preconditions{UID: &job.UID})
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	switch {
	case b.Status.Location == "":
		return ctrl.Result{}, r.release(ctx, b) // no Job ever started: nothing was written
	case b.Spec.ImportPath != "":
		// Its objects are the original backup's, which another cluster may still list: an
		// imported backup stored with Delete before admission refused it removes nothing.
		return ctrl.Result{}, r.release(ctx, b)
	}
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: resources.BackupDeletionJobName(b)}, job)
	switch {
	case apierrors.IsNotFound(err):
		restoring, err := r.restoringFrom(ctx, b)
		if err != nil || len(restoring) == 0 {
			return ctrl.Result{}, errors.Join(err, r.startDeletion(ctx, b))
		}
		// The Cache's change of Restored, or its deletion, brings us back (backupsOf).
		return ctrl.Result{}, r.setDeletion(ctx, b, cachev1alpha1.ReasonHeldForRestore, fmt.Sprintf(
			"Cache %s restores from this backup: its objects are removed once it holds its data", strings.Join(restoring, ", ")))
	case err != nil:
		return ctrl.Result{}, err
	case !metav1.IsControlledBy(job, b):
		return ctrl.Result{}, r.deletionFailed(ctx, b, fmt.Sprintf(
			"a Job named %s exists and is not this backup's: remove it, and the objects are removed", job.Name))
	case job.DeletionTimestamp != nil:
		return ctrl.Result{}, nil // a failed one, going: its deletion brings us back
	}
	ended, failed := jobEnded(job)
	pod, err := r.agentPod(ctx, job)
	if err != nil {
		return ctrl.Result{}, err
	}
	state := agentState(pod)
	switch {
	case ended && failed == "":
		log.FromContext(ctx).Info("Removed the deleted backup's objects", "location", b.Status.Location)
		return ctrl.Result{}, r.release(ctx, b)
	case ended:
		if state.Terminated != nil && strings.TrimSpace(state.Terminated.Message) != "" {
			failed = strings.TrimSpace(state.Terminated.Message)
		}
		return r.retryDeletion(ctx, b, job, failedAt(job), failed)
	case state.Waiting != nil && resources.CannotStart(state.Waiting.Reason):
		return r.retryDeletion(ctx, b, job, job.CreationTimestamp.Time,
			fmt.Sprintf("the Job's pod cannot start: %s: %s", state.Waiting.Reason, state.Waiting.Message))
	}
	return ctrl.Result{}, nil // running: its end is the Job's event
}

// restoringFrom names the Caches that restore from the backup: they name it in spec.restoreFrom,
// are not deleted, and are not Restored yet, nor refused it. A pod of theirs that starts fetches
// its shard from the backup's objects until then.
func (r *Reconciler) restoringFrom(ctx context.Context, b *cachev1alpha1.CacheBackup) ([]string, error) {
	var caches cachev2.CacheList
	if err := r.List(ctx, &caches, client.InNamespace(b.Namespace)); err != nil {
		return nil, err
	}
	var restoring []string
	for _, c := range caches.Items {
		if c.Spec.RestoreFrom == nil || c.Spec.RestoreFrom.Backup != b.Name {
			continue
		}
		restored := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionRestored)
		over := restored != nil && (restored.Status == metav1.ConditionTrue || restored.Reason == cachev2.ReasonRestoreRefused)
		if c.DeletionTimestamp == nil && !over {
			restoring = append(restoring, c.Name)
		}
	}
	return restoring, nil
}

// startDeletion starts the Job that removes the backup's objects, and says so in the status.
func (r *Reconciler) startDeletion(ctx context.Context, b *cachev1alpha1.CacheBackup) error {
	location, backupPath := backup.PlaceOf(b)
	job := resources.BackupDeletionJob(b, backup.Place{Location: location, Path: backupPath}, r.AgentImage)
	if err := controllerutil.SetControllerReference(b, job, r.Scheme()); err != nil {
		return err
	}
	err := r.Create(ctx, job)
	switch {
	case apierrors.HasStatusCause(err, corev1.NamespaceTerminatingCause):
		log.FromContext(ctx).Info("The namespace is being deleted and no Job can remove the deleted backup's objects: they are left",
			"location", b.Status.Location)
		return r.release(ctx, b)
	case apierrors.IsAlreadyExists(err):
		return nil // its event comes next
	case err != nil:
		return err
	}
	return r.setDeletion(ctx, b, cachev1alpha1.ReasonDeletingObjects,
		fmt.Sprintf("Job %s removes the backup's objects from %s", job.Name, b.Status.Location))
}

// retryDeletion records why the removal failed and, once deletionRetryInterval has passed since
// failedAt, deletes its Job so that the next pass starts another.
func (r *Reconciler) retryDeletion(ctx context.Context, b *cachev1alpha1.CacheBackup, job *batchv1.Job, failedAt time.Time, why string) (ctrl.Result, error) {
	if err := r.deletionFailed(ctx, b, why); err != nil {
		return ctrl.Result{}, err
	}
	if wait := time.Until(failedAt.Add(deletionRetryInterval)); wait > 0 {
		return ctrl.Result{RequeueAfter: wait}, nil
	}
	err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationForeground), client.Preconditions{UID: &job.UID})
	return ctrl.Result{}, client.IgnoreNotFound(err)
}

// failedAt is when the Job failed, or when it was made if it does not say.
func failedAt(job *batchv1.Job) time.Time {
	for _, c := range job.Status.Conditions {
		if c.Type == batchv1.JobFailed && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return job.CreationTimestamp.Time
}

// deletionFailed says in the status why the objects could not be removed.
func (r *Reconciler) deletionFailed(ctx context.Context, b *cachev1alpha1.CacheBackup, why string) error {
	return r.setDeletion(ctx, b, cachev1alpha1.ReasonDeletionFailed, fmt.Sprintf(
		"%s; tried again every %s. Removing the finalizer %s gives up and leaves the objects at %s",
		why, deletionRetryInterval, cachev1alpha1.BackupObjectsFinalizer, b.Status.Location))
}

// setDeletion sets the ObjectsDeleted condition, False with the reason, and stores it if it changed.
func (r *Reconciler) setDeletion(ctx context.Context, b *cachev1alpha1.CacheBackup, reason, message string) error {
	status := b.Status.DeepCopy()
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: cachev1alpha1.ConditionObjectsDeleted,
		Status: metav1.ConditionFalse, Reason: reason, Message: message, ObservedGeneration: b.Generation})
	return r.writeStatus(ctx, b, status)
}

// release removes the finalizer: the CacheBackup goes, and its Jobs with it.
func (r *Reconciler) release(ctx context.Context, b *cachev1alpha1.CacheBackup) error {
	controllerutil.RemoveFinalizer(b, cachev1alpha1.BackupObjectsFinalizer)
	return client.IgnoreNotFound(r.Update(ctx, b))
}
