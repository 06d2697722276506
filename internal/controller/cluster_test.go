package controller

import (
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/topology"
	"example.com/cache-operator/internal/valkey"
)

// With every pod ready the pods' verdict is True, and the cluster's, unchanged since the last
// pass, False: the stored condition must come out as it was, transition time included, or every
// pass would write the status and so start the next one at once.
func TestAClusterStillFormingKeepsItsReadyTransitionTime(t *testing.T) {
	long := metav1.NewTime(time.Now().Add(-time.Hour).Truncate(time.Second))
	cache := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Spec:       cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 1},
		Status: cachev2.CacheStatus{Conditions: []metav1.Condition{{
			Type: cachev2.ConditionReady, Status: metav1.ConditionFalse, Reason: cachev2.ReasonClusterForming,
			Message: "cannot ask pod-0 for its cluster state", ObservedGeneration: 1, LastTransitionTime: long,
		}}},
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: appsv1.StatefulSetStatus{
		ObservedGeneration: 1, Replicas: 1, ReadyReplicas: 1, UpdatedReplicas: 1,
	}}

	health := topology.Health{Problem: topology.Forming, Message: "cannot ask pod-0 for its cluster state"}
	status := observedStatus(cache, sts, nil, resources.TemplateCurrent, reportCluster(topology.Want{Shards: 1}, nil, health, 1))

	ready := meta.FindStatusCondition(status.Conditions, cachev2.ConditionReady)
	if ready.Status != metav1.ConditionFalse || !ready.LastTransitionTime.Equal(&long) {
		t.Errorf("Ready is %s since %v, want False since %v", ready.Status, ready.LastTransitionTime, long)
	}
}

// A new cluster's pods start one by one while it forms: the forming, not the pods' progress, is
// stored as the reason, since it is how tendCluster tells the attaching of a late pod's node
// (which the planner calls healing) from the healing of a cluster that has been whole.
func TestANewClusterWhosePodsStartIsStoredAsForming(t *testing.T) {
	cache := &cachev2.Cache{
		ObjectMeta: metav1.ObjectMeta{Generation: 1},
		Spec:       cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 3},
	}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: appsv1.StatefulSetStatus{
		ObservedGeneration: 1, Replicas: 3, ReadyReplicas: 1, UpdatedReplicas: 3,
	}}
	health := topology.Health{Problem: topology.Forming, Message: "2/3 nodes are running"}
	status := observedStatus(cache, sts, nil, resources.TemplateCurrent, reportCluster(topology.Want{Shards: 3}, nil, health, 1))
	ready := meta.FindStatusCondition(status.Conditions, cachev2.ConditionReady)
	if ready.Reason != cachev2.ReasonClusterForming || ready.Message != "2/3 nodes are running; 1/3 replicas ready" {
		t.Errorf("Ready %s %q, want ClusterForming with what the cluster and the pods wait for", ready.Reason, ready.Message)
	}
}

// clusterPod is a pod of the Cache "c" whose server, node id-<pod>, serves slots or none and
// knows the nodes of the given pods.
func clusterPod(name string, serves bool, knows ...string) clusterMember {
	self := valkey.ClusterNode{ID: "id-" + name, Myself: true, Primary: true}
	if serves {
		self.Slots = []valkey.SlotRange{{Start: 0, End: 99}}
	}
	m := clusterMember{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}},
		Member: topology.Member{Pod: name, Nodes: []valkey.ClusterNode{self}}}
	for _, other := range knows {
		m.Nodes = append(m.Nodes, valkey.ClusterNode{ID: "id-" + other, Primary: true})
	}
	return m
}

