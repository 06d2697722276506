package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"example.com/cache-operator/internal/catalog"
	"example.com/cache-operator/internal/controller"
	"example.com/cache-operator/internal/conversionwebhook"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/snapshot"
)

// options are the operator's command line: bindFlags binds them, complete fills in what the
// environment gives and checks what no flag's type can.
type options struct {
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
	logs                                zap.Options
}

// bindFlags binds every flag of the operator's command line to o.
func (o *options) bindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8443", "Address the Prometheus metrics endpoint binds to; 0 disables it.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "Serve metrics over HTTPS, only to clients whose token the API server authenticates and authorizes for GET /metrics (the metrics-reader role).")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "Directory with tls.crt and tls.key for the metrics endpoint, reloaded on change; without, a self-signed certificate is generated.")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "Address the /healthz and /readyz probes bind to.")
	fs.StringVar(&o.pprofAddr, "pprof-bind-address", "", "Address Go's /debug/pprof profiles are served on, without authentication (bind it to 127.0.0.1); empty disables them.")
	fs.BoolVar(&o.leaderElect, "leader-elect", true, "Elect a leader through a Lease, so that of several replicas only one reconciles.")
	fs.StringVar(&o.leaderElectionID, "leader-election-id", "cache-operator.cache.example.com", "Name of the leader election Lease.")
	fs.StringVar(&o.leaderElectionNS, "leader-election-namespace", "", "Namespace of the leader election Lease; in a pod, defaults to the pod's namespace.")
	fs.DurationVar(&o.leaseDuration, "leader-elect-lease-duration", 15*time.Second, "How long standbys wait after the leader's last renewal before taking over.")
	fs.DurationVar(&o.renewDeadline, "leader-elect-renew-deadline", 10*time.Second, "How long the leader keeps retrying to renew before it gives up leadership and exits.")
	fs.DurationVar(&o.retry, "leader-elect-retry-period", 2*time.Second, "How often candidates try to acquire or renew the Lease.")
	fs.StringVar(&o.watchNamespaces, "watch-namespaces", "", "Comma-separated namespaces whose Caches, backups and schedules this operator manages; empty: every namespace. Operators scoped to namespaces apart, each with a Lease of its own, run side by side.")
	fs.IntVar(&o.maxConcurrentRollouts, "max-concurrent-rollouts", 10, "How many Caches may roll a new pod template out (restart their pods) at once; the others wait their turn. 0 sets no limit.")
	fs.DurationVar(&o.rolloutProgressDeadline, "rollout-progress-deadline", controller.DefaultRolloutProgressDeadline, "How long a Cache's rollout of a new pod template may go without one more pod running it before it is reported stalled (Progressing=False) and no longer counts against --max-concurrent-rollouts.")
	fs.BoolVar(&o.atomicSlotMigration, "atomic-slot-migration", true, "Move a Cluster's slots with Valkey's atomic slot migration where every server of the Cache runs Valkey 9 or later; false moves them key by key, as on Valkey 8.")
	fs.IntVar(&o.maxConcurrentReconciles, "max-concurrent-reconciles", 16, "How many Caches are reconciled at once.")
	fs.StringVar(&o.images.ValkeyRepository, "image-repository", resources.DefaultImageRepository, "Repository of the Valkey image (a mirror, say); the Cache's version is the tag.")
	fs.StringVar(&o.images.Exporter, "exporter-image", resources.DefaultExporterImage, "The metrics exporter's image (redis_exporter), which the pods of a Cache with spec.metrics.enabled run beside Valkey. A Cache's pods take a new one with their next change (docs/upgrade.md).")
	fs.StringVar(&o.images.Agent, "agent-image", resources.DefaultAgentImage, "The operator's own image, which the backup Jobs, the restored Caches' init containers (its backup and restore modes) and every cache pod's readiness agent run.")
	fs.DurationVar(&o.backupStall, "backup-stall-timeout", snapshot.DefaultStall, "How long a backup waits for the next byte of a server's snapshot, or for a replica it copies to catch up with its primary, before it fails.")
	fs.Float64Var(&o.qps, "kube-api-qps", 0, "Client-side limit, in requests per second, on requests to the API server; 0 or less sets none and leaves it to the API server's Priority and Fairness.")
	fs.IntVar(&o.burst, "kube-api-burst", 100, "Burst of requests above --kube-api-qps, when that is set.")
	fs.StringVar(&o.catalogEndpoints, "catalog-endpoints", "", "Comma-separated etcd endpoints of the external service catalogue; empty runs without a catalogue (and without finalizers).")
	fs.StringVar(&o.layout.Prefix, "catalog-prefix", "/skydns", "Key prefix of the catalogue records (the `path` of CoreDNS's etcd plugin).")
	fs.StringVar(&o.layout.Zone, "catalog-zone", "caches.example.internal", "DNS zone of the catalogue records: a Cache is listed as <name>.<namespace>.<zone>.")
	fs.IntVar(&o.layout.TTL, "catalog-ttl", 30, "Time to live, in seconds, of DNS answers from the catalogue records.")
	fs.StringVar(&o.clusterDomain, "cluster-domain", "cluster.local", "The cluster's DNS domain, part of the node names listed in the catalogue.")
	fs.DurationVar(&o.etcd.DialTimeout, "catalog-dial-timeout", 5*time.Second, "Timeout of connecting to the catalogue.")
	fs.DurationVar(&o.catalogTimeout, "catalog-request-timeout", 5*time.Second, "Timeout of each catalogue operation.")
	fs.DurationVar(&o.catalogSweepInterval, "catalog-sweep-interval", 10*time.Minute, "How often the catalogue is swept of the records of Caches that are gone; a Cache's go once it was missing at two sweeps.")
	fs.StringVar(&o.etcd.CAFile, "catalog-ca-file", "", "CA bundle that verifies the catalogue's server certificate.")
	fs.StringVar(&o.etcd.CertFile, "catalog-cert-file", "", "Client certificate for the catalogue (mutual TLS).")
	fs.StringVar(&o.etcd.KeyFile, "catalog-key-file", "", "Key of the client certificate for the catalogue.")
	fs.StringVar(&o.etcd.UsernameFile, "catalog-username-file", "", "File holding the catalogue's username, for etcd authentication.")
	fs.StringVar(&o.etcd.PasswordFile, "catalog-password-file", "", "File holding the catalogue's password, for etcd authentication.")
	fs.DurationVar(&o.clusterCheckInterval, "cluster-check-interval", 30*time.Second, "How often the Valkey servers of a ready Cluster Cache are asked whether it is still ready (one that is not is asked every 2 s, and half a second after each step the operator takes).")
	fs.StringVar(&o.webhookHost, "webhook-bind-host", "", "Address the conversion webhook listens on; empty: every address.")
	fs.IntVar(&o.webhookPort, "webhook-port", 9443, "Port the conversion webhook listens on (HTTPS).")
	fs.StringVar(&o.webhookCert.Secret.Name, "webhook-cert-secret", "cache-operator-webhook-cert", "Secret that holds the conversion webhook's CA and serving certificate; created when missing.")
	fs.StringVar(&o.webhookCert.Secret.Namespace, "webhook-cert-namespace", "", "Namespace of that Secret; in a pod, defaults to the pod's namespace.")
	fs.StringVar(&o.webhookCert.DNSName, "webhook-dns-name", "", "Host name in the webhook's serving certificate, which the API server connects to; defaults to the webhook Service's, cache-operator-webhook.<namespace>.svc.")
	fs.StringVar(&o.webhookCert.CertDir, "webhook-cert-dir", filepath.Join(os.TempDir(), "cache-operator-webhook"), "Directory the current serving certificate is written to.")
	fs.DurationVar(&o.webhookCert.CertValidity, "webhook-cert-validity", 365*24*time.Hour, "How long each serving certificate is valid.")
	fs.DurationVar(&o.webhookCert.RenewBefore, "webhook-cert-renew-before", 90*24*time.Hour, "How long before a serving certificate expires a new one is issued.")
	fs.DurationVar(&o.webhookCert.CheckInterval, "webhook-cert-check-interval", 12*time.Hour, "How often the serving certificate's expiry is checked.")
	o.logs.BindFlags(fs)
}

