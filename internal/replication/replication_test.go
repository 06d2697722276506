package replication

import (
	"slices"
	"strings"
	"testing"
	"time"
)

var hold = Address{"127.0.0.1", 1}

func want(nodes int) Want { return Want{Nodes: nodes, FailoverAfter: 5 * time.Second, Hold: hold} }

func ip(pod string) string { return "198.18.0." + strings.TrimPrefix(pod, "pod-") }

// held is a server that has had no role since it started.
func held(pod string) Member {
	return Member{Pod: pod, IP: ip(pod), Port: 6379, Reached: true, PrimaryIP: hold.IP, PrimaryPort: hold.Port}
}

func primary(pod string, offset int64) Member {
	return Member{Pod: pod, IP: ip(pod), Port: 6379, Reached: true, Primary: true, Offset: offset, Label: RolePrimary}
}

func replica(pod, of string, offset int64) Member {
	return Member{Pod: pod, IP: ip(pod), Port: 6379, Reached: true, PrimaryIP: ip(of), PrimaryPort: 6379, LinkUp: true, Offset: offset, Label: RoleReplica}
}

// lostLink is a replica whose link to its primary has been down for the time given.
func lostLink(m Member, down time.Duration) Member {
	m.LinkUp, m.LinkDownFor = false, down
	return m
}

func steps(p Plan) []string {
	var out []string
	for _, a := range p.Actions {
		out = append(out, a.String())
	}
	return out
}

func TestANewCacheGetsItsFirstServerAsPrimaryOnceEveryServerAnswers(t *testing.T) {
	p := Next(want(3), []Member{held("pod-0"), held("pod-1")})
	if p.Problem != Forming || len(p.Actions) > 0 || p.Waiting != "2/3 nodes answer" {
		t.Errorf("two of three servers: %+v, want to wait for the third", p)
	}
	unreached := held("pod-2")
	unreached.Reached = false
	if p := Next(want(3), []Member{held("pod-0"), held("pod-1"), unreached}); len(p.Actions) > 0 {
		t.Errorf("a server not reached may be a primary cut off: %v, want no step", steps(p))
	}
	p = Next(want(3), []Member{held("pod-2"), held("pod-1"), held("pod-0")})
	if got := steps(p); !slices.Equal(got, []string{"pod-0: REPLICAOF NO ONE"}) || p.Problem != Forming {
		t.Errorf("every server held: %v (%s), want pod-0 promoted", got, p.Problem)
	}
}

// A restored Cache's first primary is the node that starts with the backup's data, and no other,
// even when that node is the last to start (it fetches the data first): the others start empty.
func TestARestoredCacheGetsTheNodeThatTookTheBackupAsPrimary(t *testing.T) {
	restored := want(3)
	restored.First = "pod-0"
	fetching := Member{Pod: "pod-0", Gone: true} // its init step fetches the backup: no address yet
	p := Next(restored, []Member{fetching, held("pod-1"), held("pod-2")})
	if len(p.Actions) > 0 || p.Problem != Forming || !strings.Contains(p.Waiting, "pod-0, which starts with the restored data") {
		t.Errorf("the node with the data not up yet: %v (%s), want to wait for it", steps(p), p.Waiting)
	}
	if p := Next(want(3), []Member{fetching, held("pod-1"), held("pod-2")}); !slices.Equal(steps(p), []string{"pod-1: REPLICAOF NO ONE"}) {
		t.Errorf("a Cache that restores nothing: %v, want the first server up promoted", steps(p))
	}
	p = Next(restored, []Member{held("pod-2"), held("pod-1"), held("pod-0")})
	if got := steps(p); !slices.Equal(got, []string{"pod-0: REPLICAOF NO ONE"}) {
		t.Errorf("every server held: %v, want pod-0 promoted", got)
	}
}

