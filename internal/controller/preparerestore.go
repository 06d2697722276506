package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
)

// +kubebuilder:rbac:groups="",resources=configmaps,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=cache.example.com,resources=cachebackups,verbs=get;list;watch

// A Cache created with spec.restoreFrom goes through its restore once, with the restore
// ConfigMap (resources.RestoreConfigMap) as its record while it lasts:
//   - before the ConfigMap: the backup must have completed and fit the Cache; the ConfigMap is
//     then written with the plan the nodes' init steps read and the keys each shard had, and
//     only then are the Cache's pods made, with the init step;
//   - with the ConfigMap: once the Cache would be Ready, the server that holds each shard now
//     is asked what it holds (checkRestore); when every shard is whole, Restored turns True;
//   - Restored True, stored: the next pass removes the ConfigMap, so that a node made later
//     starts empty; then nothing more. Until then Ready is False with the restore's reason.
//
// The operator's informer caches the ConfigMaps that carry its managed-by label: these only.

// restoreRecord is the restore ConfigMap's content beside the plan: what the operator checks.
type restoreRecord struct {
	// Backup names the backup, for messages; CredentialsSecret is the Secret the init steps
	// read the bucket's credentials from.
	Backup            string `json:"backup"`
	CredentialsSecret string `json:"credentialsSecret"`
	// Keys are the keys of each shard, in order: the node of ordinal i takes shard i; Slots are
	// a Cluster shard's slots (valkey.FormatSlots), which that node is given back.
	Keys  []int64  `json:"keys"`
	Slots []string `json:"slots,omitempty"`
}

const restoreRecordKey = "record"

// restore is a pass's view of the Cache's restore.
type restore struct {
	// done: no restore, or over; waiting, when set, is why the Cache's pods are not made yet.
	done    bool
	waiting *metav1.Condition
	// initContainer is the nodes' restore step, and record what they must hold.
	initContainer *corev1.Container
	record        restoreRecord
}

// prepareRestore finds where the Cache's restore stands and, before it started, starts it when
// its backup is ready and fits. Once the restore is over (Restored True, stored), it removes the
// ConfigMap, which the pass that checked the nodes kept until that was stored: removed first, a
// failed status write would leave the next pass with no record of a restore under way.
func (r *CacheReconciler) prepareRestore(ctx context.Context, cache *cachev2.Cache) (restore, error) {
	if cache.Spec.RestoreFrom == nil {
		return restore{done: true}, nil
	}
	cm := &corev1.ConfigMap{}
	key := client.ObjectKey{Namespace: cache.Namespace, Name: resources.RestoreConfigMapName(cache)}
	err := r.Get(ctx, key, cm) // the informer's: ConfigMaps with the managed-by label only
	if meta.IsStatusConditionTrue(cache.Status.Conditions, cachev2.ConditionRestored) {
		if err == nil && cm.DeletionTimestamp == nil {
			err = r.Delete(ctx, cm, client.Preconditions{UID: &cm.UID})
		}
		return restore{done: true}, client.IgnoreNotFound(err)
	}
	switch {
	case err == nil:
		why := staleRecord(cache, cm)
		if why == "" {
			return restoreOf(cache, r.Images.Agent, cm)
		}
		if cm.DeletionTimestamp == nil {
			if err := r.Delete(ctx, cm, client.Preconditions{UID: &cm.UID}); client.IgnoreNotFound(err) != nil {
				return restore{}, err
			}
		}
		return restore{waiting: restoreCondition(cache, cachev2.ReasonRestoring, why)}, nil
	case !apierrors.IsNotFound(err):
		return restore{}, err
	}
	name := cache.Spec.RestoreFrom.Backup
	b := &cachev1alpha1.CacheBackup{}
	if err := r.Get(ctx, client.ObjectKey{Namespace: cache.Namespace, Name: name}, b); apierrors.IsNotFound(err) {
		return restore{waiting: restoreCondition(cache, cachev2.ReasonRestoring, fmt.Sprintf("waiting for CacheBackup %s, which does not exist", name))}, nil
	} else if err != nil {
		return restore{}, err
	}
	if why := unfit(cache, b); why != "" {
		return restore{waiting: restoreCondition(cache, cachev2.ReasonRestoreRefused, why)}, nil
	}
	if b.Status.Phase != cachev1alpha1.BackupCompleted {
		return restore{waiting: restoreCondition(cache, cachev2.ReasonRestoring,
			fmt.Sprintf("waiting for CacheBackup %s to complete (it is %s)", name, phaseOrPending(b.Status.Phase)))}, nil
	}
	record := restoreRecord{Backup: name, CredentialsSecret: b.Spec.Storage.CredentialsSecret}
	for _, s := range b.Status.Shards {
		record.Keys = append(record.Keys, s.Keys)
		record.Slots = append(record.Slots, s.Slots)
	}
	location, backupPath := backup.PlaceOf(b)
	cm = resources.RestoreConfigMap(cache, backup.RestorePlan{Location: location, Path: backupPath})
	encoded, _ := json.Marshal(record) // plain values: cannot fail
	cm.Data[restoreRecordKey] = string(encoded)
	if err := controllerutil.SetControllerReference(cache, cm, r.Scheme()); err != nil {
		return restore{}, err
	}
	if err := r.Create(ctx, cm); apierrors.IsAlreadyExists(err) {
		// Made by a pass the informer has not caught up with: the stored one is the record.
		if err := r.APIReader.Get(ctx, key, cm); err != nil {
			return restore{}, err
		}
	} else if err != nil {
		return restore{}, err
	}
	return restoreOf(cache, r.Images.Agent, cm)
}

