// Package gcpacing decides how much garbage the operator's heap may gather before the next
// collection. Nearly all of the heap is the informers' copies of every Cache and child, which
// live as long as the process, so a fixed GOGC trades one cost for the other: Go's default of
// 100 lets a large fleet's heap grow to twice what is live, and 25, which keeps 10,000 Caches
// under 200 MiB, collects a small heap every few MiB while many Caches change at once, on cores
// the operator may share with the control plane. Here the heap may grow by a quarter of what is
// live, but never by less than a fixed amount: a small fleet is collected as rarely as with
// GOGC=100 and a large one as tightly as with GOGC=25 (docs/install.md#sizing).
package gcpacing

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
)

// Pacing is how far the heap may grow past what is live before the next collection.
type Pacing struct {
	// Percent is the growth as a share of the live heap, as in GOGC.
	Percent int
	// MinGrowth is the least growth, in bytes, whatever the live heap.
	MinGrowth uint64
}

// Default is the operator's pacing: a quarter of the live heap, but at least 16 MiB, which is
// what a quarter comes to at 64 MiB live, some 5,000 Caches.
var Default = Pacing{Percent: 25, MinGrowth: 16 << 20}

// maxGCPercent bounds GOGC for a heap so small that MinGrowth is many times it (the runtime
// takes GOGC as an int32); the operator's heap is past that before its informers have synced.
const maxGCPercent = 10_000

// GCPercent is the GOGC that lets a heap of live bytes grow as p says.
func (p Pacing) GCPercent(live uint64) int {
	if live == 0 || live*uint64(p.Percent) >= p.MinGrowth*100 {
		return p.Percent
	}
	// Rounded up, so the growth is at least MinGrowth.
	return int(min((p.MinGrowth*100+live-1)/live, maxGCPercent))
}

// Keep sets GOGC now and again after every collection, from the live heap that collection
// found, for the rest of the process's life. A new GOGC moves the goal of the next collection at
// once, so the growth allowed after each collection follows what that collection found live.
func (p Pacing) Keep() {
	debug.SetGCPercent(p.GCPercent(liveHeap()))
	p.afterNextCollection()
}

// afterNextCollection arranges for GOGC to be set again once the next collection has marked the
// live heap: the cleanup of an object nothing refers to runs after the collection that finds it
// unreachable, and it arranges the same for the collection after.
func (p Pacing) afterNextCollection() {
	// Large enough not to share a block of the tiny allocator, whose blocks may outlive it.
	sentinel := new([16]byte)
	runtime.AddCleanup(sentinel, func(p Pacing) {
		debug.SetGCPercent(p.GCPercent(liveHeap()))
		p.afterNextCollection()
	}, p)
}

// liveHeap is the heap the last collection found live, in bytes.
func liveHeap() uint64 {
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(sample)
	if sample[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return sample[0].Value.Uint64()
}

// SoftLimit is the Go runtime's memory limit (GOMEMLIMIT) for a process whose container may use
// containerLimit bytes: three quarters of it. The runtime collects garbage harder as what it
// counts nears that, well before the kernel would kill the process at the container's limit; the
// rest is for what the runtime does not count, the binary's pages above all (48 MiB of the
// operator's RSS), and for the heap's overshoot while a collection runs.
func SoftLimit(containerLimit int64) int64 {
	return containerLimit / 4 * 3
}
