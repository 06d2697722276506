package metrics

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	"example.com/cache-operator/internal/cronschedule"
)

var (
	backupsDesc = prometheus.NewDesc("cache_operator_backups",
		"CacheBackups by phase.", []string{"phase"}, nil)
	lastBackupSuccessDesc = prometheus.NewDesc("cache_operator_backup_last_success_timestamp_seconds",
		"When the latest completed backup of the Cache completed (Unix time).", []string{"namespace", "cache"}, nil)
	lastBackupFailureDesc = prometheus.NewDesc("cache_operator_backup_last_failure_timestamp_seconds",
		"When the latest failed backup of the Cache failed (Unix time); absent if none failed.", []string{"namespace", "cache"}, nil)
	lastBackupDurationDesc = prometheus.NewDesc("cache_operator_backup_last_duration_seconds",
		"How long the latest completed backup of the Cache took, from its start to its end.", []string{"namespace", "cache"}, nil)
	lastBackupBytesDesc = prometheus.NewDesc("cache_operator_backup_last_bytes",
		"The size of the latest completed backup of the Cache: its RDBs' bytes.", []string{"namespace", "cache"}, nil)
	scheduleLastSuccessDesc = prometheus.NewDesc("cache_operator_backup_schedule_last_success_timestamp_seconds",
		"When the schedule's latest backup to complete completed, or, before its first, when the schedule was made (Unix time).",
		[]string{"namespace", "schedule", "cache"}, nil)
	schedulePeriodDesc = prometheus.NewDesc("cache_operator_backup_schedule_period_seconds",
		"The gap between the schedule's latest time and its next; absent while it makes no backups (suspended, or unreadable).",
		[]string{"namespace", "schedule", "cache"}, nil)
)

// NewBackupsCollector exports metrics about the CacheBackups in reader (the manager's informer
// cache), computed when Prometheus scrapes, as NewCachesCollector does for Caches.
func NewBackupsCollector(reader client.Reader) prometheus.Collector {
	return &backupsCollector{reader: reader}
}

type backupsCollector struct{ reader client.Reader }

func (c *backupsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- backupsDesc
	ch <- lastBackupSuccessDesc
	ch <- lastBackupFailureDesc
	ch <- lastBackupDurationDesc
	ch <- lastBackupBytesDesc
	ch <- scheduleLastSuccessDesc
	ch <- schedulePeriodDesc
}

func (c *backupsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var backups cachev1alpha1.CacheBackupList
	if err := c.reader.List(ctx, &backups, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(backupsDesc, err)
		return
	}
	type cacheKey struct{ namespace, name string }
	phases := map[cachev1alpha1.BackupPhase]int{}
	succeeded := map[cacheKey]*cachev1alpha1.CacheBackup{}
	failed := map[cacheKey]time.Time{}
	for i := range backups.Items {
		b := &backups.Items[i]
		phase := b.Status.Phase
		if phase == "" {
			phase = cachev1alpha1.BackupPending
		}
		phases[phase]++
		key := cacheKey{b.Namespace, b.Spec.CacheName}
		if b.Status.CompletionTime == nil || b.Spec.ImportPath != "" {
			continue // an imported backup was taken of no Cache here
		}
		switch end := b.Status.CompletionTime.Time; phase {
		case cachev1alpha1.BackupCompleted:
			if last := succeeded[key]; last == nil || end.After(last.Status.CompletionTime.Time) {
				succeeded[key] = b
			}
		case cachev1alpha1.BackupFailed:
			if end.After(failed[key]) {
				failed[key] = end
			}
		case cachev1alpha1.BackupPending, cachev1alpha1.BackupRunning:
		}
	}
	for _, phase := range []cachev1alpha1.BackupPhase{cachev1alpha1.BackupPending, cachev1alpha1.BackupRunning, cachev1alpha1.BackupCompleted, cachev1alpha1.BackupFailed} {
		ch <- prometheus.MustNewConstMetric(backupsDesc, prometheus.GaugeValue, float64(phases[phase]), string(phase))
	}
	for key, b := range succeeded {
		end := b.Status.CompletionTime.Time
		ch <- prometheus.MustNewConstMetric(lastBackupSuccessDesc, prometheus.GaugeValue, float64(end.Unix()), key.namespace, key.name)
		ch <- prometheus.MustNewConstMetric(lastBackupBytesDesc, prometheus.GaugeValue, float64(b.Status.Bytes), key.namespace, key.name)
		if start := b.Status.StartTime; start != nil {
			ch <- prometheus.MustNewConstMetric(lastBackupDurationDesc, prometheus.GaugeValue, end.Sub(start.Time).Seconds(), key.namespace, key.name)
		}
	}
	for key, end := range failed {
		ch <- prometheus.MustNewConstMetric(lastBackupFailureDesc, prometheus.GaugeValue, float64(end.Unix()), key.namespace, key.name)
	}
	c.collectSchedules(ctx, ch)
}

// collectSchedules exports, for each schedule, what the alert CacheBackupScheduleMissed compares:
// the time since its latest success and its period.
func (c *backupsCollector) collectSchedules(ctx context.Context, ch chan<- prometheus.Metric) {
	var schedules cachev1alpha1.CacheBackupScheduleList
	if err := c.reader.List(ctx, &schedules, client.UnsafeDisableDeepCopy); err != nil {
		ch <- prometheus.NewInvalidMetric(scheduleLastSuccessDesc, err)
		return
	}
	now := time.Now()
	for _, s := range schedules.Items {
		labels := []string{s.Namespace, s.Name, s.Spec.CacheName}
		since := s.CreationTimestamp.Time
		if last := s.Status.LastSuccessfulTime; last != nil {
			since = last.Time
		}
		ch <- prometheus.MustNewConstMetric(scheduleLastSuccessDesc, prometheus.GaugeValue, float64(since.Unix()), labels...)
		if cron, err := cronschedule.Parse(s.Spec.Schedule); err == nil && !s.Spec.Suspend {
			ch <- prometheus.MustNewConstMetric(schedulePeriodDesc, prometheus.GaugeValue, cronschedule.Period(cron, now).Seconds(), labels...)
		}
	}
}
