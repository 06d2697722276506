// Package schedulecontroller makes the backups of CacheBackupSchedules: at each time the
// schedule says, one CacheBackup (which package backupcontroller takes), never two of one
// schedule at once, and once backups complete, it deletes those past the schedule's retention,
// their objects with them (their deletion policy is Delete).
//
// Everything a pass decides comes from the cluster's state: a backup's name holds its scheduled
// time, so a pass that crashed after making one and before writing the status makes nothing
// twice, and an operator that was down makes one backup for the latest time it missed.
package schedulecontroller

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/cronschedule"
)

// ControllerName names the controller in logs and metrics.
const ControllerName = "cachebackupschedule"

// Reconciler makes the backups of schedules and prunes them.
type Reconciler struct {
	client.Client
	// Clock is the time the schedules are read against: the real one, or a test's.
	Clock clock.PassiveClock
}

// +kubebuilder:rbac:groups=cache.example.com,resources=cachebackupschedules,verbs=get;list;watch
// +kubebuilder:rbac:groups=cache.example.com,resources=cachebackupschedules/status,verbs=update
// +kubebuilder:rbac:groups=cache.example.com,resources=cachebackups,verbs=get;list;watch;create;delete

// Reconcile prunes the schedule's finished backups past its retention, makes the backup that is
// due, if one is and the previous one has ended, and comes back when the next one is due.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	s := &cachev1alpha1.CacheBackupSchedule{}
	if err := r.Get(ctx, req.NamespacedName, s); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var list cachev1alpha1.CacheBackupList
	if err := r.List(ctx, &list, client.InNamespace(s.Namespace), client.MatchingLabels{cachev1alpha1.LabelSchedule: s.Name}); err != nil {
		return ctrl.Result{}, err
	}
	backups := newestFirst(list.Items)
	if err := r.prune(ctx, backups, max(int(s.Spec.Keep), 1)); err != nil {
		return ctrl.Result{}, err
	}
	status := s.Status.DeepCopy()
	status.LastSuccessfulTime = lastSuccess(backups)
	next, err := r.schedule(ctx, s, backups, status)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := r.writeStatus(ctx, s, status); err != nil || next.IsZero() {
		return ctrl.Result{}, err
	}
	return ctrl.Result{RequeueAfter: max(next.Sub(r.Clock.Now()), time.Second)}, nil
}

// schedule makes the backup that is due, if the schedule says one is, and returns when the next
// one is due (zero: never, the schedule being suspended or unreadable). status records what it did.
func (r *Reconciler) schedule(ctx context.Context, s *cachev1alpha1.CacheBackupSchedule, backups []cachev1alpha1.CacheBackup, status *cachev1alpha1.CacheBackupScheduleStatus) (time.Time, error) {
	cron, err := cronschedule.Parse(s.Spec.Schedule)
	if err != nil {
		setScheduling(s, status, metav1.ConditionFalse, cachev1alpha1.ReasonInvalidSchedule,
			fmt.Sprintf("spec.schedule %q: %v", s.Spec.Schedule, err))
		status.NextScheduleTime = nil
		return time.Time{}, nil
	}
	if s.Spec.Suspend {
		setScheduling(s, status, metav1.ConditionFalse, cachev1alpha1.ReasonSuspended, "spec.suspend is set: no backup is made")
		status.NextScheduleTime = nil
		return time.Time{}, nil
	}
	now := r.Clock.Now()
	next := cron.Next(now)
	status.NextScheduleTime = ptrTime(next)
	// The latest time made: the newest backup's, or the status's if its backups were deleted by
	// hand; a new schedule makes nothing for the times before it.
	since := s.CreationTimestamp.Time
	if status.LastScheduleTime != nil && status.LastScheduleTime.After(since) {
		since = status.LastScheduleTime.Time
	}
	if newest, ok := lastScheduled(backups); ok && newest.After(since) {
		since = newest
		status.LastScheduleTime, status.LastBackup = ptrTime(newest), backups[0].Name
	}
	due, isDue := cronschedule.Latest(cron, since, now)
	switch running := unfinished(backups); {
	case !isDue:
		setScheduling(s, status, metav1.ConditionTrue, cachev1alpha1.ReasonScheduled, "the next backup is due at "+next.Format(time.RFC3339))
	case running != "":
		// One at a time: two snapshots of one Cache would only slow each other. The backup's
		// end brings this schedule back, and the latest time due then is made.
		setScheduling(s, status, metav1.ConditionTrue, cachev1alpha1.ReasonPreviousBackupRunning, fmt.Sprintf(
			"a backup was due at %s; it is made once %s ends", due.Format(time.RFC3339), running))
	default:
		made, err := r.makeBackup(ctx, s, due, status)
		if err != nil || !made {
			return next, err
		}
		setScheduling(s, status, metav1.ConditionTrue, cachev1alpha1.ReasonScheduled, "the next backup is due at "+next.Format(time.RFC3339))
	}
	return next, nil
}

