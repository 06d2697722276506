package testenv

import (
	"sync/atomic"
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test with cond's last explanation after
// timeout. Tests wait on conditions, never on fixed sleeps. It looks again after 50 ms at first
// and less often the longer the condition takes, down to twice a second: most conditions are
// reads of the API server that every test running beside shares, and a wait of minutes needs no
// twenty reads a second. A benchmark, which times when a condition first holds, calls
// PollClosely.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for pause := firstPoll; ; pause = min(pause*5/4, time.Duration(slowestPoll.Load())) {
		ok, why := cond()
		if ok {
			return
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("timed out after %s waiting for %s; last seen: %s", timeout, what, why)
		}
		<-time.After(min(pause, left))
	}
}

// firstPoll is how soon a wait looks at its condition again the first time.
const firstPoll = 50 * time.Millisecond

// slowestPoll is the longest pause between two looks of a wait.
var slowestPoll atomic.Int64

func init() { slowestPoll.Store(int64(500 * time.Millisecond)) }

// PollClosely makes every wait look every 50 ms until the test ends, for a benchmark: its
// figures are when a condition first held. Benchmarks run alone, so no test beside pays for it.
func PollClosely(t testing.TB) {
	old := slowestPoll.Swap(int64(firstPoll))
	t.Cleanup(func() { slowestPoll.Store(old) })
}
