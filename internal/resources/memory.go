package resources

import (
	"k8s.io/apimachinery/pkg/api/resource"
)

// MaxMemory is the memory Valkey may use for data on a node with the given memory limit: three
// quarters of what is left once the server's own serverBaseline is set aside. The last quarter is
// for what grows beside the data: a replica's lag beyond the backlog (ReplicationBacklog), the
// pages a fork's child copies as writes land (a backup's snapshot, a replica's full sync) and
// allocator fragmentation, so the kernel's OOM killer never gets there before eviction does.
// Three quarters of the whole limit left too little at the smallest: a 64Mi node, filled and
// evicting under 1 MiB/s of writes while it forked for a full sync, peaked at 62.9 MiB. Under
// eviction, fragmentation takes part of the last quarter too: filled 64Mi servers held 55.4 to
// 56.0 MiB before any fork, which leaves a fork's copies 8 to 10 MiB (docs/placement.md).
func MaxMemory(limit resource.Quantity) int64 {
	return max(limit.Value()-serverBaseline, 0) / 4 * 3
}

// MemoryFor is the smallest memory limit, in whole MiB, whose MaxMemory holds bytes of data.
func MemoryFor(bytes int64) resource.Quantity {
	limit := bytes*4/3 + serverBaseline
	return *resource.NewQuantity((limit+1<<20-1)>>20<<20, resource.BinarySI)
}

// ReplicationBacklog is how much of its replication stream a server with the given memory limit
// keeps for a replica that reconnects to resume from without a full resync: a sixteenth of what
// is left once serverBaseline is set aside. A primary keeps one buffer of the stream, shared by
// the backlog and by the writes each replica has yet to receive. Valkey counts the backlog within
// maxmemory, but what a replica lags beyond it outside, where eviction never trims it; so a
// replica may lag by twice the backlog before the primary drops it (it then resyncs), and what
// is uncounted stays within a sixteenth, a quarter of the quarter beyond maxmemory, leaving the
// rest for a fork's copies. Valkey's defaults, a backlog of 10 MiB and a replica dropped only
// 256 MiB behind (or 64 MiB behind for a minute), took a quarter of a 64Mi node's maxmemory,
// and let a filled 256Mi primary, flooded with writes while its replicas fell behind on a busy
// node, grow into the OOM killer.
func ReplicationBacklog(limit resource.Quantity) int64 {
	return max(limit.Value()-serverBaseline, 0) / 16
}

// serverBaseline is what a Valkey server takes besides its data and its replication stream: its
// own code and heap, and its clients' buffers, a few MiB.
const serverBaseline = 8 << 20
