package controller

import (
	"context"
	"errors"
	"fmt"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	ctrlreconcile "sigs.k8s.io/controller-runtime/pkg/reconcile"
)

func TestConflictsAreRetriedNotReportedAsErrors(t *testing.T) {
	conflict := apierrors.NewConflict(schema.GroupResource{Group: "cache.example.com", Resource: "caches"}, "orders-cache", errors.New("modified"))
	other := errors.New("the catalogue is down")
	for _, tc := range []struct {
		name      string
		err       error
		wantError bool
	}{
		{"a conflict", fmt.Errorf("updating status: %w", conflict), false},
		{"conflicts only", errors.Join(conflict, fmt.Errorf("again: %w", conflict)), false},
		{"a conflict and another error", errors.Join(conflict, other), true},
		{"another error", other, true},
	} {
		inner := ctrlreconcile.Func(func(context.Context, ctrl.Request) (ctrl.Result, error) { return ctrl.Result{}, tc.err })
		result, err := routineConflicts{inner}.Reconcile(context.Background(), ctrl.Request{})
		if (err != nil) != tc.wantError {
			t.Errorf("%s: error %v, want one: %v", tc.name, err, tc.wantError)
		}
		if !tc.wantError && result.RequeueAfter != conflictRetryAfter {
			t.Errorf("%s: result %+v, want a retry after %s", tc.name, result, conflictRetryAfter)
		}
	}
}
