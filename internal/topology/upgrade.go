package topology

import (
	"fmt"
	"time"
)

// Roll plans the next step of an ordered upgrade: restarting, one at a time, the pods that run an
// older pod template (Outdated), on a cluster that is formed and healthy, so that each restart
// starts from a whole cluster with every replica in sync, and the next waits until the restarted
// node is back in it. Replicas go first. Then, per shard, a replica on the new template takes over
// from its primary with CLUSTER FAILOVER, which loses no acknowledged write; the old primary is
// then a replica, restarted as such. A shard without a replica restarts its primary last, and
// loses its keys: the plan's Progress says so.
func Roll(all []Member) Plan {
	// A leaving pod goes anyway; restarting it would only delay the scale-in.
	var members []Member
	for _, m := range staying(all) {
		members = append(members, *m)
	}
	outdated := 0
	for i := range members {
		if members[i].Outdated {
			outdated++
		}
	}
	if outdated == 0 {
		return Plan{}
	}
	plan := Plan{Operation: Upgrading,
		Progress: fmt.Sprintf("%d/%d nodes run the current pod template", len(members)-outdated, len(members))}
	for i := range members {
		if m := &members[i]; m.Outdated && slotsOf(m) == 0 {
			if !handedOver(m, members) {
				plan.Actions = []Action{{Kind: KindRestart, On: m.Pod}}
				return plan
			}
			return afterGrace(plan, m)
		}
	}
	for i := range members {
		m := &members[i]
		if !m.Outdated {
			continue
		}
		self, _ := m.self()
		for j := range members {
			r := &members[j]
			if replica, _ := r.self(); replica.PrimaryID == self.ID && !r.Outdated && r.LinkUp {
				plan.Actions = []Action{{Kind: KindFailover, On: r.Pod}}
				return plan
			}
		}
	}
	for i := range members {
		if m := &members[i]; m.Outdated {
			plan.Actions = []Action{{Kind: KindRestart, On: m.Pod}}
			plan.Progress += fmt.Sprintf("; %s is a primary without a replica: the keys of its %d slots are lost when it restarts", m.Pod, slotsOf(m))
			return plan
		}
	}
	return plan
}

// HandoverGrace is how long a primary that handed its shard over (CLUSTER FAILOVER) keeps running
// as a replica before its pod restarts. A cluster client that still has the old slot map learns
// the new one from the MOVED replies of the old primary; once that server is gone, the client has
// only a dead address (or, with the replacement pod on the same IP, an empty server that answers
// CLUSTERDOWN) until it refreshes the map on its own. Measured under a steady client: restarts
// 150–312 ms after the handover failed 21–260 writes each; one with every gap over 2 s, none.
const HandoverGrace = 3 * time.Second

// handedOver reports whether m, an outdated replica, is a primary that handed its shard over in
// this upgrade: its primary runs the current template, which in the upgrade's order only a
// replica that took over does (the outdated replicas of outdated primaries go first).
func handedOver(m *Member, members []Member) bool {
	self, _ := m.self()
	for i := range members {
		if other, _ := members[i].self(); other.ID == self.PrimaryID {
			return !members[i].Outdated
		}
	}
	return false
}

// afterGrace is the step for m, a primary that handed its shard over: once every member reports
// the handover (the cluster is formed, which Roll is only asked of), record that moment on its
// pod; restart it HandoverGrace after.
func afterGrace(plan Plan, m *Member) Plan {
	switch {
	case !m.HandoverSeen:
		plan.Actions = []Action{{Kind: KindMarkHandover, On: m.Pod}}
	case m.SinceHandover < HandoverGrace:
		plan.WaitingFor = HandoverGrace - m.SinceHandover
		plan.Waiting = fmt.Sprintf("clients to learn that %s no longer serves its slots before it restarts (%s left)",
			m.Pod, plan.WaitingFor.Round(100*time.Millisecond))
	default:
		plan.Actions = []Action{{Kind: KindRestart, On: m.Pod}}
	}
	return plan
}
