package controller

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/topology"
	"example.com/cache-operator/internal/valkey"
)

// clusterPollWhileNotReady is how soon a Cluster Cache that is not ready is looked at again, to
// take the next step or see the one taken land: Valkey sends no watch events. A ready one is
// looked at every CacheReconciler.ClusterCheckInterval, to notice what breaks without any pod
// changing (a replica's link going down, a slot left migrating).
const clusterPollWhileNotReady = 2 * time.Second

// clusterPollAfterStep is how soon a Cluster Cache is looked at again after a pass took a step:
// what a step waits on (a handshake after CLUSTER MEET, a replica's link after CLUSTER
// REPLICATE, the votes of a CLUSTER FAILOVER) lands within a gossip round, a fraction of a
// second, and the next step of the operation waits on it. At clusterPollWhileNotReady each step
// of a pod's restart in an ordered upgrade waited most of 2 s for nothing. A pass that takes no
// step (waiting on a sync, a pod, a grace period) keeps the slower pace.
const clusterPollAfterStep = 500 * time.Millisecond

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// clusterPollWhileMoving is how soon a Cluster Cache whose slots are moving is looked at again:
// each pass moves one bounded batch key by key, or starts atomic jobs, and the next may start as
// soon as the last is seen to land.
const clusterPollWhileMoving = 200 * time.Millisecond

// clusterPollWhileJobsRun is how soon a Cluster Cache is looked at again while its servers run
// atomic slot migration jobs and a pass can only wait for them to end. A job takes seconds, and
// each look asks every server of the Cache for its view: looked at every clusterPollWhileMoving,
// a 3 → 5 shards scale-out of 1 GB on a two-core machine took median 1.36 × what valkey-cli's
// rebalance took on the same servers (5 runs), and looked at every second, 0.98 × (6 runs;
// docs/benchmark.md). A job's end is seen up to this much later.
const clusterPollWhileJobsRun = time.Second

// clusterMember is a pod of a Cluster Cache and what its server reports.
type clusterMember struct {
	topology.Member
	pod *corev1.Pod
	// auth is who the operator is to the member's server.
	auth valkey.Auth
}

func topologyMembers(members []clusterMember) []topology.Member {
	out := make([]topology.Member, len(members))
	for i := range members {
		out[i] = members[i].Member
	}
	return out
}

// tendCluster is a Cluster Cache's part of a pass: from each pod's server's view of the cluster,
// it takes the next step towards the cluster the spec asks for (topology.Next: forming, healing,
// scaling, draining, rebalancing, upgrading), at most one bounded step per pass, and reports
// what the servers say, with a verdict that is Ready only when the cluster serves as asked. It
// returns when to look again. The verdict is on the state read before the step, which the next
// pass reads afresh.
func (r *CacheReconciler) tendCluster(ctx context.Context, cache *cachev2.Cache, sts *appsv1.StatefulSet, members []clusterMember, restored map[string][]valkey.SlotRange) (*clusterReport, time.Duration, error) {
	for i := range members {
		members[i].Outdated = runsEarlierTemplate(sts, members[i].pod)
	}
	want := topology.Want{Shards: int(cache.Spec.Shards), ReplicasPerShard: int(cache.Spec.ReplicasOrZero()), Restored: restored,
		KeyByKey: r.KeyByKeySlotMigration}
	plan, health := topology.Next(want, topologyMembers(members))
	// The planner cannot tell a cluster that has never been whole from one that heals; the
	// stored status can: a cluster still forming stays ClusterForming until it is first ready.
	if stored := meta.FindStatusCondition(cache.Status.Conditions, cachev2.ConditionReady); health.Problem == topology.Healing &&
		stored != nil && stored.Reason == cachev2.ReasonClusterForming {
		health.Problem = topology.Forming
	}
	actErr := r.act(ctx, members, plan.Actions)
	for _, m := range members {
		if m.Stranger != "" {
			r.Recorder.Eventf(cache, nil, corev1.EventTypeWarning, reasonStranger, "Observe",
				"the server at %s, the address of pod %s, says it is %s: no cluster step is taken until the pod's own server answers there", m.IP, m.Pod, m.Stranger)
		}
	}
	for _, a := range plan.Actions {
		if a.Kind == topology.KindTakeover {
			r.Recorder.Eventf(cache, nil, corev1.EventTypeWarning, reasonTakeover, "Takeover",
				"%s takes over the slots of its primary, whose server is gone (restarted as a new node, or its pod replaced)", a.On)
		}
	}
	for _, id := range plan.Lost {
		r.Recorder.Eventf(cache, nil, corev1.EventTypeWarning, reasonSlotsLost, "Forget",
			"node %s served slots and departed with no replica left to take them over: they go to a new node, without their keys", id)
	}

	report := reportCluster(want, members, health, cache.Generation)
	report.slotsToMove, report.slotsUnknown, report.running = int32(plan.SlotsToMove), plan.SlotsUnknown, primariesRelease(members)
	switch {
	case health.Ready() && len(plan.Actions) == 0:
		return report, r.ClusterCheckInterval, actErr
	case plan.JobsRunning:
		return report, clusterPollWhileJobsRun, actErr
	case plan.Migrating:
		return report, clusterPollWhileMoving, actErr
	case len(plan.Actions) > 0:
		return report, clusterPollAfterStep, actErr
	case plan.WaitingFor > 0:
		return report, min(plan.WaitingFor, clusterPollWhileNotReady), actErr
	}
	return report, clusterPollWhileNotReady, actErr
}

