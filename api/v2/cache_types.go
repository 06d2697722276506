package v2

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Mode is how a Cache's nodes work together.
// +kubebuilder:validation:Enum=Standalone;Cluster;Replicated
type Mode string

const (
	// ModeStandalone runs independent nodes that share nothing; clients shard keys between them
	// (v1's only mode).
	ModeStandalone Mode = "Standalone"
	// ModeCluster runs a Valkey Cluster: the 16384 hash slots spread over Shards primaries,
	// each with ReplicasPerShard replicas. Clients use any node as a seed.
	ModeCluster Mode = "Cluster"
	// ModeReplicated runs one primary, which holds every key, and ReplicasPerShard replicas of
	// it, for clients that do not speak the cluster protocol: they write and read through the
	// Service <name>-primary, which the operator keeps on the current primary, and may read
	// from <name>-replicas. The operator fails the primary over to a replica when it is lost.
	ModeReplicated Mode = "Replicated"
)

// Bounds of the spec, for code and documentation. The schema markers on CacheSpec state the same
// numbers (a marker cannot name a constant); TestSchemaTakesAClusterOfUpTo100ShardsWithUpTo2Replicas holds
// them together.
const (
	// MaxStandaloneShards is the most nodes a Standalone Cache may have (v1's bound).
	MaxStandaloneShards = 9
	// MaxClusterShards is the most primaries a Cluster Cache may have: with two replicas each,
	// 300 nodes, well within what Valkey Cluster's gossip handles.
	MaxClusterShards = 100
	// MaxReplicasPerShard is the most replicas a Cluster's shard may have.
	MaxReplicasPerShard = 2
	// MaxReplicatedReplicas is the most replicas a Replicated Cache's primary may have.
	MaxReplicatedReplicas = 5
)