// A scale-in from 4 shards to 3 removes c-3: the StatefulSet keeps it until its server serves no
// slot and is forgotten by every staying server; then it shrinks. The leaving server itself still
// knows the cluster, to answer clients until its pod is gone.
func TestAScaleInKeepsTheLeavingPodsUntilTheirServersAreReleased(t *testing.T) {
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 3}}
	staying := func(knows ...string) []clusterMember {
		return []clusterMember{
			clusterPod("c-0", true, append([]string{"c-1", "c-2"}, knows...)...),
			clusterPod("c-1", true, append([]string{"c-0", "c-2"}, knows...)...),
			clusterPod("c-2", true, append([]string{"c-0", "c-1"}, knows...)...),
		}
	}
	for _, tc := range []struct {
		name    string
		members []clusterMember
		nodes   int32
	}{{
		name:    "no scale-in",
		members: staying(),
		nodes:   3,
	}, {
		name:    "the leaving primary still serves slots",
		members: append(staying("c-3"), clusterPod("c-3", true, "c-0", "c-1", "c-2")),
		nodes:   4,
	}, {
		name:    "drained of its slots, still in the cluster",
		members: append(staying("c-3"), clusterPod("c-3", false, "c-0", "c-1", "c-2")),
		nodes:   4,
	}, {
		name: "still known by one staying server",
		members: func() []clusterMember {
			m := append(staying(), clusterPod("c-3", false, "c-0", "c-1", "c-2"))
			m[0] = clusterPod("c-0", true, "c-1", "c-2", "c-3")
			return m
		}(),
		nodes: 4,
	}, {
		name:    "its server cannot be asked",
		members: append(staying(), clusterMember{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "c-3"}}, Member: topology.Member{Pod: "c-3"}}),
		nodes:   4,
	}, {
		name:    "released: forgotten by every staying server",
		members: append(staying(), clusterPod("c-3", false, "c-0", "c-1", "c-2")),
		nodes:   3,
	}, {
		name:    "two leaving, the higher one released: both kept, as a StatefulSet removes the highest first",
		members: append(staying("c-3"), clusterPod("c-3", true, "c-0", "c-1", "c-2"), clusterPod("c-4", false, "c-0", "c-1", "c-2")),
		nodes:   5,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tc.members {
				tc.members[i].Leaving = ordinal(cache, tc.members[i].pod) >= cache.Spec.Nodes()
			}
			if got := nodesToRun(cache, tc.members); got != tc.nodes {
				t.Errorf("nodesToRun = %d, want %d", got, tc.nodes)
			}
		})
	}
}

// A pass that could not ask every server of a Cluster keeps the slots to move and moved as stored:
// the slots of a server it did not ask are counted nowhere, and would read as moved, and the
// count would start again from 0 once that server answers.
func TestAPassBlindToAServerKeepsTheSlotsCountAsStored(t *testing.T) {
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 3},
		Status: cachev2.CacheStatus{SlotsToMove: 3000, SlotsMoved: 3553}}
	sts := &appsv1.StatefulSet{ObjectMeta: metav1.ObjectMeta{Generation: 1}, Status: appsv1.StatefulSetStatus{
		ObservedGeneration: 1, Replicas: 5, ReadyReplicas: 5, UpdatedReplicas: 5,
	}}
	health := topology.Health{Problem: topology.Draining, Message: "cannot ask pod-4 for its cluster state"}
	report := reportCluster(topology.Want{Shards: 3}, nil, health, 1)
	report.slotsToMove, report.slotsUnknown = 0, true
	if status := observedStatus(cache, sts, nil, resources.TemplateCurrent, report); status.SlotsToMove != 3000 || status.SlotsMoved != 3553 {
		t.Errorf("blind to a server: %d to move, %d moved; want 3000 and 3553 as stored", status.SlotsToMove, status.SlotsMoved)
	}
	report.slotsUnknown = false
	if status := observedStatus(cache, sts, nil, resources.TemplateCurrent, report); status.SlotsToMove != 0 || status.SlotsMoved != 6553 {
		t.Errorf("every server asked, none to move: %d to move, %d moved; want 0 and 6553", status.SlotsToMove, status.SlotsMoved)
	}
}
