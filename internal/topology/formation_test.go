package topology

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"example.com/cache-operator/internal/valkey"
)

// server describes one member for a test: its pod, what it says of itself, and which other pods
// its server knows.
type server struct {
	pod     string
	slots   []valkey.SlotRange
	replica string // pod of its primary
	knows   []string
	down    bool
}

func id(pod string) string { return "id-" + pod }

func ip(pod string) string { return "127.64.0." + strings.TrimPrefix(pod, "pod-") }

// world builds the members: each server's CLUSTER NODES has itself and the servers it knows,
// each as it describes itself.
func world(servers ...server) []Member {
	byPod := map[string]server{}
	for _, s := range servers {
		byPod[s.pod] = s
	}
	entry := func(s server, myself bool) valkey.ClusterNode {
		n := valkey.ClusterNode{ID: id(s.pod), IP: ip(s.pod), Port: 6379, Myself: myself, Connected: true,
			Slots: s.slots, Primary: s.replica == ""}
		if s.replica != "" {
			n.PrimaryID = id(s.replica)
		}
		return n
	}
	var members []Member
	for _, s := range servers {
		m := Member{Pod: s.pod, IP: ip(s.pod), Port: 6379}
		if !s.down {
			m.Nodes = []valkey.ClusterNode{entry(s, true)}
			for _, other := range s.knows {
				m.Nodes = append(m.Nodes, entry(byPod[other], false))
			}
		}
		members = append(members, m)
	}
	return members
}

func pods(n int) []string {
	var p []string
	for i := range n {
		p = append(p, fmt.Sprintf("pod-%d", i))
	}
	return p
}

// all makes every server know every other.
func all(servers ...server) []server {
	names := make([]string, len(servers))
	for i, s := range servers {
		names[i] = s.pod
	}
	for i := range servers {
		servers[i].knows = slices.DeleteFunc(slices.Clone(names), func(p string) bool { return p == servers[i].pod })
	}
	return servers
}

func fresh(n int) []server {
	var s []server
	for _, p := range pods(n) {
		s = append(s, server{pod: p})
	}
	return s
}

func r(start, end int) valkey.SlotRange { return valkey.SlotRange{Start: start, End: end} }

func actions(p Plan) []string {
	var out []string
	for _, a := range p.Actions {
		out = append(out, a.String())
	}
	return out
}

