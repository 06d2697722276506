package topology

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"example.com/cache-operator/internal/valkey"
)

// sim is a model of a Valkey Cluster in which every node's view is the truth, for driving the
// planner through whole operations: a step's actions are applied as Valkey applies them, and
// the next step is planned from the result. The real servers run the same operations in e2e.
type sim struct {
	nodes map[string]*simNode // by pod
}

type simNode struct {
	pod, id           string
	slots             map[int]bool
	primary           string
	migrating         map[int]string
	importing         map[int]string
	knows             map[string]bool // node IDs
	leaving, outdated bool
	linkDown          bool
}

func newSim() *sim { return &sim{nodes: map[string]*simNode{}} }

// add starts fresh servers.
func (s *sim) add(pods ...string) {
	for _, pod := range pods {
		s.nodes[pod] = &simNode{pod: pod, id: id(pod), slots: map[int]bool{}, migrating: map[int]string{},
			importing: map[int]string{}, knows: map[string]bool{}}
	}
}

func (s *sim) byID(nodeID string) *simNode {
	for _, n := range s.nodes {
		if n.id == nodeID {
			return n
		}
	}
	return nil
}

func (s *sim) entry(n *simNode, myself bool) valkey.ClusterNode {
	e := valkey.ClusterNode{ID: n.id, IP: ip(n.pod), Port: 6379, Myself: myself, Connected: true,
		Primary: n.primary == "", PrimaryID: n.primary}
	for _, slot := range slices.Sorted(maps.Keys(n.slots)) {
		e.Slots = append(e.Slots, r(slot, slot))
	}
	if myself && len(n.migrating) > 0 {
		e.Migrating = maps.Clone(n.migrating)
	}
	if myself && len(n.importing) > 0 {
		e.Importing = maps.Clone(n.importing)
	}
	return e
}

func (s *sim) members() []Member {
	var members []Member
	for _, pod := range slices.Sorted(maps.Keys(s.nodes)) {
		n := s.nodes[pod]
		m := Member{Pod: pod, IP: ip(pod), Port: 6379, State: "ok", LinkUp: n.primary != "" && !n.linkDown,
			Leaving: n.leaving, Outdated: n.outdated, Nodes: []valkey.ClusterNode{s.entry(n, true)}}
		for _, other := range slices.Sorted(maps.Keys(n.knows)) {
			if o := s.byID(other); o != nil {
				m.Nodes = append(m.Nodes, s.entry(o, false))
			}
		}
		members = append(members, m)
	}
	return members
}

func (s *sim) podAt(address Address) *simNode {
	for _, n := range s.nodes {
		if ip(n.pod) == address.IP {
			return n
		}
	}
	return nil
}

// apply applies one action as Valkey would; it fails the test where Valkey would refuse.
func (s *sim) apply(t *testing.T, a Action) {
	t.Helper()
	n := s.nodes[a.On]
	switch {
	case a.Meet != nil:
		other := s.podAt(*a.Meet)
		n.knows[other.id], other.knows[n.id] = true, true
	case a.AddSlots != nil:
		for _, rr := range a.AddSlots {
			for slot := rr.Start; slot <= rr.End; slot++ {
				n.slots[slot] = true
			}
		}
	case a.Replicate != "":
		if len(n.slots) > 0 {
			t.Fatalf("%s: CLUSTER REPLICATE on a primary with slots", a)
		}
		n.primary = a.Replicate
	case a.Forget != "":
		if a.Forget == n.primary {
			t.Fatalf("%s: a replica cannot forget its primary", a)
		}
		delete(n.knows, a.Forget)
	case a.Failover || a.Takeover:
		old := s.byID(n.primary)
		n.slots, old.slots = old.slots, map[int]bool{}
		for _, o := range s.nodes {
			if o.primary == old.id {
				o.primary = n.id
			}
		}
		n.primary, old.primary = "", n.id
	case a.Reset:
		if len(n.slots) > 0 {
			t.Fatalf("%s: reset of a primary with slots", a)
		}
		n.knows, n.primary = map[string]bool{}, ""
		for _, o := range s.nodes {
			if o.primary == n.id && !o.leaving {
				t.Fatalf("%s: %s still replicates the node reset", a, o.pod)
			}
		}
	case (a.Stable != nil || a.Claim != nil || a.Migrate != nil) && n.primary != "":
		t.Fatalf("%s: SETSLOT on a replica: Valkey refuses", a)
	case a.Stable != nil:
		for _, slot := range a.Stable {
			delete(n.migrating, slot)
			delete(n.importing, slot)
		}
	case a.Claim != nil:
		for _, slot := range a.Claim.Slots {
			n.slots[slot] = true
			delete(n.importing, slot)
		}
	case a.Migrate != nil:
		s.migrate(t, n, s.nodes[a.Migrate.Target], a.Migrate, len(a.Migrate.Slots))
	default:
		t.Fatalf("no model of %s", a)
	}
}

