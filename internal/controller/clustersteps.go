package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"example.com/cache-operator/internal/topology"
	"example.com/cache-operator/internal/valkey"
)

// keyMoveBudget bounds how long one pass spends moving slots between servers: no slot is opened
// after it. A slot opened in time has as long again to move its keys: most slots of a cache
// hold a few keys, and one left open at the pass's deadline would take a pass of its own to
// finish. A slot whose keys are not all moved by then (large values) stays open, and the next
// pass resumes it from what the servers report; so a big migration takes many short passes and
// never holds a worker long. Two seconds, not one: each pass also reads every server again,
// which on real nodes took about as long as a one-second budget moved slots.
const keyMoveBudget = 2 * time.Second

// +kubebuilder:rbac:groups="",resources=pods,verbs=delete;patch

// annotationHandoverSeen, on a pod of a Cluster Cache, is when the operator saw every member
// report that the pod's server had handed its shard over to another primary in an ordered upgrade
// (topology.MarkHandover), RFC 3339: the pod restarts topology.HandoverGrace after. It goes with
// the pod.
const annotationHandoverSeen = "cache.example.com/handover-seen-at"

// act applies the plan's actions and returns every failure. The actions are independent of each
// other (topology.Plan), so they run side by side: the migrations of a scale-out, each from its
// own source, share the pass's key-moving budget rather than queue behind one another. A pod is
// deleted only if it is still the pod that was observed.
func (r *CacheReconciler) act(ctx context.Context, members []clusterMember, actions []topology.Action) error {
	byPod := map[string]clusterMember{}
	for _, m := range members {
		byPod[m.Pod] = m
	}
	deadline := time.Now().Add(keyMoveBudget)
	errs := make([]error, len(actions))
	var wg sync.WaitGroup
	for i, a := range actions {
		log.FromContext(ctx).Info("Valkey cluster step", "step", a.String())
		wg.Go(func() { errs[i] = r.actOn(ctx, byPod, a, deadline) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tending the Valkey cluster: %w", err)
	}
	return nil
}

// actOn applies one action: a write to its pod, or a command to its server.
func (r *CacheReconciler) actOn(ctx context.Context, byPod map[string]clusterMember, a topology.Action, deadline time.Time) error {
	m := byPod[a.On]
	switch a.Kind { //nolint:exhaustive // the other kinds are commands to the server, below
	case topology.KindRestart:
		return r.restartPod(ctx, m.pod)
	case topology.KindMarkHandover:
		return client.IgnoreNotFound(r.markHandover(ctx, m.pod))
	}
	server, err := valkey.Connect(m.IP, m.Port, m.auth)
	if err != nil {
		return err
	}
	defer server.Close()
	return r.command(ctx, server, byPod, a, deadline)
}

// markHandover records on the pod, if it is still the pod that was observed, that its handover
// was seen now.
func (r *CacheReconciler) markHandover(ctx context.Context, pod *corev1.Pod) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":         pod.UID, // a precondition: the API server refuses to change it
		"annotations": map[string]string{annotationHandoverSeen: time.Now().UTC().Format(time.RFC3339Nano)},
	}})
	if err != nil {
		return err
	}
	return r.Patch(ctx, pod.DeepCopy(), client.RawPatch(types.MergePatchType, patch))
}

// command sends one action's command to its server.
func (r *CacheReconciler) command(ctx context.Context, server *valkey.Server, byPod map[string]clusterMember, a topology.Action, deadline time.Time) error {
	switch a.Kind {
	case topology.KindMeet:
		return server.Meet(ctx, a.Meet.IP, a.Meet.Port)
	case topology.KindAddSlots:
		return server.AddSlots(ctx, a.AddSlots)
	case topology.KindReplicate:
		return server.Replicate(ctx, a.Replicate)
	case topology.KindForget:
		return server.Forget(ctx, a.Forget)
	case topology.KindTakeover:
		return server.FailoverTakeover(ctx)
	case topology.KindFailover:
		return server.Failover(ctx)
	case topology.KindReset:
		return server.ResetSoft(ctx)
	case topology.KindStable:
		return server.SetSlotsStable(ctx, a.Stable)
	case topology.KindClaim:
		return server.SetSlotsOwner(ctx, a.Claim.Slots, a.Claim.ID)
	case topology.KindMigrate:
		return migrate(ctx, server, byPod, a.Migrate, deadline, keyMoveBudget)
	case topology.KindMigrateSlots:
		return migrateAtomically(ctx, server, byPod[a.MigrateSlots.Target], a.MigrateSlots)
	case topology.KindCancelMigrations:
		return server.CancelSlotMigrations(ctx)
	case topology.KindUnfence:
		return server.Unfence(ctx)
	case topology.KindRestart, topology.KindMarkHandover:
		// Writes to the pod, made by actOn.
	}
	return fmt.Errorf("%s: no command for this kind of step", a)
}

