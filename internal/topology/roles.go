package topology

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"example.com/cache-operator/internal/valkey"
)

// handOverLeaving keeps a shard whose primary's pod leaves when the cluster needs the shard: if
// fewer staying primaries serve slots than shards are wanted, a staying in-sync replica of the
// leaving primary takes over with CLUSTER FAILOVER, which loses no acknowledged write and
// moves no slot. That is how replicasPerShard goes down when a primary sits on a pod that goes
// (after an earlier failover). A leaving primary without such a replica is drained instead, by
// rebalance.
func handOverLeaving(want Want, members []Member) (Plan, bool) {
	primaries := 0
	for _, m := range staying(members) {
		if slotsOf(m) > 0 {
			primaries++
		}
	}
	var actions []Action
	var syncing []string
	for i := range members {
		leaving := &members[i]
		self, _ := leaving.self()
		if !leaving.Leaving || self.SlotsServed() == 0 || primaries+len(actions)+len(syncing) >= want.Shards {
			continue
		}
		var successor, unsynced *Member
		for _, m := range staying(members) {
			if replica, _ := m.self(); replica.PrimaryID == self.ID {
				if m.LinkUp {
					successor = m
					break
				}
				unsynced = m
			}
		}
		switch {
		case successor != nil:
			actions = append(actions, Action{Kind: KindFailover, On: successor.Pod})
		case unsynced != nil:
			// Drained instead, the shard would be lost from the count of primaries.
			syncing = append(syncing, unsynced.Pod)
		}
	}
	if len(actions) == 0 && len(syncing) > 0 {
		return Plan{Waiting: "replicas to sync before they take over from leaving primaries: " + strings.Join(syncing, ", ")}, false
	}
	return Plan{Actions: actions}, len(actions) == 0
}

// freeReplica makes a primary out of a replica when the cluster has fewer primaries to be than
// shards wanted and no empty server to take the part, as when replicas per shard go down while
// shards go up: a replica of the primary with the most replicas forgets the cluster (CLUSTER
// RESET SOFT, which also drops its copy of the data) and rejoins as an empty server.
func freeReplica(want Want, members []Member) (Plan, bool) {
	if len(targets(want, members)) >= want.Shards {
		return Plan{}, true
	}
	replicas := map[string][]string{}
	for _, m := range staying(members) {
		if self, _ := m.self(); self.PrimaryID != "" {
			replicas[self.PrimaryID] = append(replicas[self.PrimaryID], m.Pod)
		}
	}
	var most []string
	for _, id := range slices.Sorted(maps.Keys(replicas)) {
		if len(replicas[id]) > len(most) {
			most = replicas[id]
		}
	}
	if len(most) == 0 {
		return Plan{Waiting: fmt.Sprintf("%d of %d primaries and no server to make another", len(targets(want, members)), want.Shards)}, false
	}
	return Plan{Actions: []Action{{Kind: KindReset, On: most[len(most)-1]}}}, false
}

