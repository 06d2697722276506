package topology

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"example.com/cache-operator/internal/valkey"
)

// sim is a model of a Valkey Cluster in which every node's view is the truth, for driving the
// planner through whole operations: a step's actions are applied as Valkey applies them, and
// the next step is planned from the result. The real servers run the same operations in e2e.
type sim struct {
	nodes map[string]*simNode // by pod
	// version is the Valkey release every server runs ("": one without atomic slot migration).
	version string
	// gone are the nodes whose server is gone while others still know them, by node ID: the
	// others list them without an address (noaddr), as when a new node answers at it.
	gone map[string]*simNode
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
	// syncing: a replica taking its first copy from its primary, which passes SETSLOT on only to
	// online replicas; the sim keeps it syncing until the planner has nothing else to do.
	syncing bool
	// fenced: the server has just started and refuses replicas' resynchronisation.
	fenced bool
	// handoverSeen: the operator recorded on the pod that its shard was handed over, a grace
	// ago.
	handoverSeen bool
	// jobs is the log of atomic slot migrations the node ran as a source, newest first.
	jobs []valkey.SlotMigration
}

func newSim() *sim { return &sim{nodes: map[string]*simNode{}, gone: map[string]*simNode{}} }

// add starts fresh servers.
func (s *sim) add(pods ...string) {
	for _, pod := range pods {
		s.nodes[pod] = &simNode{pod: pod, id: id(pod), slots: map[int]bool{}, migrating: map[int]string{},
			importing: map[int]string{}, knows: map[string]bool{}, fenced: true}
	}
}

func (s *sim) byID(nodeID string) *simNode {
	for _, n := range s.nodes {
		if n.id == nodeID {
			return n
		}
	}
	return s.gone[nodeID]
}

// restartInPlace restarts a pod's server in place: it comes back as a new, fenced node with no
// slot at the same address, where the old node's peers find it and drop the old node's address.
func (s *sim) restartInPlace(pod string) {
	old := s.nodes[pod]
	s.gone[old.id] = old
	s.add(pod)
	s.nodes[pod].id = old.id + "-restarted"
}

func (s *sim) entry(n *simNode, myself bool) valkey.ClusterNode {
	e := valkey.ClusterNode{ID: n.id, IP: ip(n.pod), Port: 6379, Myself: myself, Connected: true,
		Primary: n.primary == "", PrimaryID: n.primary}
	if s.gone[n.id] != nil {
		e.IP, e.Connected = "", false
	}
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
		// A replica of a fenced or gone primary cannot sync.
		primary := s.byID(n.primary)
		m := Member{Pod: pod, IP: ip(pod), Port: 6379, State: "ok", Version: s.version, Observed: simNow,
			LinkUp:  primary != nil && !n.linkDown && !n.syncing && !primary.fenced && s.gone[n.primary] == nil,
			Leaving: n.leaving, Outdated: n.outdated, Fenced: n.fenced, Nodes: []valkey.ClusterNode{s.entry(n, true)}}
		if n.handoverSeen {
			m.HandoverSeen, m.SinceHandover = true, HandoverGrace
		}
		if n.primary == "" && valkey.MigratesAtomically(s.version) {
			m.Migrations = slices.Clone(n.jobs)
		}
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
	if setslot := a.Kind == KindStable || a.Kind == KindClaim || a.Kind == KindMigrate || a.Kind == KindMigrateSlots; setslot && n.primary != "" {
		t.Fatalf("%s: SETSLOT on a replica: Valkey refuses", a)
	} else if setslot && s.syncingReplicaOf(n, a) != "" {
		t.Fatalf("%s while %s takes its first copy: it would keep the slot marks for good", a, s.syncingReplicaOf(n, a))
	}
	switch a.Kind {
	case KindMeet:
		other := s.podAt(*a.Meet)
		n.knows[other.id], other.knows[n.id] = true, true
	case KindAddSlots:
		for _, rr := range a.AddSlots {
			for slot := rr.Start; slot <= rr.End; slot++ {
				n.slots[slot] = true
			}
		}
	case KindReplicate:
		if len(n.slots) > 0 {
			t.Fatalf("%s: CLUSTER REPLICATE on a primary with slots", a)
		}
		n.primary, n.syncing = a.Replicate, true
	case KindForget:
		if a.Forget == n.primary {
			t.Fatalf("%s: a replica cannot forget its primary", a)
		}
		delete(n.knows, a.Forget)
		// As Valkey does: a forgotten node's open slots are closed.
		maps.DeleteFunc(n.migrating, func(_ int, to string) bool { return to == a.Forget })
		maps.DeleteFunc(n.importing, func(_ int, from string) bool { return from == a.Forget })
	case KindFailover, KindTakeover:
		old := s.byID(n.primary)
		n.slots, old.slots = old.slots, map[int]bool{}
		for _, o := range s.nodes {
			if o.primary == old.id {
				o.primary = n.id
			}
		}
		n.primary, old.primary = "", n.id
	case KindReset:
		if len(n.slots) > 0 {
			t.Fatalf("%s: reset of a primary with slots", a)
		}
		n.knows, n.primary = map[string]bool{}, ""
		for _, o := range s.nodes {
			if o.primary == n.id && !o.leaving {
				t.Fatalf("%s: %s still replicates the node reset", a, o.pod)
			}
		}
	case KindStable:
		for _, slot := range a.Stable {
			delete(n.migrating, slot)
			delete(n.importing, slot)
		}
	case KindClaim:
		for _, slot := range a.Claim.Slots {
			n.slots[slot] = true
			delete(n.importing, slot)
		}
	case KindMigrate:
		s.migrate(t, n, s.nodes[a.Migrate.Target], a.Migrate, len(a.Migrate.Slots))
	case KindMigrateSlots:
		s.startJob(t, n, a)
	case KindCancelMigrations:
		for i := range n.jobs {
			if n.jobs[i].Running() {
				n.jobs[i].State = valkey.MigrationCancelled
			}
		}
	case KindMarkHandover:
		// Steps are as far apart as the grace: the sim's clock runs between them.
		n.handoverSeen = true
	case KindUnfence:
		for _, o := range s.nodes {
			if s.gone[o.primary] != nil {
				t.Fatalf("%s: %s replicates a node that is gone, and would resync from the new one", a, o.pod)
			}
		}
		n.fenced = false
	default:
		t.Fatalf("no model of %s", a)
	}
}

// simNow is the sim's clock, when every member is read; the logs' jobs are dated by it.
var simNow = time.Date(2026, 12, 6, 0, 0, 0, 0, time.UTC)

// startJob starts an atomic slot migration as Valkey does, refusing it whole where Valkey would.
func (s *sim) startJob(t *testing.T, source *simNode, a Action) {
	t.Helper()
	target := s.nodes[a.MigrateSlots.Target]
	switch {
	case !valkey.MigratesAtomically(s.version):
		t.Fatalf("%s: Valkey %q has no atomic slot migration", a, s.version)
	case source.primary != "" || target.primary != "":
		t.Fatalf("%s: between %s and %s, not two primaries", a, source.pod, target.pod)
	}
	for _, r := range a.MigrateSlots.Slots {
		for slot := r.Start; slot <= r.End; slot++ {
			if !source.slots[slot] {
				t.Fatalf("%s: slot %d is not %s's: Valkey refuses", a, slot, source.pod)
			}
			for _, job := range source.jobs {
				if job.Running() && slices.ContainsFunc(job.Slots, func(r valkey.SlotRange) bool { return r.Start <= slot && slot <= r.End }) {
					t.Fatalf("%s: slot %d moves in a job already: Valkey refuses (I am already migrating)", a, slot)
				}
			}
		}
	}
	job := valkey.SlotMigration{Name: fmt.Sprint("job-", len(source.jobs)), Export: true, Slots: a.MigrateSlots.Slots,
		SourceID: source.id, TargetID: target.id, State: "snapshotting", Updated: simNow}
	source.jobs = append([]valkey.SlotMigration{job}, source.jobs...)
}

// jobsRunning reports whether a server runs an atomic slot migration.
func (s *sim) jobsRunning() bool {
	for _, n := range s.nodes {
		if slices.ContainsFunc(n.jobs, func(job valkey.SlotMigration) bool { return job.Running() }) {
			return true
		}
	}
	return false
}

// endJobs ends every running atomic slot migration as state says (a job that succeeds hands its
// slots over), and reports whether one ran.
func (s *sim) endJobs(t *testing.T, state string) bool {
	ended := false
	for _, n := range s.nodes {
		for i := range n.jobs {
			job := &n.jobs[i]
			if !job.Running() {
				continue
			}
			ended, job.State = true, state
			if state != valkey.MigrationSucceeded {
				continue
			}
			var slots []int
			for _, r := range job.Slots {
				for slot := r.Start; slot <= r.End; slot++ {
					slots = append(slots, slot)
				}
			}
			s.migrate(t, n, s.byID(job.TargetID), &Migration{Slots: slots, Import: slots, Export: slots}, len(slots))
		}
	}
	return ended
}

