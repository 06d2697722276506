package gcpacing

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestGCPercentGrowsASmallHeapByAtLeastMinGrowth(t *testing.T) {
	const mib = 1 << 20
	p := Pacing{Percent: 25, MinGrowth: 16 * mib}
	for _, tc := range []struct {
		live uint64
		want int
	}{
		{live: 0, want: 25},          // before the first collection: nothing to scale by
		{live: 4 * mib, want: 400},   // 16 MiB on 4
		{live: 12 * mib, want: 134},  // 16 MiB on 12 is 133.3 %, rounded up so as not to fall short
		{live: 64 * mib, want: 25},   // a quarter is 16 MiB
		{live: 200 * mib, want: 25},  // a quarter is more than 16 MiB
		{live: 64*mib - 1, want: 26}, // just under: a quarter falls short
	} {
		got := p.GCPercent(tc.live)
		if got != tc.want {
			t.Errorf("GCPercent(%d MiB live) = %d, want %d", tc.live/mib, got, tc.want)
		}
		if tc.live > 0 && got < maxGCPercent && tc.live*uint64(got)/100 < p.MinGrowth {
			t.Errorf("GCPercent(%d) = %d lets the heap grow by less than MinGrowth", tc.live, got)
		}
	}
}

// Keep must keep setting GOGC after collections, not only once: set by hand in between, it is
// set again by the next collection.
func TestKeepSetsGOGCAgainAfterEveryCollection(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	p := Pacing{Percent: 25, MinGrowth: 1 << 30} // far above any test's heap: never a quarter
	p.Keep()
	for range 2 {
		debug.SetGCPercent(25)
		deadline := time.Now().Add(10 * time.Second)
		for gcPercent() == 25 {
			if time.Now().After(deadline) {
				t.Fatal("GOGC was not set again after a collection")
			}
			runtime.GC()
			runtime.Gosched()
		}
		if got, want := gcPercent(), uint64(p.GCPercent(liveHeap())); got != want {
			t.Errorf("GOGC after a collection = %d, want %d for %d bytes live", got, want, liveHeap())
		}
	}
}

func gcPercent() uint64 {
	sample := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(sample)
	return sample[0].Value.Uint64()
}