// attachReplicas gives every target primary (see targets) its replicas: staying members that
// serve no slot and are not targets themselves, and staying replicas of a primary that is not a
// target (a leaving or drained one), replicate a target with fewer replicas than wanted,
// preferring one whose shard has no pod on the same Kubernetes node yet (a node that goes takes
// a primary and its replica with it otherwise), then the one with the fewest replicas; a target
// with more replicas than wanted gives one to a target with fewer. Replicas of new targets
// attach while those are still empty, before their slots arrive.
func attachReplicas(want Want, members []Member) (Plan, bool) {
	chosen := targets(want, members)
	if len(chosen) == 0 {
		return Plan{Waiting: "no server serves slots yet"}, false
	}
	ids := make([]string, len(chosen))
	isTarget := map[string]bool{}
	shardNodes := map[string][]string{} // by target, the Kubernetes nodes of its shard's pods
	for i, t := range chosen {
		self, _ := t.self()
		ids[i] = self.ID
		isTarget[self.ID] = true
		shardNodes[self.ID] = []string{t.Node}
	}
	replicas := map[string][]string{}
	var movable []*Member
	importing := importingAtomically(members)
	for _, m := range staying(members) {
		self, _ := m.self()
		switch {
		case isTarget[self.ID]:
		case isTarget[self.PrimaryID]:
			replicas[self.PrimaryID] = append(replicas[self.PrimaryID], m.Pod)
			shardNodes[self.PrimaryID] = append(shardNodes[self.PrimaryID], m.Node)
		case self.SlotsServed() == 0 && len(self.Importing) == 0 && !importing[self.ID]:
			movable = append(movable, m)
		}
	}
	// crowding is how many of the target's shard's pods share the Kubernetes node given.
	crowding := func(target, node string) int {
		if node == "" {
			return 0
		}
		n := 0
		for _, on := range shardNodes[target] {
			n += boolInt(on == node)
		}
		return n
	}
	var actions []Action
	for _, m := range movable {
		open := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return len(replicas[id]) >= want.ReplicasPerShard })
		if len(open) == 0 {
			break
		}
		primary := slices.MinFunc(open, func(a, b string) int {
			if d := crowding(a, m.Node) - crowding(b, m.Node); d != 0 {
				return d
			}
			return len(replicas[a]) - len(replicas[b])
		})
		replicas[primary] = append(replicas[primary], m.Pod)
		shardNodes[primary] = append(shardNodes[primary], m.Node)
		actions = append(actions, Action{Kind: KindReplicate, On: m.Pod, Replicate: primary})
	}
	fewest := func() string {
		return slices.MinFunc(ids, func(a, b string) int { return len(replicas[a]) - len(replicas[b]) })
	}
	if len(actions) == 0 {
		most := slices.MaxFunc(ids, func(a, b string) int { return len(replicas[a]) - len(replicas[b]) })
		if primary := fewest(); len(replicas[primary]) < want.ReplicasPerShard && len(replicas[most]) > want.ReplicasPerShard {
			actions = append(actions, Action{Kind: KindReplicate, On: replicas[most][len(replicas[most])-1], Replicate: primary})
		}
	}
	return Plan{Actions: actions}, len(actions) == 0
}

// replicasComplete waits, once nothing else is to do, until there are as many primaries as
// shards wanted, each serving slots, and every primary has its replicas.
func replicasComplete(want Want, members []Member) (Plan, bool) {
	primaries := 0
	for _, t := range targets(want, members) {
		if slotsOf(t) > 0 {
			primaries++
		}
	}
	if primaries < want.Shards {
		return Plan{Waiting: fmt.Sprintf("%d of %d primaries serve slots", primaries, want.Shards)}, false
	}
	replicas := map[string]int{}
	for _, m := range staying(members) {
		if self, _ := m.self(); self.PrimaryID != "" {
			replicas[self.PrimaryID]++
		}
	}
	for _, t := range targets(want, members) {
		if self, _ := t.self(); replicas[self.ID] < want.ReplicasPerShard {
			return Plan{Waiting: fmt.Sprintf("primary %s has %d of %d replicas", self.ID, replicas[self.ID], want.ReplicasPerShard)}, false
		}
	}
	return Plan{}, true
}

