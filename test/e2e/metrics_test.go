package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/internal/testenv"
)

// metricName matches the names of the metrics our alerts and dashboard read.
var metricName = regexp.MustCompile(`\b(?:cache_operator|controller_runtime|workqueue|rest_client|leader_election|process|go)_[a-z0-9_]+`)

// Every metric the alerts and the dashboard query is one the running operator exports: a
// renamed or dropped metric would otherwise leave an alert that can never fire.
func TestAlertsAndDashboardUseExportedMetrics(t *testing.T) {
	var used []string
	for _, file := range []string{"config/prometheus/alerts.yaml", "config/grafana/cache-operator-dashboard.json"} {
		b, err := os.ReadFile(filepath.Join(testenv.Root(), file))
		if err != nil {
			t.Fatal(err)
		}
		used = append(used, metricName.FindAllString(string(b), -1)...)
	}
	slices.Sort(used)
	used = slices.Compact(used)

	etcd := testenv.StartEtcd(t)
	o := startOperator(t, "metrics", etcd.Endpoint)
	waitLeader(t, o)
	ns := newNamespace(t)
	newCache(t, ns, "orders-cache")
	waitSettled(t, ns, time.Minute)
	families := o.Metrics(t)

	for _, name := range used {
		base := name
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			base = strings.TrimSuffix(base, suffix)
		}
		if families[name] == nil && families[base] == nil {
			t.Errorf("%s is queried but the operator does not export it", name)
		}
	}
}
