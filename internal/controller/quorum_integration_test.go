//go:build integration

package controller

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"example.com/cache-operator/internal/resources"
	"example.com/cache-operator/internal/topology"
	"example.com/cache-operator/internal/valkey"
	"example.com/cache-operator/test/harness/testenv"
)

// A primary that stops answering (here SIGSTOP: a hung server, or the machine under it gone) in a
// cluster of one or two shards is never failed over by Valkey, which needs a majority of the
// primaries to agree that it fails. The operator's own passes (observe every server, plan the
// next step, act on it) promote its replica once the servers have gone the node timeout without
// reaching it, and every write the replica acknowledged (WAIT 1) is served by the new primary.
// On real servers, started fenced as the pod template starts them.
func TestAShardWithoutQuorumIsFailedOverByTheOperator(t *testing.T) {
	for _, shards := range []int{1, 2} {
		t.Run(fmt.Sprintf("%d×1", shards), func(t *testing.T) {
			ctx := context.Background()
			want := topology.Want{Shards: shards, ReplicasPerShard: 1}
			ips := testenv.LoopbackIPs(want.Nodes())
			members := make([]clusterMember, len(ips))
			processes := map[string]*os.Process{}
			for i, ip := range ips {
				args := append([]string{"--cluster-enabled", "yes", "--cluster-node-timeout", "2000",
					"--cluster-replica-validity-factor", "0", "--user"}, resources.FenceRule...)
				members[i].Member = topology.Member{Pod: "pod-" + strconv.Itoa(i), IP: ip, Port: 6379}
				processes[members[i].Pod] = testenv.StartValkey(t, ip, 6379, args...)
			}
			pass := func() (topology.Plan, topology.Health) {
				for i := range members {
					members[i].Member = topology.Member{Pod: members[i].Pod, IP: members[i].IP, Port: members[i].Port}
					observeMember(ctx, &members[i].Member, valkey.Auth{}, members[i].Pod)
				}
				plan, health := topology.Next(want, topologyMembers(members))
				for _, a := range plan.Actions {
					server, err := valkey.Connect(members[slices.IndexFunc(members, func(m clusterMember) bool { return m.Pod == a.On })].IP, 6379, valkey.Auth{})
					if err != nil {
						t.Fatal(err)
					}
					if err := (&CacheReconciler{}).command(ctx, server, nil, a, time.Now().Add(keyMoveBudget)); err != nil {
						t.Logf("%s: %v", a, err)
					}
					server.Close()
				}
				return plan, health
			}
			testenv.WaitFor(t, time.Minute, "the cluster formed and ready", func() (bool, string) {
				plan, health := pass()
				return plan.Formed() && health.Ready(), fmt.Sprintf("%s: %s", health.Problem, health.Message)
			})

			var primary, replica clusterMember
			for _, m := range members {
				if self, _ := valkey.Myself(m.Nodes); slices.ContainsFunc(self.Slots, func(r valkey.SlotRange) bool { return r.Start == 0 }) {
					primary = m
				}
			}
			primaryID := selfID(primary)
			for _, m := range members {
				if self, _ := valkey.Myself(m.Nodes); self.PrimaryID == primaryID {
					replica = m
				}
			}
			acked := writeAcknowledged(t, primary.IP, 500)

			if err := processes[primary.Pod].Signal(syscall.SIGSTOP); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = processes[primary.Pod].Signal(syscall.SIGCONT) })
			// Serving the slots is not yet serving clients: a primary that took over says
			// cluster_state:fail (CLUSTERDOWN) until its rejoin delay is over.
			testenv.WaitFor(t, time.Minute, replica.Pod+" to take over from the stopped "+primary.Pod+" and say ok", func() (bool, string) {
				plan, health := pass()
				for _, m := range members {
					if self, _ := valkey.Myself(m.Nodes); m.Pod == replica.Pod && self.SlotsServed() > 0 && m.State == "ok" {
						return true, ""
					}
				}
				return false, fmt.Sprintf("%v; %s: %s", plan.Actions, health.Problem, health.Message)
			})
			client := testenv.Valkey(t, replica.IP, 6379)
			for _, key := range acked {
				if got, err := client.Do(ctx, client.B().Get().Key(key).Build()).ToString(); err != nil || got != key {
					t.Fatalf("%s, acknowledged by the replica before its primary stopped: %q, %v", key, got, err)
				}
			}
		})
	}
}

func selfID(m clusterMember) string {
	self, _ := valkey.Myself(m.Nodes)
	return self.ID
}

// lowSlotTag is a hash tag of slot 1584, which the primary of slot 0 serves in a cluster of one or
// two shards.
const lowSlotTag = "3"

// writeAcknowledged writes n keys of one slot (lowSlotTag) on the server at ip, acknowledged by a
// replica; it returns the keys.
func writeAcknowledged(t *testing.T, ip string, n int) []string {
	t.Helper()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("{%s}-%d", lowSlotTag, i)
	}
	testenv.SetAcknowledgedByAReplica(t, testenv.Valkey(t, ip, 6379), keys, keys)
	return keys
}
