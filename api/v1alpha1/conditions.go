package v1alpha1

// Complete reports whether the backup holds the Cache's data, whole, with its reason while it
// does not: Pending, Running or Failed.
const (
	// ConditionComplete is the type of the Complete condition.
	ConditionComplete = "Complete"

	// ReasonCacheNotReady means the backup waits for its Cache to be Ready: a snapshot of a
	// Cluster that is still forming or moving slots would miss keys. It starts once the Cache is.
	ReasonCacheNotReady = "CacheNotReady"

	// ReasonCacheNotFound means the backup's Cache does not exist (any more): the backup failed.
	ReasonCacheNotFound = "CacheNotFound"

	// ReasonSnapshotting means the backup's Job streams the snapshots into the bucket.
	ReasonSnapshotting = "Snapshotting"

	// ReasonSnapshotsStored means every shard's RDB and the manifest are in the bucket.
	ReasonSnapshotsStored = "SnapshotsStored"

	// ReasonBackupFailed means the backup's Job failed; the message has its reason (a server
	// that stopped sending, a bucket unreachable or refusing the credentials). Whatever it wrote
	// is deleted, and no manifest was written: it is never a backup to restore from. Make another
	// CacheBackup to try again.
	ReasonBackupFailed = "BackupFailed"

	// ReasonJobLost means the backup's Job was deleted before it ended: the backup failed.
	ReasonJobLost = "JobLost"
)
