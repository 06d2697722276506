package controller

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
)

// pass is one reconcile of one Cache: what its phases have learned, in the order they run, and
// the status and the retry that it ends with. Each phase reads what the phases before it learned
// and adds its own.
type pass struct {
	cache *cachev2.Cache

	restore restore      // the restorePhase's
	certs   certificates // the certificatesPhase's
	creds   credentials  // the credentialsPhase's
	// members are a Cluster's servers as they report themselves, replicated a Replicated
	// Cache's, nodes how many pods the Cache runs, and running the newest Valkey release its
	// primaries run, whose data a new version must be able to read (the membersPhase's).
	members    []clusterMember
	replicated []replicatedMember
	nodes      int32
	running    string
	made       children // the childrenPhase's
	// registered is the Registered condition (the registrationPhase's), and cluster what the
	// servers of a Cluster report after the clusterPhase's step.
	registered *metav1.Condition
	cluster    *clusterReport

	// readyBefore is the Ready condition as the pass found it, and status what it writes.
	readyBefore *metav1.Condition
	status      cachev2.CacheStatus
	// pollAfter is when to look again though nothing changes: 0 for never.
	pollAfter time.Duration
	// failed are errors that the status reports, returned after it is written for the work
	// queue to retry with backoff.
	failed []error
}

// A phase does one concern of a pass. It returns the pass's result, with or without an error,
// when the pass ends there (it waits on something, created a child, or failed); nil goes on to
// the next phase.
type phase func(ctx context.Context, p *pass) (*ctrl.Result, error)

// end ends a pass with the result and the error given: a phase never returns an error without a
// result.
func end(result ctrl.Result, err error) (*ctrl.Result, error) { return &result, err }

// fail ends a pass with the error, reported in the Cache's status first.
func (r *CacheReconciler) fail(ctx context.Context, p *pass, err error) (*ctrl.Result, error) {
	return end(ctrl.Result{}, r.reportFailure(ctx, p.cache, err))
}

// waitForOwnWrite ends a pass that wrote an object its informer does not show yet: the event of
// that write brings the Cache back; the timer is a backstop.
func waitForOwnWrite() (*ctrl.Result, error) {
	return end(ctrl.Result{RequeueAfter: staleReadRetryAfter}, nil)
}

// restorePhase: a restored Cache's pods are made only once its backup is ready and fits
// (preparerestore.go).
func (r *CacheReconciler) restorePhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	var err error
	if p.restore, err = r.prepareRestore(ctx, p.cache); err != nil {
		return r.fail(ctx, p, err)
	}
	if p.restore.waiting != nil {
		return end(r.waitForBackup(ctx, p.cache, p.restore.waiting))
	}
	return nil, nil
}

// certificatesPhase: a Cache with TLS has its certificates before its pods, which mount them at
// their start; the operator speaks TLS to its servers with them.
func (r *CacheReconciler) certificatesPhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	var err error
	p.certs, err = r.ensureCertificates(ctx, p.cache)
	switch {
	case err != nil:
		return r.fail(ctx, p, err)
	case p.certs.pending:
		return waitForOwnWrite()
	case p.certs.missing:
		return end(r.waitForCredentials(ctx, p.cache, p.certs.invalid))
	}
	return nil, nil
}

// credentialsPhase: a Cache with auth has its credentials before its pods, which load them at
// their start; the operator speaks to its servers as its own user.
func (r *CacheReconciler) credentialsPhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	var err error
	p.creds, err = r.ensureCredentials(ctx, p.cache, p.certs.client)
	switch {
	case err != nil:
		return r.fail(ctx, p, err)
	case p.creds.pending:
		return waitForOwnWrite()
	case p.creds.missing:
		return end(r.waitForCredentials(ctx, p.cache, p.creds.condition))
	}
	if p.creds.applyErr != nil {
		p.failed = append(p.failed, p.creds.applyErr)
	}
	return nil, nil
}

// membersPhase asks the servers of a Cluster or Replicated Cache who they are before its children
// are made: a scale-in removes no pod before its server has handed over its slots and left the
// cluster, or its primary's role, and no pod gets a version that cannot read the data its
// primary holds (resources.JudgeStatefulSet).
func (r *CacheReconciler) membersPhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	p.nodes = p.cache.Spec.Nodes()
	var err error
	switch p.cache.Spec.Mode {
	case cachev2.ModeCluster:
		if p.members, err = r.observeCluster(ctx, p.cache, p.creds.auth); err != nil {
			return end(ctrl.Result{}, err)
		}
		p.nodes, p.running = nodesToRun(p.cache, p.members), primariesRelease(p.members)
	case cachev2.ModeReplicated:
		if p.replicated, err = r.observeReplicated(ctx, p.cache, p.creds.auth); err != nil {
			return end(ctrl.Result{}, err)
		}
		p.nodes, p.running = replicatedNodesToRun(p.cache, p.replicated), replicatedRelease(p.replicated)
	case cachev2.ModeStandalone:
		// Independent nodes, each emptied by a restart: no data to keep readable.
	}
	return nil, nil
}

// childrenPhase makes the Service, the StatefulSet and the PodDisruptionBudget match the spec.
func (r *CacheReconciler) childrenPhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	var err error
	if p.made, err = r.ensureChildren(ctx, p.cache, p.nodes, p.running, p.restore.initContainer); err != nil {
		return r.fail(ctx, p, err)
	}
	switch {
	case p.made.created:
		// A pass that creates a child does nothing else: a new Cache's first pass only creates
		// its children, and the finalizer, the registration and the status come in the next,
		// which the children's creation brings. A fleet created at once so gets all its
		// StatefulSets, the slowest part, before any Cache's other writes (docs/benchmark-history.md).
		// A pass that recreates a child deleted by hand stops there too.
		return end(ctrl.Result{}, nil)
	case p.made.pending:
		return waitForOwnWrite()
	}
	return nil, nil
}

