package topology

import (
	"strings"
	"testing"

	"example.com/cache-operator/internal/valkey"
)

// healthy marks every member's server as reporting cluster_state:ok and its replication link up.
func healthy(members []Member) []Member {
	for i := range members {
		members[i].State, members[i].LinkUp = "ok", true
	}
	return members
}

func TestNextIsReadyOnlyWhenEverythingHolds(t *testing.T) {
	want := Want{Shards: 2, ReplicasPerShard: 1}
	cluster := func() []Member {
		return healthy(world(all(
			server{pod: "pod-0", slots: []valkey.SlotRange{r(0, 8191)}},
			server{pod: "pod-1", slots: []valkey.SlotRange{r(8192, 16383)}},
			server{pod: "pod-2", replica: "pod-0"},
			server{pod: "pod-3", replica: "pod-1"},
		)...))
	}
	for _, tc := range []struct {
		name    string
		breaks  func([]Member)
		problem Problem
		message string
	}{
		{"all holds", func([]Member) {}, "", ""},
		{"not formed", func(m []Member) { m[3].Nodes[0].PrimaryID = "" }, Healing, "next step: pod-3: CLUSTER REPLICATE id-pod-1"},
		{"a server cannot be asked", func(m []Member) { m[1].Nodes = nil }, Healing, "cannot ask pod-1"},
		{"cluster state", func(m []Member) { m[2].State = "fail" }, ClusterStateNotOK, "cluster_state is not ok on pod-2 (fail)"},
		{"a primary seen failing", func(m []Member) { m[2].Nodes[1].Failing = true }, SlotsUnserved, "8192 of 16384 slots"},
		{"a server's map not yet updated", func(m []Member) {
			// pod-2 has not heard yet that slots 8000-8191 came back to pod-0 from pod-1.
			m[2].Nodes[1].Slots = []valkey.SlotRange{r(0, 7999)}
			m[2].Nodes[2].Slots = []valkey.SlotRange{r(8000, 16383)}
		}, SlotsUnserved, "pod-2 routes 192 slots"},
		{"a primary a server has no address for", func(m []Member) { m[3].Nodes[1].IP = "" }, SlotsUnserved, "pod-3 routes 8192 slots"},
		{"a replica's link down", func(m []Member) { m[3].LinkUp = false }, ReplicasMissing, "primary id-pod-1 has 0 of 1"},
		{"a slot migrating", func(m []Member) {
			m[0].Nodes[0].Migrating = map[int]string{100: "id-pod-1"}
			m[1].Nodes[0].Importing = map[int]string{100: "id-pod-0"}
		}, Rebalancing, "1 slots to move; moving 1 from pod-0 to pod-1; next step: pod-0: migrate slots 100 to pod-1"},
		{"a pod on an older template", func(m []Member) { m[0].Outdated = true }, Upgrading,
			"3/4 nodes run the current pod template; next step: pod-2: CLUSTER FAILOVER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			members := cluster()
			tc.breaks(members)
			_, h := Next(want, members)
			if h.Problem != tc.problem || !strings.HasPrefix(h.Message, tc.message) {
				t.Errorf("Next = %s %q, want %s %q", h.Problem, h.Message, tc.problem, tc.message)
			}
			if h.Ready() != (tc.problem == "") {
				t.Errorf("Ready() = %v with problem %q", h.Ready(), h.Problem)
			}
		})
	}
}
