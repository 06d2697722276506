package controller

import (
	"context"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/catalog"
)

// EventCatalogRecordSwept is the reason of the event that says a Cache's records, left behind
// in the catalogue after it went, were removed.
const EventCatalogRecordSwept = "CatalogRecordSwept"

// CatalogSweeper removes the catalogue records of Caches that no longer exist: those the escape
// hatch left behind (AnnotationAbandonCatalogRecord, when the catalogue was down), or that an
// operator run without the catalogue, or gone, never removed. Only the leader sweeps. A Cache's
// records go only once it was missing at two sweeps, an interval apart, read from the API server
// each time: a Cache created meanwhile, whose records were written before the informer showed
// it, is found at the second. A Cache the informer shows costs no request.
type CatalogSweeper struct {
	Catalog catalog.Catalog
	// Cached reads the informer's Caches; Live reads around it, for a Cache the informer lacks.
	Cached, Live client.Reader
	Recorder     events.EventRecorder
	Interval     time.Duration
	// Namespaces, if any, are the only ones whose Caches' records are swept: those of the
	// operator's --watch-namespaces. The records of others are another operator's to keep.
	Namespaces []string

	// missing are the Caches with records that were missing at the last sweep.
	missing map[catalog.Key]bool
}

// Start sweeps now and then every Interval, until ctx ends. A catalogue that cannot be reached
// is swept once it can.
func (s *CatalogSweeper) Start(ctx context.Context) error {
	ticker := time.NewTicker(s.Interval)
	defer ticker.Stop()
	for {
		s.sweep(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
		}
	}
}

// sweep removes the records of the Caches that were missing at the last sweep and still are,
// with an event each, and remembers those missing for the first time.
func (s *CatalogSweeper) sweep(ctx context.Context) {
	logger := log.FromContext(ctx).WithName("catalog-sweep")
	listed, err := s.Catalog.Listed(ctx)
	if err != nil {
		logger.Info("Cannot list the catalogue; trying again later", "error", err.Error())
		return
	}
	missing := map[catalog.Key]bool{}
	for _, key := range listed {
		if len(s.Namespaces) > 0 && !slices.Contains(s.Namespaces, key.Namespace) {
			continue
		}
		name := client.ObjectKey{Namespace: key.Namespace, Name: key.Name}
		err := s.Cached.Get(ctx, name, &cachev2.Cache{})
		if apierrors.IsNotFound(err) {
			err = s.Live.Get(ctx, name, &metav1.PartialObjectMetadata{
				TypeMeta: metav1.TypeMeta{APIVersion: cachev2.GroupVersion.String(), Kind: "Cache"}})
		}
		switch {
		case !apierrors.IsNotFound(err):
			continue // it exists, or cannot be read now: its records stay
		case !s.missing[key]:
			missing[key] = true
			continue
		}
		if err := s.Catalog.Deregister(ctx, key); err != nil {
			logger.Info("Cannot remove the records of a Cache that is gone; trying again later", "cache", key, "error", err.Error())
			missing[key] = true
			continue
		}
		logger.Info("Removed the catalogue records of a Cache that is gone", "cache", key)
		gone := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}
		s.Recorder.Eventf(gone, nil, corev1.EventTypeNormal, EventCatalogRecordSwept, "Sweep",
			"Removed the catalogue records of %s/%s, left behind when the Cache went", key.Namespace, key.Name)
	}
	s.missing = missing
}