// complete fills in what the flags leave to the pod (the webhook certificate's namespace, and the
// DNS name from it), checks the flags no type can, and returns the namespaces to watch (none:
// every namespace).
func (o *options) complete() ([]string, error) {
	if o.webhookCert.Secret.Namespace == "" {
		namespace, err := os.ReadFile(podNamespaceFile)
		if err != nil {
			return nil, fmt.Errorf("out of a cluster, --webhook-cert-namespace must be given: %w", err)
		}
		o.webhookCert.Secret.Namespace = strings.TrimSpace(string(namespace))
	}
	if o.webhookCert.DNSName == "" {
		o.webhookCert.DNSName = "cache-operator-webhook." + o.webhookCert.Secret.Namespace + ".svc"
	}
	if o.webhookCert.RenewBefore >= o.webhookCert.CertValidity {
		return nil, errors.New("--webhook-cert-renew-before must be shorter than --webhook-cert-validity")
	}
	if o.rolloutProgressDeadline <= 0 {
		return nil, errors.New("--rollout-progress-deadline must be positive")
	}
	if o.catalogEndpoints != "" {
		o.layout.Zone = strings.Trim(o.layout.Zone, ".")
		if o.layout.Zone == "" || o.catalogTimeout <= 0 || o.etcd.DialTimeout <= 0 || o.catalogSweepInterval <= 0 {
			return nil, errors.New("--catalog-zone must not be empty and the catalogue timeouts must be positive")
		}
		for _, endpoint := range strings.Split(o.catalogEndpoints, ",") {
			o.etcd.Endpoints = append(o.etcd.Endpoints, strings.TrimSpace(endpoint))
		}
	}
	watched, err := namespaceList(o.watchNamespaces)
	if err != nil {
		return nil, fmt.Errorf("--watch-namespaces: %w", err)
	}
	return watched, nil
}

// podNamespaceFile holds, in a pod, the pod's namespace.
const podNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
