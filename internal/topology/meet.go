package topology

import (
	"fmt"
	"slices"

	"example.com/cache-operator/internal/valkey"
)

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
			actions = append(actions, Action{Kind: KindMeet, On: seed.Pod, Meet: &Address{IP: m.IP, Port: m.Port}})
		case !known(m, members)[seed.Pod]:
			// The seed knows a server that knows nobody: one reset to rejoin (freeReplica).
			actions = append(actions, Action{Kind: KindMeet, On: m.Pod, Meet: &Address{IP: seed.IP, Port: seed.Port}})
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
