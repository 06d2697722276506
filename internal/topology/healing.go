package topology

import (
	"maps"
	"slices"
	"strings"
)

// forgetDeparted heals the cluster of the nodes of pods that are gone. A replaced pod starts a
// new, empty node with a new ID; the old one never comes back. With every pod's server answering
// (Form checks that first), a node that is no member's own and not a handshake in progress is
// departed at once if it serves no slot: forgetting it takes nothing from the cluster, and only
// some members may know it (one that met a leaving node's server as it was released), so the
// cluster may never agree it failed. One that serves slots and that no member replicates is
// departed once no member's cluster bus reaches it: with no replica there is no failover to wait
// for, and in a cluster of two primaries the one left alone can never make the majority that
// judges the other failed. One that serves slots and has a replica is departed once the cluster
// agrees it failed (fail), or once it has lost its address (noaddr):
// that happens when the new pod gets the old one's IP, and then the others stop probing the old
// node and never judge it failed, so Valkey never fails its shard over by itself. For such a
// primary a replica among the members takes over (CLUSTER FAILOVER TAKEOVER, which needs no
// vote); a failed one is left to Valkey's own failover, which picks the replica with the most
// data. A slot a member was importing from a departed primary without a replica is claimed by
// that member. Then every member forgets every departed node, in one step, within the minute for
// which a forgotten node is not re-learnt from a member that still knows it. A departed primary without
// a replica leaves its slots unserved once forgotten, and assignSlots gives them to a new node.
func forgetDeparted(_ Want, members []Member) (Plan, bool) {
	ours := memberIDs(members)
	replicated, reachable := map[string]bool{}, map[string]bool{}
	for i := range members {
		self, _ := members[i].self()
		replicated[self.PrimaryID] = true
		for _, n := range members[i].Nodes {
			reachable[n.ID] = reachable[n.ID] || n.Connected
		}
	}
	departed, lostAddress := map[string]bool{}, map[string]bool{}
	noQuorum := failedWithoutQuorum(members)
	for i := range members {
		for _, n := range members[i].Nodes {
			gone := n.Failing || n.IP == "" || n.SlotsServed() == 0 || !reachable[n.ID] && !replicated[n.ID] || noQuorum[n.ID]
			if !ours[n.ID] && !n.Handshake && gone {
				departed[n.ID] = true
				lostAddress[n.ID] = lostAddress[n.ID] || n.IP == ""
			}
		}
	}
	holdsSlots := map[string]bool{}
	for i := range members {
		for _, n := range members[i].Nodes {
			if departed[n.ID] && n.SlotsServed() > 0 {
				holdsSlots[n.ID] = true
			}
		}
	}
	successor := successors(members, func(id string) bool { return departed[id] && holdsSlots[id] })
	failingOver := slices.Sorted(maps.Keys(successor))
	var takeovers []Action
	for _, id := range failingOver {
		if lostAddress[id] || noQuorum[id] {
			takeovers = append(takeovers, Action{Kind: KindTakeover, On: successor[id].Pod})
		}
	}
	if len(takeovers) > 0 {
		return Plan{Actions: takeovers, Operation: Healing}, false
	}
	if len(failingOver) > 0 {
		return Plan{Waiting: "Valkey to fail over the shard of the departed node " + strings.Join(failingOver, ", "), Operation: Healing}, false
	}
	// A slot that a member imports from a departed primary without a replica keeps, of its keys,
	// only those the member has received: the member claims it first. Forgetting the departed
	// node would end the import (Valkey drops the open slots of a node it forgets) and leave the
	// slot, and with it those keys, to a new node.
	var claims []Action
	for i := range members {
		self, _ := members[i].self()
		var slots []int
		for _, slot := range slices.Sorted(maps.Keys(openSlots(self).Importing)) {
			if from := self.Importing[slot]; departed[from] && holdsSlots[from] && !replicated[from] {
				slots = append(slots, slot)
			}
		}
		if len(slots) > 0 {
			claims = append(claims, Action{Kind: KindClaim, On: members[i].Pod, Claim: &Claim{Slots: slots, ID: self.ID}})
		}
	}
	if len(claims) > 0 {
		return Plan{Actions: claims, Operation: Healing}, false
	}
	var forgets []Action
	var lost []string
	for i := range members {
		self, _ := members[i].self()
		for _, n := range members[i].Nodes {
			// A replica cannot forget its own primary; it is re-pointed once a new one exists.
			if departed[n.ID] && n.ID != self.PrimaryID && (!holdsSlots[n.ID] || !replicated[n.ID]) {
				forgets = append(forgets, Action{Kind: KindForget, On: members[i].Pod, Forget: n.ID})
				if holdsSlots[n.ID] && !slices.Contains(lost, n.ID) {
					lost = append(lost, n.ID)
				}
			}
		}
	}
	return Plan{Actions: forgets, Operation: Healing, Lost: lost}, len(forgets) == 0
}

