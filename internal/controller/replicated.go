package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"syscall"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/metrics"
	"example.com/cache-operator/internal/replication"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
)

// replicatedMember is a pod of a Replicated Cache and what its server reports: its replication,
// and the Valkey release it runs.
type replicatedMember struct {
	replication.Member
	pod     *corev1.Pod
	version string
}

// replicatedPhase takes a Replicated Cache's servers, as the membersPhase found them, one step
// towards one primary that the others replicate, with the primary's label on its pod alone, and
// every pod on the current pod template (replication.Next), and reports what they say. Like a
// Cluster, it is looked at again on a timer: Valkey sends no events.
func (r *CacheReconciler) replicatedPhase(ctx context.Context, p *pass) (*ctrl.Result, error) {
	if p.cache.Spec.Mode != cachev2.ModeReplicated {
		return nil, nil
	}
	members := p.replicated
	for i := range members {
		members[i].Outdated = runsEarlierTemplate(p.made.sts, members[i].pod)
		members[i].Leaving = ordinal(p.cache, members[i].pod) >= p.cache.Spec.Nodes()
	}
	want := replication.Want{Nodes: int(p.cache.Spec.Nodes()), FailoverAfter: p.cache.Spec.FailoverAfter(), Hold: resources.HoldAddress}
	if !p.restore.done {
		// The backup's one shard goes to the first node (preparerestore.go).
		want.First = p.cache.Name + "-0"
	}
	plan := replication.Next(want, replicationMembers(members))
	if plan.FailedOver != "" {
		r.Recorder.Eventf(p.cache, nil, corev1.EventTypeWarning, cachev2.ReasonPrimaryLost, "Failover",
			"the primary %s is lost: %s", plan.FailedOver, plan.Message)
	}
	failovers := metrics.Failovers(p.cache.Namespace, p.cache.Name)
	if err := r.actReplicated(ctx, members, plan.Actions, p.creds.auth); err != nil {
		p.failed = append(p.failed, err)
	} else if plan.FailedOver != "" {
		failovers.Inc()
	}
	p.cluster = reportReplicated(members, plan, p.cache.Generation)
	p.cluster.running = p.running
	poll := r.ClusterCheckInterval
	switch {
	case len(plan.Actions) > 0, plan.Primary == "":
		// No server takes writes (a primary handing over as its pod stops, one lost): the
		// step that ends it, or the label's move once a replica has taken over, is one look
		// away, and at the slower pace that look came up to 2 s late for clients.
		poll = clusterPollAfterStep
	case plan.Problem != "":
		poll = clusterPollWhileNotReady
	}
	p.pollAfter = soonest(p.pollAfter, poll)
	return nil, nil
}

func replicationMembers(members []replicatedMember) []replication.Member {
	out := make([]replication.Member, len(members))
	for i := range members {
		out[i] = members[i].Member
	}
	return out
}

// observeReplicated asks the server of every pod of the Cache, all at once, for its replication.
// A pod that is deleted, or has no address or no running server, is Gone; a server that cannot be
// asked, or that says it is another pod's (an address gone to another pod), is not Reached.
func (r *CacheReconciler) observeReplicated(ctx context.Context, cache *cachev2.Cache, auth valkey.Auth) ([]replicatedMember, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(cache.Namespace), client.MatchingLabels(resources.SelectorLabels(cache))); err != nil {
		return nil, fmt.Errorf("listing the Cache's pods: %w", err)
	}
	members := make([]replicatedMember, len(pods.Items))
	var wg sync.WaitGroup
	for i := range pods.Items {
		pod := &pods.Items[i]
		m := &members[i]
		m.pod, m.Pod, m.IP, m.Port = pod, pod.Name, pod.Status.PodIP, resources.Port
		m.Label = replication.Role(pod.Labels[resources.LabelRole])
		m.Gone = pod.DeletionTimestamp != nil || pod.Status.PodIP == "" || pod.Status.Phase != corev1.PodRunning
		if !m.Gone {
			wg.Go(func() { observeReplica(ctx, m, auth) })
		}
	}
	wg.Wait()
	return members, nil
}

// replicatedPrimaries are the members whose servers answer as a primary: one, or none while
// there is none; two only after a split the operator mends (replication's oneOf).
func replicatedPrimaries(members []replicatedMember) []*replicatedMember {
	var primaries []*replicatedMember
	for i := range members {
		if m := &members[i]; m.TakesWrites() {
			primaries = append(primaries, m)
		}
	}
	return primaries
}

