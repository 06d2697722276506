package controller

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
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

// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch

// tendCluster is a Cluster Cache's part of a pass: it asks each pod's server for its view of the
// cluster, takes the next step of forming it (topology.Form), at most one per pass, and reports
// what the servers say, with a verdict that is Ready only when the cluster serves. It returns when
// to look again. The verdict is on the state read before the step, which the next pass reads
// afresh.
func (r *CacheReconciler) tendCluster(ctx context.Context, cache *cachev2.Cache) (*clusterReport, time.Duration, error) {
	members, err := r.observeCluster(ctx, cache)
	if err != nil {
		return nil, 0, err
	}
	want := topology.Want{Shards: int(cache.Spec.Shards), ReplicasPerShard: int(cache.Spec.ReplicasOrZero())}
	plan := topology.Form(want, members)
	actErr := r.act(ctx, members, plan.Actions)

	health := topology.Assess(want, members)
	report := reportCluster(want, members, health, cache.Generation)
	if health.Ready() && len(plan.Actions) == 0 {
		return report, r.ClusterCheckInterval, actErr
	}
	return report, clusterPollWhileNotReady, actErr
}

// observeCluster asks the server of every live pod of the Cache, all at once, for its view of
// the cluster. A server that cannot be asked is a member without a view, which Form waits on.
func (r *CacheReconciler) observeCluster(ctx context.Context, cache *cachev2.Cache) ([]topology.Member, error) {
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(cache.Namespace), client.MatchingLabels(resources.SelectorLabels(cache))); err != nil {
		return nil, fmt.Errorf("listing the Cache's pods: %w", err)
	}
	var members []topology.Member
	for _, pod := range pods.Items {
		if pod.DeletionTimestamp == nil && pod.Status.PodIP != "" && pod.Status.Phase == corev1.PodRunning {
			members = append(members, topology.Member{Pod: pod.Name, IP: pod.Status.PodIP, Port: resources.Port})
		}
	}
	var wg sync.WaitGroup
	for i := range members {
		wg.Go(func() { observeMember(ctx, &members[i]) })
	}
	wg.Wait()
	return members, nil
}

// observeMember fills in what m's server reports; on any failure, m keeps no view of the
// cluster, and the log says why.
func observeMember(ctx context.Context, m *topology.Member) {
	logger := log.FromContext(ctx).WithValues("pod", m.Pod)
	server, err := valkey.Connect(m.IP, m.Port)
	if err != nil {
		logger.Info("Cannot reach the Valkey server", "error", err.Error())
		return
	}
	defer server.Close()
	nodes, err := server.ClusterNodes(ctx)
	if err == nil {
		m.State, err = server.ClusterState(ctx)
	}
	if self, _ := valkey.Myself(nodes); err == nil && self.PrimaryID != "" {
		var replication valkey.Replication
		replication, err = server.Replication(ctx)
		m.LinkUp, m.ReplOffset = replication.LinkUp, replication.Offset
	}
	if err != nil {
		logger.Info("Cannot read the Valkey server's cluster state", "error", err.Error())
		return
	}
	m.Nodes = nodes
}

// act runs the plan's actions, which are independent of each other, and returns every failure.
func (r *CacheReconciler) act(ctx context.Context, members []topology.Member, actions []topology.Action) error {
	byPod := map[string]topology.Member{}
	for _, m := range members {
		byPod[m.Pod] = m
	}
	var errs []error
	for _, a := range actions {
		log.FromContext(ctx).Info("Valkey cluster step", "step", a.String())
		m := byPod[a.On]
		server, err := valkey.Connect(m.IP, m.Port)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		switch {
		case a.Meet != nil:
			err = server.Meet(ctx, a.Meet.IP, a.Meet.Port)
		case a.AddSlots != nil:
			err = server.AddSlots(ctx, a.AddSlots)
		case a.Forget != "":
			err = server.Forget(ctx, a.Forget)
		case a.Takeover:
			err = server.FailoverTakeover(ctx)
		default:
			err = server.Replicate(ctx, a.Replicate)
		}
		server.Close()
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("forming the Valkey cluster: %w", err)
	}
	return nil
}

// clusterReport is what a Cluster Cache's servers say, in the terms of its status.
type clusterReport struct {
	shards, readyShards, slotsAssigned int32
	nodes                              []cachev2.ClusterNode
	// ready is the cluster's verdict, the Cache's Ready condition once every pod is ready.
	ready metav1.Condition
}

// reportCluster sums up the shards, slots and nodes the servers report, and the cluster's health.
func reportCluster(want topology.Want, members []topology.Member, health topology.Health, generation int64) *clusterReport {
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