// unfit says why a backup cannot be restored into the Cache, or nothing.
func unfit(cache *cachev2.Cache, b *cachev1alpha1.CacheBackup) string {
	switch {
	case b.Status.Phase == cachev1alpha1.BackupFailed:
		return fmt.Sprintf("CacheBackup %s failed: it holds nothing to restore", b.Name)
	case b.Status.Phase != cachev1alpha1.BackupCompleted:
		return ""
	case !modesFit(cachev2.Mode(b.Status.CacheMode), cache.Spec.Mode, len(b.Status.Shards)):
		return fmt.Sprintf("CacheBackup %s holds a %s Cache's data (%d shards); this Cache is %s: a restore needs a Cache of the same mode, "+
			"or, for a backup of one shard, a Standalone or Replicated Cache, which take each other's",
			b.Name, b.Status.CacheMode, len(b.Status.Shards), cache.Spec.Mode)
	case len(b.Status.Shards) != int(cache.Spec.Shards):
		return fmt.Sprintf("CacheBackup %s holds %d shards and this Cache has %d: a restore puts each shard on one node, as it was; create the Cache with %d shards (and scale it after)",
			b.Name, len(b.Status.Shards), cache.Spec.Shards, len(b.Status.Shards))
	case slices.ContainsFunc(b.Status.Shards, func(s cachev1alpha1.BackupShard) bool { return s.Object == "" }):
		return fmt.Sprintf("CacheBackup %s does not list each shard's keys and slots (its Job's report left them out: too many shards), which a restore checks against", b.Name)
	case valkey.OlderVersion(cache.Spec.Version, b.Status.ValkeyVersion):
		format := ""
		if b.Status.RDBFormat != 0 {
			format = fmt.Sprintf(" (RDB format %d)", b.Status.RDBFormat)
		}
		return fmt.Sprintf("CacheBackup %s was taken from Valkey %s%s, which Valkey %s cannot load: a server loads the snapshots of its own release and older ones only; create the Cache with %s or later",
			b.Name, b.Status.ValkeyVersion, format, cache.Spec.Version, b.Status.ValkeyVersion)
	}
	maxMemory := resources.MaxMemory(cache.Spec.Memory)
	for _, s := range b.Status.Shards {
		if s.Memory > maxMemory {
			need := resources.MemoryFor(s.Memory)
			return fmt.Sprintf("CacheBackup %s's %s took %d bytes on its server, more than this Cache's nodes may hold (maxmemory %d of spec.memory %s): they would evict keys as they load it; create the Cache with spec.memory of at least %s",
				b.Name, s.Name, s.Memory, maxMemory, cache.Spec.Memory.String(), need.String())
		}
	}
	return ""
}

// modesFit reports whether the data of a backup of a Cache of mode from, in shards shards, fits
// a Cache of mode to: one of the same mode, or, for one shard, either of Standalone and
// Replicated, whose one shard holds every key in database 0 with no slots, so that its RDB
// loads into either. A backup that records no mode (made before backups recorded it) fits none.
func modesFit(from, to cachev2.Mode, shards int) bool {
	oneServer := func(m cachev2.Mode) bool { return m == cachev2.ModeStandalone || m == cachev2.ModeReplicated }
	return from == to || shards == 1 && oneServer(from) && oneServer(to)
}

func phaseOrPending(p cachev1alpha1.BackupPhase) cachev1alpha1.BackupPhase {
	if p == "" {
		return cachev1alpha1.BackupPending
	}
	return p
}

