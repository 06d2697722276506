// Package backupcontroller takes the backups of Caches. For each CacheBackup it waits until the
// Cache is Ready, then starts a Job that streams a snapshot of each shard into the bucket
// (package backup, in the operator's own image), follows the Job through its informer and
// records how it ended; and when a backup whose deletion policy is Delete is deleted, another
// Job removes its objects before it goes. An imported backup's Job reads its manifest instead.
// Nothing slow runs in Reconcile: a pass reads, makes at most one write besides the status, and
// returns, so a backup of any size never holds a worker; and the Jobs go on while the operator
// restarts.
package backupcontroller

import (
	"context"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "cachebackup"

// Reconciler takes the backups of Caches.
type Reconciler struct {
	client.Client
	// APIReader reads around the informers: the pods of a Cache, when a backup starts, and the
	// pod of a backup's Job, on each pass while it runs (the operator caches neither).
	APIReader client.Reader
	// AgentImage is the operator's own image, which the backup Jobs run.
	AgentImage string
	// Stall, if set, is how long a snapshot waits for the next byte before the backup fails.
	Stall time.Duration
}

// +kubebuilder:rbac:groups=cache.example.com,resources=cachebackups,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=cache.example.com,resources=cachebackups/status,verbs=update
// The Jobs it makes block their backup's deletion (their owner reference), which some API servers
// allow only to who may update the backup's finalizers.
// +kubebuilder:rbac:groups=cache.example.com,resources=cachebackups/finalizers,verbs=update
// +kubebuilder:rbac:groups=batch,resources=jobs,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// Reconcile moves a backup one step along its life: Pending until its Cache is Ready, Running
// while its Job runs, Completed or Failed once the Job ended; then the Job is removed. A backup
// whose deletion policy is Delete is held by a finalizer from its first pass, and once deleted,
// its objects are removed before it goes.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	b := &cachev1alpha1.CacheBackup{}
	if err := r.Get(ctx, req.NamespacedName, b); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if b.DeletionTimestamp != nil {
		return r.removeObjects(ctx, b)
	}
	if b.Spec.DeletionPolicy == cachev1alpha1.DeletionDelete && controllerutil.AddFinalizer(b, cachev1alpha1.BackupObjectsFinalizer) {
		// Before the Job writes anything: from now on, the backup's deletion removes its objects.
		return ctrl.Result{}, r.Update(ctx, b)
	}
	job, err := r.job(ctx, b)
	if err != nil {
		return ctrl.Result{}, err
	}
	if b.Status.Phase.Finished() {
		return ctrl.Result{}, r.removeJob(ctx, b, job)
	}
	status := b.Status.DeepCopy()
	switch ended, _ := jobEnded(job); {
	case job != nil && !metav1.IsControlledBy(job, b):
		foreignJob(b, status, job)
	case job != nil && (job.DeletionTimestamp == nil || ended):
		err = r.follow(ctx, b, job, status)
	case job != nil:
		setLost(b, status) // deleted before it ended
	case b.Status.Phase == cachev1alpha1.BackupRunning:
		err = r.lost(ctx, b, status)
	default:
		err = r.start(ctx, b, status)
	}
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.writeStatus(ctx, b, status); err != nil || status.Phase != cachev1alpha1.BackupRunning {
		return ctrl.Result{}, err
	}
	// The Job's events say when it ends; only a pod that cannot start says nothing to the Job.
	return ctrl.Result{RequeueAfter: startCheckInterval}, nil
}

// startCheckInterval is how often a running backup's pod is checked for a reason it cannot start.
const startCheckInterval = 30 * time.Second

// job is the backup's Job, from the informer, or nil.
func (r *Reconciler) job(ctx context.Context, b *cachev1alpha1.CacheBackup) (*batchv1.Job, error) {
	job := &batchv1.Job{}
	err := r.Get(ctx, client.ObjectKey{Namespace: b.Namespace, Name: resources.BackupJobName(b)}, job)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return job, err
}