// syncingReplicaOf is a replica still syncing with a primary whose slots the action changes.
func (s *sim) syncingReplicaOf(n *simNode, a Action) string {
	changed := []*simNode{n}
	switch a.Kind { //nolint:exhaustive // the kinds that change a second primary's slots
	case KindMigrate:
		changed = append(changed, s.nodes[a.Migrate.Target])
	case KindMigrateSlots:
		changed = append(changed, s.nodes[a.MigrateSlots.Target])
	}
	for _, o := range s.nodes {
		for _, p := range changed {
			if o.syncing && o.primary == p.id {
				return o.pod
			}
		}
	}
	return ""
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
				if s.gone[k] != nil {
					continue // a server that is gone tells nothing
				}
				for j := range s.byID(k).knows {
					if j != n.id && !n.knows[j] {
						n.knows[j], changed = true, true
					}
				}
			}
		}
	}
}

// advance takes a plan's step on the sim, as the operator's next pass would: a plan that waits
// on replicas still syncing sees them synced; otherwise its actions are applied, and the cluster
// bus spreads what they changed.
func (s *sim) advance(t *testing.T, plan Plan) {
	t.Helper()
	if plan.Waiting != "" && s.finishSyncs() {
		return
	}
	for _, a := range plan.Actions {
		s.apply(t, a)
	}
	s.gossip()
}

// run plans and applies steps until the cluster is formed, and returns the number of steps.
func (s *sim) run(t *testing.T, want Want, limit int) int {
	t.Helper()
	for step := 1; step <= limit; step++ {
		plan := Form(want, s.members())
		if plan.Formed() {
			return step - 1
		}
		if plan.Waiting != "" && (s.finishSyncs() || s.endJobs(t, valkey.MigrationSucceeded)) {
			continue
		}
		if plan.Waiting != "" {
			t.Fatalf("step %d waits: %s", step, plan.Waiting)
		}
		moved := 0
		for _, a := range plan.Actions {
			if a.Kind == KindMigrate {
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

// finishSyncs lets every syncing replica finish its first copy, and reports whether one did.
func (s *sim) finishSyncs() bool {
	finished := false
	for _, n := range s.nodes {
		finished = finished || n.syncing
		n.syncing = false
	}
	return finished
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
	s.finishSyncs()
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
		{Want{Shards: 3, ReplicasPerShard: 1}, Want{Shards: 5, ReplicasPerShard: 1}},
		{Want{Shards: 3, ReplicasPerShard: 0}, Want{Shards: 4, ReplicasPerShard: 0}},
		{Want{Shards: 1, ReplicasPerShard: 0}, Want{Shards: 9, ReplicasPerShard: 0}},
		{Want{Shards: 2, ReplicasPerShard: 2}, Want{Shards: 3, ReplicasPerShard: 2}},
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

func TestAScaleOutStepMovesFromEverySourceAtOnce(t *testing.T) {
	from, to := Want{Shards: 3, ReplicasPerShard: 1}, Want{Shards: 5, ReplicasPerShard: 1}
	s := formedSim(t, from)
	s.add(simPods(from.Nodes(), to.Nodes())...)
	for step := 1; ; step++ {
		plan := Form(to, s.members())
		if plan.Waiting != "" && s.finishSyncs() {
			continue
		}
		var sources []string
		for _, a := range plan.Actions {
			if a.Kind == KindMigrate {
				sources = append(sources, a.On)
			}
		}
		if len(sources) == 0 {
			if step > 20 {
				t.Fatal("no migration in 20 steps")
			}
			for _, a := range plan.Actions {
				s.apply(t, a)
			}
			s.gossip()
			continue
		}
		slices.Sort(sources)
		if len(sources) != from.Shards || len(slices.Compact(sources)) != from.Shards {
			t.Errorf("the first migrating step moves from %v, want each of the %d primaries once", sources, from.Shards)
		}
		return
	}
}

func TestScaleInDrainsLeavingShardsBeforeTheyAreReleased(t *testing.T) {
	for _, tc := range []struct{ from, to Want }{
		{Want{Shards: 5, ReplicasPerShard: 1}, Want{Shards: 3, ReplicasPerShard: 1}},
		{Want{Shards: 4, ReplicasPerShard: 0}, Want{Shards: 3, ReplicasPerShard: 0}},
		{Want{Shards: 3, ReplicasPerShard: 1}, Want{Shards: 3, ReplicasPerShard: 0}},
		{Want{Shards: 3, ReplicasPerShard: 2}, Want{Shards: 2, ReplicasPerShard: 1}},
		{Want{Shards: 9, ReplicasPerShard: 0}, Want{Shards: 1, ReplicasPerShard: 0}},
		// More shards from fewer nodes: replicas become primaries.
		{Want{Shards: 3, ReplicasPerShard: 1}, Want{Shards: 4, ReplicasPerShard: 0}},
		{Want{Shards: 3, ReplicasPerShard: 2}, Want{Shards: 4, ReplicasPerShard: 1}},
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

// A scale-in whose leaving primary cannot be asked for a pass does not count that primary's slots
// as moved: its slots to move are unknown then, not fewer.
func TestSlotsToMoveAreUnknownWhileAServerCannotBeAsked(t *testing.T) {
	to := Want{Shards: 3, ReplicasPerShard: 0}
	s := formedSim(t, Want{Shards: 4, ReplicasPerShard: 0})
	s.leave(to.Nodes())
	seen := Form(to, s.members())
	if seen.SlotsToMove == 0 || seen.SlotsUnknown {
		t.Fatalf("every server asked: %d slots to move (unknown: %t), want the leaving shard's, known", seen.SlotsToMove, seen.SlotsUnknown)
	}
	leaving := slices.Sorted(maps.Keys(s.nodes))[to.Nodes()]
	unseen := Form(to, unreachable(s.members(), leaving, false))
	if !unseen.SlotsUnknown || strings.Contains(unseen.Progress, "slots to move") {
		t.Errorf("%s not asked: %d slots to move, unknown: %t, progress %q; want them unknown, and not said", leaving, unseen.SlotsToMove, unseen.SlotsUnknown, unseen.Progress)
	}
}

func TestReplicasDownHandsAPrimaryOnALeavingPodToAStayingReplica(t *testing.T) {
	s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 1})
	// After an earlier failover, pod-03 (leaving when replicas go to 0) is pod-00's primary.
	s.apply(t, Action{Kind: KindFailover, On: "pod-03"})
	s.leave(3)
	plan := Form(Want{Shards: 3, ReplicasPerShard: 0}, s.members())
	if got := actions(plan); !slices.Equal(got, []string{"pod-00: CLUSTER FAILOVER"}) || plan.Operation != Draining {
		t.Fatalf("first step %v (%s), want pod-00 to take its shard back", got, plan.Operation)
	}
	s.run(t, Want{Shards: 3, ReplicasPerShard: 0}, 20)
	s.assertBalanced(t, Want{Shards: 3, ReplicasPerShard: 0})
}

// A replica that is to take over from a leaving primary but is not in sync is waited for: drained
// instead, its shard would be lost from the count of primaries.
func TestReplicasDownWaitsForTheReplicaThatTakesOver(t *testing.T) {
	s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 1})
	s.apply(t, Action{Kind: KindFailover, On: "pod-03"})
	s.nodes["pod-00"].linkDown = true
	s.leave(3)
	if plan := Form(Want{Shards: 3, ReplicasPerShard: 0}, s.members()); !strings.HasPrefix(plan.Waiting, "replicas to sync before they take over") {
		t.Fatalf("plan %v, waiting %q", actions(plan), plan.Waiting)
	}
	s.nodes["pod-00"].linkDown = false
	s.run(t, Want{Shards: 3, ReplicasPerShard: 0}, 20)
	s.assertBalanced(t, Want{Shards: 3, ReplicasPerShard: 0})
}

// A slot imported from a node that is not a member but still serves it (a pod being deleted) is
// not taken: there would be two owners.
func TestASlotStillServedByANodeThatIsNoMembersIsNotClaimed(t *testing.T) {
	s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 0})
	s.nodes["pod-01"].importing[0] = id("pod-00")
	members := slices.DeleteFunc(s.members(), func(m Member) bool { return m.Pod == "pod-00" })
	plan, done := closeOpenSlots(Want{Shards: 3, ReplicasPerShard: 0}, members)
	if done || len(plan.Actions) > 0 || !strings.Contains(plan.Waiting, "0 (pod-01)") {
		t.Errorf("closeOpenSlots = %v, waiting %q; want it to wait for the slot's server", actions(plan), plan.Waiting)
	}
}

// A node drained of its last slot turns replica and may keep the mark of a slot it was importing;
// Valkey refuses SETSLOT there, so the mark is left alone, and a source still migrating the slot
// to it gives up.
func TestOpenSlotsTowardANodeThatTurnedReplicaAreClosedOnTheSource(t *testing.T) {
	s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 0})
	s.nodes["pod-00"].migrating[0] = id("pod-02")
	s.nodes["pod-02"].importing[0] = id("pod-00")
	s.nodes["pod-02"].slots, s.nodes["pod-02"].primary = map[int]bool{}, id("pod-01")
	plan, _ := closeOpenSlots(Want{Shards: 3, ReplicasPerShard: 0}, s.members())
	if got := actions(plan); !slices.Equal(got, []string{"pod-00: CLUSTER SETSLOT 0 STABLE"}) {
		t.Errorf("closeOpenSlots = %v, want the source to drop the migration", got)
	}
}

