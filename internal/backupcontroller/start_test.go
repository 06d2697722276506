package backupcontroller

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
)

func pod(name, ip string, ready bool) corev1.Pod {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.PodStatus{PodIP: ip,
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: status}}}}
}

func sourcePods(shards []backup.Shard) []string {
	var out []string
	for _, s := range shards {
		out = append(out, s.Name+"="+s.Source+"@"+s.Addr)
	}
	return out
}

// A Cluster's shards are copied from a ready replica each, or from their primary when no
// replica is ready, named in the order of their primaries; a Standalone Cache's nodes in order.
// A shard with no ready pod holds the backup back.
func TestSourcesPreferAReadyReplicaOfEachShard(t *testing.T) {
	cluster := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: cachev2.CacheSpec{Mode: cachev2.ModeCluster, Shards: 2},
		Status: cachev2.CacheStatus{Nodes: []cachev2.ClusterNode{
			{Pod: "c-3", Role: cachev2.RolePrimary}, {Pod: "c-1", Role: cachev2.RoleReplica, PrimaryPod: "c-3"},
			{Pod: "c-0", Role: cachev2.RolePrimary}, {Pod: "c-2", Role: cachev2.RoleReplica, PrimaryPod: "c-0"},
		}}}
	pods := []corev1.Pod{pod("c-0", "127.64.0.1", true), pod("c-1", "127.64.0.2", true), pod("c-2", "127.64.0.3", false), pod("c-3", "127.64.0.4", true)}
	shards, err := sources(cluster, pods)
	if want := []string{"shard-0=c-0@127.64.0.1:6379", "shard-1=c-1@127.64.0.2:6379"}; err != nil || !slices.Equal(sourcePods(shards), want) {
		t.Errorf("the Cluster's sources are %v, %v; want %v", sourcePods(shards), err, want)
	}

	pods[0] = pod("c-0", "127.64.0.1", false)
	if _, err := sources(cluster, pods); err == nil || !strings.Contains(err.Error(), "shard 0") {
		t.Errorf("a shard with no ready pod gave %v, want an error naming it", err)
	}

	standalone := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 2}}
	shards, err = sources(standalone, []corev1.Pod{pod("c-1", "127.64.0.2", true), pod("c-0", "127.64.0.1", true)})
	if want := []string{"shard-0=c-0@127.64.0.1:6379", "shard-1=c-1@127.64.0.2:6379"}; err != nil || !slices.Equal(sourcePods(shards), want) {
		t.Errorf("the Standalone Cache's sources are %v, %v; want %v", sourcePods(shards), err, want)
	}
}