// removeJob deletes a finished backup's Job and its pod: what the backup is, is in its status
// by then, and a fleet's finished Jobs would otherwise pile up. A Job of its name that is not its
// own is left alone.
func (r *Reconciler) removeJob(ctx context.Context, b *cachev1alpha1.CacheBackup, job *batchv1.Job) error {
	if job == nil || job.DeletionTimestamp != nil || !metav1.IsControlledBy(job, b) {
		return nil
	}
	err := r.Delete(ctx, job, client.PropagationPolicy(metav1.DeletePropagationBackground), client.Preconditions{UID: &job.UID})
	return client.IgnoreNotFound(err)
}

// writeStatus stores the status, and only when it changed: an unchanged pass writes nothing.
func (r *Reconciler) writeStatus(ctx context.Context, b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus) error {
	if equality.Semantic.DeepEqual(&b.Status, status) {
		return nil
	}
	b.Status = *status
	return r.Status().Update(ctx, b)
}

// setPhase sets the phase and the Complete condition that says why.
func setPhase(b *cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupStatus, phase cachev1alpha1.BackupPhase, reason, message string) {
	status.Phase = phase
	cond := metav1.Condition{Type: cachev1alpha1.ConditionComplete, Status: metav1.ConditionFalse,
		Reason: reason, Message: message, ObservedGeneration: b.Generation}
	if phase == cachev1alpha1.BackupCompleted {
		cond.Status = metav1.ConditionTrue
	}
	meta.SetStatusCondition(&status.Conditions, cond)
	if phase.Finished() && status.CompletionTime == nil {
		status.CompletionTime = ptrNow()
	}
}

func ptrNow() *metav1.Time {
	now := metav1.NewTime(time.Now().Truncate(time.Second))
	return &now
}

// cacheNameField indexes the backups by their Cache, so that a change of a Cache wakes the
// backups that wait for it.
const cacheNameField = "spec.cacheName"

// SetupWithManager registers the controller: it watches the backups, their Jobs, and the Caches
// and credentials they wait for.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager, maxConcurrentReconciles int) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &cachev1alpha1.CacheBackup{}, cacheNameField, func(o client.Object) []string {
		return []string{o.(*cachev1alpha1.CacheBackup).Spec.CacheName}
	}); err != nil {
		return err
	}
	// No index on the Caches: an index makes the Cache informer at set-up, and the manager then
	// waits for it to sync before it starts anything else, the webhook's certificate loader
	// included. Listing Caches stored as v1 needs that webhook, so an operator upgraded from v1
	// would never start. restoringFrom filters the namespace's Caches instead.
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&cachev1alpha1.CacheBackup{}).
		Owns(&batchv1.Job{}).
		Watches(&cachev2.Cache{}, handler.EnqueueRequestsFromMapFunc(r.backupsOf)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.backupsOfCredentials)).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles}).
		Complete(r)
}

// backupsOf are the unfinished backups of a Cache, and the backup it restores from, whose
// deletion may wait for it.
func (r *Reconciler) backupsOf(ctx context.Context, obj client.Object) []reconcile.Request {
	cache := obj.(*cachev2.Cache)
	var requests []reconcile.Request
	if from := cache.Spec.RestoreFrom; from != nil {
		requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: cache.Namespace, Name: from.Backup}})
	}
	return append(requests, r.unfinishedBackups(ctx, cache.Namespace, cache.Name)...)
}

// backupsOfCredentials are the unfinished backups of the Cache whose credentials the Secret
// holds: one may wait for the Cache's nodes to be given the backup user (backupUserPending).
func (r *Reconciler) backupsOfCredentials(ctx context.Context, obj client.Object) []reconcile.Request {
	cache, ok := obj.GetLabels()[cachev2.LabelCredentialsOf]
	if !ok {
		return nil
	}
	return r.unfinishedBackups(ctx, obj.GetNamespace(), cache)
}

// unfinishedBackups are the backups of the Cache that have not ended.
func (r *Reconciler) unfinishedBackups(ctx context.Context, namespace, cache string) []reconcile.Request {
	var backups cachev1alpha1.CacheBackupList
	if err := r.List(ctx, &backups, client.InNamespace(namespace), client.MatchingFields{cacheNameField: cache}); err != nil {
		return nil
	}
	var requests []reconcile.Request
	for _, b := range backups.Items {
		if !b.Status.Phase.Finished() {
			requests = append(requests, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&b)})
		}
	}
	return requests
}