func TestTheOthersFollowThePrimaryAndTheLabelMovesOffBeforeItMovesOn(t *testing.T) {
	newPrimary := primary("pod-1", 100)
	newPrimary.Label = RoleReplica
	oldPrimary := held("pod-0")
	oldPrimary.Label = RolePrimary
	p := Next(want(3), []Member{oldPrimary, newPrimary, lostLink(replica("pod-2", "pod-0", 90), time.Second)})
	wantSteps := []string{
		"label pod pod-0 as the replica",
		"pod-0: REPLICAOF 198.18.0.1 6379",
		"label pod pod-1 as the primary",
		"pod-2: REPLICAOF 198.18.0.1 6379",
	}
	if got := steps(p); !slices.Equal(got, wantSteps) {
		t.Errorf("steps %q, want %q", got, wantSteps)
	}
	if p.Primary != "pod-1" || p.Problem != ReplicasMissing {
		t.Errorf("primary %q, problem %q; want pod-1, ReplicasMissing", p.Primary, p.Problem)
	}
}

func TestReadyOnlyWhenEveryReplicaIsLinkedToThePrimary(t *testing.T) {
	healthy := func() []Member {
		return []Member{primary("pod-0", 100), replica("pod-1", "pod-0", 100), replica("pod-2", "pod-0", 100)}
	}
	if p := Next(want(3), healthy()); p.Problem != "" || len(p.Actions) > 0 || p.Primary != "pod-0" {
		t.Errorf("healthy: %+v, want ready with nothing to do", p)
	}
	for _, tc := range []struct {
		name    string
		breaks  func([]Member) []Member
		problem Problem
		message string
	}{
		{"a replica's link down", func(m []Member) []Member { m[2] = lostLink(m[2], time.Second); return m }, ReplicasMissing, "the primary pod-0 has 1 of 2 replicas in sync; not yet: pod-2"},
		{"a server not reached", func(m []Member) []Member { m[1].Reached = false; return m }, NodesUnreached, "cannot ask pod-1"},
		{"a pod missing", func(m []Member) []Member { return m[:2] }, ReplicasMissing, "2/3 nodes are running"},
		{"the label on a replica too", func(m []Member) []Member { m[1].Label = RolePrimary; return m }, ReplicasMissing, "next step: label pod pod-1 as the replica"},
		// A new pod has no label: the replicas' Service would never select it.
		{"a replica without a label", func(m []Member) []Member { m[2].Label = ""; return m }, ReplicasMissing, "next step: label pod pod-2 as the replica"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Next(want(3), tc.breaks(healthy()))
			if p.Problem != tc.problem || !strings.HasPrefix(p.Message, tc.message) {
				t.Errorf("got %s %q, want %s %q", p.Problem, p.Message, tc.problem, tc.message)
			}
		})
	}
}

// The primary's server restarted in place comes back empty and held at the same address: the
// replica furthest into its writes takes over at once, and the empty server is never the one.
func TestAPrimaryBackEmptyIsReplacedAtOnceByTheFurthestReplica(t *testing.T) {
	members := []Member{held("pod-0"), lostLink(replica("pod-1", "pod-0", 90), 0), lostLink(replica("pod-2", "pod-0", 120), 0)}
	members[0].Label = RolePrimary
	p := Next(want(3), members)
	if got := steps(p); !slices.Equal(got, []string{"pod-2: REPLICAOF NO ONE"}) || p.FailedOver != "pod-0" {
		t.Errorf("steps %v, failed over %q; want pod-2 promoted in pod-0's place", got, p.FailedOver)
	}
}

// A primary the operator cannot reach is failed over only once every replica has lost it for
// FailoverAfter; while a replica still reaches it, it serves, and nobody is promoted.
func TestAnUnreachablePrimaryIsFailedOverOnlyOnceEveryReplicaHasLostItLongEnough(t *testing.T) {
	unreached := primary("pod-0", 100)
	unreached.Reached = false
	for _, tc := range []struct {
		name     string
		replicas []Member
		promote  string
	}{
		{"a replica still linked", []Member{lostLink(replica("pod-1", "pod-0", 100), time.Minute), replica("pod-2", "pod-0", 100)}, ""},
		{"lost for less than the timeout", []Member{lostLink(replica("pod-1", "pod-0", 100), time.Minute), lostLink(replica("pod-2", "pod-0", 100), 4*time.Second)}, ""},
		{"lost for the timeout", []Member{lostLink(replica("pod-1", "pod-0", 100), 5*time.Second), lostLink(replica("pod-2", "pod-0", 99), time.Minute)}, "pod-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Next(want(3), append([]Member{unreached}, tc.replicas...))
			var got string
			if len(p.Actions) == 1 && p.Actions[0].Kind == KindPromote {
				got = p.Actions[0].On
			}
			if got != tc.promote || (got == "" && len(p.Actions) > 0) {
				t.Errorf("steps %v (%s), want promoted %q", steps(p), p.Message, tc.promote)
			}
		})
	}
}

