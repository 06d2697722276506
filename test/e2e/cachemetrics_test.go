//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	valkeygo "github.com/valkey-io/valkey-go"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/test/harness/testenv"
)

// exporterMetricName matches the names of the exporter's metrics that the cache alerts and the
// dashboard read.
var exporterMetricName = regexp.MustCompile(`\bredis_[a-z0-9_]+`)

// scrapeExporter reads the metrics the exporter in the pod serves, as the PodMonitor scrapes
// them: the pod's IP and the container port named metrics.
func scrapeExporter(pod *corev1.Pod) (map[string]*dto.MetricFamily, error) {
	return testenv.ScrapeMetrics("http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(resources.MetricsPort)) + "/metrics")
}

// TestEachPodsExporterServesWhatTheCacheAlertsRead: in a Cluster with auth and metrics, every pod
// (restricted, as the Pod Security Standard says) runs the exporter beside Valkey, which reads its server as the exporter's own user, without an
// error. What it serves is what the cluster is: every node up, the cluster ok with all its slots
// served, the replica's link to its primary up, a client's reads counted as hits and misses. A
// server that crashes restarts in place while its exporter keeps running and reads the new one.
// And every metric of the exporter's that the cache alerts and the dashboard read is served by a
// running exporter, so none of them waits on a series that never comes.
func TestEachPodsExporterServesWhatTheCacheAlertsRead(t *testing.T) {
	runBeside(t, 1)
	startOperator(t, "a", "", clusterCheckInterval)
	// The pods, exporter included, meet the restricted Pod Security Standard, or none is made.
	ns := newRestrictedNamespace(t)
	c := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Name: "watched", Namespace: ns},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 1, ReplicasPerShard: new(int32(1)),
			Version: valkeyVersion, Memory: resource.MustParse("64Mi"),
			Auth: &cachev2.Auth{}, Metrics: &cachev2.Metrics{Enabled: true}},
	}
	if err := admin.Create(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKeyFromObject(c)
	c = waitReadyAs(t, key, metav1.ConditionTrue, cachev2.ReasonClusterReady, 3*time.Minute)

	app := appClusterClient(t, key, string(appSecret(t, ns, "watched-auth").Data[resources.AppPasswordKey]))
	ctx := context.Background()
	if err := app.Do(ctx, app.B().Set().Key("k").Value("v").Build()).Error(); err != nil {
		t.Fatal(err)
	}
	const hits, misses = 3, 2
	for i := range hits + misses {
		k := "k"
		if i >= hits {
			k = fmt.Sprint("missing-", i)
		}
		if err := app.Do(ctx, app.B().Get().Key(k).Build()).Error(); err != nil && !valkeygo.IsValkeyNil(err) {
			t.Fatal(err)
		}
	}

	pods := cachePods(t, key)
	served := map[string]bool{}
	testenv.WaitFor(t, time.Minute, "every pod's exporter to report its node as it is", func() (bool, string) {
		var hitsSeen, missesSeen, linksUp float64
		for i := range pods {
			families, err := scrapeExporter(&pods[i])
			if err != nil || families == nil {
				return false, fmt.Sprintf("%s: %v", pods[i].Name, err)
			}
			for name := range families {
				served[name] = true
			}
			up := testenv.Sum(families, "redis_up", nil)
			scrapeErrors := testenv.Sum(families, "redis_exporter_last_scrape_error", nil)
			state := testenv.Sum(families, "redis_cluster_state", nil)
			slots := testenv.Sum(families, "redis_cluster_slots_ok", nil)
			if up != 1 || scrapeErrors != 0 || state != 1 || slots != 16384 {
				return false, fmt.Sprintf("%s: redis_up %v, scrape errors %v, cluster state %v, slots ok %v", pods[i].Name, up, scrapeErrors, state, slots)
			}
			hitsSeen += testenv.Sum(families, "redis_keyspace_hits_total", nil)
			missesSeen += testenv.Sum(families, "redis_keyspace_misses_total", nil)
			linksUp += testenv.Sum(families, "redis_master_link_up", nil)
		}
		return hitsSeen >= hits && missesSeen >= misses && linksUp == 1,
			fmt.Sprintf("hits %v, misses %v, replicas linked %v", hitsSeen, missesSeen, linksUp)
	})

	// A server that crashes restarts in place, beside an exporter that keeps running and sees a
	// new server: what CacheNodeRestartingOften counts.
	replica, _ := podOfRole(t, c, cachev2.RoleReplica)
	runID := func() (string, error) {
		families, err := scrapeExporter(replica)
		if err != nil {
			return "", fmt.Errorf("scraping %s: %w", replica.Name, err)
		}
		if families == nil {
			return "", fmt.Errorf("%s's exporter does not answer", replica.Name)
		}
		for _, m := range families["redis_instance_info"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "run_id" {
					return l.GetValue(), nil
				}
			}
		}
		return "", fmt.Errorf("%s's exporter reports no run_id", replica.Name)
	}
	before, err := runID()
	if err != nil {
		t.Fatal(err)
	}
	if err := crashServer(ns, replica.Name); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, time.Minute, replica.Name+"'s server restarted in place, its exporter still running and reading the new one", func() (bool, string) {
		var pod corev1.Pod
		if err := admin.Get(ctx, client.ObjectKeyFromObject(replica), &pod); err != nil {
			return false, err.Error()
		}
		restarts := map[string]int32{}
		for _, cs := range pod.Status.ContainerStatuses {
			restarts[cs.Name] = cs.RestartCount
		}
		now, err := runID()
		return pod.UID == replica.UID && restarts[resources.ContainerName] == 1 && restarts[resources.ExporterContainerName] == 0 &&
				err == nil && now != before,
			fmt.Sprintf("restarts %v, run_id %s (was %s), %v", restarts, now, before, err)
	})

	var used []string
	for _, file := range []string{"config/prometheus/alerts.yaml", "config/grafana/cache-operator-dashboard.json"} {
		b, err := os.ReadFile(filepath.Join(testenv.Root(), file))
		if err != nil {
			t.Fatal(err)
		}
		used = append(used, exporterMetricName.FindAllString(string(b), -1)...)
	}
	slices.Sort(used)
	if used = slices.Compact(used); len(used) == 0 {
		t.Fatal("the alerts and the dashboard read none of the exporter's metrics; this test's pattern is out of date")
	}
	for _, name := range used {
		if !served[name] {
			t.Errorf("%s is read by the alerts or the dashboard, but no exporter serves it", name)
		}
	}
}