// A migration whose target fails over goes on to the replica that took over, which imports the
// slot too (since Valkey 8 a primary passes SETSLOT on to its replicas), with the keys received so
// far: the source is re-pointed to it, not closed, which would leave those keys where no client
// reads them.
func TestAMigrationWhoseTargetFailedOverGoesOnToItsSuccessor(t *testing.T) {
	s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 1})
	s.nodes["pod-00"].migrating[0] = id("pod-01")
	s.nodes["pod-01"].importing[0] = id("pod-00")
	s.apply(t, Action{Kind: KindFailover, On: "pod-04"})
	s.nodes["pod-04"].importing[0] = id("pod-00")
	plan, _ := closeOpenSlots(Want{Shards: 3, ReplicasPerShard: 1}, s.members())
	if got := actions(plan); !slices.Equal(got, []string{"pod-00: migrate slots 0 to pod-04"}) {
		t.Fatalf("closeOpenSlots = %v, want the migration re-pointed to pod-04", got)
	}
	if m := plan.Actions[0].Migrate; !slices.Equal(m.Export, []int{0}) || len(m.Import) != 0 || m.TargetID != id("pod-04") {
		t.Errorf("migration %+v: want the source told to migrate slot 0 to pod-04, which imports it already", m)
	}
}

func TestScaleOutThenInBeforeTheFirstFinishedEndsBalanced(t *testing.T) {
	s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 1})
	s.add(simPods(6, 10)...)
	for range 4 { // meet, replicas, then the first slots move
		for _, a := range Form(Want{Shards: 5, ReplicasPerShard: 1}, s.members()).Actions {
			s.apply(t, a)
		}
		s.gossip()
	}
	s.leave(6)
	s.run(t, Want{Shards: 3, ReplicasPerShard: 1}, 100)
	s.assertBalanced(t, Want{Shards: 3, ReplicasPerShard: 1})
	if !Released(s.members()) {
		t.Error("not released")
	}
}

// Every state a crash can leave a migration in is finished or closed, from what the servers
// report alone.
func TestOpenSlotsLeftByACrashAreFinishedOrClosed(t *testing.T) {
	want := Want{Shards: 3, ReplicasPerShard: 0}
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
	s := formedSim(t, Want{Shards: 2, ReplicasPerShard: 0})
	s.add("pod-02")
	for {
		plan := Form(Want{Shards: 3, ReplicasPerShard: 0}, s.members())
		if a := plan.Actions[0]; a.Kind == KindMigrate {
			s.migrate(t, s.nodes[a.On], s.nodes[a.Migrate.Target], a.Migrate, len(a.Migrate.Slots)/2)
			break
		}
		for _, a := range plan.Actions {
			s.apply(t, a)
		}
		s.gossip()
	}
	next := Form(Want{Shards: 3, ReplicasPerShard: 0}, s.members())
	if next.Operation != ScalingOut || next.Actions[0].Migrate == nil || len(next.Actions[0].Migrate.Import) != 0 {
		t.Fatalf("after the stop: %s %v", next.Operation, actions(next))
	}
	s.run(t, Want{Shards: 3, ReplicasPerShard: 0}, 20)
	s.assertBalanced(t, Want{Shards: 3, ReplicasPerShard: 0})
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
			s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 1})
			tc.setup(s)
			plan := Roll(s.members())
			if got := actions(plan); len(got) != 1 || got[0] != tc.want || plan.Operation != Upgrading {
				t.Errorf("Roll = %v (%s), want %s", got, plan.Operation, tc.want)
			}
		})
	}
	s := formedSim(t, Want{Shards: 2, ReplicasPerShard: 0})
	s.nodes["pod-01"].outdated = true
	plan := Roll(s.members())
	if got := actions(plan); !slices.Equal(got, []string{"delete pod pod-01"}) || !strings.Contains(plan.Progress, "keys of its 8192 slots are lost") {
		t.Errorf("Roll without replicas = %v, %q", got, plan.Progress)
	}
}

// A crash while leaving nodes are released leaves each of them forgotten by some staying nodes
// and not by others. The next step is what the crash left undone, on every node that still knows a
// leaving one; until then the pods are not released.
func TestAHalfDoneReleaseIsFinishedOnEveryRemainingNode(t *testing.T) {
	for _, tc := range []struct {
		name     string
		from, to Want
		// undone are the actions of the releasing step that the crash left untaken.
		undone []string
		// relearnt lets the cluster bus run before the next look, as when the operator is back
		// after the minute for which a forgotten node is not learnt again.
		relearnt bool
		next     []string
	}{{
		name: "a drained primary forgotten by one staying node",
		from: Want{Shards: 4, ReplicasPerShard: 0}, to: Want{Shards: 3, ReplicasPerShard: 0},
		undone: []string{"pod-01: CLUSTER FORGET id-pod-03", "pod-02: CLUSTER FORGET id-pod-03"},
		next:   []string{"pod-01: CLUSTER FORGET id-pod-03", "pod-02: CLUSTER FORGET id-pod-03"},
	}, {
		name: "a drained primary forgotten by none",
		from: Want{Shards: 4, ReplicasPerShard: 0}, to: Want{Shards: 3, ReplicasPerShard: 0},
		undone: []string{"pod-00: CLUSTER FORGET id-pod-03", "pod-01: CLUSTER FORGET id-pod-03", "pod-02: CLUSTER FORGET id-pod-03"},
		next:   []string{"pod-00: CLUSTER FORGET id-pod-03", "pod-01: CLUSTER FORGET id-pod-03", "pod-02: CLUSTER FORGET id-pod-03"},
	}, {
		name: "a drained primary forgotten by one node, which learnt it again from the others",
		from: Want{Shards: 4, ReplicasPerShard: 0}, to: Want{Shards: 3, ReplicasPerShard: 0},
		undone:   []string{"pod-01: CLUSTER FORGET id-pod-03", "pod-02: CLUSTER FORGET id-pod-03"},
		relearnt: true,
		next:     []string{"pod-00: CLUSTER FORGET id-pod-03", "pod-01: CLUSTER FORGET id-pod-03", "pod-02: CLUSTER FORGET id-pod-03"},
	}, {
		name: "leaving replicas, one still known by its former primary",
		from: Want{Shards: 3, ReplicasPerShard: 1}, to: Want{Shards: 3, ReplicasPerShard: 0},
		undone: []string{"pod-01: CLUSTER FORGET id-pod-04"},
		next:   []string{"pod-01: CLUSTER FORGET id-pod-04"},
	}, {
		name: "leaving replicas forgotten by all staying nodes but one",
		from: Want{Shards: 3, ReplicasPerShard: 1}, to: Want{Shards: 3, ReplicasPerShard: 0},
		undone: []string{"pod-02: CLUSTER FORGET id-pod-04"},
		next:   []string{"pod-02: CLUSTER FORGET id-pod-04"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			s := formedSim(t, tc.from)
			s.leave(tc.to.Nodes())
			var releasing Plan
			for step := 0; releasing.Actions == nil; step++ {
				plan := Form(tc.to, s.members())
				if step == 100 || plan.Waiting != "" || plan.Formed() {
					t.Fatalf("step %d: %v, waiting %q; want a step that releases", step, actions(plan), plan.Waiting)
				}
				if plan.Operation == Draining && slices.ContainsFunc(plan.Actions, func(a Action) bool { return a.Kind == KindForget }) {
					releasing = plan
					break
				}
				for _, a := range plan.Actions {
					s.apply(t, a)
				}
				s.gossip()
			}
			for _, a := range tc.undone {
				if !slices.Contains(actions(releasing), a) {
					t.Fatalf("the releasing step %v has no %q", actions(releasing), a)
				}
			}
			for _, a := range releasing.Actions {
				if !slices.Contains(tc.undone, a.String()) {
					s.apply(t, a)
				}
			}
			if tc.relearnt {
				s.gossip()
			}

			if Released(s.members()) {
				t.Fatal("released while a staying node still knows a leaving one")
			}
			next := Form(tc.to, s.members())
			if got := actions(next); !slices.Equal(got, tc.next) || next.Operation != Draining {
				t.Errorf("next step %v (%s), want %v (%s)", got, next.Operation, tc.next, Draining)
			}
			s.run(t, tc.to, 20)
			s.assertBalanced(t, tc.to)
			if !Released(s.members()) {
				t.Error("not released once formed")
			}
		})
	}
}