func TestFormationPlansOneStepAtATime(t *testing.T) {
	want := Want{Shards: 3, ReplicasPerShard: 1}
	formed := all(
		server{pod: "pod-0", slots: []valkey.SlotRange{r(0, 5461)}},
		server{pod: "pod-1", slots: []valkey.SlotRange{r(5462, 10922)}},
		server{pod: "pod-2", slots: []valkey.SlotRange{r(10923, 16383)}},
		server{pod: "pod-3", replica: "pod-0"},
		server{pod: "pod-4", replica: "pod-1"},
		server{pod: "pod-5", replica: "pod-2"},
	)
	for _, tc := range []struct {
		name        string
		members     []Member
		wantActions []string
		waiting     string
	}{{
		name:    "too few pods yet",
		members: world(fresh(4)...),
		waiting: "4/6 nodes are running",
	}, {
		name:    "a server that cannot be asked",
		members: world(append(fresh(5), server{pod: "pod-5", down: true})...),
		waiting: "cannot ask pod-5",
	}, {
		name:    "fresh servers: one meets all the others",
		members: world(fresh(6)...),
		wantActions: []string{
			"pod-0: CLUSTER MEET 127.64.0.1 6379", "pod-0: CLUSTER MEET 127.64.0.2 6379", "pod-0: CLUSTER MEET 127.64.0.3 6379",
			"pod-0: CLUSTER MEET 127.64.0.4 6379", "pod-0: CLUSTER MEET 127.64.0.5 6379",
		},
	}, {
		name: "the seed is whoever knows most, and meets only whom it does not know",
		members: world(server{pod: "pod-0"}, server{pod: "pod-1"}, server{pod: "pod-2", knows: []string{"pod-3", "pod-4"}},
			server{pod: "pod-3"}, server{pod: "pod-4"}, server{pod: "pod-5"}),
		// pod-3 and pod-4 know nobody though pod-2 knows them, as after a CLUSTER RESET: they
		// meet pod-2 themselves (a server that was met has the seed at least in handshake).
		wantActions: []string{
			"pod-2: CLUSTER MEET 127.64.0.0 6379", "pod-2: CLUSTER MEET 127.64.0.1 6379", "pod-3: CLUSTER MEET 127.64.0.2 6379",
			"pod-4: CLUSTER MEET 127.64.0.2 6379", "pod-2: CLUSTER MEET 127.64.0.5 6379",
		},
	}, {
		name: "met by the seed, not yet by everyone",
		members: func() []Member {
			m := world(server{pod: "pod-0", knows: pods(6)[1:]}, server{pod: "pod-1", knows: []string{"pod-0"}}, server{pod: "pod-2"},
				server{pod: "pod-3"}, server{pod: "pod-4"}, server{pod: "pod-5"})
			for i := range m[2:] {
				m[2+i].Nodes = append(m[2+i].Nodes, valkey.ClusterNode{ID: "id-random", IP: ip("pod-0"), Port: 6379, Handshake: true})
			}
			return m
		}(),
		waiting: "the cluster bus handshake of pod-1 with pod-2",
	}, {
		name:        "all met, no slots: a third of them each to three primaries",
		members:     world(all(fresh(6)...)...),
		wantActions: []string{"pod-0: CLUSTER ADDSLOTSRANGE 0-5461", "pod-1: CLUSTER ADDSLOTSRANGE 5462-10922", "pod-2: CLUSTER ADDSLOTSRANGE 10923-16383"},
	}, {
		name: "a crash after the first primary got its slots: the rest go to two more",
		members: world(all(server{pod: "pod-0", slots: []valkey.SlotRange{r(0, 5461)}},
			server{pod: "pod-1"}, server{pod: "pod-2"}, server{pod: "pod-3"}, server{pod: "pod-4"}, server{pod: "pod-5"})...),
		wantActions: []string{"pod-1: CLUSTER ADDSLOTSRANGE 5462-10922", "pod-2: CLUSTER ADDSLOTSRANGE 10923-16383"},
	}, {
		name: "slots served: each spare server replicates a primary without one",
		members: world(all(formed[0], formed[1], formed[2],
			server{pod: "pod-3"}, server{pod: "pod-4", replica: "pod-1"}, server{pod: "pod-5"})...),
		wantActions: []string{"pod-3: CLUSTER REPLICATE id-pod-0", "pod-5: CLUSTER REPLICATE id-pod-2"},
	}, {
		name: "more primaries wanted than slots left: no empty share",
		members: world(all(server{pod: "pod-0", slots: []valkey.SlotRange{r(0, 16382)}},
			server{pod: "pod-1"}, server{pod: "pod-2"}, server{pod: "pod-3"}, server{pod: "pod-4"}, server{pod: "pod-5"})...),
		wantActions: []string{"pod-1: CLUSTER ADDSLOTSRANGE 16383"},
	}, {
		name: "slots held by a node that is not a member: not given to another",
		members: func() []Member {
			m := world(all(fresh(6)...)...)
			m[1].Nodes = append(m[1].Nodes, valkey.ClusterNode{ID: "id-gone", IP: "127.64.0.9", Port: 6379, Connected: true, Primary: true, Slots: []valkey.SlotRange{r(0, 99)}})
			return m
		}(),
		waiting: "slots are held by nodes that are not this Cache's servers: id-gone",
	}, {
		name: "a replaced primary's old node, failed, with a replica: left to Valkey's failover, which picks the replica",
		members: func() []Member {
			m := world(all(formed[1], formed[2], formed[3], formed[4], formed[5], server{pod: "pod-0"})...)
			for i := range m[:5] {
				m[i].Nodes = append(m[i].Nodes, valkey.ClusterNode{ID: "id-gone", Primary: true, Failing: true, IP: "127.64.0.9", Port: 6379, Slots: []valkey.SlotRange{r(0, 5461)}})
			}
			m[2].Nodes[0].PrimaryID = "id-gone" // pod-3
			return m
		}(),
		waiting: "Valkey to fail over the shard of the departed node id-gone",
	}, {
		name: "a replaced primary's old node at an address reused by its new pod (noaddr): taken over the same way",
		members: func() []Member {
			m := world(all(formed[1], formed[2], formed[3], formed[4], formed[5], server{pod: "pod-0"})...)
			for i := range m[:5] {
				m[i].Nodes = append(m[i].Nodes, valkey.ClusterNode{ID: "id-gone", Primary: true, Slots: []valkey.SlotRange{r(0, 5461)}})
			}
			m[2].Nodes[0].PrimaryID = "id-gone"
			return m
		}(),
		wantActions: []string{"pod-3: CLUSTER FAILOVER TAKEOVER"},
	}, {
		name: "a departed primary (noaddr) with two replicas: the one furthest into its writes takes over",
		members: func() []Member {
			m := world(all(formed[1], formed[2], formed[3], formed[4], formed[5], server{pod: "pod-0"})...)
			for i := range m[:5] {
				m[i].Nodes = append(m[i].Nodes, valkey.ClusterNode{ID: "id-gone", Primary: true, Slots: []valkey.SlotRange{r(0, 5461)}})
			}
			m[2].Nodes[0].PrimaryID, m[2].ReplOffset = "id-gone", 100 // pod-3
			m[3].Nodes[0].PrimaryID, m[3].ReplOffset = "id-gone", 250 // pod-4
			return m
		}(),
		wantActions: []string{"pod-4: CLUSTER FAILOVER TAKEOVER"},
	}, {
		name: "a departed node nobody replicates: every member that knows it forgets it",
		members: func() []Member {
			m := world(all(formed[1], formed[2], formed[3], formed[4], formed[5], server{pod: "pod-0"})...)
			for i := range m[:3] {
				m[i].Nodes = append(m[i].Nodes, valkey.ClusterNode{ID: "id-gone", Primary: true, Failing: true, IP: "127.64.0.9", Port: 6379})
			}
			return m
		}(),
		wantActions: []string{"pod-1: CLUSTER FORGET id-gone", "pod-2: CLUSTER FORGET id-gone", "pod-3: CLUSTER FORGET id-gone"},
	}, {
		name: "a departed primary whose replica is gone too: forgotten, so that its slots can go to a new node",
		members: func() []Member {
			m := world(all(formed[1], formed[2], formed[4], formed[5], server{pod: "pod-0"}, server{pod: "pod-3"})...)
			for i := range m[:4] {
				m[i].Nodes = append(m[i].Nodes, valkey.ClusterNode{ID: "id-gone", Primary: true, Failing: true, IP: "127.64.0.9", Port: 6379, Slots: []valkey.SlotRange{r(0, 5461)}})
			}
			return m
		}(),
		wantActions: []string{"pod-1: CLUSTER FORGET id-gone", "pod-2: CLUSTER FORGET id-gone", "pod-4: CLUSTER FORGET id-gone", "pod-5: CLUSTER FORGET id-gone"},
	}, {
		name: "a node in handshake has a made-up ID that is no member's: it is not forgotten",
		members: func() []Member {
			m := world(all(formed...)...)
			m[1].Nodes = append(m[1].Nodes, valkey.ClusterNode{ID: "id-random", Handshake: true, IP: "127.64.0.9", Port: 6379})
			return m
		}(),
	}, {
		name: "a node that is no member's and serves slots, reachable, only suspected by one member, is not forgotten: the cluster has not agreed",
		members: func() []Member {
			m := world(all(formed...)...)
			m[1].Nodes = append(m[1].Nodes, valkey.ClusterNode{ID: "id-other", Primary: true, IP: "127.64.0.9", Port: 6379, Suspected: true,
				Connected: true, Slots: []valkey.SlotRange{r(0, 0)}})
			return m
		}(),
		waiting: "slots are held by nodes that are not this Cache's servers: id-other",
	}, {
		name: "a departed primary nobody replicates, unreachable, that the cluster cannot judge failed: forgotten",
		members: func() []Member {
			m := world(all(formed[1], formed[2], formed[3], formed[4], formed[5], server{pod: "pod-0"})...)
			for i := range m[:5] {
				m[i].Nodes = append(m[i].Nodes, valkey.ClusterNode{ID: "id-gone", Primary: true, Suspected: true, IP: "127.64.0.9", Port: 6379, Slots: []valkey.SlotRange{r(0, 5461)}})
			}
			return m
		}(),
		wantActions: []string{"pod-1: CLUSTER FORGET id-gone", "pod-2: CLUSTER FORGET id-gone", "pod-3: CLUSTER FORGET id-gone", "pod-4: CLUSTER FORGET id-gone", "pod-5: CLUSTER FORGET id-gone"},
	}, {
		name: "a node that is no member's and serves no slot, known to one member only, is forgotten at once",
		members: func() []Member {
			m := world(all(formed...)...)
			m[1].Nodes = append(m[1].Nodes, valkey.ClusterNode{ID: "id-released", Primary: true, IP: "127.64.0.9", Port: 6379, Suspected: true})
			return m
		}(),
		wantActions: []string{"pod-1: CLUSTER FORGET id-released"},
	}, {
		name:    "formed",
		members: world(formed...),
	}, {
		name: "formed after a failover: a primary on any pod",
		members: world(all(
			server{pod: "pod-3", slots: []valkey.SlotRange{r(0, 5461)}}, server{pod: "pod-0", replica: "pod-3"},
			formed[1], formed[2], formed[4], formed[5])...),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			plan := Form(want, tc.members)
			if got := actions(plan); !slices.Equal(got, tc.wantActions) {
				t.Errorf("actions\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.wantActions, "\n"))
			}
			if !strings.HasPrefix(plan.Waiting, tc.waiting) || (tc.waiting == "") != (plan.Waiting == "") {
				t.Errorf("waiting for %q, want %q", plan.Waiting, tc.waiting)
			}
		})
	}
}

