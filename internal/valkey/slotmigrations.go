package valkey

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	valkeygo "github.com/valkey-io/valkey-go"
)

// The commands below move hash slots with Valkey 9's atomic slot migration: the source primary is
// given the slots and the target, and does the rest itself. It streams a snapshot of the slots'
// keys to the target, then their changes, then pauses its writes briefly while the target takes
// the slots over in one step (one config epoch). Clients see no ASK redirect, and a job that fails
// or is cancelled leaves every slot with its source. A job is known only to the two primaries, and
// only in memory: CLUSTER GETSLOTMIGRATIONS lists the recent ones, newest first.

// MigratesAtomically reports whether a server of the Valkey release has atomic slot migration,
// which came with 9.0.
func MigratesAtomically(version string) bool {
	return version != "" && !OlderVersion(version, "9.0.0")
}

// SlotMigration is one atomic slot migration job as a primary's log reports it.
type SlotMigration struct {
	Name string
	// Export: this node is the job's source (operation EXPORT), not its target (IMPORT).
	Export             bool
	Slots              []SlotRange
	SourceID, TargetID string
	// State is where the job is: for an export connecting, snapshotting, replicating, then
	// waiting for and in the write pause, and at the end success, failed or cancelled.
	State string
	// Message says why a job failed.
	Message string
	// Updated is when the job last changed state.
	Updated time.Time
}

// Slot migration job states: those that end a job, and those of an export whose source has
// paused its writes for the target to take the slots over.
const (
	MigrationSucceeded = "success"
	MigrationFailed    = "failed"
	MigrationCancelled = "cancelled"
	MigrationPaused    = "failover-paused"
	MigrationGranted   = "failover-granted"
)

// Running reports whether the job has not ended.
func (m SlotMigration) Running() bool {
	return m.State != MigrationSucceeded && m.State != MigrationFailed && m.State != MigrationCancelled
}

// SlotsMoving is how many slots the job moves.
func (m SlotMigration) SlotsMoving() int { return CountSlots(m.Slots) }

// MigrateSlots makes this server, the source primary, start moving the slot ranges to the node
// targetID as one atomic job. It returns once the job is accepted; SlotMigrations follows it.
// The command is refused whole if any slot is not this server's or is moving already.
func (s *Server) MigrateSlots(ctx context.Context, ranges []SlotRange, targetID string) error {
	args := []string{"MIGRATESLOTS", "SLOTSRANGE"}
	for _, r := range ranges {
		args = append(args, strconv.Itoa(r.Start), strconv.Itoa(r.End))
	}
	args = append(args, "NODE", targetID)
	return s.wrap("CLUSTER MIGRATESLOTS", s.do(ctx, s.client.B().Arbitrary("CLUSTER").Args(args...).Build()).Error())
}

// CancelSlotMigrations cancels every job this server, a source, is running: each leaves its slots
// with the source. A server with none to cancel is no error.
func (s *Server) CancelSlotMigrations(ctx context.Context) error {
	err := s.do(ctx, s.client.B().Arbitrary("CLUSTER", "CANCELSLOTMIGRATIONS").Build()).Error()
	if err != nil && strings.Contains(err.Error(), "No migrations ongoing") {
		return nil
	}
	return s.wrap("CLUSTER CANCELSLOTMIGRATIONS", err)
}

// SlotMigrations is this server's log of atomic slot migration jobs, newest first
// (CLUSTER GETSLOTMIGRATIONS).
func (s *Server) SlotMigrations(ctx context.Context) ([]SlotMigration, error) {
	entries, err := s.do(ctx, s.client.B().Arbitrary("CLUSTER", "GETSLOTMIGRATIONS").Build()).ToArray()
	if err != nil {
		return nil, s.wrap("CLUSTER GETSLOTMIGRATIONS", err)
	}
	jobs := make([]SlotMigration, 0, len(entries))
	for _, entry := range entries {
		fields, err := entry.AsMap()
		if err != nil {
			return nil, s.wrap("CLUSTER GETSLOTMIGRATIONS", err)
		}
		job, err := parseSlotMigration(fields)
		if err != nil {
			return nil, s.wrap("CLUSTER GETSLOTMIGRATIONS", err)
		}
		jobs = append(jobs, job)
	}
	return jobs, nil
}

// parseSlotMigration reads one job of CLUSTER GETSLOTMIGRATIONS's reply, a map of its fields.
func parseSlotMigration(fields map[string]valkeygo.ValkeyMessage) (SlotMigration, error) {
	text := func(name string) string {
		field := fields[name]
		s, _ := field.ToString()
		return s
	}
	var job SlotMigration
	for _, r := range strings.Fields(text("slot_ranges")) {
		ranges, err := ParseSlots(r)
		if err != nil {
			return SlotMigration{}, fmt.Errorf("slot_ranges %q: %w", text("slot_ranges"), err)
		}
		job.Slots = append(job.Slots, ranges...)
	}
	updateTime := fields["last_update_time"]
	updated, _ := updateTime.AsInt64()
	job.Name, job.Export = text("name"), text("operation") == "EXPORT"
	job.SourceID, job.TargetID = text("source_node"), text("target_node")
	job.State, job.Message = text("state"), strings.TrimSpace(text("message"))
	job.Updated = time.Unix(updated, 0)
	return job, nil
}
