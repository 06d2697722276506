//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1 "example.com/cache-operator/api/v1"
	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/test/harness/testenv"
)

// metricName matches the names of the metrics our alerts and dashboard read.
var metricName = regexp.MustCompile(`\b(?:cache_operator|controller_runtime|workqueue|rest_client|leader_election|process|go|apiserver)_[a-z0-9_]+`)

// controllerLabel matches a selection on the controller label, in YAML or in JSON.
var controllerLabel = regexp.MustCompile(`controller=\\?"([^"\\]+)\\?"`)

// Every metric the alerts and the dashboard query is one the running operator (or, for an
// apiserver_ one, the API server) exports, and every
// controller they select on is one it runs: a renamed or dropped metric or controller would
// otherwise leave an alert that can never fire.
func TestAlertsAndDashboardUseExportedMetrics(t *testing.T) {
	runBeside(t, 1)
	var used, controllers []string
	for _, file := range []string{"config/prometheus/alerts.yaml", "config/grafana/cache-operator-dashboard.json"} {
		b, err := os.ReadFile(filepath.Join(testenv.Root(), file))
		if err != nil {
			t.Fatal(err)
		}
		used = append(used, metricName.FindAllString(string(b), -1)...)
		for _, m := range controllerLabel.FindAllStringSubmatch(string(b), -1) {
			controllers = append(controllers, m[1])
		}
	}
	slices.Sort(used)
	used = slices.Compact(used)

	etcd := testenv.StartEtcd(t)
	// An alert reads leader_election_master_status, which exists with leader election on: on a
	// Lease of this run's own (the operator is killed, and leaves it held), longer than the one
	// of the tests that run alone, so that an API server busy with the tests beside this one
	// renews it in time.
	o := startOperator(t, "metrics", etcd.Endpoint, "--leader-elect=true", "--leader-election-id", leaderElectionID+"-"+rand.String(8),
		"--leader-elect-lease-duration", "60s", "--leader-elect-renew-deadline", "40s")
	waitLeader(t, o)
	ns := newNamespace(t)
	newOneNodeCache(t, ns, "orders-cache")
	newClusterCache(t, ns, "sessions-cache", 1, 0)  // the Cluster metrics exist for Cluster Caches
	newReplicatedCache(t, ns, "jobs-cache", 0, nil) // the Replicated ones for Replicated Caches
	waitSettled(t, ns, 2*time.Minute)
	// The backup metrics exist with a backup that completed and one that failed.
	store := newBackupStore(t, ns)
	completed := newBackup(t, ns, "orders-nightly", "orders-cache", store.location)
	doomed := newOneNodeCache(t, ns, "doomed-cache")
	failed := newBackup(t, ns, "doomed-nightly", doomed.Name, store.location)
	if err := admin.Delete(context.Background(), doomed); err != nil {
		t.Fatal(err)
	}
	// The schedule metrics exist with a schedule (one that makes nothing this year, most likely).
	schedule := &cachev1alpha1.CacheBackupSchedule{ObjectMeta: metav1.ObjectMeta{Name: "orders-yearly", Namespace: ns},
		Spec: cachev1alpha1.CacheBackupScheduleSpec{CacheName: "orders-cache", Schedule: "@yearly", Storage: store.location, Keep: 1}}
	if err := admin.Create(context.Background(), schedule); err != nil {
		t.Fatal(err)
	}
	waitBackup(t, completed, cachev1alpha1.BackupCompleted, 2*time.Minute)
	waitBackup(t, failed, cachev1alpha1.BackupFailed, time.Minute)
	testenv.WaitFor(t, time.Minute, "the schedule reconciled", func() (bool, string) {
		err := admin.Get(context.Background(), client.ObjectKeyFromObject(schedule), schedule)
		return err == nil && len(schedule.Status.Conditions) > 0, fmt.Sprint(err, schedule.Status)
	})
	families := o.Metrics(t)
	// The API server's metrics of conversion appear with its first conversion.
	testenv.WaitFor(t, time.Minute, "a read of the Cache through v1", func() (bool, string) {
		err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: "orders-cache"}, &cachev1.Cache{})
		return err == nil, fmt.Sprint(err)
	})
	apiserverMetrics, err := cluster.KubectlOutput(context.Background(), "get", "--raw", "/metrics")
	if err != nil {
		t.Fatal(err)
	}

	for _, name := range used {
		if strings.HasPrefix(name, "apiserver_") {
			if !strings.Contains(apiserverMetrics, "\n"+name+"{") {
				t.Errorf("%s is queried but the API server does not export it", name)
			}
			continue
		}
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if families[name] == nil && families[base] == nil {
			t.Errorf("%s is queried but the operator does not export it", name)
		}
	}
	if len(controllers) == 0 {
		t.Fatal("the alerts and the dashboard select on no controller label; this test's pattern is out of date")
	}
	for _, name := range controllers {
		if testenv.Sum(families, "controller_runtime_reconcile_total", map[string]string{"controller": name}) == 0 {
			t.Errorf("controller %q is selected on but the operator reconciles under no such name (it is %q)", name, controller.ControllerName)
		}
	}
}
