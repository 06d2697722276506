// Command cache-operator runs the Cache controller: it turns each Cache custom resource into a
// Valkey StatefulSet and headless Service and reports their state in the Cache's status.
package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/webhook"

	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/backupcontroller"
	"example.com/cache-operator/internal/catalog"
	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/internal/conversionwebhook"
	"example.com/cache-operator/internal/gcpacing"
	"example.com/cache-operator/internal/metrics"
	"example.com/cache-operator/internal/schedulecontroller"
)

func main() {
	// The operator's image also takes backups, in the Jobs the operator starts, and restores
	// them, in a restored Cache's init containers (package backup).
	if len(os.Args) > 1 {
		if agent, ok := agents[os.Args[1]]; ok {
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
			code := agent(ctx, os.Args[2:])
			stop()
			os.Exit(code)
		}
	}
	var o options
	o.bindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&o.logs)))
	log := ctrl.Log.WithName("setup")
	if _, set := os.LookupEnv("GOGC"); !set {
		gcpacing.Default.Keep() // a GOGC in the environment is the user's to choose
	}
	if limit, ok := softMemoryLimit(os.LookupEnv); ok {
		debug.SetMemoryLimit(limit)
		log.Info("Set the Go runtime's memory limit", "bytes", limit)
	}
	watched, err := o.complete()
	if err != nil {
		fail(log, err, "Invalid flags")
	}

	servingCert := &conversionwebhook.ServingCert{}
	mgr, err := newManager(&o, watched, servingCert)
	if err != nil {
		fail(log, err, "Unable to create manager")
	}
	ctx := ctrl.SetupSignalHandler()
	if err := setUp(ctx, mgr, &o, watched, servingCert); err != nil {
		fail(log, err, "Unable to set up the operator")
	}

	log.Info("Starting manager", "leaderElection", o.leaderElect, "imageRepository", o.images.ValkeyRepository, "exporterImage", o.images.Exporter,
		"catalog", o.catalogEndpoints != "", "watchNamespaces", watched)
	// A leader that loses its Lease gets an error here and exits, so it can never write
	// alongside the new leader.
	if err := mgr.Start(ctx); err != nil {
		fail(log, err, "Manager stopped")
	}
}

// newManager is the manager of the operator's controllers and webhooks, with its informers
// limited to the watched namespaces (all when none).
func newManager(o *options, watched []string, servingCert *conversionwebhook.ServingCert) (manager.Manager, error) {
	// No client-side limit by default: the workers bound how many requests are in flight, and
	// the API server's Priority and Fairness queues them fairly among its clients; a limit here
	// only made a fleet's creation wait on the operator (docs/benchmark-history.md).
	cfg := ctrl.GetConfigOrDie()
	if o.qps > 0 {
		cfg.QPS, cfg.Burst = float32(o.qps), o.burst
	}
	return ctrl.NewManager(cfg, ctrl.Options{
		Scheme: controller.NewScheme(),
		Cache:  controller.InformerOptions(o.webhookCert.Secret.Namespace, watched...),
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    o.webhookHost,
			Port:    o.webhookPort,
			TLSOpts: []func(*tls.Config){servingCert.Configure},
		}),
		Metrics:                metricsOptions(o.metricsAddr, o.metricsSecure, o.metricsCertDir),
		HealthProbeBindAddress: o.probeAddr,
		PprofBindAddress:       o.pprofAddr,
		LeaderElection:         o.leaderElect,
		LeaderElectionID:       o.leaderElectionID,
		// LeaderElectionNamespace is only needed out of a cluster; in a pod the manager uses
		// the pod's namespace.
		LeaderElectionNamespace: o.leaderElectionNS,
		LeaseDuration:           &o.leaseDuration,
		RenewDeadline:           &o.renewDeadline,
		RetryPeriod:             &o.retry,
		// On a clean shutdown, hand the Lease over at once instead of making the standby
		// wait out the lease duration. Safe because the process exits right after.
		LeaderElectionReleaseOnCancel: true,
	})
}

