package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev2 "example.com/cache-operator/api/v2"
)

var (
	cachesDesc = prometheus.NewDesc("cache_operator_caches",
		"Caches by the status and reason of their Ready condition (Unknown/None before the first reconcile).",
		[]string{"ready", "reason"}, nil)
	cacheReadyDesc = prometheus.NewDesc("cache_operator_cache_ready",
		"1 if the Cache's Ready condition is True, else 0: one series per Cache, for alerts that name it.",
		[]string{"namespace", "name"}, nil)
	slotsToMoveDesc = prometheus.NewDesc("cache_operator_cache_slots_to_move",
		"Hash slots that a Cluster Cache's operation under way (scaling out, draining, rebalancing) still has to move; "+
			"0 when none is. A value that stays above 0 means the migration has stopped.",
		[]string{"namespace", "name"}, nil)
	slotsMovedDesc = prometheus.NewDesc("cache_operator_cache_slots_moved",
		"Hash slots that a Cluster Cache's latest operation has moved so far.",
		[]string{"namespace", "name"}, nil)
	primaryDesc = prometheus.NewDesc("cache_operator_cache_primary",
		"1 for the pod whose server takes writes in a Replicated Cache (status.primary, behind the Service <name>-primary); "+
			"no series while none does.",
		[]string{"namespace", "name", "pod"}, nil)
	rolloutStalledDesc = prometheus.NewDesc("cache_operator_cache_rollout_stalled",
		"1 if the Cache's rollout of a new pod template has not moved for the operator's progress deadline "+
			"(Progressing=False), else 0.",
		[]string{"namespace", "name"}, nil)
	terminatingDesc = prometheus.NewDesc("cache_operator_caches_terminating",
		"Caches that are being deleted and wait for their finalizer.", nil, nil)
	oldestTerminatingDesc = prometheus.NewDesc("cache_operator_oldest_terminating_cache_age_seconds",
		"Seconds since the deletion of the Cache that has been Terminating longest; 0 when none is. "+
			"A high value means a finalizer is stuck.", nil, nil)
)

// NewCachesCollector exports metrics about the Caches in reader (the manager's informer cache),
// computed when Prometheus scrapes. They are read off the world each time, like a reconcile,
// rather than kept up to date by the reconciler: a crash loses nothing, and every replica
// reports the same numbers. Register it with ctrlmetrics.Registry to serve it.
//
// Until readable reports true it reports nothing: listing Caches may take the conversion webhook
// (while some are stored as v1), and a list before the webhook serves would make the manager's
// start wait for an informer that cannot sync, and so never start what gives the webhook its
// certificate.
func NewCachesCollector(reader client.Reader, readable func() bool) prometheus.Collector {
	return &cachesCollector{reader: reader, readable: readable}
}

type cachesCollector struct {
	reader   client.Reader
	readable func() bool
}

func (c *cachesCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- cachesDesc
	ch <- cacheReadyDesc
	ch <- slotsToMoveDesc
	ch <- slotsMovedDesc
	ch <- primaryDesc
	ch <- rolloutStalledDesc
	ch <- terminatingDesc
	ch <- oldestTerminatingDesc
}

func (c *cachesCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.readable() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// Read-only, so the informer's own objects rather than a copy of every Cache per scrape: at
	// 10,000 Caches a copy is tens of MiB of garbage each time.
	var caches cachev2.CacheList
	if err := c.reader.List(ctx, &caches, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(cachesDesc, err)
		return
	}

	type readiness struct{ status, reason string }
	counts := map[readiness]int{}
	terminating, oldest := 0, 0.0
	for i := range caches.Items {
		cache := &caches.Items[i]
		r := readiness{"Unknown", "None"}
		if cond := meta.FindStatusCondition(cache.Status.Conditions, cachev2.ConditionReady); cond != nil {
			r = readiness{string(cond.Status), cond.Reason}
		}
		counts[r]++
		ready := 0.0
		if r.status == string(metav1.ConditionTrue) {
			ready = 1
		}
		ch <- prometheus.MustNewConstMetric(cacheReadyDesc, prometheus.GaugeValue, ready, cache.Namespace, cache.Name)
		if cache.Spec.Mode == cachev2.ModeCluster {
			ch <- prometheus.MustNewConstMetric(slotsToMoveDesc, prometheus.GaugeValue, float64(cache.Status.SlotsToMove), cache.Namespace, cache.Name)
			ch <- prometheus.MustNewConstMetric(slotsMovedDesc, prometheus.GaugeValue, float64(cache.Status.SlotsMoved), cache.Namespace, cache.Name)
		}
		if cache.Spec.Mode == cachev2.ModeReplicated && cache.Status.Primary != "" {
			ch <- prometheus.MustNewConstMetric(primaryDesc, prometheus.GaugeValue, 1, cache.Namespace, cache.Name, cache.Status.Primary)
		}
		stalled := 0.0
		if meta.IsStatusConditionFalse(cache.Status.Conditions, cachev2.ConditionProgressing) {
			stalled = 1
		}
		ch <- prometheus.MustNewConstMetric(rolloutStalledDesc, prometheus.GaugeValue, stalled, cache.Namespace, cache.Name)
		if ts := cache.DeletionTimestamp; ts != nil {
			terminating++
			oldest = max(oldest, time.Since(ts.Time).Seconds())
		}
	}
	for r, n := range counts {
		ch <- prometheus.MustNewConstMetric(cachesDesc, prometheus.GaugeValue, float64(n), r.status, r.reason)
	}
	ch <- prometheus.MustNewConstMetric(terminatingDesc, prometheus.GaugeValue, float64(terminating))
	ch <- prometheus.MustNewConstMetric(oldestTerminatingDesc, prometheus.GaugeValue, oldest)
}
