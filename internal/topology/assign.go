package topology

import (
	"slices"
	"strings"

	"example.com/cache-operator/internal/valkey"
)

// assignSlots spreads the slots nobody serves over primaries: the members that serve none and
// replicate nothing, up to the wanted number of primaries, or else the primary serving the
// fewest. A slot counts as served when any server claims it, itself or in any member's view, so
// no slot is given to two servers, even while the news of an assignment is still spreading.
// Slots claimed only by a node that is not one of the members (the old node of a replaced pod)
// are not planned for here: forgetting such nodes is healing, not formation.
func assignSlots(want Want, members []Member) (Plan, bool) {
	served, strangers := servedSlots(members)
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
		actions = append(actions, Action{Kind: KindAddSlots, On: owners[i].Pod, AddSlots: part})
	}
	return Plan{Actions: actions}, false
}

// servedSlots marks the slots any server claims, itself or in any member's view, and lists the
// claimants that are not members.
func servedSlots(members []Member) (served []bool, strangers []string) {
	served = make([]bool, valkey.SlotCount)
	ours := memberIDs(members)
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
	return served, strangers
}

// claimRestored gives each restored server the slots of its shard that nobody serves: a server
// started with a backup's RDB claims only the slots it holds keys in, and the rest of its shard's
// slots go back to it too, rather than being spread anew (assignSlots), which would move its keys
// away and leave it a replica. It comes before the servers meet.
func claimRestored(want Want, members []Member) (Plan, bool) {
	if len(want.Restored) == 0 {
		return Plan{}, true
	}
	served, _ := servedSlots(members)
	var actions []Action
	for i := range members {
		ranges := want.Restored[members[i].Pod]
		if _, ok := members[i].self(); !ok || len(ranges) == 0 {
			continue
		}
		free := make([]bool, valkey.SlotCount)
		for _, r := range ranges {
			for s := r.Start; s <= r.End; s++ {
				free[s] = !served[s]
			}
		}
		if missing := rangesOf(free, true); len(missing) > 0 {
			actions = append(actions, Action{Kind: KindAddSlots, On: members[i].Pod, AddSlots: missing})
		}
	}
	if len(actions) == 0 {
		return Plan{}, true
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
