// Package replication decides, from what the servers of a Replicated Cache report about their
// replication, the next bounded step towards one primary that every other server replicates,
// with the primary's pod, and only its pod, labelled as the primary for the Service that clients
// write through. It is pure: no client, no clock, no memory between calls. It judges by Valkey's
// own state (INFO replication), never by pod ordinals or by which pod carries the label, since
// after a failover the primary may be any pod and a label is only as fresh as the informer.
//
// Every server starts held (resources.HoldAddress): a replica of an address where nothing
// listens, so that it refuses writes (READONLY) and refuses to serve a replica's
// resynchronisation (NOMASTERLINK) until the operator gives it a role. A primary whose server is
// restarted in place (a crash, an OOM kill) so comes back empty and held, at the same address,
// and neither takes writes nor wipes the replicas that still point at that address.
package replication

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	cachev2 "example.com/cache-operator/api/v2"
)

// Member is one pod of the Cache and what its server says.
type Member struct {
	Pod  string
	IP   string
	Port int
	// Gone marks a pod that is going away (deleted) or whose server cannot run (no address):
	// whatever it served is lost, and it is never given a role.
	Gone bool
	// Refused is set when the pod's address refused the connection: no server listens there,
	// so one that was the primary has lost what it held (persistence is off), however soon it
	// starts again. Reached is set when the server answered; the fields below are its answer.
	Refused bool
	Reached bool
	// Primary is set for a server that takes writes (role:master). A replica says where its
	// primary is (PrimaryIP, PrimaryPort), whether its link is up, and for how long it has been
	// down.
	Primary     bool
	PrimaryIP   string
	PrimaryPort int
	LinkUp      bool
	LinkDownFor time.Duration
	// Offset is how far into the stream of writes the server has got (master_repl_offset).
	Offset int64
	// Label is the role the pod's label says, for the Services that select on it; empty while
	// it has none.
	Label Role
	// Outdated marks a pod that runs an earlier pod template than its StatefulSet's: an ordered
	// upgrade restarts it (roll).
	Outdated bool
	// Leaving marks a pod that a scale-in removes: its StatefulSet keeps it until the primary's
	// role is on a pod that stays (handOver).
	Leaving bool
	// FailingOver is set for a primary that is handing its role over (KindHandOver).
	FailingOver bool
}

// TakesWrites reports whether the server answered as a primary, on a pod that is not going.
func (m *Member) TakesWrites() bool { return m.Reached && m.Primary && !m.Gone }

// Held reports whether the server has had no role since it started: it replicates the hold
// address.
func (m *Member) Held(hold Address) bool {
	return m.Reached && !m.Primary && m.PrimaryIP == hold.IP && m.PrimaryPort == hold.Port
}

func (m *Member) address() Address { return Address{m.IP, m.Port} }

// Address is where a server listens.
type Address struct {
	IP   string
	Port int
}

func (a Address) String() string { return fmt.Sprintf("%s %d", a.IP, a.Port) }

// Want is the Cache the spec asks for.
type Want struct {
	// Nodes is the number of servers: the primary and its replicas.
	Nodes int
	// FailoverAfter is how long every replica must have lost its link to a primary that the
	// operator cannot reach either before a replica takes over.
	FailoverAfter time.Duration
	// Hold is the address every server replicates from its start until it is given a role.
	Hold Address
	// First, when set, is the pod whose server becomes the first primary of a Cache whose
	// servers have no role yet: a restore's first node, which alone starts with the backup's
	// data. Any other would be an empty primary that the others, that one too, copy.
	First string
}

// Kind is what an action does.
type Kind int

const (
	// KindPromote makes a replica the primary (REPLICAOF NO ONE).
	KindPromote Kind = iota
	// KindReplicate makes a server replicate the primary at Action.Primary (REPLICAOF).
	KindReplicate
	// KindLabel sets the pod's label to Action.Role.
	KindLabel
	// KindRestart deletes the pod, which its StatefulSet makes again on the current template.
	KindRestart
	// KindHandOver has the primary hand its role to its replica at Action.Primary (FAILOVER
	// TO), which loses no acknowledged write.
	KindHandOver
)

// Role is what the pod's label says its server is, for the Services that select on it.
type Role string

const (
	RolePrimary Role = "primary"
	RoleReplica Role = "replica"
)

// Action is one step on one pod (On).
type Action struct {
	Kind    Kind
	On      string
	Primary Address
	Role    Role
}