// makeBackup makes the schedule's backup for the time due, unless its Cache does not exist (its
// backups would only fail): the schedule then says so, and the time stays due.
func (r *Reconciler) makeBackup(ctx context.Context, s *cachev1alpha1.CacheBackupSchedule, due time.Time, status *cachev1alpha1.CacheBackupScheduleStatus) (bool, error) {
	err := r.Get(ctx, client.ObjectKey{Namespace: s.Namespace, Name: s.Spec.CacheName}, &cachev2.Cache{})
	if apierrors.IsNotFound(err) {
		setScheduling(s, status, metav1.ConditionFalse, cachev1alpha1.ReasonCacheNotFound, fmt.Sprintf(
			"a backup was due at %s, and Cache %s does not exist in namespace %s", due.Format(time.RFC3339), s.Spec.CacheName, s.Namespace))
		return false, nil
	} else if err != nil {
		return false, err
	}
	b := scheduledBackup(s, due)
	// The name is the time's: a pass that made it and crashed before its status write finds it
	// here, and makes nothing twice.
	if err := r.Create(ctx, b); err != nil && !apierrors.IsAlreadyExists(err) {
		return false, err
	}
	log.FromContext(ctx).Info("Made a scheduled backup", "backup", b.Name, "scheduledAt", due)
	status.LastScheduleTime = ptrTime(due)
	status.LastBackup = b.Name
	return true, nil
}

// setScheduling sets the Scheduling condition.
func setScheduling(s *cachev1alpha1.CacheBackupSchedule, status *cachev1alpha1.CacheBackupScheduleStatus, value metav1.ConditionStatus, reason, message string) {
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{Type: cachev1alpha1.ConditionScheduling,
		Status: value, Reason: reason, Message: message, ObservedGeneration: s.Generation})
}

// writeStatus stores the status, and only when it changed: an unchanged pass writes nothing.
func (r *Reconciler) writeStatus(ctx context.Context, s *cachev1alpha1.CacheBackupSchedule, status *cachev1alpha1.CacheBackupScheduleStatus) error {
	if equality.Semantic.DeepEqual(&s.Status, status) {
		return nil
	}
	s.Status = *status
	return r.Status().Update(ctx, s)
}

func ptrTime(t time.Time) *metav1.Time {
	mt := metav1.NewTime(t)
	return &mt
}

// SetupWithManager registers the controller: it watches the schedules and the backups they made.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, maxConcurrentReconciles int) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&cachev1alpha1.CacheBackupSchedule{}).
		Watches(&cachev1alpha1.CacheBackup{}, handler.EnqueueRequestsFromMapFunc(scheduleOf)).
		WithOptions(controller.Options{MaxConcurrentReconciles: maxConcurrentReconciles}).
		Complete(r)
}

// scheduleOf is the schedule that made a backup, if one did.
func scheduleOf(_ context.Context, b client.Object) []reconcile.Request {
	name := b.GetLabels()[cachev1alpha1.LabelSchedule]
	if name == "" {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: b.GetNamespace(), Name: name}}}
}