// registrationPhase lists the Cache's nodes in the catalogue, the finalizer first, so that no
// record can outlive its Cache. A failed registration is reported in the status, then returned
// for a retry.
func (r *CacheReconciler) registrationPhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	if err := r.ensureFinalizer(ctx, p.cache); err != nil {
		return end(ctrl.Result{}, fmt.Errorf("adding finalizer: %w", err))
	}
	var err error
	p.registered, err = r.register(ctx, p.cache)
	switch {
	case errors.Is(err, errDeletedMeanwhile):
		// Not a failure to retry: the informer's event of the deletion brings the next pass.
		log.FromContext(ctx).Info("Not registering the Cache", "reason", err.Error())
		return end(ctrl.Result{}, nil)
	case err != nil:
		p.failed = append(p.failed, err)
	}
	return nil, nil
}

// clusterPhase takes a Cluster Cache's servers one step towards the spec's shape (cluster.go).
// A Valkey Cluster sends no events, so a Cluster Cache is looked at again on a timer; other
// Caches are brought back by their StatefulSet's status, through the owner reference.
func (r *CacheReconciler) clusterPhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	if p.cache.Spec.Mode != cachev2.ModeCluster {
		return nil, nil
	}
	restored, err := p.restore.slotsByPod(p.cache)
	if err != nil {
		return end(ctrl.Result{}, err)
	}
	var poll time.Duration
	p.cluster, poll, err = r.tendCluster(ctx, p.cache, p.made.sts, p.members, restored)
	p.pollAfter = soonest(p.pollAfter, poll)
	if err != nil {
		p.failed = append(p.failed, err)
	}
	return nil, nil
}

// statusPhase folds what the phases before it learned into the status: the StatefulSet's, the
// registration's and the Cluster's report, and the credentials' condition.
func (r *CacheReconciler) statusPhase(_ context.Context, p *pass) (*ctrl.Result, error) {
	p.readyBefore = meta.FindStatusCondition(p.cache.Status.Conditions, cachev2.ConditionReady).DeepCopy()
	p.status = observedStatus(p.cache, p.made.sts, p.registered, p.made.hold, p.cluster)
	if p.creds.condition != nil {
		meta.SetStatusCondition(&p.status.Conditions, *p.creds.condition)
	}
	return nil, nil
}

// rolloutPhase reports a template rollout's progress, and its place in the fleet's queue while
// the rollout gate holds it (rollouts.go).
func (r *CacheReconciler) rolloutPhase(_ context.Context, p *pass) (*ctrl.Result, error) {
	p.pollAfter = soonest(p.pollAfter, r.Rollouts.trackProgress(p.cache, p.made.sts, &p.status, time.Now()))
	if p.made.hold == resources.TemplateHeldForFleet {
		meta.SetStatusCondition(&p.status.Conditions, r.Rollouts.queued(p.cache))
		p.pollAfter = soonest(p.pollAfter, rolloutQueueInterval)
	}
	return nil, nil
}

// servingPhase has the servers serve the certificate the Secret holds (ensurecertificates.go).
func (r *CacheReconciler) servingPhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	recheck, err := r.serveCertificate(ctx, p.cache, p.certs, p.creds.auth, &p.status)
	p.pollAfter = soonest(p.pollAfter, recheck)
	if err != nil {
		p.failed = append(p.failed, err)
	}
	return nil, nil
}

// podsPhase reports pods that cannot start (podsstuck.go).
func (r *CacheReconciler) podsPhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	recheck, err := r.checkPods(ctx, p.cache, p.made.sts, &p.status, time.Now())
	if err != nil {
		return end(ctrl.Result{}, err)
	}
	p.pollAfter = soonest(p.pollAfter, recheck)
	return nil, nil
}

// restoreCheckPhase checks that a restored Cache's nodes hold what its backup held (preparerestore.go).
func (r *CacheReconciler) restoreCheckPhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	verified, err := r.gateOnRestore(ctx, p.cache, p.restore, p.members, p.creds.auth, &p.status)
	if err != nil {
		return end(ctrl.Result{}, err)
	}
	switch {
	case verified:
		// The next pass removes the restore's ConfigMap; the echo of this status write would
		// bring none (ownWrites).
		p.pollAfter = restoreCleanupAfter
	case !p.restore.done:
		// A node's restore step that fails shows only in its init container's status, which no
		// watch of the operator's brings (it caches a Cluster's pods only, without that
		// status: clusterMemberPod): look again.
		p.pollAfter = soonest(p.pollAfter, restoreWaitRetryAfter)
	}
	return nil, nil
}

// writeStatusPhase writes the status, and tells of an operation that started or ended.
func (r *CacheReconciler) writeStatusPhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	if err := r.writeStatus(ctx, p.cache, p.status); err != nil {
		return end(ctrl.Result{}, fmt.Errorf("updating status: %w", err))
	}
	r.announceOperation(p.cache, p.readyBefore, meta.FindStatusCondition(p.cache.Status.Conditions, cachev2.ConditionReady))
	return nil, nil
}

// result is how a pass that went through every phase ends: with the failures its status
// reported, for the work queue's backoff to decide when to look again; else on the timer of the
// soonest thing due.
func (p *pass) result() (ctrl.Result, error) {
	if err := errors.Join(p.failed...); err != nil {
		return ctrl.Result{}, err
	}
	poll := p.pollAfter
	for _, due := range []time.Time{p.creds.due, p.certs.renewal} {
		if !due.IsZero() {
			poll = soonest(poll, max(time.Until(due), time.Second))
		}
	}
	return ctrl.Result{RequeueAfter: poll}, nil
}