func (a Action) String() string {
	switch a.Kind {
	case KindPromote:
		return a.On + ": REPLICAOF NO ONE"
	case KindReplicate:
		return fmt.Sprintf("%s: REPLICAOF %s", a.On, a.Primary)
	case KindLabel:
		return fmt.Sprintf("label pod %s as the %s", a.On, a.Role)
	case KindRestart:
		return "restart pod " + a.On
	case KindHandOver:
		return fmt.Sprintf("%s: FAILOVER TO %s", a.On, a.Primary)
	}
	return fmt.Sprintf("%s: action of unknown kind %d", a.On, a.Kind)
}

// Problem is why the Cache is not ready; empty when it is. Its values are the reasons of the
// Cache's Ready condition.
type Problem string

// Plan is the outcome of one look: the actions to take now, in order, or what the Cache waits
// for; Problem and Message are the verdict on what was seen, before the actions.
type Plan struct {
	Actions []Action
	Waiting string
	// FailedOver names the lost primary's pod when this step promotes a replica in its place.
	FailedOver string
	Problem    Problem
	Message    string
	// Primary is the pod of the server that takes writes; empty when there is none.
	Primary string
}

// The problems, which are the Cache's reasons of the same names.
const (
	Forming         Problem = cachev2.ReasonReplicationForming
	PrimaryLost     Problem = cachev2.ReasonPrimaryLost
	ReplicasMissing Problem = cachev2.ReasonReplicasMissing
	NodesUnreached  Problem = cachev2.ReasonNodesUnreachable
	Upgrading       Problem = cachev2.ReasonUpgrading
	Draining        Problem = cachev2.ReasonDraining
)

// Next is the next step, and the verdict on the Cache as its servers report it.
func Next(want Want, members []Member) Plan {
	members = slices.Clone(members)
	slices.SortFunc(members, func(a, b Member) int { return cmp.Compare(a.Pod, b.Pod) })
	var primaries []*Member
	for i := range members {
		if members[i].TakesWrites() {
			primaries = append(primaries, &members[i])
		}
	}
	switch len(primaries) {
	case 0:
		return elect(want, members)
	case 1:
		return follow(want, members, primaries[0])
	}
	return oneOf(members, primaries)
}

// follow brings every other server to replicate the primary, and the label to its pod alone:
// first off the pods that are not the primary, so that the Service never selects two servers
// that take writes.
func follow(want Want, members []Member, primary *Member) Plan {
	plan := Plan{Primary: primary.Pod}
	var adds []Action
	for i := range members {
		m := &members[i]
		switch {
		case m == primary && m.Label != RolePrimary:
			adds = append(adds, Action{Kind: KindLabel, On: m.Pod, Role: RolePrimary})
		case m != primary && m.Label == RolePrimary:
			plan.Actions = append(plan.Actions, Action{Kind: KindLabel, On: m.Pod, Role: RoleReplica})
		case m != primary && m.Label == "" && m.Reached && !m.Primary && !m.Gone:
			// A server that answers as a replica (or held): the replicas' Service selects it
			// once it is ready, which it is while in sync.
			adds = append(adds, Action{Kind: KindLabel, On: m.Pod, Role: RoleReplica})
		}
		if m != primary && m.Reached && !m.Gone && (m.PrimaryIP != primary.IP || m.PrimaryPort != primary.Port) {
			adds = append(adds, Action{Kind: KindReplicate, On: m.Pod, Primary: primary.address()})
		}
	}
	plan.Actions = append(plan.Actions, adds...)
	var unreached, unlinked []string
	// stale is an outdated replica that points at the primary but cannot follow it: after a
	// failover in an upgrade, a replica on the older release may not read the newer primary's
	// data. It holds nothing the primary lacks, so the upgrade restarts it on the new template.
	var stale *Member
	linked, staying := 0, 0
	for i := range members {
		m := &members[i]
		if !m.Leaving {
			staying++
		}
		switch {
		case m == primary, m.Leaving:
			// A pod that goes is not waited for.
		case !m.Reached || m.Gone:
			unreached = append(unreached, m.Pod)
		case !m.LinkUp || m.PrimaryIP != primary.IP:
			unlinked = append(unlinked, m.Pod)
			if stale == nil && m.Outdated && m.PrimaryIP == primary.IP && m.PrimaryPort == primary.Port {
				stale = m
			}
		default:
			linked++
		}
	}
	switch {
	case staying < want.Nodes:
		plan.Problem, plan.Message = ReplicasMissing, fmt.Sprintf("%d/%d nodes are running", staying, want.Nodes)
	case len(unreached) > 0:
		plan.Problem, plan.Message = NodesUnreached, "cannot ask "+strings.Join(unreached, ", ")+" for its replication"
	case linked < want.Nodes-1:
		plan.Problem, plan.Message = ReplicasMissing, fmt.Sprintf("the primary %s has %d of %d replicas in sync; not yet: %s",
			primary.Pod, linked, want.Nodes-1, strings.Join(unlinked, ", "))
		if stale != nil && len(plan.Actions) == 0 {
			plan.Actions = []Action{{Kind: KindRestart, On: stale.Pod}}
			plan.Message += fmt.Sprintf("; next step: %s, on an earlier pod template, which cannot follow the primary", plan.Actions[0])
		}
	case len(plan.Actions) > 0:
		plan.Problem, plan.Message = ReplicasMissing, "next step: "+plan.Actions[0].String()
	case primary.Leaving:
		handOver(&plan, members, primary)
	default:
		roll(&plan, members, primary)
	}
	// A pod restarted by the upgrade is missing, unreached or syncing for a while: while older
	// pods remain, that is part of the upgrade, as a Cluster's is (topology.Next).
	if (plan.Problem == ReplicasMissing || plan.Problem == NodesUnreached) &&
		slices.ContainsFunc(members, func(m Member) bool { return m.Outdated && !m.Leaving }) {
		plan.Problem = Upgrading
	}
	return plan
}

