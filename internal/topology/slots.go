package topology

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"example.com/cache-operator/internal/valkey"
)

// MaxSlotsPerStep bounds how many slots one step moves, so that a pass of the reconciler that
// migrates returns within a few round trips per batch and a worker never waits on a whole
// rebalance.
const MaxSlotsPerStep = 1024

// slotMove is one slot to move from one member to another.
type slotMove struct {
	slot     int
	from, to *Member
}

// targets are the staying members that are to be the cluster's primaries: those that serve the
// most slots already, and then empty ones that replicate nothing, in order of their pod names,
// up to the number of shards wanted. A staying primary beyond that number is drained.
func targets(want Want, members []Member) []*Member {
	var primaries, empty []*Member
	for _, m := range staying(members) {
		self, _ := m.self()
		switch {
		case self.SlotsServed() > 0:
			primaries = append(primaries, m)
		case self.PrimaryID == "":
			empty = append(empty, m)
		}
	}
	slices.SortStableFunc(primaries, func(a, b *Member) int { return cmp.Compare(slotsOf(b), slotsOf(a)) })
	chosen := primaries[:min(len(primaries), want.Shards)]
	return append(slices.Clip(chosen), empty[:min(len(empty), want.Shards-len(chosen))]...)
}

func slotsOf(m *Member) int {
	self, _ := m.self()
	return self.SlotsServed()
}

// slotsServed lists the slots m's server says it serves.
func slotsServed(m *Member) []int {
	self, _ := m.self()
	var slots []int
	for _, r := range self.Slots {
		for s := r.Start; s <= r.End; s++ {
			slots = append(slots, s)
		}
	}
	return slots
}

// balancingMoves are the moves that leave every target serving its share, 16384/S slots or one
// more, and every other member none. The targets that serve the most keep the larger shares, and
// each gives up its highest slots, so that as few slots as possible move.
func balancingMoves(want Want, members []Member) []slotMove {
	chosen := targets(want, members)
	if len(chosen) == 0 {
		return nil
	}
	isTarget := map[*Member]bool{}
	for _, t := range chosen {
		isTarget[t] = true
	}
	type surplus struct {
		from  *Member
		slots []int
	}
	var give []surplus
	for i := range members {
		if m := &members[i]; !isTarget[m] && slotsOf(m) > 0 {
			give = append(give, surplus{m, slotsServed(m)})
		}
	}
	share := func(i int) int { return valkey.SlotCount/len(chosen) + boolInt(i < valkey.SlotCount%len(chosen)) }
	for i, t := range chosen {
		if slots := slotsServed(t); len(slots) > share(i) {
			give = append(give, surplus{t, slots[share(i):]})
		}
	}
	var moves []slotMove
	for i, t := range chosen {
		for need := share(i) - slotsOf(t); need > 0 && len(give) > 0; need-- {
			g := &give[0]
			moves = append(moves, slotMove{slot: g.slots[0], from: g.from, to: t})
			if g.slots = g.slots[1:]; len(g.slots) == 0 {
				give = give[1:]
			}
		}
	}
	return moves
}

// slotsToMove is how many slots must still change primary: the balancing moves and the slots
// left open by a migration that stopped.
func slotsToMove(want Want, members []Member) int {
	moving := map[int]bool{}
	for _, mv := range balancingMoves(want, members) {
		moving[mv.slot] = true
	}
	for i := range members {
		self, _ := members[i].self()
		for s := range openSlots(self).Migrating {
			moving[s] = true
		}
		for s := range openSlots(self).Importing {
			moving[s] = true
		}
	}
	return len(moving)
}

// rebalance moves up to MaxSlotsPerStep slots towards the balance of balancingMoves.
func rebalance(want Want, members []Member) (Plan, bool) {
	moves := balancingMoves(want, members)
	if len(moves) == 0 {
		return Plan{}, true
	}
	moves = moves[:min(len(moves), MaxSlotsPerStep)]
	type pair struct{ from, to *Member }
	bySlots := map[pair][]int{}
	var order []pair
	for _, mv := range moves {
		p := pair{mv.from, mv.to}
		if _, ok := bySlots[p]; !ok {
			order = append(order, p)
		}
		bySlots[p] = append(bySlots[p], mv.slot)
	}
	var actions []Action
	for _, p := range order {
		slots := bySlots[p]
		actions = append(actions, migrate(members, p.from, p.to, slots, slots, slots))
	}
	return Plan{Actions: actions}, false
}

