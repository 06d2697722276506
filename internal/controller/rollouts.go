package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
)

// RolloutGate bounds how many Caches roll a new pod template out at once (--max-concurrent-
// rollouts): when one change touches many Caches (an image repository changed, an earlier
// release's templates opted out of at once), a few restart their pods at a time and the rest
// wait their turn, Ready as they were, with PodTemplateCurrent=False/RolloutQueued.
//
// The rollouts in progress are counted from the cluster's state, the StatefulSets whose pods do
// not all run their latest template (resources.RollingOut), so that a restarted operator knows
// them all. What the informer cannot show yet, a template this process wrote moments ago, is
// remembered for a short while, so that workers deciding at the same moment cannot all start.
//
// A rollout that has not moved for ProgressDeadline (an image that cannot be pulled, a pod that
// never gets ready) is reported, Progressing=False, and counts no more: ten such Caches would
// otherwise hold every other template change in the cluster for good.
type RolloutGate struct {
	// Limit is the most Caches rolling out at once; 0 sets no limit.
	Limit int
	// ProgressDeadline is how long a rollout may go without a pod coming to run the new template
	// before it is reported stalled (--rollout-progress-deadline); 0 is
	// DefaultRolloutProgressDeadline.
	ProgressDeadline time.Duration
	// Reader reads the informers' StatefulSets and Caches.
	Reader client.Reader

	mu sync.Mutex
	// started are the StatefulSets this process started a rollout of, and when, until the
	// informer shows them rolling out or recentStart has passed.
	started map[client.ObjectKey]time.Time
}

// rollingOutField indexes the informer's StatefulSets that roll a new template out
// (resources.RollingOut) under the value rollingOut, and no others, which the index so holds
// nothing for (indexRollingOut).
const (
	rollingOutField = "rollingOut"
	rollingOut      = "true"
)

// indexRollingOut adds the index the gate lists StatefulSets by (rollingOutField) to the
// manager's informers, before they start.
func indexRollingOut(ctx context.Context, indexer client.FieldIndexer) error {
	return indexer.IndexField(ctx, &appsv1.StatefulSet{}, rollingOutField, func(obj client.Object) []string {
		if sts, ok := obj.(*appsv1.StatefulSet); ok && resources.RollingOut(sts) {
			return []string{rollingOut}
		}
		return nil
	})
}

// recentStart is how long a rollout this process started counts even though the informer does
// not show it: longer than the informer ever lags behind a write.
const recentStart = 30 * time.Second

// DefaultRolloutProgressDeadline is --rollout-progress-deadline's default, a Deployment's: long
// enough for a pod to pull its image and a Cluster node to sync its replica, short enough that a
// stalled rollout frees its place within the hour.
const DefaultRolloutProgressDeadline = 10 * time.Minute

// rolloutQueueInterval is how often a Cache waiting for its turn asks again: a rollout that ends
// elsewhere sends this Cache no event.
const rolloutQueueInterval = 5 * time.Second