// CacheSpec is the user's intent for a Cache: how its nodes work together, how many there are,
// which Valkey release they run and how much memory each gets.
//
// +kubebuilder:validation:XValidation:rule="self.mode != 'Standalone' || self.shards <= 9",message="a Standalone Cache has at most 9 shards (nodes)"
// +kubebuilder:validation:XValidation:rule="has(self.restoreFrom) == has(oldSelf.restoreFrom) && (!has(self.restoreFrom) || self.restoreFrom == oldSelf.restoreFrom)",message="restoreFrom is set when a Cache is created and cannot be changed or removed: the restore happens once, at the nodes' first start"
// +kubebuilder:validation:XValidation:rule="has(self.auth) == has(oldSelf.auth)",message="auth is set when a Cache is created and cannot be added or removed: clients and nodes that speak with and without credentials cannot serve side by side; create a new Cache (restoreFrom a backup keeps the data)"
// +kubebuilder:validation:XValidation:rule="has(self.tls) == has(oldSelf.tls)",message="tls is set when a Cache is created and cannot be added or removed: clients and nodes that speak with and without TLS cannot serve side by side; create a new Cache (restoreFrom a backup keeps the data)"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Standalone' || !has(self.replicasPerShard)",message="replicasPerShard applies to Cluster and Replicated modes only; a Standalone Cache has no replicas"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Cluster' || !has(self.replicasPerShard) || self.replicasPerShard <= 2",message="a Cluster's shard has at most 2 replicas"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Replicated' || self.shards == 1",message="a Replicated Cache has one primary, which holds every key: set shards: 1 (its default, 3, is the other modes'), and its replicas in replicasPerShard"
// +kubebuilder:validation:XValidation:rule="self.mode == 'Replicated' || !has(self.replication)",message="replication applies to Replicated mode only"
// +kubebuilder:validation:XValidation:rule="self.mode != 'Cluster' || !self.version.matches('^[0-9]+[.]') || int(self.version.split('.')[0]) >= 8",message="a Cluster needs Valkey 8.0 or later: the operator relies on a primary passing slot migrations on to its replicas, so that a migration survives a failover of its target, which Valkey does from 8.0"
type CacheSpec struct {
	// Mode is Standalone (independent nodes, each holding the keys that clients send it),
	// Cluster (a Valkey Cluster with replicas, formed and kept whole by the operator) or
	// Replicated (one primary with every key, and its replicas, behind a Service that follows
	// the primary through failovers). It cannot be changed once set: the keys would be lost.
	// Defaults to Cluster.
	// +kubebuilder:default=Cluster
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="mode cannot be changed: the two modes keep keys in different places, so changing it would drop every key; create a new Cache instead"
	// +optional
	Mode Mode `json:"mode,omitempty"`

	// Shards is the number of nodes of a Standalone Cache (1 to 9), or the number of primaries
	// of a Cluster Cache (1 to 100), over which the 16384 hash slots are spread; a Replicated
	// Cache has one primary, and shards must be 1. The scale
	// subresource reads and writes it, so `kubectl scale` targets the Cache. Defaults to 3.
	// Changing it in Cluster mode moves slots: to the new primaries when it grows; off the
	// primaries that go, before their pods are removed, when it shrinks.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +kubebuilder:default=3
	// +optional
	Shards int32 `json:"shards,omitempty"`

	// ReplicasPerShard is the number of replicas of each primary of a Cluster Cache, 0 to 2, or
	// of a Replicated Cache's primary, 0 to 5; with at least one, the Cache survives losing a
	// primary by promoting a replica. Unset means 0. Not allowed in Standalone mode. Lowering it
	// removes replicas only: a primary on a pod that goes hands its shard to a replica that
	// stays first.
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=5
	// +optional
	ReplicasPerShard *int32 `json:"replicasPerShard,omitempty"`

	// Version is the Valkey release to run, MAJOR.MINOR.PATCH (for example 8.1.1). It becomes
	// the image tag. Changing it restarts the nodes one at a time: in Standalone mode highest
	// ordinal first; in Cluster mode replicas first, each back in sync before the next, then
	// each primary once an updated replica has taken over its shard; in Replicated mode the
	// replicas first, each back in sync before the next, then the primary, which hands over to
	// a replica in sync as its pod stops (Ready says Upgrading). A release that cannot read the
	// data of the one a primary runs (8.x after 9.x) is refused: Ready says DowngradeRefused.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]+[.][0-9]+[.][0-9]+$')",message="version must be a Valkey release as MAJOR.MINOR.PATCH, such as 8.1.1 (no 'v' prefix, no tags such as 'latest')"
	// +required
	Version string `json:"version"`

	// Memory is the memory of each cache node: the container's memory request and limit. Valkey
	// may use three quarters of it, less 8Mi for the server itself, for data (maxmemory: 186Mi of
	// 256Mi) and evicts the least recently used keys beyond that; the rest is headroom for forks,
	// connections and buffers. At least 64Mi, at most 64Gi.
	// +kubebuilder:default="256Mi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Mi')) >= 0",message="memory must be at least 64Mi"
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('64Gi')) <= 0",message="memory must be at most 64Gi"
	// +optional
	Memory resource.Quantity `json:"memory,omitzero"`

	// RestoreFrom, set when the Cache is created, starts its nodes with a backup's data rather
	// than empty. The backup must have as many shards as the Cache, and come from a Cache of the
	// same mode: each shard's data goes to one node, as it was (a Cluster's slots with it). A
	// Replicated Cache's backup, of its one shard, also restores into a Standalone Cache of one
	// node, and such a Standalone Cache's into a Replicated Cache, whose first primary takes it
	// and whose replicas copy it. The Cache is Ready only once every node holds the keys its
	// shard had.
	// +optional
	RestoreFrom *RestoreSource `json:"restoreFrom,omitempty"`

	// Auth, set when the Cache is created, makes its servers refuse clients without a user and
	// password. Applications connect as the user and password in the Secret that auth names;
	// the operator, replication and the metrics exporter each have a user of their own, with
	// only the commands they need, and Valkey's default user is off. Unset, every client in
	// reach of a node may read and write it without credentials (the behaviour before auth).
	// It cannot be added to or removed from a Cache that exists.
	// +optional
	Auth *Auth `json:"auth,omitempty"`

	// Pod sets where the Cache's pods may run, what CPU they get and what they carry, beyond
	// what the operator sets itself. A change of it restarts the pods as a change of version
	// does: a Cluster's replicas first, each back in sync before the next, and a primary only
	// after a replica took over. Unset, the pods are as the operator builds them.
	// +optional
	Pod *PodSettings `json:"pod,omitempty"`

	// Metrics runs a metrics exporter beside each node, for Prometheus to scrape. A change of
	// it restarts the pods as a change of pod settings does. Unset, the pods run no exporter.
	// +optional
	Metrics *Metrics `json:"metrics,omitempty"`

	// TLS, set when the Cache is created, makes its servers speak TLS only: to clients, between
	// a primary and its replicas, and on a Cluster's bus, where a node must present a
	// certificate of the Cache's CA to be let in (a process without one cannot join the
	// cluster). Unless tls.secretName names a Secret of the user's (one a cert-manager
	// Certificate fills, say), the operator makes the Cache's CA (its key in the Secret
	// <name>-ca-key) and the nodes' certificate (in the Secret <name>-tls), and renews the
	// certificate before it expires. Clients trust ca.crt of the ConfigMap <name>-ca. The nodes serve a new certificate without a restart. Clients need no
	// certificate of their own. Set it empty (tls: {}) for the defaults. It cannot be added to
	// or removed from a Cache that exists.
	// +optional
	TLS *TLS `json:"tls,omitempty"`

	// Replication is how a Replicated Cache fails its primary over. Only in Replicated mode.
	// Unset, every setting has the value its field names as the default.
	// +optional
	Replication *Replication `json:"replication,omitempty"`

	// Config is the Valkey settings the user may choose, each within bounds that keep the node a
	// cache the operator can run. A change of it restarts the pods as a change of pod settings
	// does. Unset, every setting has the value its field names as the default.
	// +optional
	Config *ValkeyConfig `json:"config,omitempty"`
}

