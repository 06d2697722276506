// Command cache-operator runs the Cache controller: it turns each Cache custom resource into a
// Valkey StatefulSet and headless Service and reports their state in the Cache's status.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/clock"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
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
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/schedulecontroller"
	"example.com/cache-operator/internal/snapshot"
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
	var (
		metricsAddr, probeAddr, pprofAddr   string
		metricsSecure                       bool
		metricsCertDir                      string
		leaderElect                         bool
		leaderElectionID, leaderElectionNS  string
		leaseDuration, renewDeadline, retry time.Duration
		maxConcurrentReconciles             int
		images                              resources.Images
		backupStall                         time.Duration
		qps                                 float64
		burst                               int
		etcd                                catalog.EtcdConfig
		catalogEndpoints                    string
		layout                              catalog.Layout
		catalogTimeout                      time.Duration
		catalogSweepInterval                time.Duration
		clusterDomain                       string
		clusterCheckInterval                time.Duration
		webhookHost                         string
		webhookPort                         int
		webhookCert                         conversionwebhook.Config
		watchNamespaces                     string
		maxConcurrentRollouts               int
		atomicSlotMigration                 bool
		rolloutProgressDeadline             time.Duration
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	flag.BoolVar(&metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS, only to clients whose token the API server authenticates and authorizes for GET /metrics (the metrics-reader role).")
	flag.StringVar(&metricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for the metrics endpoint, reloaded on change; without, a self-signed certificate is generated.")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	flag.StringVar(&pprofAddr, "pprof-bind-address", "", "Address Go's /debug/pprof profiles are served on, without authentication (bind it to 127.0.0.1); empty disables them.")
	flag.BoolVar(&leaderElect, "leader-elect", true, "Elect a leader through a Lease, so that of several replicas only one reconciles.")
	flag.StringVar(&leaderElectionID, "leader-election-id", "cache-operator.cache.example.com", "Name of the leader election Lease.")
	flag.StringVar(&leaderElectionNS, "leader-election-namespace", "", "Namespace of the leader election Lease; in a pod, defaults to the pod's namespace.")
	flag.DurationVar(&leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long standbys wait after the leader's last renewal before taking over.")
	flag.DurationVar(&renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps retrying to renew before it gives up leadership and exits.")
	flag.DurationVar(&retry, "leader-elect-retry-period", 2*time.Second, "How often candidates try to acquire or renew the Lease.")
	flag.StringVar(&watchNamespaces, "watch-namespaces", "", "Comma-separated namespaces whose Caches, backups and schedules this operator manages; empty: every namespace. Operators scoped to namespaces apart, each with a Lease of its own, run side by side.")
	flag.IntVar(&maxConcurrentRollouts, "max-concurrent-rollouts", 10, "How many Caches may roll a new pod template out (restart their pods) at once; the others wait their turn. 0 sets no limit.")
	flag.DurationVar(&rolloutProgressDeadline, "rollout-progress-deadline", controller.DefaultRolloutProgressDeadline, "How long a Cache's rollout of a new pod template may go without one more pod running it before it is reported stalled (Progressing=False) and no longer counts against --max-concurrent-rollouts.")
	flag.BoolVar(&atomicSlotMigration, "atomic-slot-migration", true, "Move a Cluster's slots with Valkey's atomic slot migration where every server of the Cache runs Valkey 9 or later; false moves them key by key, as on Valkey 8.")
	flag.IntVar(&maxConcurrentReconciles, "max-concurrent-reconciles", 16, "How many Caches are reconciled at once.")
	flag.StringVar(&images.ValkeyRepository, "image-repository", resources.DefaultImageRepository, "Repository of the Valkey image (a mirror, say); the Cache's version is the tag.")
	flag.StringVar(&images.Exporter, "exporter-image", resources.DefaultExporterImage, "The metrics exporter's image (redis_exporter), which the pods of a Cache with spec.metrics.enabled run beside Valkey. A Cache's pods take a new one with their next change (docs/upgrade.md).")
	flag.StringVar(&images.Agent, "agent-image", resources.DefaultAgentImage, "The operator's own image, which the backup Jobs, the restored Caches' init containers (its backup and restore modes) and every cache pod's readiness agent run.")
	flag.DurationVar(&backupStall, "backup-stall-timeout", snapshot.DefaultStall, "How long a backup waits for the next byte of a server's snapshot before it fails.")
	flag.Float64Var(&qps, "kube-api-qps", 0, "Client-side limit, in requests per second, on requests to the API server; 0 or less sets none and leaves it to the API server's Priority and Fairness.")
	flag.IntVar(&burst, "kube-api-burst", 100, "Burst of requests above --kube-api-qps, when that is set.")
	flag.StringVar(&catalogEndpoints, "catalog-endpoints", "", "Comma-separated etcd endpoints of the external service catalogue; empty runs without a catalogue (and without finalizers).")
	flag.StringVar(&layout.Prefix, "catalog-prefix", "/skydns", "Key prefix of the catalogue records (the `path` of CoreDNS's etcd plugin).")
	flag.StringVar(&layout.Zone, "catalog-zone", "caches.example.internal", "DNS zone of the catalogue records: a Cache is listed as <name>.<namespace>.<zone>.")
	flag.IntVar(&layout.TTL, "catalog-ttl", 30, "Time to live, in seconds, of DNS answers from the catalogue records.")
	flag.StringVar(&clusterDomain, "cluster-domain", "cluster.local", "The cluster's DNS domain, part of the node names listed in the catalogue.")
	flag.DurationVar(&etcd.DialTimeout, "catalog-dial-timeout", 5*time.Second, "Timeout of connecting to the catalogue.")
	flag.DurationVar(&catalogTimeout, "catalog-request-timeout", 5*time.Second, "Timeout of each catalogue operation.")
	flag.DurationVar(&catalogSweepInterval, "catalog-sweep-interval", 10*time.Minute, "How often the catalogue is swept of the records of Caches that are gone; a Cache's go once it was missing at two sweeps.")
	flag.StringVar(&etcd.CAFile, "catalog-ca-file", "", "CA bundle that verifies the catalogue's server certificate.")
	flag.StringVar(&etcd.CertFile, "catalog-cert-file", "", "Client certificate for the catalogue (mutual TLS).")
	flag.StringVar(&etcd.KeyFile, "catalog-key-file", "", "Key of the client certificate for the catalogue.")
	flag.StringVar(&etcd.UsernameFile, "catalog-username-file", "", "File holding the catalogue's username, for etcd authentication.")
	flag.StringVar(&etcd.PasswordFile, "catalog-password-file", "", "File holding the catalogue's password, for etcd authentication.")
	logOpts := zap.Options{}
	flag.DurationVar(&clusterCheckInterval, "cluster-check-interval", 30*time.Second, "How often the Valkey servers of a ready Cluster Cache are asked whether it is still ready (one that is not is asked every 2 s, and half a second after each step the operator takes).")
	flag.StringVar(&webhookHost, "webhook-bind-host", "", "Address the conversion webhook listens on; empty: every address.")
	flag.IntVar(&webhookPort, "webhook-port", 9443, "Port the conversion webhook listens on (HTTPS).")
	flag.StringVar(&webhookCert.Secret.Name, "webhook-cert-secret", "cache-operator-webhook-cert", "Secret that holds the conversion webhook's CA and serving certificate; created when missing.")
	flag.StringVar(&webhookCert.Secret.Namespace, "webhook-cert-namespace", "", "Namespace of that Secret; in a pod, defaults to the pod's namespace.")
	flag.StringVar(&webhookCert.DNSName, "webhook-dns-name", "", "Host name in the webhook's serving certificate, which the API server connects to; defaults to the webhook Service's, cache-operator-webhook.<namespace>.svc.")
	flag.StringVar(&webhookCert.CertDir, "webhook-cert-dir", filepath.Join(os.TempDir(), "cache-operator-webhook"), "Directory the current serving certificate is written to.")
	flag.DurationVar(&webhookCert.CertValidity, "webhook-cert-validity", 365*24*time.Hour, "How long each serving certificate is valid.")
	flag.DurationVar(&webhookCert.RenewBefore, "webhook-cert-renew-before", 90*24*time.Hour, "How long before a serving certificate expires a new one is issued.")
	flag.DurationVar(&webhookCert.CheckInterval, "webhook-cert-check-interval", 12*time.Hour, "How often the serving certificate's expiry is checked.")
	logOpts.BindFlags(flag.CommandLine)
	flag.Parse()

	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&logOpts)))
	log := ctrl.Log.WithName("setup")
	if _, set := os.LookupEnv("GOGC"); !set {
		gcpacing.Default.Keep() // a GOGC in the environment is the user's to choose
	}
	if limit, ok := softMemoryLimit(os.LookupEnv); ok {
		debug.SetMemoryLimit(limit)
		log.Info("Set the Go runtime's memory limit", "bytes", limit)
	}

	if webhookCert.Secret.Namespace == "" {
		namespace, err := os.ReadFile(podNamespaceFile)
		if err != nil {
			fail(log, err, "Out of a cluster, --webhook-cert-namespace must be given")
		}
		webhookCert.Secret.Namespace = strings.TrimSpace(string(namespace))
	}
	if webhookCert.DNSName == "" {
		webhookCert.DNSName = "cache-operator-webhook." + webhookCert.Secret.Namespace + ".svc"
	}
	if webhookCert.RenewBefore >= webhookCert.CertValidity {
		fail(log, errors.New("--webhook-cert-renew-before must be shorter than --webhook-cert-validity"), "Invalid webhook flags")
	}
	if rolloutProgressDeadline <= 0 {
		fail(log, errors.New("--rollout-progress-deadline must be positive"), "Invalid rollout flags")
	}

	// No client-side limit by default: the workers bound how many requests are in flight, and
	// the API server's Priority and Fairness queues them fairly among its clients; a limit here
	// only made a fleet's creation wait on the operator (docs/benchmark-history.md).
	cfg := ctrl.GetConfigOrDie()
	if qps > 0 {
		cfg.QPS, cfg.Burst = float32(qps), burst
	}

	watched, err := namespaceList(watchNamespaces)
	if err != nil {
		fail(log, err, "Invalid --watch-namespaces")
	}
	informers := controller.InformerOptions(webhookCert.Secret.Namespace, watched...)
	servingCert := &conversionwebhook.ServingCert{}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: controller.NewScheme(),
		Cache:  informers,
		WebhookServer: webhook.NewServer(webhook.Options{
			Host:    webhookHost,
			Port:    webhookPort,
			TLSOpts: []func(*tls.Config){servingCert.Configure},
		}),
		Metrics:                metricsOptions(metricsAddr, metricsSecure, metricsCertDir),
		HealthProbeBindAddress: probeAddr,
		PprofBindAddress:       pprofAddr,
		LeaderElection:         leaderElect,
		LeaderElectionID:       leaderElectionID,
		// LeaderElectionNamespace is only needed out of a cluster; in a pod the manager uses
		// the pod's namespace.
		LeaderElectionNamespace: leaderElectionNS,
		LeaseDuration:           &leaseDuration,
		RenewDeadline:           &renewDeadline,
		RetryPeriod:             &retry,
		// On a clean shutdown, hand the Lease over at once instead of making the standby
		// wait out the lease duration. Safe because the process exits right after.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		fail(log, err, "Unable to create manager")
	}

	r := &controller.CacheReconciler{
		Client:        mgr.GetClient(),
		APIReader:     mgr.GetAPIReader(),
		Recorder:      mgr.GetEventRecorder("cache-operator"),
		Images:        images,
		ClusterDomain: clusterDomain,

		ClusterCheckInterval:  clusterCheckInterval,
		KeyByKeySlotMigration: !atomicSlotMigration,
		Rollouts:              &controller.RolloutGate{Limit: maxConcurrentRollouts, ProgressDeadline: rolloutProgressDeadline, Reader: mgr.GetClient()},
	}
	if catalogEndpoints != "" {
		layout.Zone = strings.Trim(layout.Zone, ".")
		if layout.Zone == "" || catalogTimeout <= 0 || etcd.DialTimeout <= 0 || catalogSweepInterval <= 0 {
			fail(log, errors.New("--catalog-zone must not be empty and the catalogue timeouts must be positive"),
				"Invalid catalogue flags")
		}
		for _, endpoint := range strings.Split(catalogEndpoints, ",") {
			etcd.Endpoints = append(etcd.Endpoints, strings.TrimSpace(endpoint))
		}
		etcdClient, err := etcd.NewClient()
		if err != nil {
			fail(log, err, "Unable to set up the catalogue client")
		}
		r.Catalog = metrics.InstrumentCatalog(&catalog.Etcd{Client: etcdClient, Layout: layout, Timeout: catalogTimeout})
		sweeper := &controller.CatalogSweeper{Catalog: r.Catalog, Cached: mgr.GetClient(), Live: mgr.GetAPIReader(),
			Recorder: r.Recorder, Interval: catalogSweepInterval, Namespaces: watched}
		if err := mgr.Add(sweeper); err != nil {
			fail(log, err, "Unable to set up the catalogue sweep")
		}
	}
	if err := ctrlmetrics.Registry.Register(metrics.NewCachesCollector(mgr.GetCache(), servingCert.Serving)); err != nil {
		fail(log, err, "Unable to register metrics")
	}
	if err := ctrlmetrics.Registry.Register(metrics.NewBackupsCollector(mgr.GetCache())); err != nil {
		fail(log, err, "Unable to register metrics")
	}
	ctx := ctrl.SetupSignalHandler()
	if err := conversionwebhook.Setup(ctx, mgr, webhookCert, servingCert); err != nil {
		fail(log, err, "Unable to set up the conversion webhook")
	}
	if err := r.SetupWithManager(mgr, maxConcurrentReconciles); err != nil {
		fail(log, err, "Unable to set up the Cache controller")
	}
	backups := &backupcontroller.Reconciler{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader(), AgentImage: images.Agent, Stall: backupStall}
	if err := backups.SetupWithManager(ctx, mgr, maxConcurrentReconciles); err != nil {
		fail(log, err, "Unable to set up the CacheBackup controller")
	}
	schedules := &schedulecontroller.Reconciler{Client: mgr.GetClient(), Clock: clock.RealClock{}}
	if err := schedules.SetupWithManager(mgr, maxConcurrentReconciles); err != nil {
		fail(log, err, "Unable to set up the CacheBackupSchedule controller")
	}
	var admissionReader client.Reader = mgr.GetClient()
	if len(watched) > 0 {
		admissionReader = mgr.GetAPIReader()
	}
	if err := backupcontroller.SetupAdmission(mgr, admissionReader); err != nil {
		fail(log, err, "Unable to set up the CacheBackup admission webhook")
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		fail(log, err, "Unable to add health check")
	}
	// Ready once the webhook serves, so that a Service sends conversions only to replicas that
	// can answer them.
	if err := mgr.AddReadyzCheck("readyz", mgr.GetWebhookServer().StartedChecker()); err != nil {
		fail(log, err, "Unable to add readiness check")
	}

	log.Info("Starting manager", "leaderElection", leaderElect, "imageRepository", images.ValkeyRepository, "exporterImage", images.Exporter,
		"catalog", catalogEndpoints != "", "watchNamespaces", watched)
	// A leader that loses its Lease gets an error here and exits, so it can never write
	// alongside the new leader.
	if err := mgr.Start(ctx); err != nil {
		fail(log, err, "Manager stopped")
	}
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

// podNamespaceFile holds, in a pod, the pod's namespace.
const podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

func fail(log logr.Logger, err error, msg string) {
	log.Error(err, msg)
	os.Exit(1)
}