// A primary whose server is not running (its address refuses connections) has lost what it held,
// and one that cannot be reached otherwise (a timeout) may still serve: the first is replaced at
// once, the second only after FailoverAfter.
func TestAPrimaryWhoseServerIsDownIsReplacedWithoutWaiting(t *testing.T) {
	down := primary("pod-0", 100)
	down.Reached, down.Refused = false, true
	if got := steps(Next(want(2), []Member{down, lostLink(replica("pod-1", "pod-0", 100), 0)})); !slices.Equal(got, []string{"pod-1: REPLICAOF NO ONE"}) {
		t.Errorf("refused: steps %v, want pod-1 promoted", got)
	}
	down.Refused = false
	if got := steps(Next(want(2), []Member{down, lostLink(replica("pod-1", "pod-0", 100), 0)})); len(got) > 0 {
		t.Errorf("timed out: steps %v, want none before FailoverAfter", got)
	}
}

// A primary whose pod goes is lost with what it held: a replica takes over without waiting.
func TestAPrimaryWhosePodGoesIsReplacedWithoutWaiting(t *testing.T) {
	going := primary("pod-0", 100)
	going.Gone, going.Reached = true, false
	p := Next(want(2), []Member{going, lostLink(replica("pod-1", "pod-0", 100), 0)})
	if got := steps(p); !slices.Equal(got, []string{"pod-1: REPLICAOF NO ONE"}) {
		t.Errorf("steps %v, want pod-1 promoted", got)
	}
}

// A primary whose pod is going away but whose replica still follows it is handing over (its
// preStop hook): nothing is promoted, and the Cache says so.
func TestAPrimaryGoingAwayWhileItsReplicaFollowsItIsLeftToHandOver(t *testing.T) {
	going := primary("pod-0", 100)
	going.Gone = true
	p := Next(want(2), []Member{going, replica("pod-1", "pod-0", 100)})
	if want := "pod-0, the primary, is going away and hands over to a replica in sync first; pod-1 still replicates it"; len(p.Actions) > 0 || p.Message != want {
		t.Errorf("%v: %q; want no step: %q", steps(p), p.Message, want)
	}
}

// Two servers that take writes: the one the replicas follow stays, the other replicates it.
func TestOfTwoPrimariesTheOneTheReplicasFollowStays(t *testing.T) {
	back := primary("pod-0", 50)
	current := primary("pod-1", 200)
	current.Label = RoleReplica
	p := Next(want(3), []Member{back, current, replica("pod-2", "pod-1", 200)})
	wantSteps := []string{"label pod pod-0 as the replica", "pod-0: REPLICAOF 198.18.0.1 6379"}
	if got := steps(p); !slices.Equal(got, wantSteps) || p.Primary != "pod-1" {
		t.Errorf("steps %v, primary %q; want %v and pod-1", got, p.Primary, wantSteps)
	}
}

// outdated is the member on an earlier pod template.
func outdated(m Member) Member {
	m.Outdated = true
	return m
}