// Replication is how a Replicated Cache fails its primary over.
type Replication struct {
	// FailoverAfter is how long a primary that the operator cannot reach, and that every replica
	// has lost its link to, may stay so before the replica furthest into its writes takes over.
	// Shorter fails over sooner; longer rides out a brief network fault without a failover, whose
	// writes the replicas had not received are lost. A primary known lost (its pod going, its
	// server not running or back empty) is replaced at once, whatever this says. Defaults to 5s;
	// 1s to 5m.
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('5m')",message="failoverAfter must be between 1s and 5m"
	// +optional
	FailoverAfter *metav1.Duration `json:"failoverAfter,omitempty"`
}

// ValkeyConfig is the Valkey settings a user may choose for a Cache's servers.
type ValkeyConfig struct {
	// MaxmemoryPolicy is which keys a full node evicts to make room for a new one (Valkey's
	// maxmemory-policy): allkeys-lru (the default: the least recently used of all), allkeys-lfu
	// (the least frequently used), allkeys-random, volatile-lru, volatile-lfu, volatile-random and
	// volatile-ttl (only keys with a TTL: the least recently or frequently used, any, or the
	// soonest to expire), or noeviction (none: writes fail with OOM while the node is full).
	// +kubebuilder:validation:Enum=allkeys-lru;allkeys-lfu;allkeys-random;volatile-lru;volatile-lfu;volatile-random;volatile-ttl;noeviction
	// +optional
	MaxmemoryPolicy string `json:"maxmemoryPolicy,omitempty"`

	// Timeout is how many seconds a client may stay idle before the server closes its
	// connection (Valkey's timeout): 0, the default, never closes one; at most 86400 (a day).
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	// +optional
	Timeout *int32 `json:"timeout,omitempty"`

	// NotifyKeyspaceEvents is which keyspace events the server publishes to subscribers
	// (Valkey's notify-keyspace-events), in its letters: K and E for the keyspace and keyevent
	// channels, and g $ l s h z x e t m d n A for the kinds of events. Empty, the default,
	// publishes none; each notification costs the server CPU.
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:Pattern=`^[KEg$lshzxetmdnA]*$`
	// +optional
	NotifyKeyspaceEvents string `json:"notifyKeyspaceEvents,omitempty"`
}

