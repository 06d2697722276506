package topology

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"example.com/cache-operator/internal/valkey"
)

// migrationRetryDelay is how long after a failed atomic slot migration the same source is given
// another, doubled for each failure in a row before it, up to migrationRetryDelayMax: a job that
// fails late (the target out of memory, say) has cost a fork of the source and a copy of its
// slots, which a retry at every pass would repeat without rest.
const (
	migrationRetryDelay    = 10 * time.Second
	migrationRetryDelayMax = 5 * time.Minute
)

// failureShown is how long after it failed a source's last job is named in the progress.
const failureShown = 10 * time.Minute

// migratesAtomically reports whether every member runs a release with atomic slot migration
// (valkey.MigratesAtomically), and so moves slots with it. A cluster with one member on an earlier
// release, as halfway through an upgrade, moves them key by key (rebalance): a job needs both its
// primaries to know the commands, and a replica of an earlier release could not follow a primary
// that took slots over with them.
func migratesAtomically(members []Member) bool {
	for i := range members {
		if !valkey.MigratesAtomically(members[i].Version) {
			return false
		}
	}
	return len(members) > 0
}

// moveSlots moves slots towards the balance of balancingMoves: atomically where every member can
// and the operator lets it (migrateAtomically), key by key otherwise (rebalance). Jobs still
// running are waited for, or cancelled, whatever the path: a key-by-key migration of a slot that
// a job moves would be refused.
func moveSlots(want Want, members []Member) (Plan, bool) {
	atomically := !want.KeyByKey && migratesAtomically(members)
	if atomically || jobsRunning(members) {
		return migrateAtomically(want, members, atomically)
	}
	return rebalance(want, members)
}

// migrateAtomically is rebalance with Valkey 9's atomic slot migration: each source that still
// gives is given one job per target it gives to, with all the slots that target gets from it, all
// at once, side by side with the other sources' jobs (a source runs its own side by side too, each
// with its own slots). A job is the source's to run; the plan starts it and follows it in the
// source's log (Member.Migrations), which is how it resumes after a crash of the operator: no
// job starts while another runs, and a job that failed is started again on what the servers then
// report (the slots a failed job held stay with its source; a source that failed
// over has a new primary with an empty log). A running job whose target the spec no longer wants
// is cancelled, and leaves its slots with the source. Unless start, it starts no job, and only
// sees the running ones through.
func migrateAtomically(want Want, members []Member, start bool) (Plan, bool) {
	isTarget := map[*Member]bool{}
	for _, t := range targets(want, members) {
		isTarget[t] = true
	}
	byID := membersByID(members)
	var actions []Action
	busy := map[*Member]bool{}
	for i := range members {
		m := &members[i]
		unwanted, handingOver := false, false
		for _, job := range runningExports(m) {
			busy[m] = true
			to := byID[job.TargetID]
			unwanted = unwanted || to == nil || !isTarget[to]
			// Not once the source has paused its writes for the target to take over: a cancel
			// then would let them go on while the target may take the slots over still.
			handingOver = handingOver || job.State == valkey.MigrationPaused || job.State == valkey.MigrationGranted
		}
		if unwanted && !handingOver {
			// CANCELSLOTMIGRATIONS cancels every job of the source: those towards a target still
			// wanted start again, on what the servers then report.
			actions = append(actions, Action{Kind: KindCancelMigrations, On: m.Pod})
		}
	}
	moves := balancingMoves(want, members)
	if len(moves) == 0 && len(busy) == 0 {
		return Plan{}, true
	}
	if !start || len(busy) > 0 {
		// A job's target serves none of its slots until the job ends: moves computed while one
		// runs would give its target more than its share, and slots a second hop (seen when two
		// jobs started a pass apart).
		moves = nil
	}
	type pair struct{ from, to *Member }
	slots := map[pair][]int{}
	var pairs []pair
	for _, mv := range moves {
		if retryingAfterFailure(mv.from) {
			continue
		}
		p := pair{mv.from, mv.to}
		if _, ok := slots[p]; !ok {
			pairs = append(pairs, p)
		}
		slots[p] = append(slots[p], mv.slot)
	}
	// The jobs start together, once every target knows who serves the slots it gets, for the
	// same reason, and says its cluster is ok: a node that has just joined may say fail for up
	// to a node timeout (Valkey's rejoin delay), and a target still saying so when a job hands it
	// the slots would answer their clients CLUSTERDOWN.
	var learning []string
	for _, p := range pairs {
		switch {
		case !seesServing(p.to, p.from, slots[p]):
			learning = append(learning, fmt.Sprintf("%s to learn that %s serves the slots it gives it", p.to.Pod, p.from.Pod))
		case p.to.State != clusterStateOK:
			learning = append(learning, fmt.Sprintf("%s to say cluster_state:ok before it takes slots over (it says %q)", p.to.Pod, p.to.State))
		}
	}
	if len(learning) == 0 {
		for _, p := range pairs {
			target, _ := p.to.self()
			actions = append(actions, Action{Kind: KindMigrateSlots, On: p.from.Pod, MigrateSlots: &SlotJob{
				Target: p.to.Pod, TargetID: target.ID, Slots: rangesOfSlots(slots[p]),
			}})
		}
	}
	plan := Plan{Actions: actions, Migrating: true, JobsRunning: len(actions) == 0 && len(busy) > 0}
	if len(actions) == 0 {
		if jobs := describeJobs(members); jobs != "" || len(learning) == 0 {
			learning = append(learning, "atomic slot migrations to end, or a failed one's retry: "+jobs)
		}
		plan.Waiting = strings.Join(learning, "; ")
	}
	return plan, false
}

