//go:build integration

package controller

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/replication"
	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// A stale view of a Replicated Cache's pods never promotes a second primary. The operator sees
// the pods through its informer, which may lag behind a failover, a pod made again at another
// address, or one that is new; what it decides on is what the servers at those addresses say,
// each once it has said it is the pod expected. On real servers, after a failover: passes given
// the pods as they were before it (the old primary's pod still labelled the primary), without
// the new primary's pod, and with the new primary's pod at the address of another pod's server,
// promote no server, and the next pass given the pods as they are finds the Cache ready.
func TestAStaleViewOfTheReplicatedPodsNeverPromotesASecondPrimary(t *testing.T) {
	ctx := context.Background()
	cache := &cachev2.Cache{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "jobs"},
		Spec: cachev2.CacheSpec{Mode: cachev2.ModeReplicated, Shards: 1, ReplicasPerShard: ptr.To[int32](2)}}
	want := replication.Want{Nodes: 3, FailoverAfter: cache.Spec.FailoverAfter(), Hold: resources.HoldAddress}
	ips := testenv.LoopbackIPs(3)
	names := []string{"jobs-0", "jobs-1", "jobs-2"}
	// As the pod's container starts it: held, and saying which pod it is.
	start := func(i int) *os.Process {
		return testenv.StartValkey(t, ips[i], resources.Port, "--replicaof", resources.HoldAddress.IP, strconv.Itoa(resources.HoldAddress.Port),
			"--cluster-announce-human-nodename", resources.NodeName(cache.Namespace, names[i]))
	}
	processes := make([]*os.Process, len(names))
	for i := range names {
		processes[i] = start(i)
	}
	pod := func(name, ip string, role replication.Role) client.Object {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: cache.Namespace, Name: name, UID: types.UID("uid-" + name),
			Labels: resources.SelectorLabels(cache)}, Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}
		if role != "" {
			p.Labels[resources.LabelRole] = string(role)
		}
		return p
	}
	// pass is one look and step of the operator, seeing the pods as view holds them.
	pass := func(view client.Client) replication.Plan {
		t.Helper()
		r := &CacheReconciler{Client: view}
		members, err := r.observeReplicated(ctx, cache, valkey.Auth{})
		if err != nil {
			t.Fatal(err)
		}
		plan := replication.Next(want, replicationMembers(members))
		if err := r.actReplicated(ctx, members, plan.Actions, valkey.Auth{}); err != nil {
			t.Logf("%v", err)
		}
		return plan
	}
	viewOf := func(pods ...client.Object) client.Client {
		return fake.NewClientBuilder().WithScheme(NewScheme()).WithObjects(pods...).Build()
	}
	// primaries are the servers that take writes, by pod.
	primaries := func() []string {
		var out []string
		for i, ip := range ips {
			if testenv.ValkeyInfo(t, testenv.Valkey(t, ip, resources.Port), "replication", "role") == "master" {
				out = append(out, names[i])
			}
		}
		return out
	}
	// The pods as they are: the operator's labels on them are its own writes.
	var current []client.Object
	for i, name := range names {
		current = append(current, pod(name, ips[i], ""))
	}
	world := viewOf(current...)
	settle := func() replication.Plan {
		t.Helper()
		var plan replication.Plan
		testenv.WaitFor(t, time.Minute, "one primary, every replica in sync", func() (bool, string) {
			plan = pass(world)
			return plan.Problem == "" && plan.Primary != "", fmt.Sprintf("%s: %s", plan.Problem, plan.Message)
		})
		return plan
	}
	formed := settle()
	if formed.Primary != "jobs-0" {
		t.Fatalf("the first primary is %s, want jobs-0", formed.Primary)
	}
	// The primary's server restarted in place, empty and held; a replica takes over.
	if err := processes[0].Kill(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 10*time.Second, "jobs-0's server gone", func() (bool, string) {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(ips[0], strconv.Itoa(resources.Port)), time.Second)
		if err == nil {
			_ = conn.Close()
		}
		return err != nil, "still accepts connections"
	})
	start(0)
	now := settle().Primary
	if now == "jobs-0" || now == "" {
		t.Fatalf("after jobs-0's server restarted empty, the primary is %q", now)
	}
	other := 3 - slices.Index(names, now) // the pod neither primary, before or now
	stale := map[string][]client.Object{
		"the pods as before the failover": {pod("jobs-0", ips[0], replication.RolePrimary), pod(names[1], ips[1], replication.RoleReplica),
			pod(names[2], ips[2], replication.RoleReplica)},
		"the new primary's pod missing": {pod("jobs-0", ips[0], replication.RolePrimary), pod(names[other], ips[other], replication.RoleReplica)},
		"the new primary's pod at another pod's address": {pod("jobs-0", ips[0], replication.RolePrimary),
			pod(now, ips[other], replication.RoleReplica)},
	}
	for view, pods := range stale {
		for range 3 {
			plan := pass(viewOf(pods...))
			if got := primaries(); len(got) != 1 || got[0] != now {
				t.Fatalf("a pass seeing %s (%s: %s): the servers that take writes are %v, want %s alone", view, plan.Problem, plan.Message, got, now)
			}
		}
	}
	if again := settle(); again.Primary != now {
		t.Errorf("seeing the pods as they are again, the primary is %s, want %s", again.Primary, now)
	}
}

// A step the plan takes on a pod's server is refused when the server at the pod's address says it
// is another pod's: the address went to another pod between the pass's look and its step (a pass
// apart). Promoting that server would make a second primary.
func TestAStepOnAPodWhoseAddressWentToAnotherPodIsRefused(t *testing.T) {
	ip := testenv.LoopbackIPs(1)[0]
	testenv.StartValkey(t, ip, resources.Port, "--replicaof", resources.HoldAddress.IP, strconv.Itoa(resources.HoldAddress.Port),
		"--cluster-announce-human-nodename", resources.NodeName("shop", "jobs-2"))
	m := &replicatedMember{pod: &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: "jobs-1"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip}}}
	m.Pod, m.IP, m.Port = "jobs-1", ip, resources.Port

	err := (&CacheReconciler{}).actOnReplica(context.Background(), m, replication.Action{Kind: replication.KindPromote, On: m.Pod}, valkey.Auth{})
	if !errors.Is(err, errAnotherPods) {
		t.Errorf("promoting jobs-1 at an address whose server is jobs-2's: %v, want %v", err, errAnotherPods)
	}
	if role := testenv.ValkeyInfo(t, testenv.Valkey(t, ip, resources.Port), "replication", "role"); role != "slave" {
		t.Errorf("jobs-2's server is now a %s, want still a replica", role)
	}
}