// TLS is how a Cache's servers speak TLS.
// +kubebuilder:validation:XValidation:rule="has(self.secretName) == has(oldSelf.secretName) && (!has(self.secretName) || self.secretName == oldSelf.secretName)",message="tls.secretName is set when a Cache is created and cannot be changed: the pods mount that Secret"
// +kubebuilder:validation:XValidation:rule="has(self.issuerRef) == has(oldSelf.issuerRef) && (!has(self.issuerRef) || self.issuerRef == oldSelf.issuerRef)",message="tls.issuerRef is set when a Cache is created and cannot be changed: its certificates are trusted by its CA"
// +kubebuilder:validation:XValidation:rule="!(has(self.secretName) && has(self.issuerRef))",message="tls takes secretName or issuerRef, not both: with issuerRef, the operator names the Secret"
type TLS struct {
	// SecretName names a Secret in the Cache's namespace whose certificate (tls.crt, with its
	// key, tls.key) the nodes serve and whose CA (ca.crt) they trust: the Secret a cert-manager
	// Certificate of the user's fills, say. Unset, the operator makes its own CA and
	// certificate, or has the issuer of issuerRef make them. The certificate must be signed
	// by that CA, be good for both server and client authentication (a node shows it to the
	// others on the cluster bus), and name <name>.<namespace>.svc, which the operator verifies
	// the nodes by. The
	// Secret must carry the label LabelCredentialsOf (cache.example.com/credentials-of) with
	// the Cache's name, so that the operator sees its changes: whoever fills it renews it, and
	// the nodes serve each new certificate without a restart. Until it is usable, the Cache
	// makes no pod. Set when the Cache is created; it cannot change.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="secretName must be the name of a Secret: lower-case letters, digits, '-' and '.'"
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// IssuerRef names a cert-manager Issuer or ClusterIssuer of the user's that issues the
	// nodes' certificate. The operator makes a cert-manager Certificate, <name>-tls, that asks
	// it for one naming the Cache's Service and its nodes' names, and the nodes serve what
	// cert-manager puts in the Secret <name>-tls, checked as a Secret named by secretName is.
	// The Issuer must put its CA's certificate in ca.crt (cert-manager's CA Issuer does; an
	// ACME one does not). Needs cert-manager installed. Unset, with secretName unset too, the
	// operator makes its own CA and certificate. Set when the Cache is created; it cannot
	// change.
	// +optional
	IssuerRef *IssuerRef `json:"issuerRef,omitempty"`

	// CertificateValidity is how long each certificate for the nodes is valid: the operator's,
	// or, with issuerRef, each one cert-manager issues (the Certificate's duration). A new one is
	// issued, and served at once, when a third of that is left. Defaults to 2160h (90 days); at
	// least 1h, at most 8760h (a year). It does not apply to a Secret named by secretName:
	// whoever fills that one decides.
	// +kubebuilder:default="2160h"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h') && duration(self) <= duration('8760h')",message="certificateValidity must be between 1h and 8760h"
	// +optional
	CertificateValidity *metav1.Duration `json:"certificateValidity,omitempty"`
}

