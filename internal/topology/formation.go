// Package topology decides, from what the servers of a Cluster-mode Cache report about
// themselves, the next bounded step towards the cluster the spec asks for. It is pure: no client,
// no clock, no memory between calls; it judges by Valkey's own state, never by pod ordinals,
// since after a failover the primary of a shard may be any pod.
package topology

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"example.com/cache-operator/internal/valkey"
)

// Member is one pod of the Cache and what its server says.
type Member struct {
	Pod  string
	IP   string
	Port int
	// Nodes is CLUSTER NODES as this member's server reports it; nil when it could not be
	// asked.
	Nodes []valkey.ClusterNode
	// State is cluster_state as the server reports it ("ok" when it serves every slot).
	State string
	// LinkUp reports, for a replica, whether its replication link to its primary is up, and
	// ReplOffset how far into its primary's stream of writes it has got.
	LinkUp     bool
	ReplOffset int64
	// Leaving marks a pod that a scale-in removes: its slots and its place in the cluster go
	// first. Outdated marks a pod that runs an older pod template than its StatefulSet's.
	Leaving, Outdated bool
	// Fenced marks a server that refuses replicas' resynchronisation, as every Cluster node
	// does from its start until unfence lifts it.
	Fenced bool
	// Stranger, when set, is what the server at the member's address says it is, which is not
	// this member's pod: the address has gone to another pod, and Nodes are not read.
	Stranger string
	// HandoverSeen marks a pod on which the operator recorded (MarkHandover) that every member
	// reports its shard handed over to another primary, SinceHandover ago.
	HandoverSeen  bool
	SinceHandover time.Duration
}

// self is the member's own entry: what it says about itself is authoritative for its ID, its
// role and the slots it serves.
func (m *Member) self() (valkey.ClusterNode, bool) {
	return valkey.Myself(m.Nodes)
}

// Want is the cluster the spec asks for.
type Want struct {
	Shards, ReplicasPerShard int
}

// Nodes is the number of servers the cluster is made of.
func (w Want) Nodes() int { return w.Shards * (1 + w.ReplicasPerShard) }

// Action is one admin command to one member's server, or, with Restart, the deletion of its pod.
// Exactly one of its other fields is set.
type Action struct {
	// On is the pod whose server gets the command.
	On string
	// Meet, when set, is the address of a server for On to shake hands with.
	Meet *Address
	// AddSlots, when set, are unassigned slots for On to serve.
	AddSlots []valkey.SlotRange
	// Replicate, when set, is the node ID of the primary On is to replicate.
	Replicate string
	// Forget, when set, is the node ID of a departed node for On to forget.
	Forget string
	// Takeover, when set, makes On, a replica, the primary of its shard at once.
	Takeover bool
	// Failover, when set, makes On, an in-sync replica, the primary of its shard with its
	// primary's agreement, losing no write.
	Failover bool
	// Reset, when set, makes On, a node leaving the cluster, forget it.
	Reset bool
	// Stable, when set, are slots whose migration or import On is to drop.
	Stable []int
	// Claim, when set, are slots that no other node serves, which On, importing them, is to own.
	Claim *Claim
	// Migrate, when set, moves slots from On to another primary.
	Migrate *Migration
	// Restart, when set, deletes On's pod, which its StatefulSet then creates again from the
	// current template.
	Restart bool
	// Unfence, when set, lets replicas resynchronise from On.
	Unfence bool
	// MarkHandover, when set, records on On's pod that every member now reports On's shard
	// handed over to another primary: HandoverGrace counts from then.
	MarkHandover bool
}

// Claim is slots that the node with the given ID takes.
type Claim struct {
	Slots []int
	ID    string
}

// Migration moves Slots from the source (the action's On, node SourceID) to the target. It
// resumes where a previous one stopped: only the slots in Import still need the target told to
// import them, and only those in Export the source told to migrate them. Once the source holds
// no key of a slot, the target, the source and the Announce pods (every other primary) are
// told that the target owns it.
type Migration struct {
	SourceID         string
	Target, TargetID string
	TargetAddress    Address
	Slots            []int
	Import, Export   []int
	Announce         []string
}