// The reasons of a Cluster Cache's warning events about its nodes: a departed primary's keys are
// lost (SlotsLost), a replica takes over from a primary that is gone (PrimaryLost), a pod's
// address answers as another pod's server (WrongServer).
const (
	reasonSlotsLost = "SlotsLost"
	reasonTakeover  = "PrimaryLost"
	reasonStranger  = "WrongServer"
)

// observeCluster asks the server of every live pod of the Cache, all at once, for its view of
// the cluster. A server that cannot be asked is a member without a view, which Form waits on.
// A pod beyond the nodes the spec asks for is Leaving: the StatefulSet removes the highest
// ordinals when it shrinks.
func (r *CacheReconciler) observeCluster(ctx context.Context, cache *cachev2.Cache, auth valkey.Auth) ([]clusterMember, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(cache.Namespace), client.MatchingLabels(resources.SelectorLabels(cache))); err != nil {
		return nil, fmt.Errorf("listing the Cache's pods: %w", err)
	}
	var members []clusterMember
	for i := range pods.Items {
		pod := &pods.Items[i]
		if pod.DeletionTimestamp == nil && pod.Status.PodIP != "" && pod.Status.Phase == corev1.PodRunning {
			m := clusterMember{pod: pod, auth: auth, Member: topology.Member{
				Pod: pod.Name, Node: pod.Spec.NodeName, IP: pod.Status.PodIP, Port: resources.Port,
				Leaving: ordinal(cache, pod) >= cache.Spec.Nodes(),
			}}
			if seen, err := time.Parse(time.RFC3339Nano, pod.Annotations[annotationHandoverSeen]); err == nil {
				m.HandoverSeen, m.SinceHandover = true, time.Since(seen)
			}
			members = append(members, m)
		}
	}
	var wg sync.WaitGroup
	for i := range members {
		wg.Go(func() {
			observeMember(ctx, &members[i].Member, auth, resources.NodeName(cache.Namespace, members[i].Pod))
		})
	}
	wg.Wait()
	return members, nil
}

// runsEarlierTemplate reports whether the pod, of a StatefulSet that updates on delete
// (resources.StatefulSet), runs an earlier pod template than the StatefulSet's: it waits for the
// ordered upgrade to restart it. The StatefulSet's status names the newest revision only once its
// controller has seen the latest spec; before, a pod of a spec change reverted in the meantime
// could look outdated, so none does.
func runsEarlierTemplate(sts *appsv1.StatefulSet, pod *corev1.Pod) bool {
	return sts.Status.ObservedGeneration >= sts.Generation && sts.Status.UpdateRevision != "" &&
		pod.Labels[appsv1.ControllerRevisionHashLabelKey] != sts.Status.UpdateRevision
}

// restartPod deletes the pod, if it is still the pod that was observed: its StatefulSet makes it
// again, on the current pod template.
func (r *CacheReconciler) restartPod(ctx context.Context, observed *corev1.Pod) error {
	pod := &corev1.Pod{}
	pod.Name, pod.Namespace = observed.Name, observed.Namespace
	return client.IgnoreNotFound(r.Delete(ctx, pod, client.Preconditions{UID: &observed.UID}))
}

// primariesRelease is the newest Valkey release that the members' primaries run, or "" if none
// said: the release whose data the cluster holds. A replica on a newer one, as in an upgrade
// (replicas first), holds only a copy, which a replica of an older release syncs again from its
// primary.
func primariesRelease(members []clusterMember) string {
	newest := ""
	for _, m := range members {
		self, ok := valkey.Myself(m.Nodes)
		if ok && self.PrimaryID == "" && m.Version != "" && (newest == "" || valkey.OlderVersion(newest, m.Version)) {
			newest = m.Version
		}
	}
	return newest
}

// ordinal is the pod's ordinal in the Cache's StatefulSet, from its name.
func ordinal(cache *cachev2.Cache, pod *corev1.Pod) int32 {
	n, err := strconv.ParseInt(strings.TrimPrefix(pod.Name, cache.Name+"-"), 10, 32)
	if err != nil {
		return -1
	}
	return int32(n)
}