// nextStep is a state of the cluster and what Next makes of it: exactly these actions (none while
// it waits) and this verdict.
type nextStep struct {
	name    string
	want    Want
	members func(t *testing.T) []Member
	next    []string
	problem Problem
	message string // part of the verdict's message
}

func checkNext(t *testing.T, steps []nextStep) {
	t.Helper()
	for _, tc := range steps {
		t.Run(tc.name, func(t *testing.T) {
			plan, health := Next(tc.want, tc.members(t))
			if got := actions(plan); !slices.Equal(got, tc.next) {
				t.Errorf("actions\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.next, "\n"))
			}
			if health.Problem != tc.problem || !strings.Contains(health.Message, tc.message) {
				t.Errorf("verdict %s %q, want %s with %q", health.Problem, health.Message, tc.problem, tc.message)
			}
		})
	}
}

// A replica told CLUSTER FAILOVER takes over only once Valkey says so; until then the old primary
// is neither restarted nor released, and the step is the command again or a wait. While the
// servers disagree who the primary is (read in the moments some have taken in the failover and
// others not), nothing is done.
func TestAFailoverNotYetReportedIsWaitedFor(t *testing.T) {
	checkNext(t, []nextStep{{
		name: "upgrade: the old primary still reported primary: the replica is told again",
		want: Want{Shards: 3, ReplicasPerShard: 1},
		members: func(t *testing.T) []Member {
			s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 1})
			s.nodes["pod-00"].outdated = true
			return s.members()
		},
		next:    []string{"pod-03: CLUSTER FAILOVER"},
		problem: Upgrading, message: "5/6 nodes run the current pod template; next step: pod-03: CLUSTER FAILOVER",
	}, {
		name: "upgrade: the replica took over, the old primary still claims the slots: wait",
		want: Want{Shards: 2, ReplicasPerShard: 1},
		members: func(t *testing.T) []Member {
			s := formedSim(t, Want{Shards: 2, ReplicasPerShard: 1})
			s.nodes["pod-00"].outdated = true
			s.nodes["pod-02"].primary, s.nodes["pod-02"].slots = "", maps.Clone(s.nodes["pod-00"].slots)
			return s.members()
		},
		problem: Upgrading, message: "a failover to settle: pod-00 and pod-02 both serve slots",
	}, {
		// Shard 0 has a slot more than the others: ranked by slots, pod-02 would not count as
		// a primary, and its replica would be moved to pod-00.
		name: "upgrade of 3 shards: the replica took over the largest shard, the old primary still claims the slots: wait",
		want: Want{Shards: 3, ReplicasPerShard: 1},
		members: func(t *testing.T) []Member {
			s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 1})
			s.nodes["pod-00"].outdated = true
			s.nodes["pod-03"].primary, s.nodes["pod-03"].slots = "", maps.Clone(s.nodes["pod-00"].slots)
			return s.members()
		},
		problem: Upgrading, message: "a failover to settle: pod-00 and pod-03 both serve slots",
	}, {
		name: "upgrade: the old primary already replicates the new one, which still replicates it: wait",
		want: Want{Shards: 2, ReplicasPerShard: 1},
		members: func(t *testing.T) []Member {
			s := formedSim(t, Want{Shards: 2, ReplicasPerShard: 1})
			s.nodes["pod-00"].outdated = true
			s.nodes["pod-00"].primary, s.nodes["pod-00"].slots = id("pod-02"), map[int]bool{}
			return s.members()
		},
		problem: Upgrading, message: "a failover to settle: pod-00 and pod-02 each replicate the other",
	}, {
		name: "upgrade: the replica told to fail over has its link down: wait",
		want: Want{Shards: 3, ReplicasPerShard: 1},
		members: func(t *testing.T) []Member {
			s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 1})
			s.nodes["pod-00"].outdated = true
			s.nodes["pod-03"].linkDown = true
			return s.members()
		},
		problem: ReplicasMissing, message: "primary id-pod-00 has 0 of 1 replicas with their link up",
	}, {
		name: "replicas down: the staying replica took over, the leaving primary still claims the slots: wait",
		want: Want{Shards: 3, ReplicasPerShard: 0},
		members: func(t *testing.T) []Member {
			s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 1})
			s.apply(t, Action{Kind: KindFailover, On: "pod-03"})
			s.leave(3)
			s.nodes["pod-00"].primary, s.nodes["pod-00"].slots = "", maps.Clone(s.nodes["pod-03"].slots)
			if Released(s.members()) {
				t.Error("released while the leaving primary claims slots")
			}
			return s.members()
		},
		problem: Draining, message: "pods to remove: pod-03, pod-04, pod-05; a failover to settle: pod-00 and pod-03 both serve slots",
	}, {
		name: "replicas down: each of the two read as the other's replica: wait",
		want: Want{Shards: 3, ReplicasPerShard: 0},
		members: func(t *testing.T) []Member {
			s := formedSim(t, Want{Shards: 3, ReplicasPerShard: 1})
			s.apply(t, Action{Kind: KindFailover, On: "pod-03"})
			s.leave(3)
			s.nodes["pod-00"].primary, s.nodes["pod-00"].slots = id("pod-03"), map[int]bool{}
			s.nodes["pod-03"].primary, s.nodes["pod-03"].slots = id("pod-00"), map[int]bool{}
			return s.members()
		},
		problem: Draining, message: "a failover to settle: pod-00 and pod-03 each replicate the other",
	}})
}

// A primary's container restarted in place comes back as a new, fenced node at the old one's
// address, which the old one's peers then drop (noaddr). Its replica still replicates the old
// node and reconnects to that address: it takes over first, which needs no majority of
// primaries, so with one shard as with three; the fence goes only after, and the new node is
// healed in as a replica. (sim.apply fails the test if the fence goes while a member still
// replicates a node that is gone.)
func TestAPrimaryRestartedInPlaceIsReplacedByItsReplicaBeforeItServesReplicas(t *testing.T) {
	for _, shards := range []int{1, 2, 3} {
		t.Run(fmt.Sprintf("%d shards", shards), func(t *testing.T) {
			want := Want{Shards: shards, ReplicasPerShard: 1}
			s := formedSim(t, want)
			restarted := s.nodes["pod-00"]
			s.restartInPlace("pod-00")
			if got := actions(Form(want, s.members())); !slices.Equal(got, []string{fmt.Sprintf("pod-%02d: CLUSTER FAILOVER TAKEOVER", shards)}) {
				t.Errorf("first step %v, want the takeover by pod-00's replica", got)
			}
			s.run(t, want, 20)
			s.assertBalanced(t, want)
			if n := s.byID(restarted.id + "-restarted"); n.primary == "" || n.fenced {
				t.Errorf("the restarted node is not an unfenced replica: %+v", n)
			}
		})
	}
}

// gonePrimary is the node of a server that is gone, id-gone: a primary of slots 8192-16383, which
// the cluster agrees fails.
var gonePrimary = valkey.ClusterNode{ID: "id-gone", IP: "127.64.0.9", Port: 6379, Primary: true, Failing: true,
	Slots: []valkey.SlotRange{r(8192, 16383)}}

// midUpgrade is a cluster of the given servers whose pods pod-0 and pod-2 still run the older
// template, every server answering and every link up, each knowing the nodes given besides.
func midUpgrade(servers []server, known ...valkey.ClusterNode) []Member {
	members := healthy(world(servers...))
	for i := range members {
		members[i].Outdated = members[i].Pod == "pod-0" || members[i].Pod == "pod-2"
		members[i].Nodes = append(members[i].Nodes, known...)
	}
	return members
}

