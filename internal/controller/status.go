package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
)

// writeStatus stores status, and only when it differs from the stored one: an unchanged pass
// makes no write and so triggers no further watch event. The write is an update, not a patch,
// so that a status computed from a stale read fails with a conflict and the next pass
// recomputes it from a fresh one.
func (r *CacheReconciler) writeStatus(ctx context.Context, cache *cachev2.Cache, status cachev2.CacheStatus) error {
	if equality.Semantic.DeepEqual(cache.Status, status) {
		return nil
	}
	cache.Status = status
	return r.writeCache(cache, func() error { return r.Status().Update(ctx, cache) })
}

// writeCondition sets one condition in the stored status, writing only if that changes it.
func (r *CacheReconciler) writeCondition(ctx context.Context, cache *cachev2.Cache, cond metav1.Condition) error {
	status := *cache.Status.DeepCopy()
	meta.SetStatusCondition(&status.Conditions, cond)
	return r.writeStatus(ctx, cache, status)
}

// reportFailure records err in the Ready condition, where a user and an alert look, and returns
// it for the queue to retry. Conflicts and AlreadyExists are routine outcomes of stale reads
// that the next pass resolves; they are not reported, so they never flip Ready.
func (r *CacheReconciler) reportFailure(ctx context.Context, cache *cachev2.Cache, err error) error {
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		return err
	}
	cond := metav1.Condition{
		Type:               cachev2.ConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             cachev2.ReasonReconcileFailed,
		ObservedGeneration: cache.Generation,
		Message:            err.Error(),
	}
	if conflict := (*NameConflictError)(nil); errors.As(err, &conflict) {
		cond.Reason, cond.Message = cachev2.ReasonNameConflict, conflict.Error()
		r.Recorder.Eventf(cache, nil, corev1.EventTypeWarning, cachev2.ReasonNameConflict, "Create", "%s", conflict.Error())
	}
	if serr := r.writeCondition(ctx, cache, cond); serr != nil {
		return errors.Join(err, fmt.Errorf("reporting the failure in status: %w", serr))
	}
	return err
}

