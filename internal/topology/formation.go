// Package topology decides, from what the servers of a Cluster-mode Cache report about
// themselves, the next bounded step towards the cluster the spec asks for. It is pure: no client,
// no clock, no memory between calls; it judges by Valkey's own state, never by pod ordinals,
// since after a failover the primary of a shard may be any pod.
package topology

import (
	"fmt"
	"slices"
	"strings"

	"example.com/cache-operator/internal/valkey"
)

// Form plans the next step towards the cluster the spec asks for, from the members, through a
// pipeline of steps, each done or else the step to take (formStep): the roles the servers report
// agree; departed nodes are forgotten, and new nodes unfenced (healing.go); every server meets the
// others (meet.go); slots left open by a migration that stopped are finished or closed
// (openslots.go); the slots that no server serves are spread over primaries, so that a fresh
// cluster of S shards gets 16384/S slots each, give or take one (assign.go); primaries of pods
// that leave hand their shard to a replica that stays; a surplus replica becomes an empty server
// when more primaries are wanted than servers are free; the remaining servers replicate the
// primaries with the fewest replicas (roles.go); slots move until every primary serves its share
// and leaving ones none (slots.go); then leaving servers are forgotten. Each step is decided from
// the servers' state alone, so it is resumed, not repeated, after a crash at any point.
func Form(want Want, members []Member) Plan {
	if want.Shards < 1 || want.ReplicasPerShard < 0 {
		return Plan{Waiting: fmt.Sprintf("a cluster of %d shards with %d replicas each cannot be formed", want.Shards, want.ReplicasPerShard)}
	}
	members = slices.Clone(members)
	slices.SortFunc(members, func(a, b Member) int { return strings.Compare(a.Pod, b.Pod) })
	plan := formStep(want, members)
	if !plan.Formed() {
		if plan.Operation == "" {
			plan.Operation = operation(want, members)
		}
		plan.SlotsToMove, plan.SlotsUnknown = slotsToMove(want, members), len(unreachablePods(members)) > 0
		plan.Progress = progress(plan, members)
	}
	return plan
}

func formStep(want Want, members []Member) Plan {
	if staying := len(staying(members)); staying < want.Nodes() {
		return Plan{Waiting: fmt.Sprintf("%d/%d nodes are running", staying, want.Nodes())}
	}
	// An address that answers as another pod: whatever the view says, no command goes anywhere
	// until the members are read again.
	var strangers []string
	for _, m := range members {
		if m.Stranger != "" {
			strangers = append(strangers, fmt.Sprintf("the server at %s, %s's address, is %s", m.IP, m.Pod, m.Stranger))
		}
	}
	if len(strangers) > 0 {
		return Plan{Waiting: strings.Join(strangers, "; ")}
	}
	if unreached := unreachablePods(members); len(unreached) > 0 {
		if plan, ok := takeOverUnreachable(members); ok {
			return plan
		}
		return Plan{Waiting: "cannot ask " + strings.Join(unreached, ", ") + " for its cluster state"}
	}
	for _, step := range []func(Want, []Member) (Plan, bool){
		rolesAgreed, forgetDeparted, unfence, claimRestored, meet, heldForSyncingReplicas(closeOpenSlots), assignSlots, handOverLeaving, freeReplica,
		attachReplicas, heldForSyncingReplicas(moveSlots), release,
		replicasComplete,
	} {
		if plan, done := step(want, members); !done {
			return plan
		}
	}
	return Plan{}
}

// unreachablePods are the pods of the members whose server could not be asked for its view.
func unreachablePods(members []Member) []string {
	var pods []string
	for i := range members {
		if _, ok := members[i].self(); !ok {
			pods = append(pods, members[i].Pod)
		}
	}
	return pods
}

// progress sums up, for a message, what the operation still has to do.
func progress(plan Plan, members []Member) string {
	var parts []string
	if plan.Operation == Draining {
		parts = append(parts, "pods to remove: "+leavingPods(members))
	}
	if len(plan.Lost) > 0 {
		parts = append(parts, fmt.Sprintf("departed with no replica, their slots go to a new node without their keys: %s",
			strings.Join(plan.Lost, ", ")))
	}
	if plan.SlotsToMove > 0 && !plan.SlotsUnknown {
		parts = append(parts, fmt.Sprintf("%d slots to move", plan.SlotsToMove))
	}
	if moves := describeMoves(plan.Actions); moves != "" {
		parts = append(parts, "moving "+moves)
	}
	if jobs := describeJobs(members); jobs != "" && plan.Waiting == "" {
		parts = append(parts, "migrating atomically: "+jobs)
	}
	return strings.Join(parts, "; ")
}

// operation names what the cluster is doing while it is not formed: Forming until some slot is
// served; Healing while a server cannot be asked or some node is no member's (a replaced pod's
// old node); Draining while pods are to leave; ScalingOut while it has fewer primaries than
// shards wanted, or one holds fewer slots than its share (new primaries fill up); Rebalancing
// while slots are still to move otherwise (a migration left open, a share off by more than one);
// otherwise Healing, as when a replaced pod's new node joins.
func operation(want Want, members []Member) Problem {
	ours := memberIDs(members)
	served, unreachable, leaving, primaries, newest := false, false, false, 0, valkey.SlotCount
	for i := range members {
		self, ok := members[i].self()
		unreachable = unreachable || !ok
		leaving = leaving || members[i].Leaving
		if self.SlotsServed() > 0 && !members[i].Leaving {
			primaries++
			newest = min(newest, self.SlotsServed())
		}
	}
	stranger := false
	for i := range members {
		for _, n := range members[i].Nodes {
			served = served || n.SlotsServed() > 0
			stranger = stranger || !ours[n.ID] && !n.Handshake
		}
	}
	switch {
	case !served:
		return Forming
	case unreachable || stranger:
		return Healing
	case leaving:
		return Draining
	case primaries < want.Shards || newest < valkey.SlotCount/want.Shards-1:
		return ScalingOut
	case slotsToMove(want, members) > 0:
		return Rebalancing
	}
	return Healing
}
