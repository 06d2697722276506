package topology

import (
	"cmp"
	"fmt"
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
// most slots already, and then empty ones that replicate nothing, those that an atomic slot
// migration job moves slots to first (importingAtomically: they hold none until the job ends),
// then in order of their pod names, up to the number of shards wanted. A staying primary beyond
// that number is drained.
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
	importing := importingAtomically(members)
	notImporting := func(m *Member) int {
		self, _ := m.self()
		return boolInt(!importing[self.ID])
	}
	slices.SortStableFunc(empty, func(a, b *Member) int { return cmp.Compare(notImporting(a), notImporting(b)) })
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

// rebalance moves up to MaxSlotsPerStep slots towards the balance of balancingMoves: one
// migration from each source that still gives, towards the first target it gives to, the step's
// slots shared out among them. The reconciler runs a step's migrations side by side, each
// against its own source; a migration is a chain of round trips per slot, so a scale-out that
// moved from one source at a time took as many times longer as there were sources.
func rebalance(want Want, members []Member) (Plan, bool) {
	moves := balancingMoves(want, members)
	if len(moves) == 0 {
		return Plan{}, true
	}
	type pair struct{ from, to *Member }
	bySlots := map[pair][]int{}
	var order []pair
	targetOf := map[*Member]*Member{}
	for _, mv := range moves {
		if to, ok := targetOf[mv.from]; ok && to != mv.to {
			continue // a later step, once this source's current target has its share
		}
		p := pair{mv.from, mv.to}
		if _, ok := targetOf[mv.from]; !ok {
			targetOf[mv.from] = mv.to
			order = append(order, p)
		}
		bySlots[p] = append(bySlots[p], mv.slot)
	}
	order = order[:min(len(order), MaxSlotsPerStep)]
	share := MaxSlotsPerStep / len(order)
	var actions []Action
	for _, p := range order {
		slots := bySlots[p][:min(len(bySlots[p]), share)]
		actions = append(actions, migrate(members, p.from, p.to, slots, slots, slots))
	}
	return Plan{Actions: actions, Migrating: true}, false
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
	return Action{Kind: KindMigrate, On: from.Pod, Migrate: &Migration{
		SourceID: source.ID, Target: to.Pod, TargetID: target.ID,
		TargetAddress: Address{IP: to.IP, Port: to.Port},
		Slots:         slots, Import: importing, Export: exporting, Announce: announce,
	}}
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
		switch a.Kind { //nolint:exhaustive // the kinds that move slots
		case KindMigrate:
			parts = append(parts, fmt.Sprintf("%d from %s to %s", len(a.Migrate.Slots), a.On, a.Migrate.Target))
		case KindMigrateSlots:
			parts = append(parts, fmt.Sprintf("%d from %s to %s", valkey.CountSlots(a.MigrateSlots.Slots), a.On, a.MigrateSlots.Target))
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
			switch a.Kind { //nolint:exhaustive // the kinds that involve a second primary, or none
			case KindMigrate:
				involved = append(involved, a.Migrate.Target)
			case KindMigrateSlots:
				involved = append(involved, a.MigrateSlots.Target)
			case KindCancelMigrations:
				involved = nil // leaves every slot where it is
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
			// Still moving slots: a new shard's replica takes its empty primary's copy in about a
			// second, and the move is looked at again as soon as during a migration.
			return Plan{Waiting: "replicas to finish their first sync before slots change on their primaries: " + strings.Join(held, "; "),
				Migrating: plan.Migrating}, false
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