// migrate is the action that moves slots from one member to another.
func migrate(members []Member, from, to *Member, slots, importing, exporting []int) Action {
	source, _ := from.self()
	target, _ := to.self()
	var announce []string
	for i := range members {
		if m := &members[i]; m.Pod != from.Pod && m.Pod != to.Pod && slotsOf(m) > 0 {
			announce = append(announce, m.Pod)
		}
	}
	return Action{On: from.Pod, Migrate: &Migration{
		SourceID: source.ID, Target: to.Pod, TargetID: target.ID,
		TargetAddress: Address{IP: to.IP, Port: to.Port},
		Slots:         slots, Import: importing, Export: exporting, Announce: announce,
	}}
}

// closeOpenSlots deals with slots left migrating or importing, by a migration that a crash of the
// operator or of a server stopped, or by hand. As valkey-cli's fix does, it finishes what can be
// finished and drops what cannot:
//   - a slot that a member migrates to another member is moved on to it, the target told to
//     import it first if it is not; if that target failed over, its replica that took over has
//     the import and the keys received so far, and the migration goes on to it;
//   - a slot that a member imports is moved to it from the member that serves it, which is told
//     to migrate it first if it is not; if no member serves it, the importer takes it;
//   - a slot that a member migrates to a node that is not a member, or that it no longer serves
//     while nobody imports it, is made stable again.
func closeOpenSlots(_ Want, members []Member) (Plan, bool) {
	byID := map[string]*Member{}
	server := map[int]*Member{}
	claimed := make([]bool, valkey.SlotCount) // by any node, in any member's view
	for i := range members {
		self, _ := members[i].self()
		byID[self.ID] = &members[i]
		for _, s := range slotsServed(&members[i]) {
			if server[s] == nil {
				server[s] = &members[i]
			}
		}
		for _, n := range members[i].Nodes {
			for _, r := range n.Slots {
				for s := r.Start; s <= r.End; s++ {
					claimed[s] = true
				}
			}
		}
	}
	var waiting []string
	type pair struct{ from, to *Member }
	type work struct{ slots, importing, exporting []int }
	moves := map[pair]*work{}
	var order []pair
	add := func(from, to *Member, slot int, needsImport, needsExport bool) {
		p := pair{from, to}
		w := moves[p]
		if w == nil {
			w = &work{}
			moves[p] = w
			order = append(order, p)
		}
		w.slots = append(w.slots, slot)
		if needsImport {
			w.importing = append(w.importing, slot)
		}
		if needsExport {
			w.exporting = append(w.exporting, slot)
		}
	}
	stable := map[*Member][]int{}
	claims := map[*Member][]int{}
	handled := map[int]bool{}

	for i := range members {
		m := &members[i]
		self, _ := m.self()
		for _, slot := range slices.Sorted(maps.Keys(openSlots(self).Migrating)) {
			to := byID[self.Migrating[slot]]
			switch successor := takenOverBy(to, byID); {
			case successor != nil && importsFrom(successor, slot, self.ID):
				// Since Valkey 8 a primary passes SETSLOT on to its replicas, so the one that
				// took over imports the slot too, with the keys received so far: the source is
				// re-pointed to it. (Valkey 8.0.1 re-points the source itself once it learns of
				// the failover, checked on real servers; this covers a view read before that.)
				// Closed instead, the slot would stay with the source without those keys until a
				// later pass moved them back.
				add(m, successor, slot, false, true)
			case to == nil || to == m || !isPrimary(to):
				// A target that turned replica (it gave its last slot away during a drain) can
				// take no slot; the keys it got went with its data when it started to replicate.
				stable[m] = append(stable[m], slot)
			case server[slot] != m && server[slot] != to:
				stable[m] = append(stable[m], slot) // it lost the slot to a third node
			default:
				// Told from the target's own view: one that serves the slot already must not be
				// told to import it (Valkey refuses, and the batch with it).
				toSelf, _ := to.self()
				_, importing := toSelf.Importing[slot]
				add(m, to, slot, !importing && !serves(toSelf, slot), false)
			}
			handled[slot] = true
		}
	}
	for i := range members {
		m := &members[i]
		self, _ := m.self()
		for _, slot := range slices.Sorted(maps.Keys(openSlots(self).Importing)) {
			if handled[slot] {
				continue
			}
			switch from := server[slot]; {
			case from == nil && claimed[slot]:
				// A node that is no member's serves it (the server of a pod being deleted, its
				// keys with it): taking the slot now would make two owners.
				waiting = append(waiting, fmt.Sprintf("%d (%s)", slot, m.Pod))
			case from == nil:
				claims[m] = append(claims[m], slot)
			case from == m:
				stable[m] = append(stable[m], slot)
			default:
				add(from, m, slot, false, true)
			}
		}
	}

	var actions []Action
	for _, p := range order {
		w := moves[p]
		actions = append(actions, migrate(members, p.from, p.to, w.slots, w.importing, w.exporting))
	}
	for i := range members {
		m := &members[i]
		if slots := stable[m]; len(slots) > 0 {
			actions = append(actions, Action{On: m.Pod, Stable: slots})
		}
		if slots := claims[m]; len(slots) > 0 {
			self, _ := m.self()
			actions = append(actions, Action{On: m.Pod, Claim: &Claim{Slots: slots, ID: self.ID}})
		}
	}
	if len(actions) == 0 && len(waiting) > 0 {
		return Plan{Waiting: "slots imported from a node that is no pod's, which still serves them: " + strings.Join(waiting, ", ")}, false
	}
	return Plan{Actions: actions}, len(actions) == 0
}