// migrate moves slots from source, slotsOpenAtOnce at a time, until the deadline: the target is
// told it imports them and the source that it migrates them (unless they do already), each
// slot's keys go over in batches (moveKeys), and the target, then the source, are told the
// target owns the slots whose keys have all moved. Each of these is sent for the whole group at
// once, where valkey-cli waits for one slot after another: a slot of a cache holds a few keys,
// and the SETSLOTs, each acknowledged by the primaries' replicas since Valkey 8, were most of a
// scale-out's time (valkey.Server's setSlots). Clients meet ASK redirections for the open
// group's slots alone. A group not reached by the deadline is not opened at all; one opened has
// until the deadline or slotBudget after its opening, whichever is later, to move its keys, and
// its slots not emptied by then (with their keys partly moved, or none) stay open for the next
// pass. Every other primary is told the new owners once, at the end.
func migrate(ctx context.Context, source *valkey.Server, byPod map[string]clusterMember, m *topology.Migration, deadline time.Time, slotBudget time.Duration) error {
	target, err := valkey.Connect(m.TargetAddress.IP, m.TargetAddress.Port, source.Auth())
	if err != nil {
		return err
	}
	defer target.Close()
	batch := newKeyBatch()
	var moved []int
	defer func() { announceOwner(ctx, byPod, m, moved) }()
	for group := range slices.Chunk(m.Slots, slotsOpenAtOnce) {
		// The first group is opened whatever the time, so that every pass makes progress.
		if len(moved) > 0 && time.Now().After(deadline) {
			return nil
		}
		if err := target.SetSlotsImporting(ctx, among(group, m.Import), m.SourceID); err != nil {
			return err
		}
		if err := source.SetSlotsMigrating(ctx, among(group, m.Export), m.TargetID); err != nil {
			return err
		}
		slotDeadline := later(deadline, time.Now().Add(slotBudget))
		var emptied []int
		for _, slot := range group {
			done, err := moveKeys(ctx, source, m.TargetAddress, slot, slotDeadline, batch)
			if err != nil {
				return err
			}
			if !done {
				break
			}
			emptied = append(emptied, slot)
		}
		// The target first: it raises its config epoch, so its claim wins over the source's.
		if err := target.SetSlotsOwner(ctx, emptied, m.TargetID); err != nil {
			return err
		}
		moved = append(moved, emptied...)
		// The source would learn it from the cluster bus; told now, it redirects clients at
		// once. A failure here is no error: a source that gave away its last slot turns into a
		// replica of the target and drops its clients, and a slot it still shows migrating is
		// finished by the next pass (topology.closeOpenSlots).
		announce(ctx, source, emptied, m.TargetID)
		if len(emptied) < len(group) {
			return nil // out of time: the rest of the group stays open
		}
	}
	return nil
}

// migrateAtomically starts the atomic slot migration job on source, once the target may import
// (valkey.Server.AllowImports: a target restarted since its last job lost that with the rest of
// what the operator gave its users).
func migrateAtomically(ctx context.Context, source *valkey.Server, target clusterMember, job *topology.SlotJob) error {
	to, err := valkey.Connect(target.IP, target.Port, source.Auth())
	if err != nil {
		return err
	}
	defer to.Close()
	if err := to.AllowImports(ctx); err != nil {
		return err
	}
	return source.MigrateSlots(ctx, job.Slots, job.TargetID)
}

// slotsOpenAtOnce is how many slots a migration opens together: few enough that clients meet ASK
// for a sliver of the keyspace (16 of 16384 slots per source), enough that a group's SETSLOTs
// cost a round trip where one per slot cost a scale-out most of its time.
const slotsOpenAtOnce = 16

// among are those of slots that are in set, in the order of slots.
func among(slots, set []int) []int {
	var in []int
	for _, slot := range slots {
		if slices.Contains(set, slot) {
			in = append(in, slot)
		}
	}
	return in
}

// later is the later of two times.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// announceOwner tells every other primary that the target owns the moved slots: they would
// learn it from the cluster bus, and told now they redirect clients to the right node at once.
func announceOwner(ctx context.Context, byPod map[string]clusterMember, m *topology.Migration, moved []int) {
	if len(moved) == 0 {
		return
	}
	var wg sync.WaitGroup
	for _, pod := range m.Announce {
		wg.Go(func() {
			if other, err := valkey.Connect(byPod[pod].IP, byPod[pod].Port, byPod[pod].auth); err == nil {
				announce(ctx, other, moved, m.TargetID)
				other.Close()
			}
		})
	}
	wg.Wait()
}

// announce tells a server the new owner of slots, logging rather than returning a failure.
func announce(ctx context.Context, server *valkey.Server, slots []int, ownerID string) {
	if err := server.SetSlotsOwner(ctx, slots, ownerID); err != nil {
		log.FromContext(ctx).Info("A primary will learn of moved slots from the cluster bus", "server", server.Addr, "error", err.Error())
	}
}

// moveKeys moves the slot's keys from source to the target in batches sized by batch, until none
// is left (done) or the deadline passes. While the slot migrates, a key the source does not hold
// is written on the target (clients are sent there with ASK), so a listing shorter than asked
// for, once moved, leaves the source with none: it is not listed again.
func moveKeys(ctx context.Context, source *valkey.Server, target topology.Address, slot int, deadline time.Time, batch *keyBatch) (done bool, err error) {
	for {
		keys, err := source.KeysInSlot(ctx, slot, keysPerBatch)
		if err != nil || len(keys) == 0 {
			return err == nil, err
		}
		last := len(keys) < keysPerBatch
		sizes := []int64{0} // one key is a batch whatever its size
		if len(keys) > 1 {
			if sizes, err = source.KeySizes(ctx, keys); err != nil {
				return false, err
			}
		}
		for len(keys) > 0 {
			if time.Now().After(deadline) {
				return false, nil
			}
			n := batch.take(sizes)
			began := time.Now()
			if err := source.MigrateKeys(ctx, target.IP, target.Port, keys[:n]); err != nil {
				return false, err
			}
			batch.took(time.Since(began))
			keys, sizes = keys[n:], sizes[n:]
		}
		if last {
			return true, nil
		}
	}
}

// keysPerBatch is how many keys of a slot are listed at once, and the most one MIGRATE moves.
const keysPerBatch = 100