// handOver moves the primary's role off a pod that a scale-in removes, to the replica in sync
// that stays and is furthest into its writes, with FAILOVER: the primary holds its writers until
// that replica has every write, then becomes its replica, and the label follows (follow). Only
// then does the StatefulSet shrink, and the pod that goes is a replica.
func handOver(plan *Plan, members []Member, primary *Member) {
	plan.Problem = Draining
	if primary.FailingOver {
		plan.Waiting = primary.Pod + ", the primary, is handing over to a replica that stays"
		plan.Message = plan.Waiting
		return
	}
	var to *Member
	for i := range members {
		m := &members[i]
		if m != primary && !m.Leaving && m.Reached && !m.Gone && m.LinkUp && m.PrimaryIP == primary.IP &&
			(to == nil || m.Offset > to.Offset) {
			to = m
		}
	}
	if to == nil {
		plan.Waiting = primary.Pod + ", the primary, is on a pod that goes, and no replica that stays is in sync"
		plan.Message = plan.Waiting
		return
	}
	plan.Actions = []Action{{Kind: KindHandOver, On: primary.Pod, Primary: to.address()}}
	plan.Message = fmt.Sprintf("%s, the primary, is on a pod that goes; next step: %s (%s)", primary.Pod, plan.Actions[0], to.Pod)
}

// roll restarts the pods that run an earlier pod template (an ordered upgrade), one at a time and
// only on a Cache with every replica in sync, which it is again only once the pod restarted last
// is back and in sync: the replicas first, then the primary, whose preStop hook hands over to a
// replica in sync (FAILOVER, which holds the primary's writers until that replica has every write)
// before its server stops, so that no acknowledged write is lost. By then every replica runs the
// new template, so the primary's role goes to one that does. A primary without replicas loses
// its keys as it restarts (the user consented: resources.awaitsRolloutConsent).
func roll(plan *Plan, members []Member, primary *Member) {
	var next *Member
	outdated := 0
	for i := range members {
		// A pod that a scale-in removes goes anyway.
		if m := &members[i]; m.Outdated && !m.Leaving {
			outdated++
			if next == nil || next == primary {
				next = m
			}
		}
	}
	if next == nil {
		return
	}
	plan.Actions = []Action{{Kind: KindRestart, On: next.Pod}}
	plan.Problem = Upgrading
	plan.Message = fmt.Sprintf("%d/%d nodes run the current pod template; next step: %s", len(members)-outdated, len(members), plan.Actions[0])
	switch {
	case next != primary:
	case len(members) > 1:
		plan.Message += ", the primary, which hands over to a replica in sync first"
	default:
		plan.Message += ", the primary, which has no replica: its keys are lost"
	}
}