// release lets the servers of leaving pods go once they serve no slot: every staying member
// forgets them, in one step. Then the StatefulSet may remove their pods (Released). A leaving
// server is not reset: until its pod is gone it still answers clients with the cluster's slot map,
// as it learns it from the staying members' replies. Reset, it would answer CLUSTER SHARDS with
// itself alone, serving no slot, and a client that refreshed its map from it (valkey-go takes the
// first non-empty reply) would find no node for any slot. Forgotten by every staying member, it
// is not learnt again: a node takes in what it is told only from nodes it knows, and the
// leaving server's pod goes with its data (an emptyDir), so it never comes back with its old ID.
func release(_ Want, members []Member) (Plan, bool) {
	var actions []Action
	for i := range members {
		m := &members[i]
		self, _ := m.self()
		if open := openSlots(self); !m.Leaving || self.SlotsServed() > 0 || len(open.Migrating) > 0 || len(open.Importing) > 0 {
			continue
		}
		for _, other := range staying(members) {
			if knows(other, self.ID) {
				actions = append(actions, Action{Kind: KindForget, On: other.Pod, Forget: self.ID})
			}
		}
	}
	return Plan{Actions: actions}, len(actions) == 0
}

// Released reports whether the pods that a scale-in removes may go: none serves a slot, and none
// is known by a staying member or is shaking hands with one, so that removing them takes nothing
// from the cluster and leaves no failed node behind.
func Released(members []Member) bool {
	for i := range members {
		m := &members[i]
		if !m.Leaving {
			continue
		}
		self, ok := m.self()
		if !ok || self.SlotsServed() > 0 {
			return false
		}
		for _, other := range staying(members) {
			// A handshake would make the two know each other again once it completes.
			if knows(other, self.ID) || inHandshakeWith(other, m) {
				return false
			}
		}
	}
	return true
}

func knows(m *Member, id string) bool {
	return slices.ContainsFunc(m.Nodes, func(n valkey.ClusterNode) bool { return n.ID == id && !n.Myself })
}

// leavingPods lists the leaving members, for messages.
func leavingPods(members []Member) string {
	var pods []string
	for i := range members {
		if members[i].Leaving {
			pods = append(pods, members[i].Pod)
		}
	}
	return strings.Join(pods, ", ")
}

// rolesAgreed waits while the servers disagree about who is a shard's primary, as they do for the
// moments of a failover in which some have taken in the new configuration and others not yet:
// two servers each serving a slot, or each replicating the other. A step planned from such a
// view could re-point the replicas of a shard that is changing hands, or reset the primary just
// promoted as if it were a spare server. Valkey settles it within moments, by configuration
// epoch. A slot open on either server is a migration stopped between its last two steps, which
// closeOpenSlots finishes, not a failover.
func rolesAgreed(_ Want, members []Member) (Plan, bool) {
	var disputes []string
	for i := range members {
		a, _ := members[i].self()
		for j := i + 1; j < len(members); j++ {
			b, _ := members[j].self()
			switch {
			case a.PrimaryID != "" && a.PrimaryID == b.ID && b.PrimaryID == a.ID:
				disputes = append(disputes, fmt.Sprintf("%s and %s each replicate the other", members[i].Pod, members[j].Pod))
			case claimSameSlot(a, b):
				disputes = append(disputes, fmt.Sprintf("%s and %s both serve slots", members[i].Pod, members[j].Pod))
			}
		}
	}
	if len(disputes) == 0 {
		return Plan{}, true
	}
	plan := Plan{Waiting: "a failover to settle: " + strings.Join(disputes, "; ")}
	if len(staying(members)) == len(members) {
		// Not a drain's hand-over: the cluster heals, or an upgrade goes on (see Next). The
		// count of primaries, which names the operation otherwise, is what is in dispute.
		plan.Operation = Healing
	}
	return plan, false
}

// claimSameSlot reports whether both servers serve a slot that neither has open.
func claimSameSlot(a, b valkey.ClusterNode) bool {
	for _, ra := range a.Slots {
		for _, rb := range b.Slots {
			for slot := max(ra.Start, rb.Start); slot <= min(ra.End, rb.End); slot++ {
				if !isOpen(a, slot) && !isOpen(b, slot) {
					return true
				}
			}
		}
	}
	return false
}

func isOpen(n valkey.ClusterNode, slot int) bool {
	_, migrating := n.Migrating[slot]
	_, importing := n.Importing[slot]
	return migrating || importing
}