// In an ordered upgrade that has restarted shard 1's pods (pod-1, pod-3) and not yet shard 0's
// (pod-0, its replica pod-2), pod-1's server is gone and its pod back with a new, empty node: the
// shard is healed, its replica taking over and the new node attached, before any pod restarts.
func TestAnUpgradeHealsAReplacedPrimaryBeforeTheNextRestart(t *testing.T) {
	shard0 := []server{{pod: "pod-0", slots: []valkey.SlotRange{r(0, 8191)}}, {pod: "pod-2", replica: "pod-0"}}
	primary3 := server{pod: "pod-3", slots: []valkey.SlotRange{r(8192, 16383)}}
	cluster := func(more ...server) []server { return all(append(slices.Clone(shard0), more...)...) }
	checkNext(t, []nextStep{{
		// Of two primaries, one left is no majority: Valkey would never elect the replica.
		name: "its replica not taken over yet: it takes over",
		want: Want{Shards: 2, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			return midUpgrade(cluster(server{pod: "pod-1"}, server{pod: "pod-3", replica: "gone"}), gonePrimary)
		},
		next:    []string{"pod-3: CLUSTER FAILOVER TAKEOVER"},
		problem: Upgrading, message: "next step: pod-3: CLUSTER FAILOVER TAKEOVER",
	}, {
		name: "the old node lost its address to the new pod (noaddr): its replica takes over",
		want: Want{Shards: 2, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			noaddr := gonePrimary
			noaddr.IP, noaddr.Failing = "", false
			return midUpgrade(cluster(server{pod: "pod-1"}, server{pod: "pod-3", replica: "gone"}), noaddr)
		},
		next:    []string{"pod-3: CLUSTER FAILOVER TAKEOVER"},
		problem: Upgrading, message: "next step: pod-3: CLUSTER FAILOVER TAKEOVER",
	}, {
		name: "taken over, the old node still known: every member forgets it",
		want: Want{Shards: 2, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			demoted := gonePrimary
			demoted.Primary, demoted.PrimaryID, demoted.Slots = false, "id-pod-3", nil
			return midUpgrade(cluster(server{pod: "pod-1"}, primary3), demoted)
		},
		next: []string{"pod-0: CLUSTER FORGET id-gone", "pod-1: CLUSTER FORGET id-gone", "pod-2: CLUSTER FORGET id-gone",
			"pod-3: CLUSTER FORGET id-gone"},
		problem: Upgrading, message: "next step: pod-0: CLUSTER FORGET id-gone and 3 more",
	}, {
		name: "forgotten: the new node replicates the primary without a replica",
		want: Want{Shards: 2, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			return midUpgrade(cluster(server{pod: "pod-1"}, primary3))
		},
		next:    []string{"pod-1: CLUSTER REPLICATE id-pod-3"},
		problem: Upgrading, message: "next step: pod-1: CLUSTER REPLICATE id-pod-3",
	}, {
		name: "attached, its link not up yet: no pod restarts",
		want: Want{Shards: 2, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			m := midUpgrade(cluster(server{pod: "pod-1", replica: "pod-3"}, primary3))
			m[2].LinkUp = false // pod-1
			return m
		},
		problem: ReplicasMissing, message: "primary id-pod-3 has 0 of 1 replicas with their link up",
	}, {
		name: "healed: the upgrade goes on with shard 0's replica",
		want: Want{Shards: 2, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			return midUpgrade(cluster(server{pod: "pod-1", replica: "pod-3"}, primary3))
		},
		next:    []string{"delete pod pod-2"},
		problem: Upgrading, message: "2/4 nodes run the current pod template; next step: delete pod pod-2",
	}, {
		name: "no replicas: the departed primary is forgotten, its keys lost",
		want: Want{Shards: 2, ReplicasPerShard: 0},
		members: func(*testing.T) []Member {
			return midUpgrade(all(shard0[0], server{pod: "pod-1"}), gonePrimary)
		},
		next:    []string{"pod-0: CLUSTER FORGET id-gone", "pod-1: CLUSTER FORGET id-gone"},
		problem: Upgrading, message: "departed with no replica, their slots go to a new node without their keys: id-gone",
	}, {
		// Reported as scaling out: with the departed node forgotten, the cluster has fewer
		// primaries than shards.
		name: "no replicas: once forgotten, its slots go to the new node",
		want: Want{Shards: 2, ReplicasPerShard: 0},
		members: func(*testing.T) []Member {
			return midUpgrade(all(shard0[0], server{pod: "pod-1"}))
		},
		next:    []string{"pod-1: CLUSTER ADDSLOTSRANGE 8192-16383"},
		problem: ScalingOut, message: "next step: pod-1: CLUSTER ADDSLOTSRANGE 8192-16383",
	}})
}

// The first pod an ordered upgrade restarts, pod-2, the replica of pod-0, comes back as a new
// node: it is met, attached and in sync, its old node forgotten, before the next pod restarts.
func TestAnUpgradeWaitsForARestartedReplicaToSync(t *testing.T) {
	restarted := func(pod2 server, met bool, known ...valkey.ClusterNode) func(*testing.T) []Member {
		return func(*testing.T) []Member {
			servers := all(server{pod: "pod-0", slots: []valkey.SlotRange{r(0, 8191)}},
				server{pod: "pod-1", slots: []valkey.SlotRange{r(8192, 16383)}}, server{pod: "pod-3", replica: "pod-1"})
			if met {
				servers = all(append(servers, pod2)...)
			} else {
				servers = append(servers, pod2)
			}
			members := healthy(world(servers...))
			for i := range members {
				members[i].Outdated = members[i].Pod != "pod-2"
				if members[i].Pod != "pod-2" {
					members[i].Nodes = append(members[i].Nodes, known...)
				}
			}
			return members
		}
	}
	oldNode := valkey.ClusterNode{ID: "id-gone", IP: "127.64.0.9", Port: 6379, Failing: true, PrimaryID: "id-pod-0"}
	checkNext(t, []nextStep{{
		name:    "its old node still known: forgotten",
		want:    Want{Shards: 2, ReplicasPerShard: 1},
		members: restarted(server{pod: "pod-2"}, false, oldNode),
		next:    []string{"pod-0: CLUSTER FORGET id-gone", "pod-1: CLUSTER FORGET id-gone", "pod-3: CLUSTER FORGET id-gone"},
		problem: Upgrading, message: "next step: pod-0: CLUSTER FORGET id-gone and 2 more",
	}, {
		name:    "the new node not met yet: met",
		want:    Want{Shards: 2, ReplicasPerShard: 1},
		members: restarted(server{pod: "pod-2"}, false),
		next:    []string{"pod-0: CLUSTER MEET 127.64.0.2 6379"},
		problem: Upgrading, message: "next step: pod-0: CLUSTER MEET 127.64.0.2 6379",
	}, {
		name:    "met: attached to the primary without a replica",
		want:    Want{Shards: 2, ReplicasPerShard: 1},
		members: restarted(server{pod: "pod-2"}, true),
		next:    []string{"pod-2: CLUSTER REPLICATE id-pod-0"},
		problem: Upgrading, message: "next step: pod-2: CLUSTER REPLICATE id-pod-0",
	}, {
		name: "attached, its link down while it syncs: no pod restarts",
		want: Want{Shards: 2, ReplicasPerShard: 1},
		members: func(t *testing.T) []Member {
			m := restarted(server{pod: "pod-2", replica: "pod-0"}, true)(t)
			m[3].LinkUp = false // pod-2
			return m
		},
		problem: ReplicasMissing, message: "primary id-pod-0 has 0 of 1 replicas with their link up",
	}, {
		name:    "in sync: the next replica restarts",
		want:    Want{Shards: 2, ReplicasPerShard: 1},
		members: restarted(server{pod: "pod-2", replica: "pod-0"}, true),
		next:    []string{"delete pod pod-3"},
		problem: Upgrading, message: "1/4 nodes run the current pod template; next step: delete pod pod-3",
	}})
}