// successors are, for each primary that failing says must be replaced and that has a replica
// among the members, the replica furthest into its writes: it has lost the fewest.
func successors(members []Member, failing func(id string) bool) map[string]*Member {
	successor := map[string]*Member{}
	for i := range members {
		self, _ := members[i].self()
		id := self.PrimaryID
		if id == "" || !failing(id) {
			continue
		}
		if best := successor[id]; best == nil || members[i].ReplOffset > best.ReplOffset {
			successor[id] = &members[i]
		}
	}
	return successor
}

// failedWithoutQuorum are the primaries serving slots that no member reaches, which Valkey will
// never fail over: it promotes a replica only once a majority of the primaries that serve slots
// agree that its primary fails, and here the primaries that members reach are no majority (a
// cluster of one or two shards that lost a primary, or one that lost most of them). A primary
// counts as not reached when every member that can be asked and knows it has gone the node
// timeout without an answer from it (fail? or fail); a member's own node is reached. (The bus
// link says nothing: a hung server's kernel still accepts connections.)
func failedWithoutQuorum(members []Member) map[string]bool {
	down := map[string]bool{}
	for i := range members {
		for _, n := range members[i].Nodes {
			if n.SlotsServed() == 0 || n.PrimaryID != "" || n.Handshake {
				continue
			}
			unreached := !n.Myself && (n.Suspected || n.Failing)
			if seen, ok := down[n.ID]; ok {
				down[n.ID] = seen && unreached
			} else {
				down[n.ID] = unreached
			}
		}
	}
	up := 0
	for _, d := range down {
		if !d {
			up++
		}
	}
	if up > len(down)/2 {
		return nil
	}
	maps.DeleteFunc(down, func(_ string, d bool) bool { return !d })
	return down
}

// takeOverUnreachable promotes a replica of a primary whose server the operator cannot ask and
// no member reaches, when Valkey cannot (failedWithoutQuorum): the one furthest into the
// primary's writes takes over (CLUSTER FAILOVER TAKEOVER, which needs no vote), one per shard.
// The primary must be at the address of a member whose server cannot be asked: a server that
// answers is never replaced, so the operator never makes a second primary of the slots of one
// that still serves. It reports false when there is no such primary.
func takeOverUnreachable(members []Member) (Plan, bool) {
	noQuorum := failedWithoutQuorum(members)
	silent := map[Address]bool{}
	for i := range members {
		if _, ok := members[i].self(); !ok {
			silent[Address{members[i].IP, members[i].Port}] = true
		}
	}
	unreached := map[string]bool{}
	for i := range members {
		for _, n := range members[i].Nodes {
			if noQuorum[n.ID] && silent[Address{n.IP, n.Port}] {
				unreached[n.ID] = true
			}
		}
	}
	successor := successors(members, func(id string) bool { return unreached[id] })
	var takeovers []Action
	for _, id := range slices.Sorted(maps.Keys(successor)) {
		takeovers = append(takeovers, Action{Kind: KindTakeover, On: successor[id].Pod})
	}
	return Plan{Actions: takeovers, Operation: Healing}, len(takeovers) > 0
}

// unfence lifts, all at once, the fence of the members whose servers refuse replicas'
// resynchronisation, as every Cluster node does from its start (resources.FenceRule), once no
// member replicates a node that is no member's. Until then a replica whose primary crashed, and
// restarted in place as a new node at the same address, would resynchronise from the new, empty
// node and drop its keys: Valkey's replication checks no node ID, and the replica reconnects to
// the address every second. So the fence stays while such a replica waits for its shard's
// failover (forgetDeparted); the other steps go on meanwhile, and a replica attached to a fenced
// primary waits for the fence to go before it syncs.
func unfence(_ Want, members []Member) (Plan, bool) {
	ours := memberIDs(members)
	var actions []Action
	for i := range members {
		if self, _ := members[i].self(); self.PrimaryID != "" && !ours[self.PrimaryID] {
			return Plan{}, true
		}
		if members[i].Fenced {
			actions = append(actions, Action{Kind: KindUnfence, On: members[i].Pod})
		}
	}
	return Plan{Actions: actions}, len(actions) == 0
}
