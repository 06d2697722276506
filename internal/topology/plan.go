package topology

import (
	"fmt"
	"strings"
	"time"

	"example.com/cache-operator/internal/valkey"
)

// Action is one admin command to one member's server, or a write to its pod. Its Kind says
// which; the field of the same name, for the kinds that have one, is its argument.
type Action struct {
	Kind Kind
	// On is the pod whose server gets the command.
	On string
	// Meet is the address of a server for On to shake hands with.
	Meet *Address
	// AddSlots are unassigned slots for On to serve.
	AddSlots []valkey.SlotRange
	// Replicate is the node ID of the primary On is to replicate.
	Replicate string
	// Forget is the node ID of a departed node for On to forget.
	Forget string
	// Stable are slots whose migration or import On is to drop.
	Stable []int
	// Claim are slots that no other node serves, which On, importing them, is to own.
	Claim *Claim
	// Migrate moves slots from On to another primary, key by key.
	Migrate *Migration
	// MigrateSlots moves slots from On to another primary in one atomic job (Valkey 9).
	MigrateSlots *SlotJob
}

// Kind is what an action does. Switches over it list every kind (the exhaustive linter checks),
// so that a new kind cannot fall through to another's command.
type Kind int

const (
	// KindMeet: CLUSTER MEET the Meet address.
	KindMeet Kind = iota + 1
	// KindAddSlots: CLUSTER ADDSLOTSRANGE.
	KindAddSlots
	// KindReplicate: CLUSTER REPLICATE the Replicate node.
	KindReplicate
	// KindForget: CLUSTER FORGET the Forget node.
	KindForget
	// KindTakeover makes On, a replica, the primary of its shard at once.
	KindTakeover
	// KindFailover makes On, an in-sync replica, the primary of its shard with its primary's
	// agreement, losing no write.
	KindFailover
	// KindReset makes On, a replica freed to become a primary (freeReplica), forget the cluster
	// and its copy of the data.
	KindReset
	// KindStable drops the migration or import of the Stable slots.
	KindStable
	// KindClaim makes On own the Claim slots.
	KindClaim
	// KindMigrate moves the Migrate slots, key by key.
	KindMigrate
	// KindMigrateSlots starts the atomic slot migration job MigrateSlots on On, its source.
	KindMigrateSlots
	// KindCancelMigrations cancels the atomic slot migration jobs that On runs as a source.
	KindCancelMigrations
	// KindRestart deletes On's pod, which its StatefulSet then creates again from the current
	// template.
	KindRestart
	// KindUnfence lets replicas resynchronise from On.
	KindUnfence
	// KindMarkHandover records on On's pod that every member now reports On's shard handed over
	// to another primary: HandoverGrace counts from then.
	KindMarkHandover
)

// Claim is slots that the node with the given ID takes.
type Claim struct {
	Slots []int
	ID    string
}

// Migration moves Slots from the source (the action's On, node SourceID) to the target. It
// resumes where a previous one stopped: only the slots in Import still need the target told to
// import them, and only those in Export the source told to migrate them. Once the source holds
// no key of a slot, the target, the source and the Announce pods (every other primary) are
// told that the target owns it.
type Migration struct {
	SourceID         string
	Target, TargetID string
	TargetAddress    Address
	Slots            []int
	Import, Export   []int
	Announce         []string
}

// SlotJob is an atomic slot migration of Slots from the action's On, the source, to the target.
type SlotJob struct {
	Target, TargetID string
	Slots            []valkey.SlotRange
}

// Address is where a server listens.
type Address struct {
	IP   string
	Port int
}

func (a Action) String() string {
	switch a.Kind {
	case KindMeet:
		return fmt.Sprintf("%s: CLUSTER MEET %s %d", a.On, a.Meet.IP, a.Meet.Port)
	case KindAddSlots:
		ranges := make([]string, len(a.AddSlots))
		for i, r := range a.AddSlots {
			ranges[i] = r.String()
		}
		return fmt.Sprintf("%s: CLUSTER ADDSLOTSRANGE %s", a.On, strings.Join(ranges, " "))
	case KindReplicate:
		return fmt.Sprintf("%s: CLUSTER REPLICATE %s", a.On, a.Replicate)
	case KindForget:
		return fmt.Sprintf("%s: CLUSTER FORGET %s", a.On, a.Forget)
	case KindTakeover:
		return a.On + ": CLUSTER FAILOVER TAKEOVER"
	case KindFailover:
		return a.On + ": CLUSTER FAILOVER"
	case KindReset:
		return a.On + ": CLUSTER RESET SOFT"
	case KindStable:
		return fmt.Sprintf("%s: CLUSTER SETSLOT %s STABLE", a.On, slotList(a.Stable))
	case KindClaim:
		return fmt.Sprintf("%s: CLUSTER SETSLOT %s NODE %s", a.On, slotList(a.Claim.Slots), a.Claim.ID)
	case KindMigrate:
		return fmt.Sprintf("%s: migrate slots %s to %s", a.On, slotList(a.Migrate.Slots), a.Migrate.Target)
	case KindMigrateSlots:
		return fmt.Sprintf("%s: CLUSTER MIGRATESLOTS SLOTSRANGE %s NODE %s (%s)", a.On,
			valkey.FormatSlots(a.MigrateSlots.Slots), a.MigrateSlots.TargetID, a.MigrateSlots.Target)
	case KindCancelMigrations:
		return a.On + ": CLUSTER CANCELSLOTMIGRATIONS"
	case KindRestart:
		return "delete pod " + a.On
	case KindUnfence:
		return a.On + ": ACL SETUSER default +sync +psync"
	case KindMarkHandover:
		return "record the handover on pod " + a.On
	}
	return fmt.Sprintf("%s: action of unknown kind %d", a.On, a.Kind)
}

// slotList writes slots, sorted, as ranges: "0-99,205".
func slotList(slots []int) string {
	return valkey.FormatSlots(rangesOfSlots(slots))
}

// Plan is the outcome of one look at the cluster: actions to take now, all independent of each
// other, or else what the cluster is waiting for (Waiting), or neither when it is formed.
type Plan struct {
	Actions []Action
	Waiting string
	// Operation is what the plan is part of: forming, healing, scaling out, draining,
	// rebalancing or upgrading.
	Operation Problem
	// SlotsToMove is how many slots must still change primary, this step's included. It is
	// SlotsUnknown when a server could not be asked: the slots it serves are counted nowhere,
	// and a source's would read as moved.
	SlotsToMove  int
	SlotsUnknown bool
	// Progress says how far the operation has got, for a user.
	Progress string
	// Lost are departed primaries whose slots this step gives up, with their keys: no replica
	// was left to take them over.
	Lost []string
	// Migrating: slots are moving, and the cluster is worth looking at again soon.
	Migrating bool
	// JobsRunning: the plan only waits for the atomic slot migration jobs the servers run, which
	// take seconds, rather than for a step of its own to land.
	JobsRunning bool
	// WaitingFor is how long the plan waits on a clock rather than on the servers (a handover's
	// grace): when the cluster is worth looking at again.
	WaitingFor time.Duration
}

// Formed reports whether the cluster needs nothing more.
func (p Plan) Formed() bool { return len(p.Actions) == 0 && p.Waiting == "" }
