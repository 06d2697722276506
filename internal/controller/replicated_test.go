package controller

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/replication"
)

// The status names the primary, and as its replicas the servers that replicate it, in the pods'
// order; a server held or replicating another address has no role yet.
func TestAReplicatedCachesStatusSaysWhoReplicatesWhom(t *testing.T) {
	member := func(pod, ip, primaryIP string) replicatedMember {
		return replicatedMember{Member: replication.Member{Pod: pod, IP: ip, Reached: true, Primary: primaryIP == "", PrimaryIP: primaryIP}}
	}
	members := []replicatedMember{
		member("c-2", "198.18.0.3", "127.0.0.1"),
		member("c-1", "198.18.0.2", ""),
		member("c-0", "198.18.0.1", "198.18.0.2"),
	}
	report := reportReplicated(members, replication.Plan{Primary: "c-1", Problem: replication.ReplicasMissing}, 7)
	want := []cachev2.ClusterNode{
		{Pod: "c-0", Role: cachev2.RoleReplica, PrimaryPod: "c-1"},
		{Pod: "c-1", Role: cachev2.RolePrimary},
		{Pod: "c-2"},
	}
	if len(report.nodes) != len(want) {
		t.Fatalf("nodes %+v, want %+v", report.nodes, want)
	}
	for i := range want {
		if report.nodes[i] != want[i] {
			t.Errorf("node %d: %+v, want %+v", i, report.nodes[i], want[i])
		}
	}
	if report.primary != "c-1" || report.ready.Status != metav1.ConditionFalse || report.ready.Reason != cachev2.ReasonReplicasMissing || report.readyShards != 0 {
		t.Errorf("primary %q, Ready %s %s, %d ready shards; want c-1, False ReplicasMissing, 0", report.primary, report.ready.Status, report.ready.Reason, report.readyShards)
	}
}

// A scale-in keeps every pod until one primary answers on a pod that stays and hands over to no
// one; the release that a new version must read is the primary's, or while none answers, the
// newest any server runs.
func TestAScaleInKeepsThePrimarysPodAndTheReleaseIsThePrimarys(t *testing.T) {
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: cachev2.CacheSpec{Mode: cachev2.ModeReplicated, Shards: 1}}
	member := func(pod, version string, primary bool) replicatedMember {
		m := replicatedMember{Member: replication.Member{Pod: pod, Reached: true, Primary: primary}, version: version}
		m.pod = &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: pod}}
		return m
	}
	failingOver := func(m replicatedMember) replicatedMember { m.FailingOver = true; return m }
	unreached := func(m replicatedMember) replicatedMember { m.Reached = false; return m }
	for _, tc := range []struct {
		name    string
		members []replicatedMember
		nodes   int32
		release string
	}{
		{"the primary stays", []replicatedMember{member("c-0", "9.1.2", true), member("c-1", "8.1.1", false), member("c-2", "8.1.1", false)}, 1, "9.1.2"},
		{"the primary goes", []replicatedMember{member("c-0", "8.1.1", false), member("c-1", "8.1.1", false), member("c-2", "9.1.2", true)}, 3, "9.1.2"},
		{"no primary answers", []replicatedMember{member("c-0", "8.1.1", false), member("c-1", "9.1.2", false)}, 2, "9.1.2"},
		{"the primary stays, handing over", []replicatedMember{failingOver(member("c-0", "9.1.2", true)), member("c-1", "9.1.2", false)}, 2, "9.1.2"},
		{"no server answers", []replicatedMember{unreached(member("c-0", "9.1.2", false))}, 1, ""},
	} {
		if nodes, release := replicatedNodesToRun(cache, tc.members), replicatedRelease(tc.members); nodes != tc.nodes || release != tc.release {
			t.Errorf("%s: %d nodes, release %q; want %d, %q", tc.name, nodes, release, tc.nodes, tc.release)
		}
	}
}