// IssuerRef names a cert-manager issuer.
type IssuerRef struct {
	// Name is the issuer's name.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="issuerRef.name must be the name of an issuer: lower-case letters, digits, '-' and '.'"
	Name string `json:"name"`

	// Kind is Issuer, one in the Cache's namespace (the default), or ClusterIssuer, or the
	// kind of an external issuer in Group.
	// +kubebuilder:default=Issuer
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[A-Z][A-Za-z0-9]*$`
	// +optional
	Kind string `json:"kind,omitempty"`

	// Group is the issuer's API group: cert-manager.io (the default), or an external issuer's.
	// +kubebuilder:default="cert-manager.io"
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	// +optional
	Group string `json:"group,omitempty"`
}

// TLSSecretName is the name of the Secret with its nodes' certificate and key and the CA's
// certificate, which the pods mount: the one the spec names, or the one the operator makes; empty
// for a Cache without TLS. It is no Secret for clients: the nodes' key lets a process join the
// cluster bus. Clients trust the CA that CAConfigMapName publishes.
func (c *Cache) TLSSecretName() string {
	switch {
	case c.Spec.TLS == nil:
		return ""
	case c.Spec.TLS.SecretName != "":
		return c.Spec.TLS.SecretName
	}
	return c.Name + "-tls"
}

// CAConfigMapName is the name of the ConfigMap (key ca.crt) that publishes the certificate of the
// CA a Cache's nodes are signed by, for clients to trust; empty for a Cache without TLS.
func (c *Cache) CAConfigMapName() string {
	if c.Spec.TLS == nil {
		return ""
	}
	return c.Name + "-ca"
}

// CASecretName is the name of the Secret in which the operator keeps the CA it makes for a Cache
// (keys ca.crt and ca.key), which only the operator reads; empty for a Cache whose certificate is
// not the operator's (spec.tls.secretName, spec.tls.issuerRef) or that has no TLS.
func (c *Cache) CASecretName() string {
	if c.Spec.TLS == nil || c.Spec.TLS.SecretName != "" || c.Spec.TLS.IssuerRef != nil {
		return ""
	}
	return c.Name + "-ca-key"
}

// Metrics is how a Cache's nodes report what Valkey says of itself.
type Metrics struct {
	// Enabled runs an exporter (redis_exporter, the image the operator's --exporter-image
	// names) in each pod, serving Prometheus metrics on the container port named metrics
	// (9121): memory, hits and misses, evictions, clients, replication links, the cluster's
	// state. With auth, it connects as a user of its own that may only read what the server
	// reports. The install's PodMonitor scrapes it; the cache alerts read it.
	// +optional
	Enabled bool `json:"enabled,omitempty"`
}

// PodSettings is what a user sets on a Cache's pods.
type PodSettings struct {
	// CPU is what the Valkey container requests, and at most gets. Valkey runs commands on
	// one thread: a limit above one core gives it little.
	// +optional
	CPU *CPU `json:"cpu,omitempty"`

	// NodeSelector keeps the pods on nodes with all these labels.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && self[k].matches('^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$'))",message="nodeSelector keys and values must be label keys and values"
	// +optional
	NodeSelector map[string]LabelValue `json:"nodeSelector,omitempty"`

	// Tolerations let the pods run on nodes with the taints they match.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(t, (!has(t.operator) || t.operator in ['Exists', 'Equal']) && (!has(t.effect) || t.effect in ['NoSchedule', 'PreferNoSchedule', 'NoExecute']))",message="a toleration's operator is Exists or Equal, and its effect NoSchedule, PreferNoSchedule or NoExecute"
	// +listType=atomic
	// +optional
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// PriorityClassName is the PriorityClass of the pods: how they rank against others when
	// nodes are short of room. The class must exist, or no pod is created (the StatefulSet's
	// events say so).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="priorityClassName must be the name of a PriorityClass: lower-case letters, digits, '-' and '.'"
	// +optional
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// Labels are added to the pods' labels, for the user's own selectors; keys under
	// cache.example.com/ and app.kubernetes.io/ are the operator's.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$') && self[k].matches('^([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?$'))",message="labels must be label keys and values"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('cache.example.com/') && !k.startsWith('app.kubernetes.io/'))",message="labels under cache.example.com/ and app.kubernetes.io/ are the operator's"
	// +optional
	Labels map[string]LabelValue `json:"labels,omitempty"`

	// Annotations are added to the pods' annotations; keys under cache.example.com/ are the
	// operator's.
	// +kubebuilder:validation:MaxProperties=32
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$'))",message="annotation keys must be qualified names"
	// +kubebuilder:validation:XValidation:rule="self.all(k, !k.startsWith('cache.example.com/'))",message="annotations under cache.example.com/ are the operator's"
	// +optional
	Annotations map[string]string `json:"annotations,omitempty"`
}

// LabelValue is the value of a label.
// +kubebuilder:validation:MaxLength=63
type LabelValue string

// CPU is the CPU of a Cache's Valkey container.
// +kubebuilder:validation:XValidation:rule="!has(self.limit) || quantity(string(self.limit)).compareTo(quantity(has(self.request) ? string(self.request) : '100m')) >= 0",message="the CPU limit must be at least the request (100m unless set)"
type CPU struct {
	// Request is the CPU the scheduler keeps for the container: 100m unless set, at least 10m.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('10m')) >= 0 && quantity(string(self)).compareTo(quantity('64')) <= 0",message="the CPU request must be between 10m and 64"
	// +optional
	Request *resource.Quantity `json:"request,omitempty"`

	// Limit is the most CPU the container may use; none unless set. A server throttled
	// below what it needs answers slowly, and a Cluster node slow enough for long enough is
	// taken for failed.
	// +kubebuilder:validation:XValidation:rule="quantity(string(self)).compareTo(quantity('10m')) >= 0 && quantity(string(self)).compareTo(quantity('64')) <= 0",message="the CPU limit must be between 10m and 64"
	// +optional
	Limit *resource.Quantity `json:"limit,omitempty"`
}

// Auth is how clients authenticate to a Cache's servers.
type Auth struct {
	// SecretName names the Secret in the Cache's namespace that holds the application user's
	// credentials: key username (always AppUser) and key password. Unset, the operator makes
	// one named after the Cache (<name>-auth) with a random password, owned by the Cache. A
	// Secret named here is the user's: it must exist, hold a password of at least 16
	// characters, and carry the label LabelCredentialsOf (cache.example.com/credentials-of)
	// with the Cache's name, so that the operator sees its changes. Changing the password in
	// the Secret, or naming another Secret, rotates the password: the new one works on every
	// node at once, and the old one keeps working for RotationGracePeriod.
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:XValidation:rule="self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="secretName must be the name of a Secret: lower-case letters, digits, '-' and '.'"
	// +optional
	SecretName string `json:"secretName,omitempty"`

	// RotationGracePeriod is how long the previous password of the application user keeps
	// working after the password in the Secret changes, so that every client can pick up the
	// new one first: sessions authenticated with the old one stay up, and new ones with it are
	// refused after. 0s removes it at once. Defaults to 10m; at most 168h.
	// +kubebuilder:default="10m"
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('168h')",message="rotationGracePeriod must be between 0s and 168h"
	// +optional
	RotationGracePeriod *metav1.Duration `json:"rotationGracePeriod,omitempty"`

	// Grant lists what the application user may run besides its default rights. By default it
	// may run every command except the administrative ones (@admin: CONFIG, ACL, SHUTDOWN,
	// replication, the cluster's own management), which are the operator's and are never
	// granted, and except those that wipe every key, reach beyond the client's own keys or write
	// to another server: FLUSHALL, FLUSHDB, KEYS, MIGRATE, RESTORE, SORT, SORT_RO, SWAPDB (the
	// rest of @dangerous, INFO excepted), SCRIPT FLUSH and FUNCTION FLUSH. Each entry grants one
	// of those, by its lower-case name, or @dangerous all of them.
	// +kubebuilder:validation:MaxItems=11
	// +listType=set
	// +optional
	Grant []Grant `json:"grant,omitempty"`
}

// Grant is a command (or a subcommand, COMMAND|SUBCOMMAND), or @dangerous, that the application
// user may run besides its default rights (Auth.Grant).
// +kubebuilder:validation:Enum=flushall;flushdb;keys;migrate;restore;sort;sort_ro;swapdb;script|flush;function|flush;@dangerous
type Grant string

// AppUser is the Valkey user applications connect as, in a Cache with auth.
const AppUser = "app"

// LabelCredentialsOf, on a Secret, names the Cache whose credentials it holds: the operator
// watches the Secrets that carry it, and only those.
const LabelCredentialsOf = "cache.example.com/credentials-of"

// AuthSecretName is the name of the Secret with the application user's credentials: the one the
// spec names, or the one the operator makes; empty for a Cache without auth.
func (c *Cache) AuthSecretName() string {
	switch {
	case c.Spec.Auth == nil:
		return ""
	case c.Spec.Auth.SecretName != "":
		return c.Spec.Auth.SecretName
	}
	return c.Name + "-auth"
}

// RestoreSource is the backup a Cache starts from.
type RestoreSource struct {
	// Backup is a CacheBackup in the Cache's namespace; the Cache waits until it has Completed.
	// Its bucket and credentials are used to read it.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Backup string `json:"backup"`
}

// Nodes is the number of cache node pods the spec asks for: one per shard in Standalone mode, a
// primary and its replicas per shard in the other modes.
func (s *CacheSpec) Nodes() int32 {
	if s.Mode != ModeCluster && s.Mode != ModeReplicated {
		return s.Shards
	}
	return s.Shards * (1 + s.ReplicasOrZero())
}

// ReplicasOrZero is ReplicasPerShard, 0 when unset.
func (s *CacheSpec) ReplicasOrZero() int32 {
	if s.ReplicasPerShard == nil {
		return 0
	}
	return *s.ReplicasPerShard
}

// DefaultFailoverAfter is Replication.FailoverAfter when unset.
const DefaultFailoverAfter = 5 * time.Second

// FailoverAfter is how long a Replicated Cache's unreachable primary may stay so before a replica
// takes over (Replication.FailoverAfter).
func (s *CacheSpec) FailoverAfter() time.Duration {
	if s.Replication == nil || s.Replication.FailoverAfter == nil {
		return DefaultFailoverAfter
	}
	return s.Replication.FailoverAfter.Duration
}

// MetricsEnabled reports whether the Cache's pods run a metrics exporter.
func (s *CacheSpec) MetricsEnabled() bool { return s.Metrics != nil && s.Metrics.Enabled }

// CacheStatus is what the operator last observed of a Cache. Only the operator writes it.
type CacheStatus struct {
	// ObservedGeneration is the metadata.generation of the spec that this status describes.
	// While it is lower than metadata.generation, the latest change has not been acted on yet.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// Replicas is the number of cache node pods that exist, ready or not.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`

	// ReadyReplicas is the number of cache node pods that are ready to serve.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`

	// Shards is the number of shards that exist: in Standalone mode the node pods, in Cluster
	// mode the primaries that serve slots. The scale subresource reports it.
	// +optional
	Shards int32 `json:"shards,omitempty"`

	// ReadyShards is the number of shards ready to serve: in Standalone mode the ready node
	// pods, in Cluster mode the primaries that serve slots, reachable, with every wanted
	// replica attached and its link up.
	// +optional
	ReadyShards int32 `json:"readyShards,omitempty"`

	// SlotsAssigned is, in Cluster mode, how many of the 16384 hash slots a primary serves.
	// +optional
	SlotsAssigned int32 `json:"slotsAssigned,omitempty"`

	// SlotsToMove is, in Cluster mode, how many hash slots the operation under way (scaling
	// out, draining, rebalancing) still has to move between primaries; 0 when none is.
	// +optional
	SlotsToMove int32 `json:"slotsToMove,omitempty"`

	// SlotsMoved is, in Cluster mode, how many slots the latest operation that moved slots has
	// moved so far (or in all, once SlotsToMove is 0).
	// +optional
	SlotsMoved int32 `json:"slotsMoved,omitempty"`

	// Primary is, in Replicated mode, the pod whose server takes writes, behind the Service
	// <name>-primary; empty while no server does.
	// +optional
	Primary string `json:"primary,omitempty"`

	// Nodes are, in Cluster and Replicated modes, the nodes as Valkey reports them, by pod.
	// +listType=map
	// +listMapKey=pod
	// +optional
	Nodes []ClusterNode `json:"nodes,omitempty"`

	// CertificateSerial is the serial number of the TLS certificate every node of a Cache with
	// spec.tls serves, in decimal: the operator has a node that serves another read its files
	// again. Empty for a Cache without TLS.
	// +optional
	CertificateSerial string `json:"certificateSerial,omitempty"`

	// Rollout is the rollout of a new pod template under way, while the pods do not all run the
	// latest one; absent otherwise. The Progressing condition reports whether it still moves.
	// +optional
	Rollout *RolloutStatus `json:"rollout,omitempty"`

	// Selector is the label selector of the cache node pods, in string form, for the scale
	// subresource (a HorizontalPodAutoscaler needs it to find the pods).
	// +optional
	Selector string `json:"selector,omitempty"`

	// Conditions are the latest observations of the Cache's state. Ready is True when every
	// wanted node runs the current spec and is ready and, in Cluster mode, the cluster serves
	// every slot with every replica in sync.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// RolloutStatus is how far a rollout of a new pod template has got, and since when it has not
// got further.
type RolloutStatus struct {
	// UpdatedReplicas is how many pods run the new template, ready or not.
	UpdatedReplicas int32 `json:"updatedReplicas"`
	// ProgressedAt is when the rollout last moved: when it started, or when one more pod came to
	// run the new template. The rollout's progress deadline counts from it
	// (--rollout-progress-deadline).
	ProgressedAt metav1.Time `json:"progressedAt"`
}

// Role is a Cluster node's role.
type Role string

const (
	// RolePrimary serves hash slots.
	RolePrimary Role = "Primary"
	// RoleReplica replicates a primary and takes over its slots if it fails.
	RoleReplica Role = "Replica"
)

// ClusterNode is one node of a Cluster Cache.
type ClusterNode struct {
	// Pod is the name of the node's pod.
	Pod string `json:"pod"`
	// ID is the node's Valkey Cluster node ID.
	// +optional
	ID string `json:"id,omitempty"`
	// Role is Primary or Replica; empty while the node has not joined the cluster.
	// +optional
	Role Role `json:"role,omitempty"`
	// Slots is, for a primary, how many hash slots it serves.
	// +optional
	Slots int32 `json:"slots,omitempty"`
	// PrimaryPod is, for a replica, the pod of the primary it replicates.
	// +optional
	PrimaryPod string `json:"primaryPod,omitempty"`
}

// Cache is a Valkey cache: a StatefulSet of cache nodes behind a headless Service, kept in
// line with the spec by cache-operator; in Cluster mode also a Valkey Cluster the operator forms
// and keeps whole.
//
// The name is held to what the children need: the Service's name must be a DNS label, and the
// StatefulSet's pod names and revision labels add up to 11 characters to it.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (lower-case letters, digits and '-', starting with a letter): it also names the Cache's Service"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 52",message="metadata.name must be at most 52 characters: the Cache's pod names and revision labels extend it"
// +kubebuilder:subresource:scale:specpath=.spec.shards,statuspath=.status.shards,selectorpath=.status.selector
// +kubebuilder:resource:shortName=cch,categories=all
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.spec.mode`
// +kubebuilder:printcolumn:name="Shards",type=integer,JSONPath=`.spec.shards`
// +kubebuilder:printcolumn:name="Ready Shards",type=integer,JSONPath=`.status.readyShards`
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.readyReplicas`,priority=1
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.spec.version`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Cache struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec CacheSpec `json:"spec"`
	// +optional
	Status CacheStatus `json:"status,omitempty"`
}

// CacheList is a list of Caches.
//
// +kubebuilder:object:root=true
type CacheList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Cache `json:"items"`
}

// Hub marks v2 as the version every other one converts to and from.
func (*Cache) Hub() {}