// Address is where a server listens.
type Address struct {
	IP   string
	Port int
}

func (a Action) String() string {
	switch {
	case a.Meet != nil:
		return fmt.Sprintf("%s: CLUSTER MEET %s %d", a.On, a.Meet.IP, a.Meet.Port)
	case a.AddSlots != nil:
		ranges := make([]string, len(a.AddSlots))
		for i, r := range a.AddSlots {
			ranges[i] = r.String()
		}
		return fmt.Sprintf("%s: CLUSTER ADDSLOTSRANGE %s", a.On, strings.Join(ranges, " "))
	case a.Forget != "":
		return fmt.Sprintf("%s: CLUSTER FORGET %s", a.On, a.Forget)
	case a.Takeover:
		return a.On + ": CLUSTER FAILOVER TAKEOVER"
	case a.Failover:
		return a.On + ": CLUSTER FAILOVER"
	case a.Reset:
		return a.On + ": CLUSTER RESET SOFT"
	case a.Stable != nil:
		return fmt.Sprintf("%s: CLUSTER SETSLOT %s STABLE", a.On, slotList(a.Stable))
	case a.Claim != nil:
		return fmt.Sprintf("%s: CLUSTER SETSLOT %s NODE %s", a.On, slotList(a.Claim.Slots), a.Claim.ID)
	case a.Migrate != nil:
		return fmt.Sprintf("%s: migrate slots %s to %s", a.On, slotList(a.Migrate.Slots), a.Migrate.Target)
	case a.Restart:
		return "delete pod " + a.On
	case a.Unfence:
		return a.On + ": ACL SETUSER default +sync +psync"
	case a.MarkHandover:
		return "record the handover on pod " + a.On
	default:
		return fmt.Sprintf("%s: CLUSTER REPLICATE %s", a.On, a.Replicate)
	}
}

// slotList writes slots, sorted, as ranges: "0-99,205".
func slotList(slots []int) string {
	marks := make([]bool, valkey.SlotCount)
	for _, s := range slots {
		marks[s] = true
	}
	var parts []string
	for _, r := range rangesOf(marks, true) {
		parts = append(parts, r.String())
	}
	return strings.Join(parts, ",")
}

// Plan is the outcome of one look at the cluster: actions to take now, all independent of each
// other, or else what the cluster is waiting for (Waiting), or neither when it is formed.
type Plan struct {
	Actions []Action
	Waiting string
	// Operation is what the plan is part of: forming, healing, scaling out, draining,
	// rebalancing or upgrading.
	Operation Problem
	// SlotsToMove is how many slots must still change primary, this step's included.
	SlotsToMove int
	// Progress says how far the operation has got, for a user.
	Progress string
	// Lost are departed primaries whose slots this step gives up, with their keys: no replica
	// was left to take them over.
	Lost []string
}

// Formed reports whether the cluster needs nothing more.
func (p Plan) Formed() bool { return len(p.Actions) == 0 && p.Waiting == "" }

// Form plans the next step towards the cluster the spec asks for, from the members: while a
// failover is settling, nothing; every server meets the others; slots left open by a migration that stopped are finished or closed; the
// slots that no server serves are spread over primaries, so that a fresh cluster of S shards
// gets 16384/S slots each (give or take one); primaries of pods that leave hand their shard to a
// replica that stays; a surplus replica becomes an empty server when more primaries are wanted
// than servers are free; the remaining servers replicate the primaries with the fewest replicas;
// slots move until every primary serves its share and leaving ones none; then leaving servers
// are forgotten. Each step is decided from the servers' state alone, so it is resumed, not
// repeated, after a crash at any point.
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
		plan.SlotsToMove = slotsToMove(want, members)
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
	var unreachable []string
	for i := range members {
		if _, ok := members[i].self(); !ok {
			unreachable = append(unreachable, members[i].Pod)
		}
	}
	if len(unreachable) > 0 {
		if plan, ok := takeOverUnreachable(members); ok {
			return plan
		}
		return Plan{Waiting: "cannot ask " + strings.Join(unreachable, ", ") + " for its cluster state"}
	}
	for _, step := range []func(Want, []Member) (Plan, bool){
		rolesAgreed, forgetDeparted, unfence, meet, heldForSyncingReplicas(closeOpenSlots), assignSlots, handOverLeaving, freeReplica,
		attachReplicas, heldForSyncingReplicas(rebalance), release,
		replicasComplete,
	} {
		if plan, done := step(want, members); !done {
			return plan
		}
	}
	return Plan{}
}

