package backupcontroller

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cachev1alpha1 "example.com/cache-operator/api/v1alpha1"
	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/backup"
	"example.com/cache-operator/internal/resources"
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
// replica is ready, named in the order of their primaries; a Replicated Cache's one shard the
// same way, whichever pod its primary is on; a Standalone Cache's nodes in order. A shard with no
// ready pod holds the backup back.
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

	replicated := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: cachev2.CacheSpec{Mode: cachev2.ModeReplicated, Shards: 1},
		Status: cachev2.CacheStatus{Primary: "c-1", Nodes: []cachev2.ClusterNode{
			{Pod: "c-0", Role: cachev2.RoleReplica, PrimaryPod: "c-1"}, {Pod: "c-1", Role: cachev2.RolePrimary}, {Pod: "c-2", Role: cachev2.RoleReplica, PrimaryPod: "c-1"},
		}}}
	for _, tc := range []struct {
		ready []bool // of c-0, c-1, c-2
		want  string
	}{
		{[]bool{true, true, true}, "shard-0=c-0@127.64.0.1:6379"},
		{[]bool{false, true, true}, "shard-0=c-2@127.64.0.3:6379"},
		{[]bool{false, true, false}, "shard-0=c-1@127.64.0.2:6379"},
	} {
		pods := []corev1.Pod{pod("c-0", "127.64.0.1", tc.ready[0]), pod("c-1", "127.64.0.2", tc.ready[1]), pod("c-2", "127.64.0.3", tc.ready[2])}
		if shards, err := sources(replicated, pods); err != nil || !slices.Equal(sourcePods(shards), []string{tc.want}) {
			t.Errorf("with ready pods %v, the Replicated Cache's sources are %v, %v; want %s", tc.ready, sourcePods(shards), err, tc.want)
		}
	}

	standalone := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 2}}
	shards, err = sources(standalone, []corev1.Pod{pod("c-1", "127.64.0.2", true), pod("c-0", "127.64.0.1", true)})
	if want := []string{"shard-0=c-0@127.64.0.1:6379", "shard-1=c-1@127.64.0.2:6379"}; err != nil || !slices.Equal(sourcePods(shards), want) {
		t.Errorf("the Standalone Cache's sources are %v, %v; want %v", sourcePods(shards), err, want)
	}
}

// A backup of a Cache with auth speaks as the backup user, and so waits, Pending, until the
// Cache's ACL Secret holds that user's password and every node has been given it: a Cache made by
// a release without that user gets it at its first pass after the upgrade, and a backup made
// before then would be refused by its servers.
func TestABackupOfACacheWithAuthWaitsUntilItsNodesKnowTheBackupUser(t *testing.T) {
	ctx := context.Background()
	w := newBackupWorld(t, cachev1alpha1.CacheBackupStatus{})
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "orders", Generation: 1},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeStandalone, Shards: 1, Version: "9.1.2", Auth: &cachev2.Auth{}}}
	cache.Status.Conditions = []metav1.Condition{{Type: cachev2.ConditionReady, Status: metav1.ConditionTrue, Reason: cachev2.ReasonAllReplicasReady,
		ObservedGeneration: cache.Generation, LastTransitionTime: metav1.Now()}}
	server := pod("orders-0", "127.64.0.1", true)
	server.Namespace, server.Labels = "shop", resources.SelectorLabels(cache)
	for _, obj := range []client.Object{cache, &server} {
		if err := w.c.Create(ctx, obj); err != nil {
			t.Fatal(err)
		}
	}
	acl, _ := resources.NextACL(cache, resources.ACL{}, "the-application-password", time.Now())
	earlier := resources.ACL{Passwords: maps.Clone(acl.Passwords), AppHashes: acl.AppHashes, Applied: "an-earlier-release's"}
	delete(earlier.Passwords, resources.BackupUser)
	secret := resources.ACLSecret(cache, earlier)
	if err := w.c.Create(ctx, secret); err != nil {
		t.Fatal(err)
	}

	w.pass() // the finalizer of the backup's objects
	for _, step := range []struct {
		acl     resources.ACL
		pending bool
	}{
		{earlier, true},
		{resources.ACL{Passwords: acl.Passwords, AppHashes: acl.AppHashes, Applied: "not-given-yet"}, true},
		{resources.ACL{Passwords: acl.Passwords, AppHashes: acl.AppHashes, Applied: acl.Digest(cache)}, false},
	} {
		secret.Data, secret.Annotations = resources.ACLSecret(cache, step.acl).Data, resources.ACLSecret(cache, step.acl).Annotations
		if err := w.c.Update(ctx, secret); err != nil {
			t.Fatal(err)
		}
		w.pass()
		b := w.backup()
		complete := meta.FindStatusCondition(b.Status.Conditions, cachev1alpha1.ConditionComplete)
		if pending := b.Status.Phase == cachev1alpha1.BackupPending; pending != step.pending ||
			pending && (complete == nil || !strings.Contains(complete.Message, resources.BackupUser)) {
			t.Fatalf("with the ACL Secret applied %q: phase %s, %+v; want pending %t, naming the user %s", step.acl.Applied, b.Status.Phase, complete, step.pending, resources.BackupUser)
		}
	}
	job := w.job(resources.BackupJobName(w.b))
	if job == nil {
		t.Fatal("no Job")
	}
	env := map[string]string{}
	for _, e := range job.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			env[e.Name] = e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
		}
	}
	if env[backup.EnvValkeyUser] != resources.BackupUser || env[backup.EnvValkeyPassword] != "orders-acl/"+resources.BackupUser {
		t.Errorf("the Job's environment %v: want it to speak as %s, with that user's password only", env, resources.BackupUser)
	}
}