// replicatedRelease is the Valkey release whose data a new version must read: the primary's, or,
// while none answers as the primary (one lost, or handing over), the newest any server reports,
// which holds the primary's data or is on its way to; "" only when no server answers.
func replicatedRelease(members []replicatedMember) string {
	if primaries := replicatedPrimaries(members); len(primaries) == 1 {
		return primaries[0].version
	}
	newest := ""
	for _, m := range members {
		if m.Reached && m.version != "" && (newest == "" || valkey.OlderVersion(newest, m.version)) {
			newest = m.version
		}
	}
	return newest
}

// replicatedNodesToRun is how many pods a Replicated Cache's StatefulSet keeps: the nodes the spec
// asks for once one primary answers, on a pod that stays, and hands over to no one; until then
// every pod there is, so that a scale-in never removes the primary's pod, nor one it may be
// handing over to (replication's handOver; a pod going away hands over to any replica in sync).
func replicatedNodesToRun(cache *cachev2.Cache, members []replicatedMember) int32 {
	nodes := cache.Spec.Nodes()
	primaries := replicatedPrimaries(members)
	settled := len(primaries) == 1 && ordinal(cache, primaries[0].pod) < nodes &&
		!slices.ContainsFunc(members, func(m replicatedMember) bool { return m.FailingOver })
	if !settled {
		for _, m := range members {
			nodes = max(nodes, ordinal(cache, m.pod)+1)
		}
	}
	return nodes
}

// observeReplica fills in what m's server says of its replication and release, once it has said
// it is the pod expected; on any failure, m is not Reached, and the log says why. A connection
// refused says that no server runs at the pod's address (Refused).
func observeReplica(ctx context.Context, m *replicatedMember, auth valkey.Auth) {
	logger := log.FromContext(ctx).WithValues("pod", m.Pod)
	server, err := connectToPod(ctx, m, auth)
	switch {
	case errors.Is(err, errAnotherPods):
		logger.Info("The Valkey server at the pod's address is not the pod's", "error", err.Error())
		return
	case err != nil:
		m.Refused = errors.Is(err, syscall.ECONNREFUSED)
		logger.Info("Cannot reach the Valkey server", "error", err.Error())
		return
	}
	defer server.Close()
	status, err := server.Status(ctx)
	if err != nil {
		logger.Info("Cannot read the Valkey server's replication", "error", err.Error())
		return
	}
	m.Reached, m.Primary, m.LinkUp, m.LinkDownFor = true, status.Primary, status.LinkUp, status.LinkDownFor
	m.PrimaryIP, m.PrimaryPort, m.Offset, m.version = status.PrimaryIP, status.PrimaryPort, status.StreamOffset, status.Version
	m.FailingOver = status.FailingOver
}

// errAnotherPods says that the server at a pod's address says it is another pod's: the address
// went to another pod, of this Cache or not, since the informer saw it.
var errAnotherPods = errors.New("the Valkey server at the pod's address is another pod's")

// connectToPod connects to the server at m's address once it has said it is the server of m's
// pod (the name each node announces, resources.NodeName).
func connectToPod(ctx context.Context, m *replicatedMember, auth valkey.Auth) (*valkey.Server, error) {
	server, err := valkey.Connect(m.IP, m.Port, auth)
	if err != nil {
		return nil, err
	}
	announced, err := server.NodeName(ctx)
	if want := resources.NodeName(m.pod.Namespace, m.Pod); err == nil && announced != want {
		err = fmt.Errorf("%w: it says it is %s, not %s", errAnotherPods, announced, want)
	}
	if err != nil {
		server.Close()
		return nil, err
	}
	return server, nil
}

// actReplicated takes the plan's actions one after the other, in their order, which matters: the
// primary's label comes off a pod before it goes on another. It stops at the first that fails.
func (r *CacheReconciler) actReplicated(ctx context.Context, members []replicatedMember, actions []replication.Action, auth valkey.Auth) error {
	byPod := map[string]*replicatedMember{}
	for i := range members {
		byPod[members[i].Pod] = &members[i]
	}
	for _, a := range actions {
		log.FromContext(ctx).Info("Valkey replication step", "step", a.String())
		m := byPod[a.On]
		if err := r.actOnReplica(ctx, m, a, auth); err != nil {
			return fmt.Errorf("tending the Valkey replication: %s: %w", a, err)
		}
	}
	return nil
}