// migrate moves the first count slots of m completely, and opens the rest (a crash midway).
func (s *sim) migrate(t *testing.T, source, target *simNode, m *Migration, count int) {
	t.Helper()
	if target.primary != "" {
		t.Fatalf("migrating slots to %s, a replica: Valkey refuses", target.pod)
	}
	for _, slot := range m.Import {
		if target.slots[slot] {
			t.Fatalf("SETSLOT %d IMPORTING on %s, which serves it: Valkey refuses", slot, target.pod)
		}
		target.importing[slot] = source.id
	}
	for _, slot := range m.Export {
		if !source.slots[slot] {
			t.Fatalf("SETSLOT %d MIGRATING on %s, which does not serve it", slot, source.pod)
		}
		source.migrating[slot] = target.id
	}
	for _, slot := range m.Slots[:count] {
		if target.importing[slot] == "" && !target.slots[slot] {
			t.Fatalf("slot %d moved to %s, which does not import it", slot, target.pod)
		}
		delete(target.importing, slot)
		delete(source.migrating, slot)
		delete(source.slots, slot)
		target.slots[slot] = true
	}
	// A primary that gives its last slot away becomes a replica of the node that took it, and
	// so do its replicas (cluster-allow-replica-migration, on by default).
	if len(source.slots) == 0 && count > 0 && source.primary == "" {
		for _, o := range s.nodes {
			if o.primary == source.id {
				o.primary = target.id
			}
		}
		source.primary = target.id
	}
}

// gossip spreads what nodes know until each knows every node that a node it knows knows, as the
// cluster bus does between steps.
func (s *sim) gossip() {
	for changed := true; changed; {
		changed = false
		for _, n := range s.nodes {
			for k := range n.knows {
				for j := range s.byID(k).knows {
					if j != n.id && !n.knows[j] {
						n.knows[j], changed = true, true
					}
				}
			}
		}
	}
}

// run plans and applies steps until the cluster is formed, and returns the number of steps.
func (s *sim) run(t *testing.T, want Want, limit int) int {
	t.Helper()
	for step := 1; step <= limit; step++ {
		plan := Form(want, s.members())
		if plan.Formed() {
			return step - 1
		}
		if plan.Waiting != "" {
			t.Fatalf("step %d waits: %s", step, plan.Waiting)
		}
		moved := 0
		for _, a := range plan.Actions {
			if a.Migrate != nil {
				moved += len(a.Migrate.Slots)
			}
			s.apply(t, a)
		}
		s.gossip()
		if moved > MaxSlotsPerStep {
			t.Fatalf("step %d moves %d slots, more than %d", step, moved, MaxSlotsPerStep)
		}
	}
	t.Fatalf("not formed after %d steps: %+v", limit, Form(want, s.members()))
	return 0
}

// assertBalanced checks that the staying primaries serve every slot, each 16384/shards give or
// take one, and each has its replicas.
func (s *sim) assertBalanced(t *testing.T, want Want) {
	t.Helper()
	served := map[int]string{}
	replicas := map[string]int{}
	var counts []int
	for _, n := range s.nodes {
		if n.leaving {
			if len(n.slots) > 0 {
				t.Errorf("leaving %s serves %d slots", n.pod, len(n.slots))
			}
			continue
		}
		if n.primary != "" {
			replicas[n.primary]++
			continue
		}
		counts = append(counts, len(n.slots))
		for slot := range n.slots {
			if other, dup := served[slot]; dup {
				t.Fatalf("slot %d served by %s and %s", slot, other, n.pod)
			}
			served[slot] = n.pod
		}
	}
	if len(served) != valkey.SlotCount || len(counts) != want.Shards || slices.Max(counts)-slices.Min(counts) > 1 {
		t.Errorf("%d slots served by %d primaries with %v slots; want all, by %d, even", len(served), len(counts), counts, want.Shards)
	}
	for _, n := range s.nodes {
		if !n.leaving && n.primary == "" && replicas[n.id] != want.ReplicasPerShard {
			t.Errorf("primary %s has %d replicas, want %d", n.pod, replicas[n.id], want.ReplicasPerShard)
		}
	}
}

