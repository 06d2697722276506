package controller

import (
	"context"
	"fmt"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
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
type RolloutGate struct {
	// Limit is the most Caches rolling out at once; 0 sets no limit.
	Limit int
	// StatefulSets reads the informer's StatefulSets.
	StatefulSets client.Reader

	mu sync.Mutex
	// started are the StatefulSets this process started a rollout of, and when, until the
	// informer shows them rolling out or recentStart has passed.
	started map[client.ObjectKey]time.Time
}

// recentStart is how long a rollout this process started counts even though the informer does
// not show it: longer than the informer ever lags behind a write.
const recentStart = 30 * time.Second

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
	// Read only: the informer's objects themselves rather than a copy of each, as every Cache
	// that waits asks again every rolloutQueueInterval.
	if err := g.StatefulSets.List(ctx, &sets, client.MatchingLabels{resources.LabelManagedBy: resources.ManagedBy},
		client.UnsafeDisableDeepCopy); err != nil {
		return false, err
	}
	admitted, inProgress := g.admit(key, sets.Items, time.Now())
	if !admitted {
		log.FromContext(ctx).V(1).Info("A new pod template waits its turn", "rolloutsInProgress", inProgress, "limit", g.Limit)
	}
	return admitted, nil
}

// admit is Admit's decision on the StatefulSets the informer shows, at now; g.mu is held.
func (g *RolloutGate) admit(key client.ObjectKey, sets []appsv1.StatefulSet, now time.Time) (admitted bool, inProgress int) {
	rolling := map[client.ObjectKey]bool{}
	for i := range sets {
		if sts := &sets[i]; resources.RollingOut(sts) {
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