// A shard without a replica has none to take over from its primary, whose keys go when it
// restarts: it restarts last, once the shards with a replica have failed over, and the plan says
// so. Here pod-0's shard has no replica, and pod-1's has pod-2.
func TestAShardWithoutAReplicaRestartsItsPrimaryLast(t *testing.T) {
	bare := server{pod: "pod-0", slots: []valkey.SlotRange{r(0, 8191)}}
	for _, tc := range []struct {
		name     string
		servers  []server
		outdated []string
		// handover is how long ago the handover was recorded on every pod; 0: never.
		handover time.Duration
		next     string
		waiting  string
		progress string
	}{{
		name:     "every pod outdated: the replica first",
		servers:  []server{bare, {pod: "pod-1", slots: []valkey.SlotRange{r(8192, 16383)}}, {pod: "pod-2", replica: "pod-1"}},
		outdated: []string{"pod-0", "pod-1", "pod-2"},
		next:     "delete pod pod-2",
		progress: "0/3 nodes run the current pod template",
	}, {
		name:     "the replica restarted: the shard with a replica fails over before the other restarts",
		servers:  []server{bare, {pod: "pod-1", slots: []valkey.SlotRange{r(8192, 16383)}}, {pod: "pod-2", replica: "pod-1"}},
		outdated: []string{"pod-0", "pod-1"},
		next:     "pod-2: CLUSTER FAILOVER",
		progress: "1/3 nodes run the current pod template",
	}, {
		name:     "failed over, every member agreeing: the handover is recorded on the old primary's pod",
		servers:  []server{bare, {pod: "pod-1", replica: "pod-2"}, {pod: "pod-2", slots: []valkey.SlotRange{r(8192, 16383)}}},
		outdated: []string{"pod-0", "pod-1"},
		next:     "record the handover on pod pod-1",
		progress: "1/3 nodes run the current pod template",
	}, {
		name:     "recorded, within the grace: clients learn the new primary from the old one's MOVED",
		servers:  []server{bare, {pod: "pod-1", replica: "pod-2"}, {pod: "pod-2", slots: []valkey.SlotRange{r(8192, 16383)}}},
		outdated: []string{"pod-0", "pod-1"},
		handover: HandoverGrace - time.Second,
		waiting:  "clients to learn that pod-1 no longer serves its slots before it restarts (1s left)",
		progress: "1/3 nodes run the current pod template",
	}, {
		name:     "the grace over: the old primary restarts as a replica",
		servers:  []server{bare, {pod: "pod-1", replica: "pod-2"}, {pod: "pod-2", slots: []valkey.SlotRange{r(8192, 16383)}}},
		outdated: []string{"pod-0", "pod-1"},
		handover: HandoverGrace,
		next:     "delete pod pod-1",
		progress: "1/3 nodes run the current pod template",
	}, {
		name:     "only the primary without a replica left: it restarts, its keys lost",
		servers:  []server{bare, {pod: "pod-1", replica: "pod-2"}, {pod: "pod-2", slots: []valkey.SlotRange{r(8192, 16383)}}},
		outdated: []string{"pod-0"},
		next:     "delete pod pod-0",
		progress: "2/3 nodes run the current pod template; pod-0 is a primary without a replica: the keys of its 8192 slots are lost when it restarts",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			members := healthy(world(all(tc.servers...)...))
			for i := range members {
				members[i].Outdated = slices.Contains(tc.outdated, members[i].Pod)
				members[i].HandoverSeen, members[i].SinceHandover = tc.handover > 0, tc.handover
			}
			plan := Roll(members)
			var want []string
			if tc.next != "" {
				want = []string{tc.next}
			}
			if got := actions(plan); !slices.Equal(got, want) || plan.Waiting != tc.waiting || plan.Progress != tc.progress {
				t.Errorf("Roll = %v, waiting %q, %q; want %v, waiting %q, %q", got, plan.Waiting, plan.Progress, want, tc.waiting, tc.progress)
			}
			// Within the grace, the plan says when it ends, for the operator to look again then.
			var waitingFor time.Duration
			if tc.waiting != "" {
				waitingFor = HandoverGrace - tc.handover
			}
			if plan.WaitingFor != waitingFor {
				t.Errorf("Roll waits for %s, want %s", plan.WaitingFor, waitingFor)
			}
		})
	}
}

// The source of a migration dies with a slot open and no replica to take over. The target claims
// the slot before the dead node is forgotten, which in Valkey would end the import: the keys it
// received stay served. Only then is the dead node forgotten, its other slots lost with it.
func TestAnImportFromADepartedPrimaryIsClaimedBeforeItIsForgotten(t *testing.T) {
	want := Want{Shards: 2, ReplicasPerShard: 0}
	cluster := func(pod0 func(self *valkey.ClusterNode)) []Member {
		members := healthy(world(all(server{pod: "pod-0", slots: []valkey.SlotRange{r(0, 8191)}}, server{pod: "pod-1"})...))
		for i := range members {
			members[i].Nodes = append(members[i].Nodes, gonePrimary)
		}
		for j := range members[0].Nodes {
			if members[0].Nodes[j].Myself {
				pod0(&members[0].Nodes[j])
			}
		}
		return members
	}
	importing := cluster(func(self *valkey.ClusterNode) { self.Importing = map[int]string{8192: "id-gone"} })
	plan := Form(want, importing)
	if got := actions(plan); !slices.Equal(got, []string{"pod-0: CLUSTER SETSLOT 8192 NODE id-pod-0"}) || len(plan.Lost) > 0 {
		t.Errorf("with the import open: %v, lost %v; want the importer to claim the slot, nothing lost yet", got, plan.Lost)
	}
	claimed := cluster(func(self *valkey.ClusterNode) { self.Slots = append(self.Slots, r(8192, 8192)) })
	plan = Form(want, claimed)
	if got := actions(plan); !slices.Equal(got, []string{"pod-0: CLUSTER FORGET id-gone", "pod-1: CLUSTER FORGET id-gone"}) ||
		!slices.Equal(plan.Lost, []string{"id-gone"}) {
		t.Errorf("with the slot claimed: %v, lost %v; want the dead node forgotten and its slots given up", got, plan.Lost)
	}
}

// unreachable marks, in every member's view, the node of pod as the servers see a node whose
// server stopped answering: after the node timeout without a reply (fail?), with no bus link; and
// the member of pod as one whose server the operator cannot ask.
func unreachable(members []Member, pod string, suspected bool) []Member {
	for i := range members {
		if members[i].Pod == pod {
			members[i].Nodes = nil
			continue
		}
		for j := range members[i].Nodes {
			if n := &members[i].Nodes[j]; n.ID == id(pod) {
				n.Suspected, n.Connected = suspected, !suspected
			}
		}
	}
	return members
}

// withOffsets sets the replicas' replication offsets, by pod.
func withOffsets(members []Member, offsets map[string]int64) []Member {
	for i := range members {
		if offset, ok := offsets[members[i].Pod]; ok {
			members[i].ReplOffset = offset
		}
	}
	return members
}

// Valkey fails a shard over only when a majority of the primaries that serve slots agree that
// its primary fails: a cluster of one or two shards that loses a primary never gets there. The
// operator then promotes the replica furthest ahead itself, once every member has gone the node
// timeout without reaching the primary, and never while the operator can still ask the primary's
// server (a primary cut off from its replica but still answering is not replaced: no two
// primaries of the same slots).
func TestAPrimaryNoMemberReachesIsTakenOverWhenValkeyHasNoQuorum(t *testing.T) {
	oneShard := func(replicas ...string) []server {
		s := []server{{pod: "pod-0", slots: []valkey.SlotRange{r(0, 16383)}}}
		for _, pod := range replicas {
			s = append(s, server{pod: pod, replica: "pod-0"})
		}
		return all(s...)
	}
	twoShards := all(server{pod: "pod-0", slots: []valkey.SlotRange{r(0, 8191)}}, server{pod: "pod-1", slots: []valkey.SlotRange{r(8192, 16383)}},
		server{pod: "pod-2", replica: "pod-0"}, server{pod: "pod-3", replica: "pod-1"})
	threeShards := all(server{pod: "pod-0", slots: []valkey.SlotRange{r(0, 5460)}}, server{pod: "pod-1", slots: []valkey.SlotRange{r(5461, 10922)}},
		server{pod: "pod-2", slots: []valkey.SlotRange{r(10923, 16383)}},
		server{pod: "pod-3", replica: "pod-0"}, server{pod: "pod-4", replica: "pod-1"}, server{pod: "pod-5", replica: "pod-2"})
	checkNext(t, []nextStep{{
		name: "1×1, within the node timeout: wait",
		want: Want{Shards: 1, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			return unreachable(healthy(world(oneShard("pod-1")...)), "pod-0", false)
		},
		problem: Healing, message: "cannot ask pod-0 for its cluster state",
	}, {
		name: "1×1, past the node timeout: the replica takes over",
		want: Want{Shards: 1, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			return unreachable(healthy(world(oneShard("pod-1")...)), "pod-0", true)
		},
		next:    []string{"pod-1: CLUSTER FAILOVER TAKEOVER"},
		problem: Healing, message: "next step: pod-1: CLUSTER FAILOVER TAKEOVER",
	}, {
		name: "1×2: only the replica furthest ahead takes over",
		want: Want{Shards: 1, ReplicasPerShard: 2},
		members: func(*testing.T) []Member {
			m := unreachable(healthy(world(oneShard("pod-1", "pod-2")...)), "pod-0", true)
			return withOffsets(m, map[string]int64{"pod-1": 100, "pod-2": 200})
		},
		next:    []string{"pod-2: CLUSTER FAILOVER TAKEOVER"},
		problem: Healing, message: "next step: pod-2: CLUSTER FAILOVER TAKEOVER",
	}, {
		name: "2×1, past the node timeout: one primary of two is no majority, the replica takes over",
		want: Want{Shards: 2, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			return unreachable(healthy(world(slices.Clone(twoShards)...)), "pod-1", true)
		},
		next:    []string{"pod-3: CLUSTER FAILOVER TAKEOVER"},
		problem: Healing, message: "next step: pod-3: CLUSTER FAILOVER TAKEOVER",
	}, {
		name: "3×1: two primaries of three are a majority, Valkey fails over by itself: wait",
		want: Want{Shards: 3, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			return unreachable(healthy(world(slices.Clone(threeShards)...)), "pod-0", true)
		},
		problem: Healing, message: "cannot ask pod-0 for its cluster state",
	}, {
		name: "1×1 partitioned: the replica lost the primary, which still answers the operator: no takeover",
		want: Want{Shards: 1, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			m := healthy(world(oneShard("pod-1")...))
			for j := range m[1].Nodes {
				if n := &m[1].Nodes[j]; n.ID == id("pod-0") {
					n.Suspected, n.Connected = true, false
				}
			}
			m[1].LinkUp = false
			return m
		},
		problem: SlotsUnserved, message: "0 of 16384 slots are served by reachable primaries",
	}, {
		name: "2×1, the primary's pod replaced at a new address, the old node unreached by all: the replica takes over",
		want: Want{Shards: 2, ReplicasPerShard: 1},
		members: func(*testing.T) []Member {
			gone := gonePrimary
			gone.Failing, gone.Suspected = false, true
			return midUpgrade(all(server{pod: "pod-0", slots: []valkey.SlotRange{r(0, 8191)}}, server{pod: "pod-2", replica: "pod-0"},
				server{pod: "pod-1"}, server{pod: "pod-3", replica: "gone"}), gone)
		},
		next:    []string{"pod-3: CLUSTER FAILOVER TAKEOVER"},
		problem: Upgrading, message: "next step: pod-3: CLUSTER FAILOVER TAKEOVER",
	}})
}