func simPods(from, to int) []string {
	var p []string
	for i := from; i < to; i++ {
		p = append(p, fmt.Sprintf("pod-%02d", i))
	}
	return p
}

func formedSim(t *testing.T, want Want) *sim {
	s := newSim()
	s.add(simPods(0, want.Nodes())...)
	s.run(t, want, 20)
	s.assertBalanced(t, want)
	return s
}

// leave marks the pods beyond the first n as leaving, as the StatefulSet's ordinals decide.
func (s *sim) leave(n int) {
	for i, pod := range slices.Sorted(maps.Keys(s.nodes)) {
		s.nodes[pod].leaving = i >= n
	}
}

func TestScaleOutMovesSlotsToTheNewShardsInBoundedSteps(t *testing.T) {
	for _, tc := range []struct{ from, to Want }{
		{Want{3, 1}, Want{5, 1}},
		{Want{3, 0}, Want{4, 0}},
		{Want{1, 0}, Want{9, 0}},
		{Want{2, 2}, Want{3, 2}},
	} {
		t.Run(fmt.Sprintf("%v to %v", tc.from, tc.to), func(t *testing.T) {
			s := formedSim(t, tc.from)
			s.add(simPods(tc.from.Nodes(), tc.to.Nodes())...)
			steps := s.run(t, tc.to, 100)
			s.assertBalanced(t, tc.to)
			if minimum := (valkey.SlotCount - valkey.SlotCount/tc.from.Shards*tc.from.Shards) / MaxSlotsPerStep; steps < minimum {
				t.Errorf("%d steps", steps)
			}
		})
	}
}

func TestScaleInDrainsLeavingShardsBeforeTheyAreReleased(t *testing.T) {
	for _, tc := range []struct{ from, to Want }{
		{Want{5, 1}, Want{3, 1}},
		{Want{4, 0}, Want{3, 0}},
		{Want{3, 1}, Want{3, 0}},
		{Want{3, 2}, Want{2, 1}},
		{Want{9, 0}, Want{1, 0}},
		// More shards from fewer nodes: replicas become primaries.
		{Want{3, 1}, Want{4, 0}},
		{Want{3, 2}, Want{4, 1}},
	} {
		t.Run(fmt.Sprintf("%v to %v", tc.from, tc.to), func(t *testing.T) {
			s := formedSim(t, tc.from)
			s.leave(tc.to.Nodes())
			if Released(s.members()) {
				t.Fatal("released before draining")
			}
			s.run(t, tc.to, 100)
			s.assertBalanced(t, tc.to)
			if !Released(s.members()) {
				t.Error("the leaving pods are not released when formed")
			}
		})
	}
}

func TestReplicasDownHandsAPrimaryOnALeavingPodToAStayingReplica(t *testing.T) {
	s := formedSim(t, Want{3, 1})
	// After an earlier failover, pod-03 (leaving when replicas go to 0) is pod-00's primary.
	s.apply(t, Action{On: "pod-03", Failover: true})
	s.leave(3)
	plan := Form(Want{3, 0}, s.members())
	if got := actions(plan); !slices.Equal(got, []string{"pod-00: CLUSTER FAILOVER"}) || plan.Operation != Draining {
		t.Fatalf("first step %v (%s), want pod-00 to take its shard back", got, plan.Operation)
	}
	s.run(t, Want{3, 0}, 20)
	s.assertBalanced(t, Want{3, 0})
}

