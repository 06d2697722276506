package topology

import (
	"fmt"
	"slices"
	"strings"

	cachev2 "example.com/cache-operator/api/v2"
	"example.com/cache-operator/internal/valkey"
)

// Problem is why a cluster is not ready; empty when it is. Its values are the reasons the
// Cache's Ready condition gives for it.
type Problem string

const (
	// Forming means the cluster is not formed yet: Form still has steps to take or waits.
	Forming Problem = cachev2.ReasonClusterForming
	// ClusterStateNotOK means some server reports a cluster_state other than ok.
	ClusterStateNotOK Problem = cachev2.ReasonClusterStateNotOK
	// SlotsUnserved means some slots have no primary that every server sees as reachable.
	SlotsUnserved Problem = cachev2.ReasonSlotsUnserved
	// ReplicasMissing means a shard has fewer replicas with their link up than wanted.
	ReplicasMissing Problem = cachev2.ReasonReplicasMissing
	// ScalingOut, Draining, Rebalancing, Healing and Upgrading are the operations that take
	// the cluster from one shape to another; see the Cache's reasons of the same names.
	ScalingOut  Problem = cachev2.ReasonScalingOut
	Draining    Problem = cachev2.ReasonDraining
	Rebalancing Problem = cachev2.ReasonRebalancing
	Healing     Problem = cachev2.ReasonHealing
	Upgrading   Problem = cachev2.ReasonUpgrading
)

// Health is the verdict on a cluster's readiness, and a message that names what is missing.
type Health struct {
	Problem Problem
	Message string
}

// Ready reports whether there is no problem.
func (h Health) Ready() bool { return h.Problem == "" }

// Next is the step to take now towards the cluster wanted, and the verdict on the cluster as its
// servers report it, before that step: while it is not formed, the operation under way; then
// whether it serves (Assess); then, with every pod on the current template, Ready, or else the
// next step of the ordered upgrade (Roll).
func Next(want Want, members []Member) (Plan, Health) {
	plan := Form(want, members)
	if !plan.Formed() {
		// A pod restarted by the upgrade rejoins as a new node, which is healing; while older
		// pods remain, it is part of the upgrade.
		if plan.Operation == Healing && slices.ContainsFunc(members, func(m Member) bool { return m.Outdated && !m.Leaving }) {
			plan.Operation = Upgrading
		}
		return plan, Health{plan.Operation, describe(plan)}
	}
	if health := Assess(want, members); !health.Ready() {
		return plan, health
	}
	if roll := Roll(members); !roll.Formed() {
		return roll, Health{Upgrading, describe(roll)}
	}
	return plan, Health{}
}

// describe is a message about a plan: how far its operation has got, and what happens next.
func describe(plan Plan) string {
	message := plan.Waiting
	if message == "" {
		message = "next step: " + plan.Actions[0].String()
		if more := len(plan.Actions) - 1; more > 0 {
			message += fmt.Sprintf(" and %d more", more)
		}
	}
	if plan.Progress != "" {
		message = plan.Progress + "; " + message
	}
	return message
}

// Assess judges a formed cluster by what its servers report: it is ready only when every server
// says cluster_state:ok, all 16384 slots are served by primaries that no server sees failing,
// every server routes each slot to the primary that serves it, and every shard has its replicas attached with the link up. (A formed cluster has no slot
// migrating or importing: Form finishes or closes such a slot first.)
func Assess(want Want, members []Member) Health {
	var notOK []string
	for _, m := range members {
		// A leaving server that has forgotten the cluster says fail until its pod goes.
		if m.State != clusterStateOK && !m.Leaving {
			notOK = append(notOK, fmt.Sprintf("%s (%s)", m.Pod, m.State))
		}
	}
	if len(notOK) > 0 {
		return Health{ClusterStateNotOK, "cluster_state is not ok on " + strings.Join(notOK, ", ")}
	}

	failing := map[string]bool{}
	for _, m := range members {
		for _, n := range m.Nodes {
			if n.Failing || n.Suspected {
				failing[n.ID] = true
			}
		}
	}
	servedBy := make([]bool, valkey.SlotCount)
	linked := map[string]int{}
	var primaries []string
	for _, m := range members {
		self, _ := m.self()
		switch {
		case self.PrimaryID != "":
			if m.LinkUp {
				linked[self.PrimaryID]++
			}
		case self.SlotsServed() > 0:
			primaries = append(primaries, self.ID)
			if !failing[self.ID] {
				for _, r := range self.Slots {
					for s := r.Start; s <= r.End; s++ {
						servedBy[s] = true
					}
				}
			}
		}
	}
	if served := countTrue(servedBy); served < valkey.SlotCount {
		return Health{SlotsUnserved, fmt.Sprintf("%d of %d slots are served by reachable primaries", served, valkey.SlotCount)}
	}
	if stale := staleRouting(members); stale != "" {
		return Health{SlotsUnserved, stale}
	}
	for _, id := range primaries {
		if linked[id] < want.ReplicasPerShard {
			return Health{ReplicasMissing, fmt.Sprintf("primary %s has %d of %d replicas with their link up", id, linked[id], want.ReplicasPerShard)}
		}
	}
	return Health{}
}

// staleRouting names a server whose own map of the slots sends a client elsewhere than to the
// primary that serves a slot, or to a primary it cannot reach or has no address for, and how many
// slots it misroutes; empty when every server agrees with the primaries. A cluster client learns
// the map from whichever server it asks (CLUSTER SHARDS or SLOTS), and a server's cluster_state
// can be ok while gossip has not yet brought it a change: a client that asked it would find a
// slot with no node and fail its commands.
func staleRouting(members []Member) string {
	owner := make([]string, valkey.SlotCount)
	for _, m := range members {
		if self, ok := m.self(); ok && self.PrimaryID == "" {
			for _, r := range self.Slots {
				for s := r.Start; s <= r.End; s++ {
					owner[s] = self.ID
				}
			}
		}
	}
	for _, m := range members {
		if m.Leaving || m.Nodes == nil {
			continue
		}
		routed := make([]bool, valkey.SlotCount)
		for _, n := range m.Nodes {
			// A server may not know its own address (a single node was never met), and its
			// clients use the one they asked it at.
			if !n.Primary || n.Failing || n.Suspected || (n.IP == "" && !n.Myself) {
				continue
			}
			for _, r := range n.Slots {
				for s := r.Start; s <= r.End; s++ {
					routed[s] = owner[s] == n.ID
				}
			}
		}
		if misrouted := valkey.SlotCount - countTrue(routed); misrouted > 0 {
			return fmt.Sprintf("%s routes %d slots to no primary or to another than the one that serves them", m.Pod, misrouted)
		}
	}
	return ""
}

// countTrue is the number of true values.
func countTrue(values []bool) int {
	n := 0
	for _, v := range values {
		if v {
			n++
		}
	}
	return n
}