// Admit reports whether the StatefulSet key may start a rollout now, and if so counts it as
// started.
func (g *RolloutGate) Admit(ctx context.Context, key client.ObjectKey) (admitted bool, err error) {
	if g == nil || g.Limit <= 0 {
		return true, nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var sets appsv1.StatefulSetList
	// Only those rolling out, by their index: every Cache that waits asks again every
	// rolloutQueueInterval, and the informer decodes each StatefulSet it lists.
	if err := g.Reader.List(ctx, &sets, client.MatchingFields{rollingOutField: rollingOut}, client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	stalled := map[client.ObjectKey]bool{}
	for i := range sets.Items {
		if sts := &sets.Items[i]; resources.RollingOut(sts) {
			// A StatefulSet is named after its Cache, in its namespace.
			var cache cachev2.Cache
			if err := g.Reader.Get(ctx, client.ObjectKeyFromObject(sts), &cache); client.IgnoreNotFound(err) != nil {
				return false, err
			}
			stalled[client.ObjectKeyFromObject(sts)] = meta.IsStatusConditionFalse(cache.Status.Conditions, cachev2.ConditionProgressing)
		}
	}
	admitted, inProgress := g.admit(key, sets.Items, stalled, time.Now())
	if !admitted {
		log.FromContext(ctx).V(1).Info("A new pod template waits its turn", "rolloutsInProgress", inProgress, "limit", g.Limit)
	}
	return admitted, nil
}

// admit is Admit's decision on the StatefulSets the informer shows, of which the stalled ones'
// rollouts have passed their progress deadline, at now; g.mu is held.
func (g *RolloutGate) admit(key client.ObjectKey, sets []appsv1.StatefulSet, stalled map[client.ObjectKey]bool, now time.Time) (admitted bool, inProgress int) {
	rolling := map[client.ObjectKey]bool{}
	for i := range sets {
		if sts := &sets[i]; resources.RollingOut(sts) && !stalled[client.ObjectKeyFromObject(sts)] {
			rolling[client.ObjectKeyFromObject(sts)] = true
		}
	}
	for started, at := range g.started {
		if rolling[started] || now.Sub(at) > recentStart {
			delete(g.started, started) // the informer shows it, or it is long over
			continue
		}
		rolling[started] = true
	}
	if len(rolling) >= g.Limit {
		return false, len(rolling)
	}
	if g.started == nil {
		g.started = map[client.ObjectKey]time.Time{}
	}
	g.started[key] = now
	return true, len(rolling)
}

// queued is the PodTemplateCurrent condition of a Cache waiting for its turn. It names no count,
// which would change, and be written, at every pass.
func (g *RolloutGate) queued(cache *cachev2.Cache) metav1.Condition {
	return metav1.Condition{
		Type:               cachev2.ConditionPodTemplateCurrent,
		Status:             metav1.ConditionFalse,
		Reason:             cachev2.ReasonRolloutQueued,
		ObservedGeneration: cache.Generation,
		Message: fmt.Sprintf("the new pod template waits its turn: at most %d Caches roll out at once "+
			"(--max-concurrent-rollouts); the pods keep running as they are", g.Limit),
	}
}

// trackProgress records in status how far the StatefulSet's rollout of a new pod template has
// got (status.Rollout, absent when none is under way) and whether it still moves (the
// Progressing condition), at now; it returns when the progress deadline falls, for the pass to
// look again then (0 once it has passed): a rollout that does not move sends no event.
//
// Progress is one more pod running the new template: the StatefulSet controller (a rolling
// update) or the operator (a Cluster's ordered upgrade) replaces the next pod only once the last
// one is ready, so a pod that never gets ready stops the count. The time of the last progress is
// kept in the status, so that a restarted operator keeps the deadline where it was.
func (g *RolloutGate) trackProgress(cache *cachev2.Cache, sts *appsv1.StatefulSet, status *cachev2.CacheStatus, now time.Time) time.Duration {
	st := sts.Status
	switch {
	case st.ObservedGeneration == 0 || st.ObservedGeneration >= sts.Generation && !resources.PodsRunEarlierTemplate(sts):
		// A new StatefulSet's pods start with its first template: no rollout.
		status.Rollout = nil
		meta.RemoveStatusCondition(&status.Conditions, cachev2.ConditionProgressing)
		return 0
	case st.ObservedGeneration < sts.Generation:
		// The counts describe the StatefulSet before the latest write; the next status says more.
		return 0
	}
	if status.Rollout == nil || status.Rollout.UpdatedReplicas != st.UpdatedReplicas {
		status.Rollout = &cachev2.RolloutStatus{UpdatedReplicas: st.UpdatedReplicas, ProgressedAt: metav1.NewTime(now)}
	}
	deadline := g.progressDeadline()
	cond := metav1.Condition{
		Type:               cachev2.ConditionProgressing,
		Status:             metav1.ConditionTrue,
		Reason:             cachev2.ReasonRollingOut,
		ObservedGeneration: cache.Generation,
		Message:            fmt.Sprintf("%d of %d pods run the new pod template", st.UpdatedReplicas, st.Replicas),
	}
	due := status.Rollout.ProgressedAt.Add(deadline)
	if now.Before(due) {
		meta.SetStatusCondition(&status.Conditions, cond)
		return due.Sub(now)
	}
	cond.Status, cond.Reason = metav1.ConditionFalse, cachev2.ReasonProgressDeadlineExceeded
	cond.Message = fmt.Sprintf("the rollout has not moved for %s (--rollout-progress-deadline): %d of %d pods run the new "+
		"pod template, and it waits for one to start or get ready (kubectl describe pod says why). It no longer "+
		"holds a place of --max-concurrent-rollouts, and goes on once it moves again", deadline, st.UpdatedReplicas, st.Replicas)
	meta.SetStatusCondition(&status.Conditions, cond)
	return 0
}

// progressDeadline is ProgressDeadline, or its default; a nil gate has the default too.
func (g *RolloutGate) progressDeadline() time.Duration {
	if g == nil || g.ProgressDeadline <= 0 {
		return DefaultRolloutProgressDeadline
	}
	return g.ProgressDeadline
}
