package schedulecontroller

import (
	"context"
	"slices"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
)

// AnnotationScheduledAt, on a scheduled backup, is the time it was made for (RFC 3339, UTC).
const AnnotationScheduledAt = "cache.example.com/scheduled-at"

// scheduledBackup is the schedule's backup for the time due: named after the time, labelled with
// the schedule, and deleted with its objects (the retention's point). It does not belong to the
// schedule: deleting a schedule leaves the backups it made.
func scheduledBackup(s *cachev1alpha1.CacheBackupSchedule, due time.Time) *cachev1alpha1.CacheBackup {
	return &cachev1alpha1.CacheBackup{
		ObjectMeta: metav1.ObjectMeta{
			Name:        s.Name + "-" + due.UTC().Format(cachev1alpha1.ScheduledBackupNameLayout),
			Namespace:   s.Namespace,
			Labels:      map[string]string{cachev1alpha1.LabelSchedule: s.Name},
			Annotations: map[string]string{AnnotationScheduledAt: due.UTC().Format(time.RFC3339)},
		},
		Spec: cachev1alpha1.CacheBackupSpec{
			CacheName:      s.Spec.CacheName,
			Storage:        s.Spec.Storage,
			DeletionPolicy: cachev1alpha1.DeletionDelete,
		},
	}
}

// scheduledAt is the time a backup was made for: its annotation's, or its creation's for one
// whose annotation was edited away.
func scheduledAt(b *cachev1alpha1.CacheBackup) time.Time {
	if t, err := time.Parse(time.RFC3339, b.Annotations[AnnotationScheduledAt]); err == nil {
		return t
	}
	return b.CreationTimestamp.Time
}

// newestFirst orders a schedule's backups by the time they were made for, the newest first.
func newestFirst(backups []cachev1alpha1.CacheBackup) []cachev1alpha1.CacheBackup {
	slices.SortStableFunc(backups, func(a, b cachev1alpha1.CacheBackup) int {
		if c := scheduledAt(&b).Compare(scheduledAt(&a)); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	return backups
}

// lastScheduled is the time the newest of the backups (newest first) was made for.
func lastScheduled(backups []cachev1alpha1.CacheBackup) (time.Time, bool) {
	if len(backups) == 0 {
		return time.Time{}, false
	}
	return scheduledAt(&backups[0]), true
}

// lastSuccess is when the newest completed backup completed, or nil.
func lastSuccess(backups []cachev1alpha1.CacheBackup) *metav1.Time {
	var last *metav1.Time
	for i := range backups {
		b := &backups[i]
		if end := b.Status.CompletionTime; b.Status.Phase == cachev1alpha1.BackupCompleted && end != nil && (last == nil || end.After(last.Time)) {
			last = end.DeepCopy()
		}
	}
	return last
}

// unfinished is the name of a backup of the schedule that has not ended, or "".
func unfinished(backups []cachev1alpha1.CacheBackup) string {
	for _, b := range backups {
		if !b.Status.Phase.Finished() && b.DeletionTimestamp == nil {
			return b.Name
		}
	}
	return ""
}

// surplus are the backups (newest first) that retention deletes: completed ones past the newest
// keep, and failed ones that are older than the newest completed or past the newest keep
// failed. A failed backup is kept until a later one completes so that its reason can be read;
// one that has not ended is never deleted.
func surplus(backups []cachev1alpha1.CacheBackup, keep int) []*cachev1alpha1.CacheBackup {
	var out []*cachev1alpha1.CacheBackup
	completed, failed := 0, 0
	for i := range backups {
		b := &backups[i]
		if b.DeletionTimestamp != nil {
			continue
		}
		switch b.Status.Phase {
		case cachev1alpha1.BackupCompleted:
			if completed++; completed > keep {
				out = append(out, b)
			}
		case cachev1alpha1.BackupFailed:
			if failed++; completed > 0 || failed > keep {
				out = append(out, b)
			}
		case cachev1alpha1.BackupPending, cachev1alpha1.BackupRunning, "":
		}
	}
	return out
}

// prune deletes the backups past the schedule's retention. Each goes with its objects: the
// backup controller removes them before the CacheBackup is gone.
func (r *Reconciler) prune(ctx context.Context, backups []cachev1alpha1.CacheBackup, keep int) error {
	for _, b := range surplus(backups, keep) {
		err := r.Delete(ctx, b, client.Preconditions{UID: &b.UID})
		if client.IgnoreNotFound(err) != nil {
			return err
		}
		log.FromContext(ctx).Info("Deleted a backup past the schedule's retention", "backup", b.Name, "phase", b.Status.Phase)
	}
	return nil
}
