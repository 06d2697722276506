package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// CacheBackupSpec says which Cache to back up and where to, or, for a backup made elsewhere,
// where it is. Both are fixed once the backup is made: a backup is one snapshot, and another one
// is another CacheBackup.
//
// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="spec is immutable: a backup is one snapshot; make another CacheBackup for another"
// +kubebuilder:validation:XValidation:rule="has(self.cacheName) != has(self.importPath)",message="exactly one of cacheName (take a backup) and importPath (stand for one made elsewhere) is set"
// +kubebuilder:validation:XValidation:rule="!has(self.importPath) || !has(self.deletionPolicy) || self.deletionPolicy != 'Delete'",message="an imported backup's objects are the original backup's, which another cluster may still list and restore from: its deletionPolicy is Retain; delete them with the original"
type CacheBackupSpec struct {
	// CacheName is the Cache, in the backup's namespace, whose data the backup holds.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=52
	// +kubebuilder:validation:Pattern=`^[a-z]([-a-z0-9]*[a-z0-9])?$`
	// +optional
	CacheName string `json:"cacheName,omitempty"`

	// ImportPath, instead of cacheName, makes the CacheBackup stand for a backup already in the
	// bucket, made in another cluster or namespace, so that a Cache here can restore from it: the
	// backup's path under storage.prefix, where its manifest is. For a backup made by this
	// operator, <namespace>/<cache>/<backup>: its status.location without s3://<bucket>/<prefix>/.
	// Nothing is copied: a Job reads the manifest, and the backup is Completed with what it lists.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*$`
	// +optional
	ImportPath string `json:"importPath,omitempty"`

	// Storage is the bucket the backup is written to, or, imported, read from.
	//
	// +required
	Storage BucketLocation `json:"storage"`

	// DeletionPolicy says what happens to the backup's objects in the bucket when the
	// CacheBackup is deleted: Retain leaves them (the default for a backup made or imported by
	// hand, so that deleting a namespace never deletes data), Delete removes them first, through a Job that
	// reads the bucket's credentials as the backup's own did. A schedule's backups are Delete:
	// its retention is what removes them. An imported backup is always Retain: its objects are
	// the original's.
	//
	// +kubebuilder:default=Retain
	// +optional
	DeletionPolicy DeletionPolicy `json:"deletionPolicy,omitempty"`
}

// DeletionPolicy is what happens to a backup's objects when the CacheBackup is deleted.
//
// +kubebuilder:validation:Enum=Retain;Delete
type DeletionPolicy string

const (
	// DeletionRetain leaves a deleted backup's objects in the bucket.
	DeletionRetain DeletionPolicy = "Retain"
	// DeletionDelete removes a backup's objects from the bucket before the CacheBackup goes.
	DeletionDelete DeletionPolicy = "Delete"
)

// BucketLocation is a place in an S3-compatible bucket, and the credentials that reach it. A
// backup's objects are written under <prefix>/<namespace>/<cache>/<backup>/: one RDB per shard
// and, last, the manifest that lists them.
type BucketLocation struct {
	// Endpoint is the S3 server's host or host:port, without a scheme.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9.-]+(:[0-9]{1,5})?$`
	// +required
	Endpoint string `json:"endpoint"`

	// Insecure sends requests in plain HTTP rather than HTTPS: for a server inside the cluster's
	// own network only, as the credentials travel with them.
	//
	// +optional
	Insecure bool `json:"insecure,omitempty"`

	// Region is the bucket's region, for servers that need one.
	//
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Region string `json:"region,omitempty"`

	// Bucket is the bucket's name.
	//
	// +kubebuilder:validation:MinLength=3
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9][a-z0-9.-]*[a-z0-9]$`
	// +required
	Bucket string `json:"bucket"`

	// Prefix, if set, comes before the names of every object the backup writes.
	//
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9!_.*'()/-]*$`
	// +optional
	Prefix string `json:"prefix,omitempty"`

	// CredentialsSecret is a Secret in the backup's namespace with the keys accessKeyID and
	// secretAccessKey, and optionally ca.crt, PEM certificates trusted beside the system's to
	// verify the server. Only the backup's own pod reads it: the operator never does.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	CredentialsSecret string `json:"credentialsSecret"`
}

// The keys of a CredentialsSecret.
const (
	SecretKeyAccessKeyID     = "accessKeyID"
	SecretKeySecretAccessKey = "secretAccessKey"
	SecretKeyCABundle        = "ca.crt"
)

// BackupPhase is where a backup is in its life: Pending until its Cache is Ready, Running while
// its snapshots stream to the bucket, and then Completed or Failed for good.
//
// +kubebuilder:validation:Enum=Pending;Running;Completed;Failed
type BackupPhase string