// memberIDs are the node IDs of the members that could be asked, each the ID its server gives
// itself.
func memberIDs(members []Member) map[string]bool {
	ids := map[string]bool{}
	for i := range members {
		if self, ok := members[i].self(); ok {
			ids[self.ID] = true
		}
	}
	return ids
}

// staying are the members that the scale-in, if any, keeps.
func staying(members []Member) []*Member {
	var kept []*Member
	for i := range members {
		if !members[i].Leaving {
			kept = append(kept, &members[i])
		}
	}
	return kept
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
	if plan.SlotsToMove > 0 {
		parts = append(parts, fmt.Sprintf("%d slots to move", plan.SlotsToMove))
	}
	if moves := describeMoves(plan.Actions); moves != "" {
		parts = append(parts, "moving "+moves)
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
			takeovers = append(takeovers, Action{On: successor[id].Pod, Takeover: true})
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
			claims = append(claims, Action{On: members[i].Pod, Claim: &Claim{Slots: slots, ID: self.ID}})
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
				forgets = append(forgets, Action{On: members[i].Pod, Forget: n.ID})
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
		takeovers = append(takeovers, Action{On: successor[id].Pod, Takeover: true})
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
			actions = append(actions, Action{On: members[i].Pod, Unfence: true})
		}
	}
	return Plan{Actions: actions}, len(actions) == 0
}

// meet has one member, the one that knows most of the others, meet every member it does not
// know; then it waits until every member knows every other one. Leaving members are never met:
// they are on their way out.
func meet(_ Want, all []Member) (Plan, bool) {
	var members []Member
	for _, m := range staying(all) {
		members = append(members, *m)
	}
	seed := &members[0]
	for i := range members {
		if len(known(&members[i], members)) > len(known(seed, members)) {
			seed = &members[i]
		}
	}
	seen := known(seed, members)
	var actions []Action
	for i := range members {
		m := &members[i]
		switch {
		case m.Pod == seed.Pod || inHandshakeWith(seed, m) || inHandshakeWith(m, seed):
		case !seen[m.Pod]:
			actions = append(actions, Action{On: seed.Pod, Meet: &Address{IP: m.IP, Port: m.Port}})
		case !known(m, members)[seed.Pod]:
			// The seed knows a server that knows nobody: one reset to rejoin (freeReplica).
			actions = append(actions, Action{On: m.Pod, Meet: &Address{IP: seed.IP, Port: seed.Port}})
		}
	}
	if len(actions) > 0 {
		return Plan{Actions: actions}, false
	}
	for i := range members {
		seen := known(&members[i], members)
		for j := range members {
			if i != j && !seen[members[j].Pod] {
				return Plan{Waiting: fmt.Sprintf("the cluster bus handshake of %s with %s", members[i].Pod, members[j].Pod)}, false
			}
		}
	}
	return Plan{}, true
}

// known are the members that m's server knows by their node ID, handshake completed.
func known(m *Member, members []Member) map[string]bool {
	ids := map[string]bool{}
	for _, n := range m.Nodes {
		if !n.Handshake {
			ids[n.ID] = true
		}
	}
	seen := map[string]bool{}
	for i := range members {
		if self, _ := members[i].self(); ids[self.ID] {
			seen[members[i].Pod] = true
		}
	}
	return seen
}

// inHandshakeWith reports whether m's server is shaking hands with other's address already.
func inHandshakeWith(m, other *Member) bool {
	return slices.ContainsFunc(m.Nodes, func(n valkey.ClusterNode) bool {
		return n.Handshake && n.IP == other.IP && n.Port == other.Port
	})
}

