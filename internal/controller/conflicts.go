package controller

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// conflictRetryAfter is when a pass that met a conflict is retried. The write that made ours
// stale usually enqueues the Cache again sooner, through its watch event; this is the backstop.
const conflictRetryAfter = time.Second

// routineConflicts hands a reconciler's conflicts to the queue as retries rather than errors. A
// conflict is a write from a read the informer had not yet brought up to date: routine under
// load, resolved by the next pass from a fresh read, and not worth an error-level log line or a
// count in the reconcile errors the alerts watch. An error that is more than conflicts stays an
// error.
type routineConflicts struct {
	ctrlreconcile.Reconciler
}

func (c routineConflicts) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	result, err := c.Reconciler.Reconcile(ctx, req)
	if err != nil && onlyConflicts(err) {
		log.FromContext(ctx).V(1).Info("Retrying after a conflict", "error", err.Error())
		return ctrl.Result{RequeueAfter: conflictRetryAfter}, nil
	}
	return result, err
}

// onlyConflicts reports whether err is a conflict, or errors that all are.
func onlyConflicts(err error) bool {
	if joined, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range joined.Unwrap() {
			if !onlyConflicts(e) {
				return false
			}
		}
		return true
	}
	return apierrors.IsConflict(err)
}