// A restore's servers start with keys in some of their shard's slots, which they claim; the
// rest of each shard's slots go back to the server that holds its keys, not spread anew: the
// cluster forms with the backup's layout, every restored server a primary, and no slot moves.
func TestRestoredServersGetTheirShardsBackWithoutMovingAKey(t *testing.T) {
	want := Want{Shards: 3, ReplicasPerShard: 1, Restored: map[string][]valkey.SlotRange{
		"pod-00": {r(0, 5460)}, "pod-01": {r(5461, 10922)}, "pod-02": {r(10923, 16383)},
	}}
	s := newSim()
	s.add(simPods(0, want.Nodes())...)
	// Keys in every seventh slot of each shard (a shard with no key claims nothing).
	for pod, ranges := range want.Restored {
		for slot := ranges[0].Start; slot <= ranges[0].End; slot += 7 {
			s.nodes[pod].slots[slot] = true
		}
	}
	steps := 0
	for step := 1; ; step++ {
		plan := Form(want, s.members())
		if plan.Formed() {
			break
		}
		if plan.Waiting != "" && s.finishSyncs() {
			continue
		}
		if plan.Waiting != "" || step > 20 {
			t.Fatalf("step %d: %+v", step, plan)
		}
		for _, a := range plan.Actions {
			if a.Kind == KindMigrate {
				t.Fatalf("step %d moves slots: %s", step, a)
			}
			s.apply(t, a)
		}
		s.gossip()
		steps++
	}
	s.assertBalanced(t, want)
	for pod, ranges := range want.Restored {
		n := s.nodes[pod]
		if n.primary != "" || len(n.slots) != ranges[0].Len() || !n.slots[ranges[0].Start] || !n.slots[ranges[0].End] {
			t.Errorf("%s serves %d slots, replicating %q; want its shard %v as a primary", pod, len(n.slots), n.primary, ranges)
		}
	}
	t.Logf("formed in %d steps", steps)
}

// atomicSim is a formed cluster whose servers all run a release with atomic slot migration.
func atomicSim(t *testing.T, want Want) *sim {
	s := formedSim(t, want)
	s.version = "9.1.2"
	return s
}

// slotJobs counts a plan's actions of each kind that moves slots.
func slotJobs(plan Plan) (atomic, keyByKey, cancels int) {
	for _, a := range plan.Actions {
		switch a.Kind { //nolint:exhaustive // the kinds that move slots
		case KindMigrateSlots:
			atomic++
		case KindMigrate:
			keyByKey++
		case KindCancelMigrations:
			cancels++
		}
	}
	return atomic, keyByKey, cancels
}

// On servers that all migrate atomically, a scale-out and a scale-in move slots only with atomic
// jobs, one per source and target, all started at once, and the plan waits while they run; a
// cluster with a server of an earlier release moves them key by key.
func TestAScaleMovesSlotsAtomicallyWhenEveryServerCan(t *testing.T) {
	from, to := Want{Shards: 3, ReplicasPerShard: 1}, Want{Shards: 5, ReplicasPerShard: 1}
	s := atomicSim(t, from)
	s.add(simPods(from.Nodes(), to.Nodes())...)
	jobs, stepsWithJobs := 0, 0
	for step := 1; ; step++ {
		if step > 50 {
			t.Fatal("not formed after 50 steps")
		}
		plan := Form(to, s.members())
		if plan.Formed() {
			break
		}
		atomic, keyByKey, _ := slotJobs(plan)
		if keyByKey > 0 {
			t.Fatalf("step %d moves keys one by one: %v", step, actions(plan))
		}
		jobs += atomic
		stepsWithJobs += boolInt(atomic > 0)
		if running := s.jobsRunning(); plan.JobsRunning != (running && len(plan.Actions) == 0) {
			t.Errorf("step %d: JobsRunning %t with jobs running %t and actions %v", step, plan.JobsRunning, running, actions(plan))
		}
		if plan.Waiting != "" {
			if !s.finishSyncs() && !s.endJobs(t, valkey.MigrationSucceeded) {
				t.Fatalf("step %d waits on nothing: %s", step, plan.Waiting)
			}
			continue
		}
		for _, a := range plan.Actions {
			s.apply(t, a)
		}
		s.gossip()
	}
	s.assertBalanced(t, to)
	// Each of the 3 sources gives to each of the 2 new primaries at most once, every job started
	// at once.
	if jobs < 2 || jobs > 6 || stepsWithJobs != 1 {
		t.Errorf("the scale-out took %d atomic jobs in %d steps, want one per source and target, in one step", jobs, stepsWithJobs)
	}

	s.leave(from.Nodes())
	s.run(t, from, 50)
	s.assertBalanced(t, from)

	mixed := atomicSim(t, from)
	mixed.add(simPods(from.Nodes(), to.Nodes())...)
	for step := 1; step <= 20; step++ {
		members := mixed.members()
		members[len(members)-1].Version = "8.1.4"
		plan := Form(to, members)
		if atomic, keyByKey, _ := slotJobs(plan); atomic > 0 || keyByKey > 0 {
			if atomic > 0 {
				t.Errorf("with a server on 8.1 the scale-out starts atomic jobs: %v", actions(plan))
			}
			return
		}
		mixed.advance(t, plan)
	}
	t.Error("with a server on 8.1 no slot moved in 20 steps")
}

// A scale-out taken back while its jobs run (the spec's shards lowered again, so that the new
// pods leave) cancels them: their slots stay with the sources, and the cluster ends balanced on
// the shards it had.
func TestAScaleOutTakenBackCancelsItsRunningJobs(t *testing.T) {
	s, from, _ := scalingOutAtomically(t)
	s.leave(from.Nodes())
	plan := Form(from, s.members())
	if _, _, cancels := slotJobs(plan); cancels == 0 {
		t.Fatalf("taken back, the scale-out's running jobs are not cancelled: %v (%s)", actions(plan), plan.Waiting)
	}
	for _, a := range plan.Actions {
		s.apply(t, a)
	}
	for pod, n := range s.nodes {
		if len(n.jobs) > 0 && n.jobs[0].Running() {
			t.Errorf("%s still runs %+v", pod, n.jobs[0])
		}
	}
	s.run(t, from, 50)
	s.assertBalanced(t, from)
}

// A job that failed is started again, on what the servers then report, only once a while has
// passed since it failed (a late failure cost a fork and a copy of the slots), and the progress
// says why it failed.
func TestAFailedJobIsRetriedAfterADelayAndItsFailureShown(t *testing.T) {
	s, _, to := scalingOutAtomically(t)
	s.endJobs(t, valkey.MigrationFailed)
	for _, n := range s.nodes {
		if len(n.jobs) > 0 {
			n.jobs[0].Message = "the target is out of memory"
		}
	}
	plan := Form(to, s.members())
	if atomic, _, _ := slotJobs(plan); atomic > 0 || !strings.Contains(plan.Waiting+plan.Progress, "failed: the target is out of memory") {
		t.Errorf("right after a failure: %d jobs started, waiting %q, progress %q", atomic, plan.Waiting, plan.Progress)
	}
	for _, n := range s.nodes {
		if len(n.jobs) > 0 {
			n.jobs[0].Updated = simNow.Add(-migrationRetryDelay)
		}
	}
	if atomic, _, _ := slotJobs(Form(to, s.members())); atomic == 0 {
		t.Errorf("a while after the failure no job is started again")
	}
}