// nodesToRun is how many pods the Cache's StatefulSet keeps: the nodes the spec asks for, or,
// while a scale-in drains, every pod up to the highest leaving one, so that no pod is removed
// while its server still serves slots or is known to the cluster.
func nodesToRun(cache *cachev2.Cache, members []clusterMember) int32 {
	nodes := cache.Spec.Nodes()
	if topology.Released(topologyMembers(members)) {
		return nodes
	}
	for _, m := range members {
		if m.Leaving {
			nodes = max(nodes, ordinal(cache, m.pod)+1)
		}
	}
	return nodes
}

// observeMember fills in what m's server reports, once the server has said it is the node name
// expected (resources.NodeName); a server that says it is another is a Stranger. On any failure, m
// keeps no view of the cluster, and the log says why. A server of a pod template from before
// node names announces none, and is taken at its address.
func observeMember(ctx context.Context, m *topology.Member, auth valkey.Auth, name string) {
	logger := log.FromContext(ctx).WithValues("pod", m.Pod)
	server, err := valkey.Connect(m.IP, m.Port, auth)
	if err != nil {
		logger.Info("Cannot reach the Valkey server", "error", err.Error())
		return
	}
	defer server.Close()
	announced, err := server.NodeName(ctx)
	if err != nil {
		logger.Info("Cannot ask the Valkey server which pod it is", "error", err.Error())
		return
	}
	if announced != "" && announced != name {
		m.Stranger = announced
		return
	}
	// The release first, and a primary's log of atomic slot migration jobs (only a source has
	// them) before the slots' owners: a job that ends between the two reads is then seen running,
	// or ended with its slots moved, never ended with its slots not moved yet.
	status, err := server.Status(ctx)
	m.Version, m.LinkUp, m.ReplOffset, m.Observed = status.Version, status.LinkUp, status.Offset, status.Time
	if err == nil && status.Primary && valkey.MigratesAtomically(m.Version) {
		m.Migrations, err = server.SlotMigrations(ctx)
	}
	var nodes []valkey.ClusterNode
	if err == nil {
		nodes, err = server.ClusterNodes(ctx)
	}
	if err == nil {
		m.State, err = server.ClusterState(ctx)
	}
	if err == nil {
		m.Fenced, err = server.Fenced(ctx)
	}
	if err != nil {
		logger.Info("Cannot read the Valkey server's cluster state", "error", err.Error())
		return
	}
	m.Nodes = nodes
}

// clusterReport is what a Cluster or Replicated Cache's servers say, in the terms of its status.
type clusterReport struct {
	// primary is a Replicated Cache's primary pod.
	primary                            string
	shards, readyShards, slotsAssigned int32
	// slotsToMove is how many slots the operation under way still has to move, unless
	// slotsUnknown: a server could not be asked (topology.Plan.SlotsUnknown).
	slotsToMove  int32
	slotsUnknown bool
	nodes        []cachev2.ClusterNode
	// ready is the cluster's verdict, the Cache's Ready condition once every pod is ready.
	ready metav1.Condition
	// running is the newest Valkey release the primaries run (primariesRelease).
	running string
}

// reportCluster sums up the shards, slots and nodes the servers report, and the cluster's health.
func reportCluster(want topology.Want, members []clusterMember, health topology.Health, generation int64) *clusterReport {
	podOf := map[string]string{}
	for i := range members {
		if self, ok := valkey.Myself(members[i].Nodes); ok {
			podOf[self.ID] = members[i].Pod
		}
	}
	report := &clusterReport{}
	linked := map[string]int{}
	for i := range members {
		self, ok := valkey.Myself(members[i].Nodes)
		node := cachev2.ClusterNode{Pod: members[i].Pod}
		switch {
		case !ok:
		case self.PrimaryID != "":
			node.ID, node.Role, node.PrimaryPod = self.ID, cachev2.RoleReplica, podOf[self.PrimaryID]
			if members[i].LinkUp {
				linked[self.PrimaryID]++
			}
		case self.SlotsServed() > 0:
			node.ID, node.Role, node.Slots = self.ID, cachev2.RolePrimary, int32(self.SlotsServed())
		default:
			node.ID = self.ID
		}
		report.nodes = append(report.nodes, node)
	}
	slices.SortFunc(report.nodes, func(a, b cachev2.ClusterNode) int { return strings.Compare(a.Pod, b.Pod) })
	for _, node := range report.nodes {
		if node.Role == cachev2.RolePrimary {
			report.shards++
			report.slotsAssigned += node.Slots
			if linked[node.ID] >= want.ReplicasPerShard {
				report.readyShards++
			}
		}
	}

	report.ready = metav1.Condition{
		Type:               cachev2.ConditionReady,
		Status:             metav1.ConditionFalse,
		Reason:             string(health.Problem),
		Message:            health.Message,
		ObservedGeneration: generation,
	}
	if health.Ready() {
		report.ready.Status, report.ready.Reason = metav1.ConditionTrue, cachev2.ReasonClusterReady
		report.ready.Message = fmt.Sprintf("%d shards serve all %d slots; replicas in sync per shard: %d",
			report.shards, valkey.SlotCount, want.ReplicasPerShard)
	}
	return report
}