// assignSlots spreads the slots nobody serves over primaries: the members that serve none and
// replicate nothing, up to the wanted number of primaries, or else the primary serving the
// fewest. A slot counts as served when any server claims it, itself or in any member's view, so
// no slot is given to two servers, even while the news of an assignment is still spreading.
// Slots claimed only by a node that is not one of the members (the old node of a replaced pod)
// are not planned for here: forgetting such nodes is healing, not formation.
func assignSlots(want Want, members []Member) (Plan, bool) {
	served := make([]bool, valkey.SlotCount)
	ours := memberIDs(members)
	var strangers []string
	for i := range members {
		for _, n := range members[i].Nodes {
			claims := n.SlotsServed() > 0 || len(n.Migrating) > 0
			for _, r := range n.Slots {
				for s := r.Start; s <= r.End; s++ {
					served[s] = true
				}
			}
			for s := range n.Migrating {
				served[s] = true
			}
			if claims && !ours[n.ID] && !slices.Contains(strangers, n.ID) {
				strangers = append(strangers, n.ID)
			}
		}
	}
	if len(strangers) > 0 {
		return Plan{Waiting: "slots are held by nodes that are not this Cache's servers: " + strings.Join(strangers, ", ")}, false
	}
	unassigned := rangesOf(served, false)
	if len(unassigned) == 0 {
		return Plan{}, true
	}
	primaries := 0
	var empty []*Member
	for i := range members {
		self, _ := members[i].self()
		switch {
		case self.SlotsServed() > 0 || len(self.Migrating) > 0:
			primaries++
		case self.PrimaryID == "" && !members[i].Leaving:
			empty = append(empty, &members[i])
		}
	}
	unassignedCount := 0
	for _, r := range unassigned {
		unassignedCount += r.Len()
	}
	owners := empty[:min(len(empty), max(want.Shards-primaries, 0), unassignedCount)]
	if len(owners) == 0 {
		if fewest := fewestSlots(members); fewest != nil {
			owners = []*Member{fewest}
		}
	}
	if len(owners) == 0 {
		return Plan{Waiting: "no server can take the unassigned slots: every server replicates another"}, false
	}
	var actions []Action
	for i, part := range split(unassigned, len(owners)) {
		actions = append(actions, Action{On: owners[i].Pod, AddSlots: part})
	}
	return Plan{Actions: actions}, false
}

func fewestSlots(members []Member) *Member {
	var best *Member
	bestCount := valkey.SlotCount + 1
	for i := range members {
		self, _ := members[i].self()
		if self.PrimaryID == "" && !members[i].Leaving && self.SlotsServed() < bestCount {
			best, bestCount = &members[i], self.SlotsServed()
		}
	}
	return best
}

// rangesOf is the ranges of slots whose entry in slots is value.
func rangesOf(slots []bool, value bool) []valkey.SlotRange {
	var ranges []valkey.SlotRange
	for s := 0; s < len(slots); s++ {
		if slots[s] != value {
			continue
		}
		start := s
		for s+1 < len(slots) && slots[s+1] == value {
			s++
		}
		ranges = append(ranges, valkey.SlotRange{Start: start, End: s})
	}
	return ranges
}

// split cuts ranges, in order, into n parts whose slot counts differ by at most one.
func split(ranges []valkey.SlotRange, n int) [][]valkey.SlotRange {
	total := 0
	for _, r := range ranges {
		total += r.Len()
	}
	parts := make([][]valkey.SlotRange, n)
	part, left := 0, total/n+boolInt(total%n > 0)
	for _, r := range ranges {
		for r.Len() > 0 {
			take := min(r.Len(), left)
			parts[part] = append(parts[part], valkey.SlotRange{Start: r.Start, End: r.Start + take - 1})
			r.Start += take
			left -= take
			if left == 0 && part+1 < n {
				part++
				left = total/n + boolInt(part < total%n)
			}
		}
	}
	return parts
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
