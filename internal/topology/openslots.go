package topology

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"example.com/cache-operator/internal/valkey"
)

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
	byID := membersByID(members)
	server := map[int]*Member{}
	claimed := make([]bool, valkey.SlotCount) // by any node, in any member's view
	for i := range members {
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
			actions = append(actions, Action{Kind: KindStable, On: m.Pod, Stable: slots})
		}
		if slots := claims[m]; len(slots) > 0 {
			self, _ := m.self()
			actions = append(actions, Action{Kind: KindClaim, On: m.Pod, Claim: &Claim{Slots: slots, ID: self.ID}})
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
