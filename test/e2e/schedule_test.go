//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	"example.com/cache-operator/internal/schedulecontroller"
	"example.com/cache-operator/test/harness/testenv"
)

// A one-minute schedule makes a backup at its next minute, and with keep 1, once that one
// completes, deletes the schedule's older backup and, through a Job of the operator's image,
// that backup's objects: the bucket then holds the new backup only. The schedule reports its
// latest success and exports what its alert compares.
//
// The older backup is one the schedule would have made an hour before (its label, its time),
// taken for real before the schedule exists: the test waits for one scheduled time, not two.
func TestABackupScheduleKeepsTheNewestAndRemovesTheRestsObjects(t *testing.T) {
	runBeside(t, 1)
	operator := startOperator(t, "a", "", clusterCheckInterval)
	ctx := context.Background()
	namespace, store, cache := readyPagesWithStore(t)
	// The schedule's backups hold their namespace's deletion until their objects are removed:
	// they go while this test's operator and bucket are still there.
	t.Cleanup(func() { deleteAllBackups(t, namespace) })

	hourAgo := time.Now().UTC().Truncate(time.Minute).Add(-time.Hour)
	older := &cachev1alpha1.CacheBackup{
		ObjectMeta: metav1.ObjectMeta{
			Name: "pages-" + hourAgo.Format(cachev1alpha1.ScheduledBackupNameLayout), Namespace: namespace,
			Labels:      map[string]string{cachev1alpha1.LabelSchedule: "pages"},
			Annotations: map[string]string{schedulecontroller.AnnotationScheduledAt: hourAgo.Format(time.RFC3339)},
		},
		Spec: cachev1alpha1.CacheBackupSpec{CacheName: cache.Name, Storage: store.location, DeletionPolicy: cachev1alpha1.DeletionDelete},
	}
	if err := admin.Create(ctx, older); err != nil {
		t.Fatal(err)
	}
	olderKey := client.ObjectKeyFromObject(older)
	older = waitBackup(t, olderKey, cachev1alpha1.BackupCompleted, 2*time.Minute)
	if !slices.Contains(older.Finalizers, cachev1alpha1.BackupObjectsFinalizer) {
		t.Errorf("a backup whose policy is Delete has finalizers %v, want %s", older.Finalizers, cachev1alpha1.BackupObjectsFinalizer)
	}
	olderPrefix := path.Join(store.location.Prefix, namespace, cache.Name, older.Name) + "/"
	if names := store.objects(t, olderPrefix); len(names) != backupShards+1 {
		t.Fatalf("the older backup's objects: %q, want %d RDBs and the manifest", names, backupShards)
	}

	schedule := &cachev1alpha1.CacheBackupSchedule{
		ObjectMeta: metav1.ObjectMeta{Name: "pages", Namespace: namespace},
		Spec:       cachev1alpha1.CacheBackupScheduleSpec{CacheName: cache.Name, Schedule: "* * * * *", Storage: store.location, Keep: 1},
	}
	if err := admin.Create(ctx, schedule); err != nil {
		t.Fatal(err)
	}
	// The scheduled backup comes at the next minute, completes, and the older one goes with its
	// objects.
	var newest cachev1alpha1.CacheBackup
	testenv.WaitFor(t, 3*time.Minute, "a scheduled backup completed and the older one gone", func() (bool, string) {
		var list cachev1alpha1.CacheBackupList
		if err := admin.List(ctx, &list, client.InNamespace(namespace), client.MatchingLabels{cachev1alpha1.LabelSchedule: "pages"}); err != nil {
			return false, err.Error()
		}
		var states []string
		olderGone, completed := true, false
		for _, b := range list.Items {
			states = append(states, b.Name+": "+describeBackup(&b))
			switch {
			case b.Name == older.Name:
				olderGone = false
			case b.Status.Phase == cachev1alpha1.BackupCompleted:
				newest, completed = b, true
			}
		}
		return olderGone && completed, fmt.Sprint(states)
	})
	if got := store.objects(t, olderPrefix); len(got) != 0 {
		t.Errorf("the pruned backup's objects are still in the bucket: %q", got)
	}
	newestPrefix := path.Join(store.location.Prefix, namespace, cache.Name, newest.Name) + "/"
	if names := store.objects(t, newestPrefix); len(names) != backupShards+1 {
		t.Errorf("the scheduled backup's objects: %q, want %d RDBs and the manifest", names, backupShards)
	}

	s := &cachev1alpha1.CacheBackupSchedule{}
	testenv.WaitFor(t, time.Minute, "the schedule's status records the success", func() (bool, string) {
		if err := admin.Get(ctx, client.ObjectKeyFromObject(schedule), s); err != nil {
			return false, err.Error()
		}
		return s.Status.LastSuccessfulTime != nil && s.Status.LastBackup != "", fmt.Sprintf("%+v", s.Status)
	})
	if c := meta.FindStatusCondition(s.Status.Conditions, cachev1alpha1.ConditionScheduling); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Scheduling: %+v, want True", c)
	}
	families := operator.Metrics(t)
	labels := map[string]string{"namespace": namespace, "schedule": "pages", "cache": cache.Name}
	// A later minute's backup may have completed since the status was read: never an earlier one.
	if got, want := testenv.Sum(families, "cache_operator_backup_schedule_last_success_timestamp_seconds", labels), float64(s.Status.LastSuccessfulTime.Unix()); got < want {
		t.Errorf("last success exported as %v, want at least %v", got, want)
	}
	if got := testenv.Sum(families, "cache_operator_backup_schedule_period_seconds", labels); got != 60 {
		t.Errorf("period exported as %v, want 60", got)
	}
}

// deleteAllBackups deletes the namespace's schedules, then its backups, and waits until the
// backups are gone: those whose policy is Delete once their objects are.
func deleteAllBackups(t *testing.T, namespace string) {
	t.Helper()
	ctx := context.Background()
	if err := admin.DeleteAllOf(ctx, &cachev1alpha1.CacheBackupSchedule{}, client.InNamespace(namespace)); err != nil {
		t.Errorf("deleting the schedules of %s: %v", namespace, err)
	}
	if err := admin.DeleteAllOf(ctx, &cachev1alpha1.CacheBackup{}, client.InNamespace(namespace)); err != nil {
		t.Errorf("deleting the backups of %s: %v", namespace, err)
	}
	testenv.WaitFor(t, 2*time.Minute, "the backups of "+namespace+" to be gone", func() (bool, string) {
		var list cachev1alpha1.CacheBackupList
		if err := admin.List(ctx, &list, client.InNamespace(namespace)); err != nil {
			return false, err.Error()
		}
		var left []string
		for _, b := range list.Items {
			left = append(left, b.Name+": "+describeBackup(&b))
		}
		return len(list.Items) == 0, fmt.Sprint(left)
	})
}