// A scale-out whose move waits for a new shard's replica to take its first copy is still moving
// slots: the plan says so, and is looked at again as soon as during a migration, not at the pace
// of a cluster that waits on its pods.
func TestAMoveHeldForASyncingReplicaIsStillMigrating(t *testing.T) {
	from, to := Want{Shards: 3, ReplicasPerShard: 1}, Want{Shards: 5, ReplicasPerShard: 1}
	s := atomicSim(t, from)
	s.add(simPods(from.Nodes(), to.Nodes())...)
	for step := 1; step <= 30; step++ {
		plan := Form(to, s.members())
		if strings.Contains(plan.Waiting, "replicas to finish their first sync") {
			if !plan.Migrating {
				t.Errorf("step %d waits for a replica's first sync before moving slots, not marked as migrating: %s", step, plan.Waiting)
			}
			return
		}
		s.advance(t, plan)
	}
	t.Fatal("in 30 steps the scale-out never waited for a replica's first sync")
}

// A node that has just joined learns who serves which slots from the owners' own pings, a while
// after it met them, and until then refuses a job's handshake: no job towards it starts before
// its view lists the source serving the slots, nor any other job, since all start together; and
// the plan says what it waits for.
func TestAJobWaitsUntilItsTargetKnowsWhoServesTheSlots(t *testing.T) {
	jobsWaitWhileTargetIs(t, "knows no slot's owner", "to learn that", func(m *Member) {
		for j := range m.Nodes {
			if !m.Nodes[j].Myself {
				m.Nodes[j].Slots = nil // the others' pings not come yet
			}
		}
	})
}

// A target that has just joined may say cluster_state:fail for a while (Valkey's rejoin delay,
// up to a node timeout) while it knows who serves every slot: no job starts towards it until it
// says ok, since it would answer the clients of the slots it takes over CLUSTERDOWN.
func TestAJobWaitsUntilItsTargetSaysItsClusterIsOK(t *testing.T) {
	jobsWaitWhileTargetIs(t, "says cluster_state:fail", "to say cluster_state:ok", func(m *Member) { m.State = "fail" })
}

// jobsWaitWhileTargetIs scales 3 → 5 atomically with the first new primary's view held back by
// hold: no job starts, not even towards the other new primary (all start together), until the
// plan waits with a message that names the pod and says waiting; and once the view is whole,
// the jobs start.
func jobsWaitWhileTargetIs(t *testing.T, held, waiting string, hold func(*Member)) {
	t.Helper()
	from, to := Want{Shards: 3, ReplicasPerShard: 0}, Want{Shards: 5, ReplicasPerShard: 0}
	s := atomicSim(t, from)
	joining := simPods(from.Nodes(), to.Nodes())
	s.add(joining...)
	for step := 1; step <= 20; step++ {
		members := s.members()
		for i := range members {
			if members[i].Pod == joining[0] {
				hold(&members[i])
			}
		}
		plan := Form(to, members)
		if atomic, _, _ := slotJobs(plan); atomic > 0 {
			t.Fatalf("step %d starts jobs while %s %s: %v", step, joining[0], held, actions(plan))
		}
		if strings.Contains(plan.Waiting, joining[0]+" "+waiting) {
			if atomic, _, _ := slotJobs(Form(to, s.members())); atomic == 0 {
				t.Errorf("once %s no longer %s, no job starts", joining[0], held)
			}
			return
		}
		s.advance(t, plan)
	}
	t.Fatalf("in 20 steps the plan never waited for %s %s", joining[0], waiting)
}

// A job that failed is started again only once the others have ended: while one runs its target
// serves none of its slots, and a move computed then would give that target more than its share.
func TestAFailedJobWaitsForTheOthersToEnd(t *testing.T) {
	s, _, to := scalingOutAtomically(t)
	var failed *simNode
	for _, n := range s.nodes {
		if len(n.jobs) > 0 && n.jobs[0].Running() {
			failed = n
			break
		}
	}
	failed.jobs[0].State, failed.jobs[0].Updated = valkey.MigrationFailed, simNow.Add(-migrationRetryDelayMax)
	plan := Form(to, s.members())
	if atomic, _, _ := slotJobs(plan); atomic > 0 {
		t.Errorf("with the other jobs running, %d started: %v", atomic, actions(plan))
	}
	s.endJobs(t, valkey.MigrationSucceeded)
	if atomic, _, _ := slotJobs(Form(to, s.members())); atomic == 0 {
		t.Errorf("once the others ended, %s's job is not started again", failed.pod)
	}
}

// scalingOutAtomically is a formed 3-shard cluster on Valkey 9 scaling out to 4 shards, with its
// atomic jobs started.
func scalingOutAtomically(t *testing.T) (s *sim, from, to Want) {
	t.Helper()
	from, to = Want{Shards: 3, ReplicasPerShard: 0}, Want{Shards: 4, ReplicasPerShard: 0}
	s = atomicSim(t, from)
	s.add(simPods(from.Nodes(), to.Nodes())...)
	s.jobsStarted(t, to)
	return s, from, to
}

// jobsStarted drives a scale-out on s until its first atomic jobs start, and returns them by
// source pod.
func (s *sim) jobsStarted(t *testing.T, to Want) map[string]valkey.SlotMigration {
	t.Helper()
	for step := 1; step <= 20; step++ {
		plan := Form(to, s.members())
		s.advance(t, plan)
		if atomic, _, _ := slotJobs(plan); atomic > 0 {
			jobs := map[string]valkey.SlotMigration{}
			for pod, n := range s.nodes {
				if len(n.jobs) > 0 && n.jobs[0].Running() {
					jobs[pod] = n.jobs[0]
				}
			}
			return jobs
		}
	}
	t.Fatal("no atomic job started in 20 steps")
	return nil
}

// The target of running jobs holds no slot of theirs until they end: an empty node that comes
// meanwhile (a replica restarted in place, a new node with an earlier name) is not chosen over
// it, and it is neither made a replica nor its jobs cancelled.
func TestTheTargetOfRunningJobsStaysTheTarget(t *testing.T) {
	from, to := Want{Shards: 3, ReplicasPerShard: 1}, Want{Shards: 4, ReplicasPerShard: 1}
	s := atomicSim(t, from)
	s.add(simPods(from.Nodes(), to.Nodes())...)
	jobs := s.jobsStarted(t, to)
	var target string
	for _, job := range jobs {
		target = s.byID(job.TargetID).pod
	}
	var replica string
	for _, pod := range slices.Sorted(maps.Keys(s.nodes)) {
		if n := s.nodes[pod]; n.primary != "" && pod < target {
			replica = pod
			break
		}
	}
	s.restartInPlace(replica)
	for step := 1; step <= 10; step++ {
		plan := Form(to, s.members())
		for _, a := range plan.Actions {
			if a.On == target && a.Kind == KindReplicate || a.Kind == KindCancelMigrations {
				t.Fatalf("step %d, with %s restarted in place while jobs run to %s: %s", step, replica, target, a)
			}
			s.apply(t, a)
		}
		s.gossip()
		if plan.Waiting != "" && !s.finishSyncs() {
			break
		}
	}
	s.endJobs(t, valkey.MigrationSucceeded)
	s.run(t, to, 50)
	s.assertBalanced(t, to)
}

// A job whose source has paused its writes for the target to take over is not cancelled, even
// when the spec no longer wants its target: the target may still take the slots over.
func TestAJobHandingOverIsNotCancelled(t *testing.T) {
	s, from, _ := scalingOutAtomically(t)
	for _, n := range s.nodes {
		if len(n.jobs) > 0 && n.jobs[0].Running() {
			n.jobs[0].State = valkey.MigrationPaused
		}
	}
	s.leave(from.Nodes())
	if _, _, cancels := slotJobs(Form(from, s.members())); cancels > 0 {
		t.Error("jobs handing over are cancelled")
	}
}

// A source whose jobs failed time after time waits longer before each retry: 10 s after one
// failure, 20 s after two in a row.
func TestRetriesAfterFailuresInARowWaitLonger(t *testing.T) {
	self := valkey.ClusterNode{ID: "id-a", Myself: true}
	failed := valkey.SlotMigration{Export: true, SourceID: self.ID, State: valkey.MigrationFailed, Updated: simNow}
	for _, tc := range []struct {
		failures int
		after    time.Duration
		waits    bool
	}{
		{1, 9 * time.Second, true}, {1, 10 * time.Second, false},
		{2, 19 * time.Second, true}, {2, 20 * time.Second, false},
		{20, 4 * time.Minute, true}, {20, 5 * time.Minute, false},
	} {
		m := Member{Nodes: []valkey.ClusterNode{self}, Observed: simNow.Add(tc.after)}
		for range tc.failures {
			m.Migrations = append(m.Migrations, failed)
		}
		m.Migrations = append(m.Migrations, valkey.SlotMigration{Export: true, SourceID: self.ID, State: valkey.MigrationSucceeded})
		if got := retryingAfterFailure(&m); got != tc.waits {
			t.Errorf("%d failures, %s after the last: waiting %t, want %t", tc.failures, tc.after, got, tc.waits)
		}
	}
}