const (
	BackupPending   BackupPhase = "Pending"
	BackupRunning   BackupPhase = "Running"
	BackupCompleted BackupPhase = "Completed"
	BackupFailed    BackupPhase = "Failed"
)

// Finished reports whether the phase is a backup's last.
func (p BackupPhase) Finished() bool { return p == BackupCompleted || p == BackupFailed }

// CacheBackupStatus is what the operator knows of the backup.
type CacheBackupStatus struct {
	// Phase is where the backup is in its life.
	//
	// +optional
	Phase BackupPhase `json:"phase,omitempty"`

	// Conditions: Complete, with a reason that says why the backup is not (yet) complete.
	//
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// StartTime is when the backup's snapshots were started, CompletionTime when it ended,
	// completed or failed.
	//
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// Location is where the backup's objects are, as s3://<bucket>/<path>/.
	//
	// +optional
	Location string `json:"location,omitempty"`

	// CacheMode is the mode of the Cache the snapshots come from: a restore needs a Cache of the
	// same mode, or, for a Replicated Cache's backup and a Standalone Cache's of one node, a
	// Cache of the other of those two modes.
	//
	// +kubebuilder:validation:Enum=Standalone;Cluster;Replicated
	// +optional
	CacheMode string `json:"cacheMode,omitempty"`

	// ValkeyVersion is the version of the servers the snapshots come from (the spec's while the
	// backup runs, then what the servers reported, the latest if they differ): a restore needs that
	// version or a later one.
	//
	// +optional
	ValkeyVersion string `json:"valkeyVersion,omitempty"`

	// RDBFormat is the version of the snapshots' RDB format (the newest, if they differ): 11 from
	// Valkey 8, 80 from Valkey 9. A server loads the formats up to its own only, so a Valkey 9
	// backup cannot be restored into Valkey 8.
	//
	// +optional
	RDBFormat int32 `json:"rdbFormat,omitempty"`

	// Bytes and Keys are the sizes of the whole backup: the RDBs' bytes, and the keys they hold.
	//
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// +optional
	Keys int64 `json:"keys,omitempty"`

	// Shards are the backup's parts: one per shard of a Cluster, one per node of a Standalone
	// Cache.
	//
	// +listType=map
	// +listMapKey=name
	// +optional
	Shards []BackupShard `json:"shards,omitempty"`
}

// BackupShard is one part of a backup: a snapshot of one server.
type BackupShard struct {
	// Name is the part's name, and its object's: shard-0, shard-1, ...
	Name string `json:"name"`
	// Source is the pod whose server the snapshot is taken from: a Cluster shard's replica when
	// it has one ready, so that its primary keeps serving.
	Source string `json:"source"`
	// Object is the RDB's key in the bucket, the location's prefix included, once it is whole.
	//
	// +optional
	Object string `json:"object,omitempty"`
	// Bytes and Keys are the RDB's size and the keys it holds, once it is whole.
	//
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// +optional
	Keys int64 `json:"keys,omitempty"`
	// Slots are a Cluster shard's hash slots, as CLUSTER NODES writes them (0-5460,5462): a
	// restore gives them back to the node that takes the shard.
	//
	// +optional
	Slots string `json:"slots,omitempty"`
	// Memory is the memory, in bytes, the shard's data took on its server when the backup began,
	// as Valkey counts it against maxmemory: a restore refuses a Cache whose nodes may hold
	// less. Unset for a backup made before it was recorded.
	//
	// +optional
	Memory int64 `json:"memory,omitempty"`
}

// CacheBackup is a snapshot of a Cache's data in an S3-compatible bucket, taken by a Job the
// operator starts (so a backup goes on while the operator restarts), from a replica of each shard
// where there is one. `kubectl wait --for=condition=Complete cachebackup/NAME` waits for it.
//
// The name is held to what its Job's name needs: a DNS label, with "-backup" after it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS label (lower-case letters, digits and '-', starting with a letter): it also names the backup's Job"
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 56",message="metadata.name must be at most 56 characters: the backup's Job's name extends it"
// +kubebuilder:resource:shortName=cbk,categories=all
// +kubebuilder:printcolumn:name="Cache",type=string,JSONPath=`.spec.cacheName`
// +kubebuilder:printcolumn:name="Imported",type=string,JSONPath=`.spec.importPath`,priority=1
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Keys",type=integer,JSONPath=`.status.keys`
// +kubebuilder:printcolumn:name="Bytes",type=integer,JSONPath=`.status.bytes`,priority=1
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Complete")].reason`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CacheBackup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +required
	Spec CacheBackupSpec `json:"spec"`
	// +optional
	Status CacheBackupStatus `json:"status,omitempty"`
}

// CacheBackupList is a list of CacheBackups.
//
// +kubebuilder:object:root=true
type CacheBackupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CacheBackup `json:"items"`
}
