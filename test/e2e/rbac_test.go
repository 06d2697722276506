//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/test/harness/testenv"
)

// Every other test runs the operator under its ServiceAccount and fails on any Forbidden in its
// log; this one takes a permission away and checks that the failure shows where an operator on
// call looks: the Cache's condition, an error in the log, and the reconcile error metric.
func TestMissingPermissionSurfaces(t *testing.T) {
	ctx := context.Background()
	var role rbacv1.ClusterRole
	if err := admin.Get(ctx, client.ObjectKey{Name: "cache-operator-manager"}, &role); err != nil {
		t.Fatal(err)
	}
	original := role.DeepCopy()
	t.Cleanup(func() {
		var current rbacv1.ClusterRole
		if err := admin.Get(ctx, client.ObjectKey{Name: "cache-operator-manager"}, &current); err != nil {
			t.Fatal(err)
		}
		current.Rules = original.Rules
		if err := admin.Update(ctx, &current); err != nil {
			t.Errorf("restoring the operator's role: %v", err)
		}
	})

	o := startOperator(t, "a", "")
	o.AllowForbidden = true
	ns := newNamespace(t)
	key := client.ObjectKey{Namespace: ns, Name: "orders-cache"}
	newCache(t, ns, "orders-cache")
	waitSettled(t, ns, startTimeout)

	for i, rule := range role.Rules {
		if slices.Contains(rule.APIGroups, "apps") && slices.Contains(rule.Resources, "statefulsets") {
			role.Rules[i].Verbs = slices.DeleteFunc(slices.Clone(rule.Verbs), func(v string) bool { return v == "update" })
		}
	}
	if err := admin.Update(ctx, &role); err != nil {
		t.Fatal(err)
	}
	patchCache(t, key, `{"spec":{"shards":5}}`)

	testenv.WaitFor(t, time.Minute, "Ready=False ReconcileFailed naming the Forbidden error", func() (bool, string) {
		c, err := getCache(t, key)
		if err != nil {
			return false, err.Error()
		}
		ready := meta.FindStatusCondition(c.Status.Conditions, cachev2.ConditionReady)
		ok := ready.Status == metav1.ConditionFalse && ready.Reason == cachev2.ReasonReconcileFailed &&
			strings.Contains(ready.Message, "forbidden")
		return ok, fmt.Sprintf("%s/%s %q", ready.Status, ready.Reason, ready.Message)
	})
	testenv.WaitFor(t, 30*time.Second, "an error-level log line and the reconcile error metric", func() (bool, string) {
		errorLogged := slices.ContainsFunc(strings.Split(o.Logs(t), "\n"), func(line string) bool {
			return strings.Contains(line, `"level":"error"`) && strings.Contains(line, "forbidden")
		})
		errors := testenv.Sum(o.Metrics(t), "controller_runtime_reconcile_errors_total", map[string]string{"controller": "cache"})
		return errorLogged && errors > 0, fmt.Sprintf("error logged: %v, reconcile errors: %v", errorLogged, errors)
	})
}