// seesServing reports whether the target's server lists the source as serving every one of the
// slots. A job's target refuses the handshake ("Slot N has no node served") for a slot whose owner
// it does not know, and a node that has just joined learns who serves what only from the owners'
// own pings, up to half a node timeout after it met them: a job started before then fails, and
// costs the source a fork for nothing.
func seesServing(target, source *Member, slots []int) bool {
	self, ok := source.self()
	if !ok {
		return false
	}
	for _, n := range target.Nodes {
		if n.ID == self.ID {
			return !slices.ContainsFunc(slots, func(slot int) bool { return !serves(n, slot) })
		}
	}
	return false
}

// jobsRunning reports whether a member's server runs an atomic slot migration job as a source.
func jobsRunning(members []Member) bool {
	for i := range members {
		if len(runningExports(&members[i])) > 0 {
			return true
		}
	}
	return false
}

// importingAtomically are the node IDs of the targets of the atomic slot migration jobs running:
// a target serves no slot of a job, and shows no mark of one, until the job ends.
func importingAtomically(members []Member) map[string]bool {
	importing := map[string]bool{}
	for i := range members {
		for _, job := range runningExports(&members[i]) {
			importing[job.TargetID] = true
		}
	}
	return importing
}

// runningExports are the jobs the member's server runs as a source.
func runningExports(m *Member) []valkey.SlotMigration {
	self, _ := m.self()
	var running []valkey.SlotMigration
	for _, job := range m.Migrations {
		if job.Export && job.SourceID == self.ID && job.Running() {
			running = append(running, job)
		}
	}
	return running
}

// lastExport is the newest job the member's server ran as a source, if any.
func lastExport(m *Member) (valkey.SlotMigration, bool) {
	self, _ := m.self()
	for _, job := range m.Migrations { // newest first
		if job.Export && job.SourceID == self.ID {
			return job, true
		}
	}
	return valkey.SlotMigration{}, false
}

// retryingAfterFailure reports whether the member's last job as a source failed less than its
// retry delay before it was observed: migrationRetryDelay, doubled for each failure before it in a
// row, up to migrationRetryDelayMax.
func retryingAfterFailure(m *Member) bool {
	self, _ := m.self()
	var failures []valkey.SlotMigration // the last ones, in a row, newest first
	for _, job := range m.Migrations {
		if !job.Export || job.SourceID != self.ID {
			continue
		}
		if job.State != valkey.MigrationFailed {
			break
		}
		failures = append(failures, job)
	}
	if len(failures) == 0 {
		return false
	}
	delay := migrationRetryDelay
	for range failures[1:] {
		delay = min(2*delay, migrationRetryDelayMax)
	}
	return m.Observed.Sub(failures[0].Updated) < delay
}

// describeJobs sums up, for a message, the atomic slot migrations that run, and the last one of
// each other source if it failed lately: "1024 slots from a-0 to a-3 (snapshotting)".
func describeJobs(members []Member) string {
	byID := membersByID(members)
	podOf := func(id string) string {
		if m := byID[id]; m != nil {
			return m.Pod
		}
		return id
	}
	var parts []string
	for i := range members {
		m := &members[i]
		running := runningExports(m)
		for _, job := range running {
			parts = append(parts, fmt.Sprintf("%d slots from %s to %s (%s)", job.SlotsMoving(), m.Pod, podOf(job.TargetID), job.State))
		}
		if job, ok := lastExport(m); ok && len(running) == 0 && job.State == valkey.MigrationFailed && m.Observed.Sub(job.Updated) < failureShown {
			failure := fmt.Sprintf("the last migration of %d slots from %s to %s failed", job.SlotsMoving(), m.Pod, podOf(job.TargetID))
			if job.Message != "" {
				failure += ": " + job.Message
			}
			parts = append(parts, failure)
		}
	}
	return strings.Join(parts, "; ")
}

// rangesOfSlots writes slots as ranges, sorted.
func rangesOfSlots(slots []int) []valkey.SlotRange {
	marks := make([]bool, valkey.SlotCount)
	for _, s := range slots {
		marks[s] = true
	}
	return rangesOf(marks, true)
}