// staleRecord says why a restore ConfigMap of the Cache's name is no record of this Cache's
// restore, or nothing. A Cache deleted and made again at once, before the garbage collector
// removed its ConfigMap, finds the earlier Cache's: taken as its own, its nodes would restore
// that Cache's backup. The ConfigMap must be this Cache's (its controller's UID) and name the
// backup that the spec restores from.
func staleRecord(cache *cachev2.Cache, cm *corev1.ConfigMap) string {
	if !metav1.IsControlledBy(cm, cache) {
		return fmt.Sprintf("waiting for ConfigMap %s, the restore record of an earlier Cache of this name, to be removed", cm.Name)
	}
	var record restoreRecord
	if err := json.Unmarshal([]byte(cm.Data[restoreRecordKey]), &record); err == nil && record.Backup != cache.Spec.RestoreFrom.Backup {
		return fmt.Sprintf("waiting for ConfigMap %s, the record of a restore from CacheBackup %s, to be removed", cm.Name, record.Backup)
	}
	return ""
}

// restoreOf is the restore the ConfigMap records.
func restoreOf(cache *cachev2.Cache, agentImage string, cm *corev1.ConfigMap) (restore, error) {
	var record restoreRecord
	if err := json.Unmarshal([]byte(cm.Data[restoreRecordKey]), &record); err != nil {
		return restore{}, fmt.Errorf("ConfigMap %s is not what the operator wrote: %w", cm.Name, err)
	}
	init := resources.RestoreInitContainer(cache, agentImage, record.CredentialsSecret)
	return restore{initContainer: &init, record: record}, nil
}

// slotsByPod are the slots each restored node of a Cluster is given back: the node of ordinal i
// those of shard i. Nil once the restore is over.
func (rs restore) slotsByPod(cache *cachev2.Cache) (map[string][]valkey.SlotRange, error) {
	if rs.initContainer == nil {
		return nil, nil
	}
	slots := map[string][]valkey.SlotRange{}
	for i, s := range rs.record.Slots {
		ranges, err := valkey.ParseSlots(s)
		if err != nil {
			return nil, fmt.Errorf("the restore's record of shard %d: %w", i, err)
		}
		slots[cache.Name+"-"+strconv.Itoa(i)] = ranges
	}
	return slots, nil
}

// restoreCondition is the Restored condition with the reason and message given.
func restoreCondition(cache *cachev2.Cache, reason, message string) *metav1.Condition {
	status := metav1.ConditionFalse
	if reason == cachev2.ReasonRestoreVerified {
		status = metav1.ConditionTrue
	}
	return &metav1.Condition{Type: cachev2.ConditionRestored, Status: status, Reason: reason, Message: message, ObservedGeneration: cache.Generation}
}

// withRestore puts the restore's state into the status: the Restored condition, and, until it is
// True, Ready False with its reason and message. stored are the conditions as stored: Ready,
// which the status may have turned True before the restore's gate, keeps its stored transition
// time while it stays False.
func withRestore(status *cachev2.CacheStatus, stored []metav1.Condition, restored *metav1.Condition) {
	if restored == nil {
		return
	}
	meta.SetStatusCondition(&status.Conditions, *restored)
	if restored.Status == metav1.ConditionTrue {
		return
	}
	if before := meta.FindStatusCondition(stored, cachev2.ConditionReady); before != nil {
		meta.SetStatusCondition(&status.Conditions, *before)
	}
	ready := *restored
	ready.Type = cachev2.ConditionReady
	meta.SetStatusCondition(&status.Conditions, ready)
}

// restoreWaitRetryAfter is how often a Cache whose restore waits for its backup, or for its
// nodes to fetch it, looks again; restoreCleanupAfter, how soon after its nodes were checked the
// restore's ConfigMap goes.
const (
	restoreWaitRetryAfter = 5 * time.Second
	restoreCleanupAfter   = time.Second
)

// waitForBackup records why the Cache's pods are not made yet: its restore waits for, or
// refuses, its backup. The Cache does not watch backups: it looks again after a while.
func (r *CacheReconciler) waitForBackup(ctx context.Context, cache *cachev2.Cache, waiting *metav1.Condition) (ctrl.Result, error) {
	status := *cache.Status.DeepCopy()
	withRestore(&status, cache.Status.Conditions, waiting)
	if err := r.writeStatus(ctx, cache, status); err != nil {
		return ctrl.Result{}, fmt.Errorf("updating status: %w", err)
	}
	return ctrl.Result{RequeueAfter: restoreWaitRetryAfter}, nil
}

// gateOnRestore holds a restoring Cache's Ready False until every node was checked against the
// backup (checkRestore), and records the Restored condition. It reports whether the check passed
// in this pass.
func (r *CacheReconciler) gateOnRestore(ctx context.Context, cache *cachev2.Cache, rs restore, members []clusterMember, auth valkey.Auth, status *cachev2.CacheStatus) (verified bool, err error) {
	if rs.done {
		return false, nil
	}
	restored, err := r.checkRestore(ctx, cache, rs, members, status.Primary, auth, meta.IsStatusConditionTrue(status.Conditions, cachev2.ConditionReady))
	if err != nil {
		return false, err
	}
	withRestore(status, cache.Status.Conditions, restored)
	return restored.Status == metav1.ConditionTrue, nil
}
