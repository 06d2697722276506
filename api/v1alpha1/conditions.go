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

	// ReasonReadingManifest means an imported backup's Job reads its manifest from the bucket.
	ReasonReadingManifest = "ReadingManifest"

	// ReasonManifestRead means an imported backup's manifest was read: what it lists is in the
	// status, for a restore.
	ReasonManifestRead = "ManifestRead"

	// ReasonBackupFailed means the backup's Job failed; the message has its reason (a server
	// that stopped sending, a bucket unreachable or refusing the credentials). Whatever it wrote
	// is deleted, and no manifest was written: it is never a backup to restore from. Make another
	// CacheBackup to try again.
	ReasonBackupFailed = "BackupFailed"

	// ReasonJobLost means the backup's Job was deleted before it ended: the backup failed.
	ReasonJobLost = "JobLost"
)

// While a CacheBackup whose deletion policy is Delete is being deleted, ObjectsDeleted says how
// the removal of its objects goes. The CacheBackup goes once they are gone.
const (
	// ConditionObjectsDeleted is the type of the ObjectsDeleted condition.
	ConditionObjectsDeleted = "ObjectsDeleted"

	// ReasonDeletingObjects means a Job removes the backup's objects from the bucket.
	ReasonDeletingObjects = "DeletingObjects"

	// ReasonDeletionFailed means the Job could not remove the objects (the message says why:
	// the bucket unreachable, the credentials refused or their Secret gone); it is tried again.
	// Removing the finalizer cache.example.com/backup-objects gives up, leaving the objects.
	ReasonDeletionFailed = "DeletionFailed"

	// ReasonHeldForRestore means a Cache is restoring from the backup (it names it in
	// spec.restoreFrom and is not Restored yet): its objects are removed once that Cache has its
	// data, is deleted, or has refused the backup. The message names the Caches.
	ReasonHeldForRestore = "HeldForRestore"
)

// Scheduling reports whether a CacheBackupSchedule makes backups, with the reason when it does not.
const (
	// ConditionScheduling is the type of the Scheduling condition.
	ConditionScheduling = "Scheduling"

	// ReasonScheduled means backups are made as the schedule says; the message says when next.
	ReasonScheduled = "Scheduled"

	// ReasonInvalidSchedule means the schedule cannot be read as a cron schedule: the message
	// says why. Nothing is made until the spec is fixed.
	ReasonInvalidSchedule = "InvalidSchedule"

	// ReasonSuspended means spec.suspend is set.
	ReasonSuspended = "Suspended"

	// ReasonPreviousBackupRunning means a backup was due while the schedule's previous one had
	// not finished: it is made once that one ends, for the latest time that was due.
	ReasonPreviousBackupRunning = "PreviousBackupRunning"
)

// BackupObjectsFinalizer, on a CacheBackup whose deletion policy is Delete, holds it until its
// objects are removed from the bucket.
const BackupObjectsFinalizer = "cache.example.com/backup-objects"
