//go:build integration

package controller

import (
	"context"
	"strings"
	"testing"

	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/topology"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// A pod's address that answers as another pod's server (a stale informer, an IP that went to a
// pod of another Cache) gets no command: the member is a Stranger, with no view read, and the
// plan takes no step, however much the others need one. On real servers: a server of another
// Cache at the address of a fresh one.
func TestAServerOfAnotherPodAtAMembersAddressGetsNoCommand(t *testing.T) {
	ctx := context.Background()
	ips := testenv.LoopbackIPs(2)
	testenv.StartValkey(t, ips[0], 6379, "--cluster-enabled", "yes",
		"--cluster-announce-human-nodename", resources.NodeName("default", "sessions-0"))
	testenv.StartValkey(t, ips[1], 6379, "--cluster-enabled", "yes",
		"--cluster-announce-human-nodename", resources.NodeName("default", "orders-0"))
	members := []topology.Member{{Pod: "sessions-0", IP: ips[0], Port: 6379}, {Pod: "sessions-1", IP: ips[1], Port: 6379}}
	for i := range members {
		observeMember(ctx, &members[i], valkey.Auth{}, resources.NodeName("default", members[i].Pod))
	}
	if members[0].Stranger != "" || members[0].Nodes == nil {
		t.Errorf("sessions-0's own server taken for a stranger (%q), or not read", members[0].Stranger)
	}
	if got, want := members[1].Stranger, resources.NodeName("default", "orders-0"); got != want || members[1].Nodes != nil {
		t.Errorf("sessions-1's address, where orders-0's server answers: stranger %q, view %v; want %q and no view", got, members[1].Nodes, want)
	}
	plan, health := topology.Next(topology.Want{Shards: 2}, members)
	if len(plan.Actions) > 0 || !strings.Contains(health.Message, "is default/orders-0") {
		t.Errorf("with another pod's server at a member's address: actions %v, verdict %q; want none, and the message to say so", plan.Actions, health.Message)
	}
}