// takenOverBy is the primary among the members that m, a replica, replicates; nil if m is a
// primary or not a member.
func takenOverBy(m *Member, byID map[string]*Member) *Member {
	if m == nil || isPrimary(m) {
		return nil
	}
	self, _ := m.self()
	if p := byID[self.PrimaryID]; p != nil && isPrimary(p) {
		return p
	}
	return nil
}

// importsFrom reports whether m imports the slot from the node with the given ID.
func importsFrom(m *Member, slot int, sourceID string) bool {
	self, _ := m.self()
	return self.Importing[slot] == sourceID
}

// openSlots is the node with the slots it migrates and imports, if it is a primary. A replica
// shows such marks too: since Valkey 8 a primary passes each SETSLOT on to its replicas, and one
// drained of its last slot turns replica with the marks it had. They are its primary's business
// or stale: Valkey refuses SETSLOT on a replica, and a reset drops them; so they are left alone.
func openSlots(n valkey.ClusterNode) valkey.ClusterNode {
	if n.PrimaryID != "" {
		n.Migrating, n.Importing = nil, nil
	}
	return n
}

// isPrimary reports whether the member's server says it is a primary.
func isPrimary(m *Member) bool {
	self, _ := m.self()
	return self.PrimaryID == ""
}

// serves reports whether the node serves the slot.
func serves(n valkey.ClusterNode, slot int) bool {
	return slices.ContainsFunc(n.Slots, func(r valkey.SlotRange) bool { return r.Start <= slot && slot <= r.End })
}

// describeMoves sums up a plan's migrations for a message: "1024 slots from a-0 to a-3".
func describeMoves(actions []Action) string {
	var parts []string
	for _, a := range actions {
		if a.Migrate != nil {
			parts = append(parts, fmt.Sprintf("%d from %s to %s", len(a.Migrate.Slots), a.On, a.Migrate.Target))
		}
	}
	return strings.Join(parts, ", ")
}

// heldForSyncingReplicas holds back a step's slot commands (a migration's SETSLOTs, a close, a
// claim) on a primary that has a replica still taking its first copy. Since Valkey 8 a primary
// passes each SETSLOT on to its replicas, but only to those already online: a replica still
// loading gets the open slots with its copy and misses the SETSLOT that closes them, and keeps
// the marks for good (valkey-io/valkey#998; seen here when a migration to a new shard started
// right after its replica was attached). A replica's link is up once it is online. The other
// actions of the step go ahead; if none is left, the step waits.
func heldForSyncingReplicas(step func(Want, []Member) (Plan, bool)) func(Want, []Member) (Plan, bool) {
	return func(want Want, members []Member) (Plan, bool) {
		plan, done := step(want, members)
		syncing := syncingReplicas(members)
		var kept []Action
		var held []string
		for _, a := range plan.Actions {
			involved := []string{a.On}
			if a.Migrate != nil {
				involved = append(involved, a.Migrate.Target)
			}
			var waitFor []string
			for _, pod := range involved {
				waitFor = append(waitFor, syncing[pod]...)
			}
			if len(waitFor) == 0 {
				kept = append(kept, a)
				continue
			}
			held = append(held, fmt.Sprintf("%s (%s)", a, strings.Join(waitFor, ", ")))
		}
		if len(held) == 0 {
			return plan, done
		}
		if len(kept) == 0 {
			return Plan{Waiting: "replicas to finish their first sync before slots change on their primaries: " + strings.Join(held, "; ")}, false
		}
		plan.Actions = kept
		return plan, false
	}
}

// syncingReplicas lists, by the pod of a member that is a primary, the members that replicate it
// with their link not up yet.
func syncingReplicas(members []Member) map[string][]string {
	podOf := map[string]string{}
	for i := range members {
		if self, ok := members[i].self(); ok && self.PrimaryID == "" {
			podOf[self.ID] = members[i].Pod
		}
	}
	syncing := map[string][]string{}
	for i := range members {
		self, _ := members[i].self()
		if primary, ok := podOf[self.PrimaryID]; ok && self.PrimaryID != "" && !members[i].LinkUp {
			syncing[primary] = append(syncing[primary], members[i].Pod)
		}
	}
	return syncing
}
