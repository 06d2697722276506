package backupcontroller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/internal/resources"
)

// backupWorld is a backup (whose policy is Delete unless a test says otherwise) and a
// reconciler, pass by pass: each pass is one step, and a pass run again after any of them (a
// crash, a lost write) finds its way on from what is stored.
type backupWorld struct {
	t *testing.T
	c client.Client
	r *Reconciler
	b *cachev1alpha1.CacheBackup
}

func newBackupWorld(t *testing.T, status cachev1alpha1.CacheBackupStatus) *backupWorld {
	b := &cachev1alpha1.CacheBackup{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly", UID: "this-one"},
		Spec: cachev1alpha1.CacheBackupSpec{CacheName: "orders", DeletionPolicy: cachev1alpha1.DeletionDelete,
			Storage: cachev1alpha1.BucketLocation{Endpoint: "s3:9000", Bucket: "caches", CredentialsSecret: "creds"}},
		Status: status}
	c := fake.NewClientBuilder().WithScheme(controller.NewScheme()).WithObjects(b).
		WithStatusSubresource(&cachev1alpha1.CacheBackup{}).Build()
	return &backupWorld{t: t, c: c, b: b, r: &Reconciler{Client: c, APIReader: c, AgentImage: "example.com/cache-operator:test"}}
}

func (w *backupWorld) pass() ctrl.Result {
	w.t.Helper()
	res, err := w.r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(w.b)})
	if err != nil {
		w.t.Fatal(err)
	}
	return res
}

// backup is the backup as stored, or nil once it is gone.
func (w *backupWorld) backup() *cachev1alpha1.CacheBackup {
	w.t.Helper()
	b := &cachev1alpha1.CacheBackup{}
	if err := w.c.Get(context.Background(), client.ObjectKeyFromObject(w.b), b); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		w.t.Fatal(err)
	}
	return b
}

func (w *backupWorld) job(name string) *batchv1.Job {
	w.t.Helper()
	job := &batchv1.Job{}
	if err := w.c.Get(context.Background(), client.ObjectKey{Namespace: "shop", Name: name}, job); apierrors.IsNotFound(err) {
		return nil
	} else if err != nil {
		w.t.Fatal(err)
	}
	return job
}