// elect gives a Cache with no primary one: a new Cache's first server (a restored one's first
// node, want.First), once every server runs and none has a role; or, in a failover, the replica furthest into the lost primary's writes,
// once that primary is certainly lost (its pod gone, its server not running or back empty and
// held) or unreachable to the operator and to every replica for FailoverAfter.
func elect(want Want, members []Member) Plan {
	var unreached []string
	var candidates []*Member
	for i := range members {
		m := &members[i]
		switch {
		case m.Gone:
		case !m.Reached:
			unreached = append(unreached, m.Pod)
		default:
			candidates = append(candidates, m)
		}
	}
	if len(candidates) == 0 {
		return Plan{Waiting: "no server answers", Problem: PrimaryLost, Message: "no server answers"}
	}
	// The lost primary is where the replicas that kept data point.
	var followers []*Member
	for _, m := range candidates {
		if !m.Held(want.Hold) {
			followers = append(followers, m)
		}
	}
	if len(followers) == 0 {
		// No server holds anything: a new Cache, or one that lost every server at once. Wait
		// for every server, since one not reached yet may be a primary cut off from the operator.
		if len(unreached) > 0 || len(members) < want.Nodes {
			msg := fmt.Sprintf("%d/%d nodes answer", len(candidates), want.Nodes)
			return Plan{Waiting: msg, Problem: Forming, Message: msg}
		}
		first := candidates[0]
		if want.First != "" {
			i := slices.IndexFunc(candidates, func(m *Member) bool { return m.Pod == want.First })
			if i < 0 {
				msg := fmt.Sprintf("waiting for %s, which starts with the restored data and becomes the primary, to answer", want.First)
				return Plan{Waiting: msg, Problem: Forming, Message: msg}
			}
			first = candidates[i]
		}
		return Plan{Actions: []Action{{Kind: KindPromote, On: first.Pod}}, Problem: Forming,
			Message: "next step: " + first.Pod + " becomes the primary"}
	}
	for _, m := range followers {
		if m.LinkUp {
			// A replica still reaches its primary, which the operator does not: the primary
			// serves, and a replica promoted now would be a second one.
			msg := fmt.Sprintf("%s replicates %s, which the operator cannot reach", m.Pod, Address{m.PrimaryIP, m.PrimaryPort})
			if lost := lostPrimary(members, m); lost != nil && lost.Gone {
				msg = fmt.Sprintf("%s, the primary, is going away and hands over to a replica in sync first; %s still replicates it", lost.Pod, m.Pod)
			}
			return Plan{Waiting: msg, Problem: NodesUnreached, Message: msg}
		}
	}
	best := slices.MaxFunc(followers, func(a, b *Member) int { return cmp.Compare(a.Offset, b.Offset) })
	lost := lostPrimary(members, best)
	if lost == nil || !certainlyLost(want, lost) {
		down := slices.MinFunc(followers, func(a, b *Member) int { return cmp.Compare(a.LinkDownFor, b.LinkDownFor) }).LinkDownFor
		if down < want.FailoverAfter {
			msg := fmt.Sprintf("every replica has lost its primary at %s, for %s: a replica takes over after %s",
				Address{best.PrimaryIP, best.PrimaryPort}, down, want.FailoverAfter)
			return Plan{Waiting: msg, Problem: PrimaryLost, Message: msg}
		}
	}
	plan := Plan{Actions: []Action{{Kind: KindPromote, On: best.Pod}}, Problem: PrimaryLost,
		Message: fmt.Sprintf("next step: %s, the replica furthest into its writes (offset %d), takes over", best.Pod, best.Offset)}
	if lost != nil {
		plan.FailedOver = lost.Pod
	} else {
		plan.FailedOver = best.PrimaryIP
	}
	return plan
}

// lostPrimary is the member whose address the replica points at, nil when no pod has it.
func lostPrimary(members []Member, replica *Member) *Member {
	for i := range members {
		if members[i].IP == replica.PrimaryIP && members[i].Port == replica.PrimaryPort && members[i].IP != "" {
			return &members[i]
		}
	}
	return nil
}

// certainlyLost reports whether what the primary held is gone for good: its pod is going, its
// server is not running (Refused), or it started again empty (held).
func certainlyLost(want Want, primary *Member) bool {
	return primary.Gone || primary.Refused || primary.Held(want.Hold)
}

// oneOf keeps one of several servers that take writes, the one most replicas follow (then the
// furthest into its writes), and makes the others replicate it: two primaries are a split the
// operator did not make (a primary cut off from everything while a replica took over comes
// back), and the writes the other took since are lost.
func oneOf(members []Member, primaries []*Member) Plan {
	followers := func(p *Member) int {
		n := 0
		for i := range members {
			if members[i].Reached && !members[i].Primary && members[i].PrimaryIP == p.IP && members[i].LinkUp {
				n++
			}
		}
		return n
	}
	keep := slices.MaxFunc(primaries, func(a, b *Member) int {
		return cmp.Or(cmp.Compare(followers(a), followers(b)), cmp.Compare(a.Offset, b.Offset))
	})
	plan := Plan{Primary: keep.Pod, Problem: PrimaryLost}
	var others []string
	for _, p := range primaries {
		if p != keep {
			others = append(others, p.Pod)
			if p.Label == RolePrimary {
				plan.Actions = append(plan.Actions, Action{Kind: KindLabel, On: p.Pod, Role: RoleReplica})
			}
			plan.Actions = append(plan.Actions, Action{Kind: KindReplicate, On: p.Pod, Primary: keep.address()})
		}
	}
	plan.Message = fmt.Sprintf("%s and %s both take writes: %s stays the primary", keep.Pod, strings.Join(others, ", "), keep.Pod)
	return plan
}
