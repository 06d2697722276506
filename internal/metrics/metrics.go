// Package metrics exports the operator's own Prometheus metrics, beside controller-runtime's
// reconcile, work queue and client metrics, on the manager's metrics endpoint.
package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"example.com/cache-operator/internal/catalog"
)

var (
	catalogDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "cache_operator_catalog_operation_duration_seconds",
		Help:    "Latency of operations on the external catalogue, by operation (sync, deregister).",
		Buckets: []float64{.001, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"operation"})
	catalogErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_operator_catalog_operation_errors_total",
		Help: "Failed operations on the external catalogue, by operation (sync, deregister).",
	}, []string{"operation"})
	failovers = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "cache_operator_failovers_total",
		Help: "Replicas of a Replicated Cache that this operator promoted in place of a lost primary, since it started " +
			"(a primary that hands over as its pod stops is no failover here). 0 from the first reconcile of each Replicated Cache.",
	}, []string{"namespace", "name"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(catalogDuration, catalogErrors, failovers)
	// Report zero errors from the start, so a rate() over them has a baseline.
	for _, op := range []string{opSync, opDeregister, opList} {
		catalogErrors.WithLabelValues(op)
		catalogDuration.WithLabelValues(op)
	}
}

const (
	opSync       = "sync"
	opDeregister = "deregister"
	opList       = "list"
)

// InstrumentCatalog wraps c so that every operation's latency and failure is measured.
func InstrumentCatalog(c catalog.Catalog) catalog.Catalog {
	return instrumented{c}
}

type instrumented struct{ next catalog.Catalog }

// Sync does not count a write that mayWrite refused as the catalogue's error; its time, a read
// of the API server on the rare pass that changes records, is in the operation's.
func (i instrumented) Sync(ctx context.Context, cache catalog.Key, nodes []catalog.Node, mayWrite func(context.Context) error) (bool, error) {
	defer observe(opSync, time.Now())
	refused := false
	checked := mayWrite
	if mayWrite != nil {
		checked = func(ctx context.Context) error {
			err := mayWrite(ctx)
			refused = err != nil
			return err
		}
	}
	changed, err := i.next.Sync(ctx, cache, nodes, checked)
	if !refused {
		countError(opSync, err)
	}
	return changed, err
}

func (i instrumented) Deregister(ctx context.Context, cache catalog.Key) error {
	defer observe(opDeregister, time.Now())
	err := i.next.Deregister(ctx, cache)
	countError(opDeregister, err)
	return err
}

func (i instrumented) Listed(ctx context.Context) ([]catalog.Key, error) {
	defer observe(opList, time.Now())
	keys, err := i.next.Listed(ctx)
	countError(opList, err)
	return keys, err
}

func observe(op string, start time.Time) {
	catalogDuration.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

func countError(op string, err error) {
	if err != nil {
		catalogErrors.WithLabelValues(op).Inc()
	}
}

// Failovers is the counter of the Replicated Cache's failovers (cache_operator_failovers_total):
// taken on every pass, so that its series is there, at 0, before the first failover.
func Failovers(namespace, name string) prometheus.Counter {
	return failovers.WithLabelValues(namespace, name)
}

// ForgetFailovers drops the deleted Cache's series of cache_operator_failovers_total.
func ForgetFailovers(namespace, name string) {
	failovers.DeleteLabelValues(namespace, name)
}