func (w *backupWorld) endJob(job *batchv1.Job, kind batchv1.JobConditionType, at time.Time) {
	w.t.Helper()
	job.Status.Conditions = []batchv1.JobCondition{{Type: kind, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
	if err := w.c.Status().Update(context.Background(), job); err != nil {
		w.t.Fatal(err)
	}
}

func reasonOf(b *cachev1alpha1.CacheBackup) string {
	if c := meta.FindStatusCondition(b.Status.Conditions, cachev1alpha1.ConditionObjectsDeleted); c != nil {
		return c.Reason
	}
	return ""
}

// A deleted backup whose policy is Delete goes only once a Job has removed its objects: its own
// Job is stopped first, a failed removal is retried after deletionRetryInterval, and the
// CacheBackup goes when a removal succeeds.
func TestADeletedBackupGoesOnlyOnceItsObjectsAre(t *testing.T) {
	ctx := context.Background()
	running := &batchv1.Job{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "nightly-backup"}}
	w := newBackupWorld(t, cachev1alpha1.CacheBackupStatus{Phase: cachev1alpha1.BackupRunning, Location: "s3://caches/shop/orders/nightly/"})
	if err := controllerutil.SetControllerReference(w.b, running, w.c.Scheme()); err != nil {
		t.Fatal(err)
	}
	if err := w.c.Create(ctx, running); err != nil {
		t.Fatal(err)
	}

	w.pass()
	if b := w.backup(); !slices.Contains(b.Finalizers, cachev1alpha1.BackupObjectsFinalizer) {
		t.Fatalf("after the first pass the finalizers are %v, want %s", b.Finalizers, cachev1alpha1.BackupObjectsFinalizer)
	}
	if err := w.c.Delete(ctx, w.backup()); err != nil {
		t.Fatal(err)
	}
	w.pass()
	if w.job(resources.BackupJobName(w.b)) != nil || w.job(resources.BackupDeletionJobName(w.b)) != nil {
		t.Fatal("the pass after the deletion did not stop the backup's Job first, alone")
	}
	w.pass()
	removal := w.job(resources.BackupDeletionJobName(w.b))
	if removal == nil || w.backup() == nil || reasonOf(w.backup()) != cachev1alpha1.ReasonDeletingObjects {
		t.Fatalf("after the backup's Job went: removal Job %v, backup %+v", removal != nil, w.backup())
	}
	plan, err := backup.ParsePlace(backup.DeleteCommand, removal.Spec.Template.Spec.Containers[0].Args)
	if err != nil || plan.Path != "shop/orders/nightly" || plan.Location.Bucket != "caches" ||
		removal.Spec.Template.Spec.Containers[0].Command[1] != backup.DeleteCommand {
		t.Errorf("the removal Job runs %v %+v (%v)", removal.Spec.Template.Spec.Containers[0].Command, plan, err)
	}
	w.pass() // nothing new while it runs
	if w.backup() == nil || w.job(resources.BackupDeletionJobName(w.b)).UID != removal.UID {
		t.Fatal("a pass while the removal runs changed something")
	}

	w.endJob(removal, batchv1.JobFailed, time.Now())
	if res := w.pass(); res.RequeueAfter <= 0 || res.RequeueAfter > deletionRetryInterval || reasonOf(w.backup()) != cachev1alpha1.ReasonDeletionFailed {
		t.Fatalf("after a failed removal: back in %v, reason %q; want DeletionFailed and a retry within %v", res.RequeueAfter, reasonOf(w.backup()), deletionRetryInterval)
	}
	if w.job(resources.BackupDeletionJobName(w.b)) == nil {
		t.Fatal("the failed removal's Job was deleted before the retry interval")
	}
	w.endJob(w.job(resources.BackupDeletionJobName(w.b)), batchv1.JobFailed, time.Now().Add(-deletionRetryInterval))
	w.pass()
	if w.job(resources.BackupDeletionJobName(w.b)) != nil {
		t.Fatal("the failed removal's Job was kept past the retry interval")
	}
	w.pass()
	retry := w.job(resources.BackupDeletionJobName(w.b))
	if retry == nil {
		t.Fatal("no new removal Job after the failed one went")
	}
	w.endJob(retry, batchv1.JobComplete, time.Now())
	w.pass()
	if b := w.backup(); b != nil {
		t.Fatalf("the backup stays once its objects are removed: %+v", b)
	}
}

// A backup that never started wrote nothing: deleted, it goes at once, with no Job.
func TestADeletedBackupThatNeverStartedGoesAtOnce(t *testing.T) {
	w := newBackupWorld(t, cachev1alpha1.CacheBackupStatus{Phase: cachev1alpha1.BackupPending})
	w.pass()
	if err := w.c.Delete(context.Background(), w.backup()); err != nil {
		t.Fatal(err)
	}
	w.pass()
	if w.backup() != nil || w.job(resources.BackupDeletionJobName(w.b)) != nil {
		t.Error("a backup that never started waited for a removal of objects")
	}
}

// A deleted backup that a Cache restores from keeps its objects, and says why, until that Cache
// holds its data: a pod of the Cache that starts meanwhile fetches its shard from them (retention
// of a schedule with keep 1 deleted such a backup when the next one completed, and the restored
// Cache never became Ready). A Cache that has refused it, or is Restored, holds it no more.
func TestADeletedBackupACacheRestoresFromKeepsItsObjectsUntilRestored(t *testing.T) {
	ctx := context.Background()
	w := newBackupWorld(t, cachev1alpha1.CacheBackupStatus{Phase: cachev1alpha1.BackupCompleted, Location: "s3://caches/shop/orders/nightly/"})
	restoring := func(name string) *cachev2.Cache {
		c := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: cachev2.CacheSpec{RestoreFrom: &cachev2.RestoreSource{Backup: w.b.Name}}}
		if err := w.c.Create(ctx, c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	setRestored := func(c *cachev2.Cache, status metav1.ConditionStatus, reason string) {
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: cachev2.ConditionRestored, Status: status, Reason: reason})
		if err := w.c.Update(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	copyOne, copyTwo := restoring("orders-copy"), restoring("orders-refused")
	w.pass()
	if err := w.c.Delete(ctx, w.backup()); err != nil {
		t.Fatal(err)
	}
	w.pass()
	held := w.backup()
	if held == nil || w.job(resources.BackupDeletionJobName(w.b)) != nil || reasonOf(held) != cachev1alpha1.ReasonHeldForRestore {
		t.Fatalf("a backup two Caches restore from, deleted: removal Job %v, backup %+v; want it held, %s",
			w.job(resources.BackupDeletionJobName(w.b)) != nil, held, cachev1alpha1.ReasonHeldForRestore)
	}
	if c := meta.FindStatusCondition(held.Status.Conditions, cachev1alpha1.ConditionObjectsDeleted); !strings.Contains(c.Message, "orders-copy, orders-refused") {
		t.Errorf("the hold says %q; want it to name both Caches", c.Message)
	}
	setRestored(copyTwo, metav1.ConditionFalse, cachev2.ReasonRestoreRefused)
	setRestored(copyOne, metav1.ConditionFalse, cachev2.ReasonRestoring)
	w.pass()
	if w.job(resources.BackupDeletionJobName(w.b)) != nil {
		t.Fatal("the removal started while a Cache was still restoring")
	}
	setRestored(copyOne, metav1.ConditionTrue, cachev2.ReasonRestoreVerified)
	w.pass()
	if w.job(resources.BackupDeletionJobName(w.b)) == nil || reasonOf(w.backup()) != cachev1alpha1.ReasonDeletingObjects {
		t.Fatal("no removal once every Cache had its data or had refused the backup")
	}
}

// An imported backup stands for another backup's objects: one stored with deletionPolicy Delete
// before admission refused that goes, deleted, without removing them.
func TestADeletedImportedBackupLeavesTheOriginalsObjects(t *testing.T) {
	w := newBackupWorld(t, cachev1alpha1.CacheBackupStatus{Phase: cachev1alpha1.BackupCompleted, Location: "s3://caches/prod/shop/orders/nightly"})
	b := w.backup()
	b.Spec.CacheName, b.Spec.ImportPath = "", "shop/orders/nightly"
	if err := w.c.Update(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	w.pass()
	if err := w.c.Delete(context.Background(), w.backup()); err != nil {
		t.Fatal(err)
	}
	w.pass()
	if w.backup() != nil || w.job(resources.BackupDeletionJobName(w.b)) != nil {
		t.Error("deleting an imported backup started a removal of the original's objects")
	}
}

// A pass that made a backup's Job and crashed before its status write: the next pass finds the
// Job and records the backup Running from the Job's own arguments, a backup taken here with its
// shards and an imported one with the place it reads; no second Job is made.
func TestAJobWhoseStatusWriteWasLostIsFollowed(t *testing.T) {
	ctx := context.Background()
	for name, imported := range map[string]bool{"taken": false, "imported": true} {
		t.Run(name, func(t *testing.T) {
			w := newBackupWorld(t, cachev1alpha1.CacheBackupStatus{})
			w.b.Spec.DeletionPolicy = cachev1alpha1.DeletionRetain
			if err := w.c.Update(ctx, w.b); err != nil {
				t.Fatal(err)
			}
			location, backupPath := backup.PlaceOf(w.b)
			job := resources.BackupJob(w.b, &cachev2.Cache{}, backup.Plan{Location: location, Path: backupPath, ValkeyVersion: "8.1.1", Mode: cachev2.ModeReplicated,
				Shards: []backup.Shard{{Name: "shard-0", Source: "orders-0", Addr: "127.64.0.1:6379"}}}, "example.com/cache-operator:test")
			if imported {
				w.b.Spec.CacheName, w.b.Spec.ImportPath = "", "elsewhere/orders/nightly"
				if err := w.c.Update(ctx, w.b); err != nil {
					t.Fatal(err)
				}
				location, backupPath = backup.PlaceOf(w.b)
				job = resources.BackupImportJob(w.b, backup.Place{Location: location, Path: backupPath}, "example.com/cache-operator:test")
			}
			if err := controllerutil.SetControllerReference(w.b, job, w.c.Scheme()); err != nil {
				t.Fatal(err)
			}
			if err := w.c.Create(ctx, job); err != nil {
				t.Fatal(err)
			}
			w.pass()
			b := w.backup()
			complete := meta.FindStatusCondition(b.Status.Conditions, cachev1alpha1.ConditionComplete)
			switch {
			case b.Status.Phase != cachev1alpha1.BackupRunning || complete == nil:
				t.Fatalf("status %+v; want Running", b.Status)
			case !imported && (len(b.Status.Shards) != 1 || b.Status.Shards[0].Source != "orders-0" || b.Status.CacheMode != string(cachev2.ModeReplicated) ||
				complete.Reason != cachev1alpha1.ReasonSnapshotting):
				t.Errorf("a backup taken here: %+v; want its Job's shard and mode, Snapshotting", b.Status)
			case imported && (b.Status.Location != "s3://caches/elsewhere/orders/nightly/" || complete.Reason != cachev1alpha1.ReasonReadingManifest):
				t.Errorf("an imported backup: %+v; want its place, ReadingManifest", b.Status)
			}
			var jobs batchv1.JobList
			if err := w.c.List(ctx, &jobs); err != nil || len(jobs.Items) != 1 {
				t.Errorf("%d Jobs (%v), want the one made before the crash", len(jobs.Items), err)
			}
		})
	}
}
