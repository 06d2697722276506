package topology

import (
	"fmt"
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
			plan.Actions = []Action{{On: m.Pod, Restart: true}}
			return plan
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
				plan.Actions = []Action{{On: r.Pod, Failover: true}}
				return plan
			}
		}
	}
	for i := range members {
		if m := &members[i]; m.Outdated {
			plan.Actions = []Action{{On: m.Pod, Restart: true}}
			plan.Progress += fmt.Sprintf("; %s is a primary without a replica: the keys of its %d slots are lost when it restarts", m.Pod, slotsOf(m))
			return plan
		}
	}
	return plan
}