// A replica that is to take over from a leaving primary but is not in sync is waited for: drained
// instead, its shard would be lost from the count of primaries.
func TestReplicasDownWaitsForTheReplicaThatTakesOver(t *testing.T) {
	s := formedSim(t, Want{3, 1})
	s.apply(t, Action{On: "pod-03", Failover: true})
	s.nodes["pod-00"].linkDown = true
	s.leave(3)
	if plan := Form(Want{3, 0}, s.members()); !strings.HasPrefix(plan.Waiting, "replicas to sync before they take over") {
		t.Fatalf("plan %v, waiting %q", actions(plan), plan.Waiting)
	}
	s.nodes["pod-00"].linkDown = false
	s.run(t, Want{3, 0}, 20)
	s.assertBalanced(t, Want{3, 0})
}

// A slot imported from a node that is not a member but still serves it (a pod being deleted) is
// not taken: there would be two owners.
func TestASlotStillServedByANodeThatIsNoMembersIsNotClaimed(t *testing.T) {
	s := formedSim(t, Want{3, 0})
	s.nodes["pod-01"].importing[0] = id("pod-00")
	members := slices.DeleteFunc(s.members(), func(m Member) bool { return m.Pod == "pod-00" })
	plan, done := closeOpenSlots(Want{3, 0}, members)
	if done || len(plan.Actions) > 0 || !strings.Contains(plan.Waiting, "0 (pod-01)") {
		t.Errorf("closeOpenSlots = %v, waiting %q; want it to wait for the slot's server", actions(plan), plan.Waiting)
	}
}

// A node drained of its last slot turns replica and may keep the mark of a slot it was importing;
// Valkey refuses SETSLOT there, so the mark is left alone, and a source still migrating the slot
// to it gives up.
func TestOpenSlotsTowardANodeThatTurnedReplicaAreClosedOnTheSource(t *testing.T) {
	s := formedSim(t, Want{3, 0})
	s.nodes["pod-00"].migrating[0] = id("pod-02")
	s.nodes["pod-02"].importing[0] = id("pod-00")
	s.nodes["pod-02"].slots, s.nodes["pod-02"].primary = map[int]bool{}, id("pod-01")
	plan, _ := closeOpenSlots(Want{3, 0}, s.members())
	if got := actions(plan); !slices.Equal(got, []string{"pod-00: CLUSTER SETSLOT 0 STABLE"}) {
		t.Errorf("closeOpenSlots = %v, want the source to drop the migration", got)
	}
}

func TestScaleOutThenInBeforeTheFirstFinishedEndsBalanced(t *testing.T) {
	s := formedSim(t, Want{3, 1})
	s.add(simPods(6, 10)...)
	for range 4 { // meet, replicas, then the first slots move
		for _, a := range Form(Want{5, 1}, s.members()).Actions {
			s.apply(t, a)
		}
		s.gossip()
	}
	s.leave(6)
	s.run(t, Want{3, 1}, 100)
	s.assertBalanced(t, Want{3, 1})
	if !Released(s.members()) {
		t.Error("not released")
	}
}