// observedStatus is the status of cache given the state of its StatefulSet, the outcome of its
// registration in the catalogue (nil: no catalogue), why its pods keep their template if they
// do, and, for a Cluster Cache, what its servers report (nil for a Standalone one). A
// condition's transition time moves only when its status flips.
func observedStatus(cache *cachev2.Cache, sts *appsv1.StatefulSet, registered *metav1.Condition, hold resources.TemplateHold, cluster *clusterReport) cachev2.CacheStatus {
	status := *cache.Status.DeepCopy()
	status.ObservedGeneration = cache.Generation
	status.Replicas = sts.Status.Replicas
	status.ReadyReplicas = sts.Status.ReadyReplicas
	// Each Standalone node is a shard; a Cluster's shards are counted from what Valkey reports.
	status.Shards, status.ReadyShards, status.SlotsAssigned, status.Nodes = status.Replicas, status.ReadyReplicas, 0, nil
	status.SlotsToMove, status.SlotsMoved, status.Primary = 0, 0, ""
	ready := readyCondition(cache, sts)
	if cluster != nil {
		status.Shards, status.ReadyShards = cluster.shards, cluster.readyShards
		status.SlotsAssigned, status.Nodes, status.Primary = cluster.slotsAssigned, cluster.nodes, cluster.primary
		status.SlotsToMove, status.SlotsMoved = cluster.slotsToMove, slotsMoved(cache.Status, cluster.slotsToMove)
		if cluster.slotsUnknown {
			// A server that was not asked counts none of its slots: its share would read as
			// moved, and the count would start again from 0 once it answers.
			status.SlotsToMove, status.SlotsMoved = cache.Status.SlotsToMove, cache.Status.SlotsMoved
		}
		switch {
		case ready.Status == metav1.ConditionTrue:
			ready = cluster.ready // the pods' progress is the news until they are all up
		case slices.Contains(clusterOperations, cluster.ready.Reason) || cluster.ready.Reason == cachev2.ReasonClusterForming ||
			cluster.ready.Reason == cachev2.ReasonReplicationForming || cluster.ready.Reason == cachev2.ReasonPrimaryLost:
			// Pods come and go within an operation (scaling, restarting): it stays the reason.
			// So does the forming of a new cluster, whose pods start one by one: stored, it is
			// how the next passes know that the cluster has never been whole (tendCluster), and
			// do not call the attaching of a late pod's node healing. A Replicated Cache's pods
			// are not ready until they have a role, and with no primary none is: what the
			// servers say is the news.
			ready.Reason, ready.Message = cluster.ready.Reason, cluster.ready.Message+"; "+ready.Message
		}
	}
	switch hold {
	case resources.TemplateHeldForConsent:
		ready = rolloutConsentAwaited(cache)
	case resources.TemplateHeldForDowngrade:
		ready = downgradeRefused(cache, cluster.running) // held only when a Cluster's or Replicated Cache's primary runs a newer release
	case resources.TemplateCurrent, resources.TemplateHeldForRelease, resources.TemplateHeldForFleet:
		// Ready as the pods and the cluster say; the other holds have conditions of their own.
	}
	status.Selector = labels.SelectorFromSet(resources.SelectorLabels(cache)).String()
	meta.SetStatusCondition(&status.Conditions, ready)
	if registered != nil {
		meta.SetStatusCondition(&status.Conditions, *registered)
	} else {
		meta.RemoveStatusCondition(&status.Conditions, cachev2.ConditionRegistered)
	}
	if hold == resources.TemplateHeldForRelease {
		meta.SetStatusCondition(&status.Conditions, metav1.Condition{
			Type:               cachev2.ConditionPodTemplateCurrent,
			Status:             metav1.ConditionFalse,
			Reason:             cachev2.ReasonNewerTemplateAvailable,
			ObservedGeneration: cache.Generation,
			Message: fmt.Sprintf("the pods run an earlier operator release's template; the running release's goes out "+
				"with the next change of version, memory or pod settings, or now with the annotation %s=%s (a rolling restart)",
				cachev2.AnnotationPodTemplate, cachev2.PodTemplateLatest),
		})
	} else {
		meta.RemoveStatusCondition(&status.Conditions, cachev2.ConditionPodTemplateCurrent)
	}
	return status
}

// rolloutConsentAwaited is the Ready condition of a Cache whose change of version or memory would
// empty every node (resources.TemplateHeldForConsent): it says how to go ahead.
func rolloutConsentAwaited(cache *cachev2.Cache) metav1.Condition {
	ways := fmt.Sprintf("annotate the Cache %s=%s", cachev2.AnnotationRolloutEmptiesNodes, cachev2.RolloutEmptiesNodesAllowed)
	if cache.Spec.Mode == cachev2.ModeCluster {
		ways = "give each shard a replica first (then no key is lost), or " + ways
	}
	return metav1.Condition{
		Type:               cachev2.ConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             cachev2.ReasonRolloutEmptiesNodes,
		ObservedGeneration: cache.Generation,
		Message: "the change of version or memory waits: it restarts every node, and with no replica to keep a node's " +
			"keys each comes back empty; the pods keep running as before. To go ahead, " + ways + "; or set the spec back",
	}
}

// downgradeRefused is the Ready condition of a Cache whose change of version is held because the
// version cannot read the data of running, the release a primary runs
// (resources.TemplateHeldForDowngrade).
func downgradeRefused(cache *cachev2.Cache, running string) metav1.Condition {
	return metav1.Condition{
		Type:               cachev2.ConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             cachev2.ReasonDowngradeRefused,
		ObservedGeneration: cache.Generation,
		Message: fmt.Sprintf("the change to Valkey %s waits: a primary runs Valkey %s, whose data format (RDB %d) %s cannot read "+
			"(RDB %d), so a replica on %s could not sync from it and the change would stop half done; the pods keep the template "+
			"they have. Set spec.version back to %s or later; to go back to an older release, restore a backup taken before the "+
			"upgrade into a new Cache", cache.Spec.Version, running, valkey.RDBFormat(running), cache.Spec.Version,
			valkey.RDBFormat(cache.Spec.Version), cache.Spec.Version, running),
	}
}

