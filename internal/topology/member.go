package topology

import (
	"time"

	"example.com/cache-operator/internal/valkey"
)

// clusterStateOK is the cluster_state of a server that sees every slot served by a primary it
// reaches, and so serves the keys of its own.
const clusterStateOK = "ok"

// Member is one pod of the Cache and what its server says.
type Member struct {
	Pod  string
	IP   string
	Port int
	// Node is the Kubernetes node the pod runs on; empty when not known.
	Node string
	// Nodes is CLUSTER NODES as this member's server reports it; nil when it could not be
	// asked.
	Nodes []valkey.ClusterNode
	// State is cluster_state as the server reports it (clusterStateOK when it serves every slot).
	State string
	// Version is the Valkey release the server runs.
	Version string
	// LinkUp reports, for a replica, whether its replication link to its primary is up, and
	// ReplOffset how far into its primary's stream of writes it has got.
	LinkUp     bool
	ReplOffset int64
	// Leaving marks a pod that a scale-in removes: its slots and its place in the cluster go
	// first. Outdated marks a pod that runs an older pod template than its StatefulSet's.
	Leaving, Outdated bool
	// Fenced marks a server that refuses replicas' resynchronisation, as every Cluster node
	// does from its start until unfence lifts it.
	Fenced bool
	// Stranger, when set, is what the server at the member's address says it is, which is not
	// this member's pod: the address has gone to another pod, and Nodes are not read.
	Stranger string
	// Migrations are, for a primary on a release with atomic slot migration, the jobs its log
	// lists (CLUSTER GETSLOTMIGRATIONS), newest first; Observed is when the member was read, by the
	// server's clock, which the jobs' times are on.
	Migrations []valkey.SlotMigration
	Observed   time.Time
	// HandoverSeen marks a pod on which the operator recorded (MarkHandover) that every member
	// reports its shard handed over to another primary, SinceHandover ago.
	HandoverSeen  bool
	SinceHandover time.Duration
}

// self is the member's own entry: what it says about itself is authoritative for its ID, its
// role and the slots it serves.
func (m *Member) self() (valkey.ClusterNode, bool) {
	return valkey.Myself(m.Nodes)
}

// Want is the cluster the spec asks for.
type Want struct {
	Shards, ReplicasPerShard int
	// Restored are, while a restore lasts, the slots each restored server (by pod) held in the
	// backup: it is given them back before any slot is spread (claimRestored).
	Restored map[string][]valkey.SlotRange
	// KeyByKey keeps slots moving key by key even where every server could move them with atomic
	// slot migration (the operator's --atomic-slot-migration=false).
	KeyByKey bool
}

// Nodes is the number of servers the cluster is made of.
func (w Want) Nodes() int { return w.Shards * (1 + w.ReplicasPerShard) }

// membersByID are the members that could be asked, by the node ID each server gives itself.
func membersByID(members []Member) map[string]*Member {
	byID := map[string]*Member{}
	for i := range members {
		if self, ok := members[i].self(); ok {
			byID[self.ID] = &members[i]
		}
	}
	return byID
}

// memberIDs are the node IDs of the members that could be asked, each the ID its server gives
// itself.
func memberIDs(members []Member) map[string]bool {
	ids := map[string]bool{}
	for i := range members {
		if self, ok := members[i].self(); ok {
			ids[self.ID] = true
		}
	}
	return ids
}

// staying are the members that the scale-in, if any, keeps.
func staying(members []Member) []*Member {
	var kept []*Member
	for i := range members {
		if !members[i].Leaving {
			kept = append(kept, &members[i])
		}
	}
	return kept
}