// An ordered upgrade restarts one pod at a time, the replicas first, each only once every replica
// is in sync again, and the primary last, which hands over in its preStop hook. A Cache with a
// replica not in sync, or a pod not answering, restarts nothing.
func TestAnUpgradeRestartsTheReplicasFirstAndThePrimaryLast(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []Member
		steps   []string
		problem Problem
		message string
	}{
		{"nothing outdated", []Member{primary("pod-1", 9), replica("pod-0", "pod-1", 9), replica("pod-2", "pod-1", 9)}, nil, "", ""},
		{"every pod outdated", []Member{outdated(primary("pod-0", 9)), outdated(replica("pod-1", "pod-0", 9)), outdated(replica("pod-2", "pod-0", 9))},
			[]string{"restart pod pod-1"}, Upgrading, "0/3 nodes run the current pod template; next step: restart pod pod-1"},
		{"a replica back, in sync", []Member{outdated(primary("pod-0", 9)), replica("pod-1", "pod-0", 9), outdated(replica("pod-2", "pod-0", 9))},
			[]string{"restart pod pod-2"}, Upgrading, ""},
		{"a replica back, not in sync yet", []Member{outdated(primary("pod-0", 9)), lostLink(replica("pod-1", "pod-0", 0), 0), outdated(replica("pod-2", "pod-0", 9))},
			nil, Upgrading, "the primary pod-0 has 1 of 2 replicas in sync; not yet: pod-1"},
		{"a replica back, not in sync yet, beside one that goes", []Member{outdated(primary("pod-0", 9)), lostLink(replica("pod-1", "pod-0", 0), 0), leaving(replica("pod-2", "pod-0", 9))},
			nil, Upgrading, "the primary pod-0 has 0 of 1 replicas in sync; not yet: pod-1"},
		{"after a failover, an outdated replica that cannot follow the newer primary", []Member{primary("pod-1", 9), lostLink(outdated(replica("pod-0", "pod-1", 0)), time.Minute), replica("pod-2", "pod-1", 9)},
			[]string{"restart pod pod-0"}, Upgrading, ""},
		{"the primary last", []Member{outdated(primary("pod-0", 9)), replica("pod-1", "pod-0", 9), replica("pod-2", "pod-0", 9)},
			[]string{"restart pod pod-0"}, Upgrading, "2/3 nodes run the current pod template; next step: restart pod pod-0, the primary, which hands over to a replica in sync first"},
		{"a primary without replicas", []Member{outdated(primary("pod-0", 9))},
			[]string{"restart pod pod-0"}, Upgrading, "0/1 nodes run the current pod template; next step: restart pod pod-0, the primary, which has no replica: its keys are lost"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nodes := 0
			for _, m := range tc.members {
				if !m.Leaving {
					nodes++
				}
			}
			p := Next(want(nodes), tc.members)
			if !slices.Equal(steps(p), tc.steps) || p.Problem != tc.problem || tc.message != "" && p.Message != tc.message {
				t.Errorf("%v, %s: %q; want %v, %s: %q", steps(p), p.Problem, p.Message, tc.steps, tc.problem, tc.message)
			}
		})
	}
}

// leaving is the member on a pod that a scale-in removes.
func leaving(m Member) Member {
	m.Leaving = true
	return m
}

// A scale-in that would remove the primary's pod has the primary hand over first, with FAILOVER,
// to the replica in sync that stays and is furthest into its writes, and waits while it does. A
// replica that goes restarts nothing in an upgrade.
func TestAPrimaryOnAPodThatGoesHandsOverToAReplicaThatStays(t *testing.T) {
	failingOver := leaving(primary("pod-2", 9))
	failingOver.FailingOver = true
	for _, tc := range []struct {
		name    string
		members []Member
		steps   []string
		waiting string
	}{
		{"a replica that stays in sync", []Member{replica("pod-0", "pod-2", 7), leaving(replica("pod-1", "pod-2", 9)), leaving(primary("pod-2", 9))},
			[]string{"pod-2: FAILOVER TO 198.18.0.0 6379"}, ""},
		{"the replica that stays furthest in", []Member{replica("pod-0", "pod-2", 7), replica("pod-1", "pod-2", 8), leaving(primary("pod-2", 9))},
			[]string{"pod-2: FAILOVER TO 198.18.0.1 6379"}, ""},
		{"handing over", []Member{replica("pod-0", "pod-2", 9), failingOver}, nil, "pod-2, the primary, is handing over to a replica that stays"},
		{"no replica that stays in sync", []Member{lostLink(replica("pod-0", "pod-2", 0), time.Second), leaving(replica("pod-1", "pod-2", 9)), leaving(primary("pod-2", 9))},
			nil, "pod-2, the primary, is on a pod that goes, and no replica that stays is in sync"},
		{"an outdated replica that goes", []Member{primary("pod-0", 9), leaving(outdated(replica("pod-1", "pod-0", 9)))}, nil, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := Next(want(1), tc.members)
			wantProblem := Draining
			if tc.steps == nil && tc.waiting == "" {
				wantProblem = ""
			}
			if !slices.Equal(steps(p), tc.steps) || p.Waiting != tc.waiting || p.Problem != wantProblem {
				t.Errorf("%v, waiting %q, %s; want %v, waiting %q, %s", steps(p), p.Waiting, p.Problem, tc.steps, tc.waiting, wantProblem)
			}
		})
	}
}
