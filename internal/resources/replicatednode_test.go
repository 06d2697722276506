package resources

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/replication"
)

func replicatedCache() *cachev2.Cache {
	cache := testCache()
	cache.Spec.Mode, cache.Spec.Shards, cache.Spec.ReplicasPerShard = cachev2.ModeReplicated, 1, ptr.To[int32](2)
	return cache
}

// A Replicated node's server starts held, a replica of an address where nothing listens, empty,
// saying which pod it is; its agent judges it as a Replicated node; the operator's informer sees
// its pod; the operator, not the StatefulSet controller, restarts it in an upgrade.
func TestAReplicatedNodeStartsHeldAndEmpty(t *testing.T) {
	sts := StatefulSet(replicatedCache(), DefaultImages)
	if *sts.Spec.Replicas != 3 {
		t.Errorf("replicas = %d, want 3: a primary and 2 replicas", *sts.Spec.Replicas)
	}
	valkey := sts.Spec.Template.Spec.Containers[0]
	command := strings.Join(slices.Concat(valkey.Command, valkey.Args), " ")
	for _, want := range []string{
		"--replicaof 127.0.0.1 1",
		"--cluster-announce-human-nodename $(POD_NAMESPACE)/$(POD_NAME)",
		"--remove dump.rdb",
	} {
		if !strings.Contains(command, want) {
			t.Errorf("the server's command %q lacks %q", command, want)
		}
	}
	if strings.Contains(command, "--cluster-enabled") {
		t.Errorf("a Replicated node runs in Cluster mode: %q", command)
	}
	agent := strings.Join(sts.Spec.Template.Spec.Containers[1].Command, " ")
	if !strings.Contains(agent, "--replicated") {
		t.Errorf("the readiness agent's command %q lacks --replicated", agent)
	}
	if got := sts.Spec.Template.Labels[LabelMode]; got != string(cachev2.ModeReplicated) {
		t.Errorf("pod label %s = %q, want Replicated", LabelMode, got)
	}
	if _, ok := sts.Spec.Template.Labels[LabelRole]; ok {
		t.Error("the pod template sets the role label, which the operator moves between pods")
	}
	if sts.Spec.UpdateStrategy.Type != appsv1.OnDeleteStatefulSetStrategyType {
		t.Errorf("update strategy %q, want OnDelete: the operator restarts the pods, the primary last", sts.Spec.UpdateStrategy.Type)
	}
}

// The primary's Service selects only the pod labelled primary, the replicas' only those labelled
// replica; both have a cluster IP.
func TestTheRoleServicesSelectThePodsByTheirLabel(t *testing.T) {
	cache := replicatedCache()
	pod := StatefulSet(cache, DefaultImages).Spec.Template.Labels
	withRole := func(role replication.Role) labels.Set {
		l := labels.Set{}
		for k, v := range pod {
			l[k] = v
		}
		l[LabelRole] = string(role)
		return l
	}
	services := RoleServices(cache)
	if len(services) != 2 || services[0].Name != "orders-cache-primary" || services[1].Name != "orders-cache-replicas" {
		t.Fatalf("services %v, want orders-cache-primary and orders-cache-replicas", services)
	}
	for i, role := range []replication.Role{replication.RolePrimary, replication.RoleReplica} {
		svc := services[i]
		other := map[replication.Role]replication.Role{replication.RolePrimary: replication.RoleReplica, replication.RoleReplica: replication.RolePrimary}[role]
		selector := labels.SelectorFromSet(svc.Spec.Selector)
		if !selector.Matches(withRole(role)) || selector.Matches(withRole(other)) || selector.Matches(labels.Set(pod)) {
			t.Errorf("%s selects %v: want the pods labelled %s only", svc.Name, svc.Spec.Selector, role)
		}
		if svc.Spec.ClusterIP == corev1.ClusterIPNone {
			t.Errorf("%s is headless: a client would keep an address from its DNS cache", svc.Name)
		}
	}
}