// setUp adds to the manager the Cache controller (with the catalogue and its sweep when one is
// given), the backup and schedule controllers, the conversion and admission webhooks, the
// operator's metrics and its health checks.
func setUp(ctx context.Context, mgr manager.Manager, o *options, watched []string, servingCert *conversionwebhook.ServingCert) error {
	r := &controller.CacheReconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Recorder:      mgr.GetEventRecorder("cache-operator"),
		Images:        o.images,
		ClusterDomain: o.clusterDomain,

		ClusterCheckInterval:  o.clusterCheckInterval,
		KeyByKeySlotMigration: !o.atomicSlotMigration,
		Rollouts:              &controller.RolloutGate{Limit: o.maxConcurrentRollouts, ProgressDeadline: o.rolloutProgressDeadline, Reader: mgr.GetClient()},
	}
	if o.catalogEndpoints != "" {
		etcdClient, err := o.etcd.NewClient()
		if err != nil {
			return fmt.Errorf("the catalogue's client: %w", err)
		}
		r.Catalog = metrics.InstrumentCatalog(&catalog.Etcd{Client: etcdClient, Layout: o.layout, Timeout: o.catalogTimeout})
		sweeper := &controller.CatalogSweeper{Catalog: r.Catalog, Cached: mgr.GetClient(), Live: mgr.GetAPIReader(),
			Recorder: r.Recorder, Interval: o.catalogSweepInterval, Namespaces: watched}
		if err := mgr.Add(sweeper); err != nil {
			return fmt.Errorf("the catalogue's sweep: %w", err)
		}
	}
	if err := ctrlmetrics.Registry.Register(metrics.NewCachesCollector(mgr.GetCache(), servingCert.Serving)); err != nil {
		return fmt.Errorf("the Caches' metrics: %w", err)
	}
	if err := ctrlmetrics.Registry.Register(metrics.NewBackupsCollector(mgr.GetCache())); err != nil {
		return fmt.Errorf("the backups' metrics: %w", err)
	}
	if err := conversionwebhook.Setup(ctx, mgr, o.webhookCert, servingCert); err != nil {
		return fmt.Errorf("the conversion webhook: %w", err)
	}
	if err := r.SetupWithManager(ctx, mgr, o.maxConcurrentReconciles); err != nil {
		return fmt.Errorf("the Cache controller: %w", err)
	}
	backups := &backupcontroller.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), AgentImage: o.images.Agent, Stall: o.backupStall}
	if err := backups.SetupWithManager(ctx, mgr, o.maxConcurrentReconciles); err != nil {
		return fmt.Errorf("the CacheBackup controller: %w", err)
	}
	schedules := &schedulecontroller.Reconciler{Client: mgr.GetClient(), Clock: clock.RealClock{}}
	if err := schedules.SetupWithManager(mgr, o.maxConcurrentReconciles); err != nil {
		return fmt.Errorf("the CacheBackupSchedule controller: %w", err)
	}
	// An operator scoped to namespaces caches the Caches of those only; the admission webhook
	// answers for every namespace, so it reads the others' from the API server.
	var admissionReader client.Reader = mgr.GetClient()
	if len(watched) > 0 {
		admissionReader = mgr.GetAPIReader()
	}
	if err := backupcontroller.SetupAdmission(mgr, admissionReader); err != nil {
		return fmt.Errorf("the CacheBackup admission webhook: %w", err)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		return fmt.Errorf("the health check: %w", err)
	}
	// Ready once the webhook serves, so that a Service sends conversions only to replicas that
	// can answer them.
	if err := mgr.AddReadyzCheck("readyz", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return fmt.Errorf("the readiness check: %w", err)
	}
	return nil
}

// What the operator needs whatever namespaces it manages (the role cache-operator-global, which
// `make manifests` generates from this package's markers and package conversionwebhook's; the
// rest is cache-operator-manager, which an operator scoped to some namespaces is granted in those
// only):
//   - the secure metrics endpoint asks the API server who a scraper is and whether it may read
//     /metrics;
//   - the backups' admission webhook, which answers for every namespace, reads the backup's
//     Cache wherever it is (backupcontroller.SetupAdmission).
//
// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
// +kubebuilder:rbac:groups=cache.example.com,resources=caches,verbs=get

// metricsOptions serves metrics, securely unless told otherwise: over TLS, HTTP/1.1 only (HTTP/2
// has had denial-of-service flaws, and a scrape needs none of it), and only to clients that the
// API server authenticates and authorizes for GET /metrics.
func metricsOptions(addr string, secure bool, certDir string) metricsserver.Options {
	opts := metricsserver.Options{BindAddress: addr}
	if secure {
		opts.SecureServing = true
		opts.CertDir = certDir
		opts.FilterProvider = filters.WithAuthenticationAndAuthorization
		opts.TLSOpts = []func(*tls.Config){func(c *tls.Config) { c.NextProtos = []string{"http/1.1"} }}
	}
	return opts
}

// agents are the operator binary's other modes, by their first argument.
var agents = map[string]func(context.Context, []string) int{
	backup.AgentCommand:   backup.RunAgent,
	backup.RestoreCommand: backup.RunRestore,
	backup.DeleteCommand:  backup.RunDelete,
	backup.InspectCommand: backup.RunInspect,
}

// namespaceList is --watch-namespaces as a list: names of namespaces, each once.
func namespaceList(flagValue string) ([]string, error) {
	var namespaces []string
	for _, ns := range strings.Split(flagValue, ",") {
		ns = strings.TrimSpace(ns)
		if ns == "" || slices.Contains(namespaces, ns) {
			continue
		}
		if problems := validation.IsDNS1123Label(ns); len(problems) > 0 {
			return nil, fmt.Errorf("%q is not a namespace name: %s", ns, strings.Join(problems, "; "))
		}
		namespaces = append(namespaces, ns)
	}
	return namespaces, nil
}

// envMemoryLimit is the container's memory limit in bytes, which the installs pass from the
// pod's resources (resourceFieldRef limits.memory).
const envMemoryLimit = "CONTAINER_MEMORY_LIMIT"

// softMemoryLimit is the Go runtime's memory limit for the operator: its share of the container's
// limit (gcpacing.SoftLimit), unless the environment sets GOMEMLIMIT, which is the user's to
// choose, or says no limit.
func softMemoryLimit(lookupEnv func(string) (string, bool)) (int64, bool) {
	if _, set := lookupEnv("GOMEMLIMIT"); set {
		return 0, false
	}
	value, _ := lookupEnv(envMemoryLimit)
	limit, err := strconv.ParseInt(value, 10, 64)
	if err != nil || limit <= 0 {
		return 0, false
	}
	return gcpacing.SoftLimit(limit), true
}

func fail(log logr.Logger, err error, msg string) {
	log.Error(err, msg)
	os.Exit(1)
}