func (r *CacheReconciler) actOnReplica(ctx context.Context, m *replicatedMember, a replication.Action, auth valkey.Auth) error {
	switch a.Kind { //nolint:exhaustive // the others are commands to the server, below
	case replication.KindLabel:
		return client.IgnoreNotFound(r.labelRole(ctx, m.pod, a.Role))
	case replication.KindRestart:
		return r.restartPod(ctx, m.pod)
	}
	// The pod's address may have gone to another pod since the pass observed it.
	server, err := connectToPod(ctx, m, auth)
	if err != nil {
		return err
	}
	defer server.Close()
	switch a.Kind { //nolint:exhaustive // the label and the restart are writes to the pod, above
	case replication.KindPromote:
		return server.Promote(ctx)
	case replication.KindHandOver:
		return server.FailOverTo(ctx, a.Primary.IP, a.Primary.Port, resources.HandOverTimeout)
	}
	return server.ReplicaOf(ctx, a.Primary.IP, a.Primary.Port)
}

// labelRole sets the role label of the pod, if it is still the pod that was observed.
func (r *CacheReconciler) labelRole(ctx context.Context, pod *corev1.Pod, role replication.Role) error {
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"uid":    pod.UID, // a precondition: the API server refuses to change it
		"labels": map[string]string{resources.LabelRole: string(role)},
	}})
	if err != nil {
		return err
	}
	return r.Patch(ctx, pod.DeepCopy(), client.RawPatch(types.MergePatchType, patch))
}

// reportReplicated sums up what a Replicated Cache's servers say in the terms of its status: one
// shard, the nodes' roles, the primary, and the verdict.
func reportReplicated(members []replicatedMember, plan replication.Plan, generation int64) *clusterReport {
	report := &clusterReport{shards: 1, primary: plan.Primary}
	primaryIP := ""
	for _, m := range members {
		if m.Pod == plan.Primary {
			primaryIP = m.IP
		}
	}
	for _, m := range members {
		node := cachev2.ClusterNode{Pod: m.Pod}
		switch {
		case m.Pod == plan.Primary:
			node.Role = cachev2.RolePrimary
		case m.Reached && !m.Primary && primaryIP != "" && m.PrimaryIP == primaryIP:
			node.Role, node.PrimaryPod = cachev2.RoleReplica, plan.Primary
		}
		report.nodes = append(report.nodes, node)
	}
	// In the pods' order, not the informer's: a pass that sees the same should write nothing.
	slices.SortFunc(report.nodes, func(a, b cachev2.ClusterNode) int { return strings.Compare(a.Pod, b.Pod) })
	report.ready = metav1.Condition{Type: cachev2.ConditionReady, Status: metav1.ConditionFalse,
		Reason: string(plan.Problem), Message: plan.Message, ObservedGeneration: generation}
	if plan.Problem == "" {
		report.readyShards = 1
		report.ready.Status, report.ready.Reason = metav1.ConditionTrue, cachev2.ReasonReplicationReady
		report.ready.Message = fmt.Sprintf("%s takes writes behind its Service, with %d replicas in sync", plan.Primary, len(members)-1)
	}
	return report
}

// replicatedPodChanged maps a change of a Replicated Cache's pod that the servers' roles depend
// on to its Cache: a pod that appears, goes, is being deleted, gets or loses its address or its
// running server, or has a container restarted. A primary's pod deleted, or its server restarted
// in place, is failed over at once, not at the next timed look (30 s by default) nor once its
// readiness probe has failed three times; the role label, the operator's own write, brings
// nothing back.
var replicatedPodChanged = builder.WithPredicates(predicate.Funcs{
	CreateFunc:  func(e event.CreateEvent) bool { return ofReplicatedCache(e.Object) },
	DeleteFunc:  func(e event.DeleteEvent) bool { return ofReplicatedCache(e.Object) },
	GenericFunc: func(event.GenericEvent) bool { return false },
	UpdateFunc: func(e event.UpdateEvent) bool {
		old, current := e.ObjectOld.(*corev1.Pod), e.ObjectNew.(*corev1.Pod)
		return ofReplicatedCache(current) && (old.DeletionTimestamp.IsZero() != current.DeletionTimestamp.IsZero() ||
			old.Status.PodIP != current.Status.PodIP || old.Status.Phase != current.Status.Phase ||
			restartCount(old) != restartCount(current))
	},
})

// restartCount is how often the pod's containers have restarted in all.
func restartCount(pod *corev1.Pod) int32 {
	var n int32
	for _, c := range pod.Status.ContainerStatuses {
		n += c.RestartCount
	}
	return n
}

func ofReplicatedCache(pod client.Object) bool {
	return pod.GetLabels()[resources.LabelMode] == string(cachev2.ModeReplicated)
}

// cacheOfPod maps a pod to its Cache.
func cacheOfPod(_ context.Context, pod client.Object) []ctrl.Request {
	return []ctrl.Request{{NamespacedName: client.ObjectKey{Namespace: pod.GetNamespace(), Name: pod.GetLabels()[resources.LabelInstance]}}}
}