// Every state a crash can leave a migration in is finished or closed, from what the servers
// report alone.
func TestOpenSlotsLeftByACrashAreFinishedOrClosed(t *testing.T) {
	want := Want{3, 0}
	for _, tc := range []struct {
		name   string
		open   func(s *sim)
		first  []string
		served string // who serves slot 0 at the end
	}{{
		name:   "importing set on the target only",
		open:   func(s *sim) { s.nodes["pod-01"].importing[0] = id("pod-00") },
		first:  []string{"pod-00: migrate slots 0 to pod-01"},
		served: "pod-01",
	}, {
		name:   "migrating set on the source only",
		open:   func(s *sim) { s.nodes["pod-00"].migrating[0] = id("pod-01") },
		first:  []string{"pod-00: migrate slots 0 to pod-01"},
		served: "pod-01",
	}, {
		name: "both set, some keys moved",
		open: func(s *sim) {
			s.nodes["pod-01"].importing[0] = id("pod-00")
			s.nodes["pod-00"].migrating[0] = id("pod-01")
		},
		first:  []string{"pod-00: migrate slots 0 to pod-01"},
		served: "pod-01",
	}, {
		name: "the target told it owns the slot, the source not yet",
		open: func(s *sim) {
			s.nodes["pod-00"].migrating[0] = id("pod-01")
			s.nodes["pod-01"].slots[0] = true
		},
		first:  []string{"pod-00: migrate slots 0 to pod-01"},
		served: "pod-01",
	}, {
		name:   "migrating to a node that is gone",
		open:   func(s *sim) { s.nodes["pod-00"].migrating[0] = "id-gone" },
		first:  []string{"pod-00: CLUSTER SETSLOT 0 STABLE"},
		served: "pod-00",
	}, {
		name: "importing a slot whose server is gone and forgotten",
		open: func(s *sim) {
			delete(s.nodes["pod-00"].slots, 0)
			s.nodes["pod-01"].importing[0] = "id-gone"
		},
		first:  []string{"pod-01: CLUSTER SETSLOT 0 NODE id-pod-01"},
		served: "pod-01",
	}, {
		name:   "importing a slot it already serves",
		open:   func(s *sim) { s.nodes["pod-00"].importing[0] = id("pod-01") },
		first:  []string{"pod-00: CLUSTER SETSLOT 0 STABLE"},
		served: "pod-00",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := formedSim(t, want)
			tc.open(s)
			plan := Form(want, s.members())
			if got := actions(plan); !slices.Equal(got, tc.first) {
				t.Fatalf("first step %v, want %v", got, tc.first)
			}
			s.run(t, want, 20)
			s.assertBalanced(t, want)
			for _, n := range s.nodes {
				if len(n.migrating)+len(n.importing) > 0 {
					t.Errorf("%s still has open slots: %v %v", n.pod, n.migrating, n.importing)
				}
			}
			if owner := s.servedBy(0); owner != tc.served {
				t.Errorf("slot 0 served by %s, want %s", owner, tc.served)
			}
		})
	}
}

func (s *sim) servedBy(slot int) string {
	for _, n := range s.nodes {
		if n.slots[slot] {
			return n.pod
		}
	}
	return ""
}

// A migration stopped halfway through a batch resumes with what is left.
func TestAMigrationStoppedMidBatchResumes(t *testing.T) {
	s := formedSim(t, Want{2, 0})
	s.add("pod-02")
	for {
		plan := Form(Want{3, 0}, s.members())
		if a := plan.Actions[0]; a.Migrate != nil {
			s.migrate(t, s.nodes[a.On], s.nodes[a.Migrate.Target], a.Migrate, len(a.Migrate.Slots)/2)
			break
		}
		for _, a := range plan.Actions {
			s.apply(t, a)
		}
		s.gossip()
	}
	next := Form(Want{3, 0}, s.members())
	if next.Operation != ScalingOut || next.Actions[0].Migrate == nil || len(next.Actions[0].Migrate.Import) != 0 {
		t.Fatalf("after the stop: %s %v", next.Operation, actions(next))
	}
	s.run(t, Want{3, 0}, 20)
	s.assertBalanced(t, Want{3, 0})
}

func TestRollRestartsReplicasFirstThenFailsOverEachShard(t *testing.T) {
	for _, tc := range []struct {
		name     string
		setup    func(s *sim)
		want     string
		progress string
	}{{
		name:  "an outdated replica goes first",
		setup: func(s *sim) { s.nodes["pod-00"].outdated, s.nodes["pod-03"].outdated = true, true },
		want:  "delete pod pod-03",
	}, {
		name:  "an outdated primary with a current replica fails over to it",
		setup: func(s *sim) { s.nodes["pod-00"].outdated = true },
		want:  "pod-03: CLUSTER FAILOVER",
	}, {
		name: "a primary whose replica is outdated too waits for it",
		setup: func(s *sim) {
			s.nodes["pod-01"].outdated, s.nodes["pod-04"].outdated = true, true
		},
		want: "delete pod pod-04",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := formedSim(t, Want{3, 1})
			tc.setup(s)
			plan := Roll(s.members())
			if got := actions(plan); len(got) != 1 || got[0] != tc.want || plan.Operation != Upgrading {
				t.Errorf("Roll = %v (%s), want %s", got, plan.Operation, tc.want)
			}
		})
	}
	s := formedSim(t, Want{2, 0})
	s.nodes["pod-01"].outdated = true
	plan := Roll(s.members())
	if got := actions(plan); !slices.Equal(got, []string{"delete pod pod-01"}) || !strings.Contains(plan.Progress, "keys of its 8192 slots are lost") {
		t.Errorf("Roll without replicas = %v, %q", got, plan.Progress)
	}
}