func TestSplitGivesEveryPartTheSameCountGiveOrTakeOne(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 7, 9, 16} {
		parts := split([]valkey.SlotRange{r(0, 16383)}, n)
		lo, hi, total, next := valkey.SlotCount, 0, 0, 0
		for _, part := range parts {
			count := 0
			for _, rr := range part {
				if rr.Start != next {
					t.Fatalf("%d parts: range %v does not follow slot %d", n, rr, next-1)
				}
				next = rr.End + 1
				count += rr.Len()
			}
			lo, hi, total = min(lo, count), max(hi, count), total+count
		}
		if total != valkey.SlotCount || hi-lo > 1 {
			t.Errorf("%d parts: %d slots in all, counts from %d to %d", n, total, lo, hi)
		}
	}
}

func TestFormationOfNothingDoesNotPanic(t *testing.T) {
	for _, want := range []Want{{}, {Shards: -1}, {Shards: 1, ReplicasPerShard: -1}} {
		if plan := Form(want, nil); plan.Waiting == "" {
			t.Errorf("Form(%+v, no members) = %+v, want it waiting with a reason", want, plan)
		}
	}
	if h := Assess(Want{}, nil); h.Ready() {
		t.Error("Assess of no members is ready")
	}
}

// A replica goes to a primary on another Kubernetes node when one has room: where the scheduler
// had to put two pods on one node, the operator does not make them one shard, which that node
// would take down whole.
func TestReplicasAttachToPrimariesOnOtherNodes(t *testing.T) {
	half := []valkey.SlotRange{{Start: 0, End: 8191}}
	rest := []valkey.SlotRange{{Start: 8192, End: 16383}}
	members := world(all(server{pod: "pod-1", slots: half}, server{pod: "pod-2", slots: rest}, server{pod: "pod-3"}, server{pod: "pod-4"})...)
	nodeOf := map[string]string{"pod-1": "node-a", "pod-2": "node-b", "pod-3": "node-a", "pod-4": "node-b"}
	for i := range members {
		members[i].Node = nodeOf[members[i].Pod]
	}
	plan, _ := attachReplicas(Want{Shards: 2, ReplicasPerShard: 1}, members)
	got := map[string]string{}
	for _, a := range plan.Actions {
		got[a.On] = a.Replicate
	}
	if want := map[string]string{"pod-3": id("pod-2"), "pod-4": id("pod-1")}; !maps.Equal(got, want) {
		t.Errorf("replicas attached %v, want %v (each on another node than its primary)", got, want)
	}

	// Without nodes known, the replicas go as before: to the primary with the fewest.
	for i := range members {
		members[i].Node = ""
	}
	plan, _ = attachReplicas(Want{Shards: 2, ReplicasPerShard: 1}, members)
	if len(plan.Actions) != 2 || plan.Actions[0].Replicate == plan.Actions[1].Replicate {
		t.Errorf("without nodes: %v, want one replica for each primary", plan.Actions)
	}
}