// slotsMoved counts the slots an operation has moved, from the stored status and the slots
// still to move now: it grows as that number falls, starts again from 0 when an operation
// starts, and keeps its total once the operation is done. Computed from the stored status, it
// neither counts a move twice after a conflict nor loses one across a restart.
func slotsMoved(stored cachev2.CacheStatus, toMove int32) int32 {
	switch {
	case stored.SlotsToMove > 0:
		return stored.SlotsMoved + max(stored.SlotsToMove-toMove, 0)
	case toMove > 0:
		return 0
	}
	return stored.SlotsMoved
}

// readyCondition is True once the StatefulSet controller has acted on the current StatefulSet
// spec and every wanted replica is ready and runs the current pod template; until then it is
// False with reason Progressing and a message that says how far the rollout has got.
//
// A Cluster Cache's StatefulSet keeps more pods while a scale-in drains them, and the pods of a
// Cluster or Replicated Cache are restarted by the operator's ordered upgrade, not the
// StatefulSet controller: so their pods are counted against the StatefulSet's replicas, not the
// spec's nodes, and what the servers say (the cluster's verdict) says how the upgrade goes.
func readyCondition(cache *cachev2.Cache, sts *appsv1.StatefulSet) metav1.Condition {
	want := cache.Spec.Nodes()
	st := sts.Status
	updated, rolling := st.UpdatedReplicas, st.UpdateRevision != st.CurrentRevision
	if cache.Spec.Mode != cachev2.ModeStandalone {
		want, updated, rolling = ptr.Deref(sts.Spec.Replicas, want), st.Replicas, false
	}
	cond := metav1.Condition{
		Type:               cachev2.ConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             cachev2.ReasonProgressing,
		ObservedGeneration: cache.Generation,
		Message:            fmt.Sprintf("%d/%d replicas ready", st.ReadyReplicas, want),
	}
	if st.Replicas > want {
		cond.Message = fmt.Sprintf("removing nodes: %d running, scaling down to %d", st.Replicas, want)
	}
	if rolling {
		cond.Message += fmt.Sprintf(", %d/%d updated to the current spec", updated, want)
	}
	// Without the first test the counts could describe the StatefulSet before our last change,
	// such as the old pods of a version bump, all ready but about to be replaced.
	settled := st.ObservedGeneration >= sts.Generation &&
		st.Replicas == want && updated == want && st.ReadyReplicas == want
	if settled {
		cond.Status = metav1.ConditionTrue
		cond.Reason = cachev2.ReasonAllReplicasReady
	}
	return cond
}

// announceOperation records an event when a Cluster Cache's Ready condition starts or ends an
// operation (scaling out, draining, rebalancing, healing, upgrading), judged from the stored
// condition before and after this pass's write, so that it is said once.
func (r *CacheReconciler) announceOperation(cache *cachev2.Cache, before, after *metav1.Condition) {
	reason := func(c *metav1.Condition) string {
		if c == nil || !slices.Contains(clusterOperations, c.Reason) {
			return ""
		}
		return c.Reason
	}
	was, is := reason(before), reason(after)
	if was == is {
		return
	}
	if was != "" {
		r.Recorder.Eventf(cache, nil, corev1.EventTypeNormal, was, "Finish", "%s finished: %s", was, after.Message)
	}
	if is != "" {
		r.Recorder.Eventf(cache, nil, corev1.EventTypeNormal, is, "Start", "%s started: %s", is, after.Message)
	}
}

// clusterOperations are the Ready reasons of a Cluster Cache that name an operation under way.
var clusterOperations = []string{cachev2.ReasonScalingOut, cachev2.ReasonDraining, cachev2.ReasonRebalancing,
	cachev2.ReasonHealing, cachev2.ReasonUpgrading}
