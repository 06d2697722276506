//go:build bench

package bench

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"example.com/cache-operator/test/harness/testenv"
)

// timeline records over time how many Caches are Ready and how many of their StatefulSets
// have every replica ready, for the spec of the current phase, and the operator's queue depth:
// when Caches lag behind their StatefulSets, the operator is what holds them.
type timeline struct {
	mu        sync.Mutex
	start     time.Time
	phase     string
	readyN    map[int]int
	stsReadyN map[int]int
	queue     int
	remaining int
	// floorRound is set during a floor round, whose ready StatefulSets floorReady counts.
	floorRound bool
	floorReady int
	points     []Sample
}

// newTimeline starts a timeline of n Caches, all of them left to delete until the delete phase
// lists them.
func newTimeline(n int) *timeline {
	return &timeline{start: time.Now(), readyN: map[int]int{}, stsReadyN: map[int]int{}, remaining: n}
}

// record makes a change and appends the state it leads to.
func (tl *timeline) record(change func()) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	change()
	tl.addLocked()
}

func (tl *timeline) setPhase(p string)      { tl.record(func() { tl.phase = p }) }
func (tl *timeline) mark()                  { tl.record(func() {}) }
func (tl *timeline) readyChanged(phase int) { tl.record(func() { tl.readyN[phase]++ }) }
func (tl *timeline) statefulSetReadyChanged(phase int) {
	tl.record(func() { tl.stsReadyN[phase]++ })
}
func (tl *timeline) setRemaining(n int) { tl.record(func() { tl.remaining = n }) }
func (tl *timeline) readyCleared()      { tl.record(func() { clear(tl.readyN); clear(tl.stsReadyN) }) }

// floorRoundStarted, floorReadyChanged and floorRoundEnded draw a floor round's StatefulSets
// as they become ready, to set against the create phase's curve.
func (tl *timeline) floorRoundStarted() {
	tl.record(func() { tl.floorRound, tl.floorReady = true, 0 })
}
func (tl *timeline) floorReadyChanged(n int) { tl.record(func() { tl.floorReady = n }) }
func (tl *timeline) floorRoundEnded()        { tl.record(func() { tl.floorRound = false }) }

// setQueue records the operator's queue depth, sampled every metricsEvery, only when it changes.
func (tl *timeline) setQueue(depth int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if depth != tl.queue {
		tl.queue = depth
		tl.addLocked()
	}
}

// addLocked appends the current state: Ready Caches and ready StatefulSets of the phase's spec
// (created with the first spec, scaled with the second), during a floor round its ready
// StatefulSets, during deletion the Caches still there, and the operator's queue depth.
func (tl *timeline) addLocked() {
	spec := 1
	if tl.phase == "scale" || tl.phase == "restart" {
		spec = 2
	}
	sample := Sample{Seconds: time.Since(tl.start).Seconds(), Phase: tl.phase, Ready: tl.readyN[spec],
		StatefulSetsReady: tl.stsReadyN[spec], OperatorQueue: tl.queue}
	switch {
	case tl.floorRound:
		sample.StatefulSetsReady = tl.floorReady
	case deleting(tl.phase):
		sample.Ready, sample.StatefulSetsReady = tl.remaining, 0
	}
	tl.points = append(tl.points, sample)
}

// deleting tells the phases that delete the Caches, whose timeline draws the Caches left.
func deleting(phase string) bool { return phase == "delete" || phase == "clear" }

// samples is the timeline with, of each second of each phase, only its last state: at 10,000
// Caches every change kept would make a results file of megabytes for a chart of seconds.
func (tl *timeline) samples() []Sample {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	var kept []Sample
	for i, s := range tl.points {
		if i+1 == len(tl.points) || tl.points[i+1].Phase != s.Phase || int(tl.points[i+1].Seconds) != int(s.Seconds) {
			kept = append(kept, s)
		}
	}
	return kept
}

// operatorSampler reads the operator's resident memory from /proc every half second and keeps
// each phase's peak. Its metrics (the Go heap, and the queue depth for the timeline) it scrapes
// only every metricsEvery: a scrape lists every Cache for the per-Cache series, and at 10,000
// Caches scraping twice a second made the operator allocate more for the benchmark than for
// its work. A Prometheus scrapes every 15 s or more.
type operatorSampler struct {
	mu       sync.Mutex
	phase    string
	peak     map[string]Memory
	timeline *timeline
}

const (
	memoryEvery  = 500 * time.Millisecond
	metricsEvery = 2 * time.Second
)

func (m *operatorSampler) setPhase(p string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.phase = p
}

func (m *operatorSampler) run(t *testing.T, current func() *testenv.Operator) {
	m.peak = map[string]Memory{}
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		var scraped time.Time
		everyTick(memoryEvery, stop, func() {
			o := current()
			sample, err := resident(o.PID())
			if err != nil {
				return // exited: the restart phase replaces it
			}
			if time.Since(scraped) >= metricsEvery {
				scraped = time.Now()
				// Not Metrics(t): only the test's own goroutine may end the test.
				families, err := o.Scrape()
				if err != nil {
					t.Error(err)
				}
				if families != nil {
					sample.HeapMiB = testenv.Sum(families, "go_memstats_heap_alloc_bytes", nil) / (1 << 20)
					m.timeline.setQueue(int(testenv.Sum(families, "workqueue_depth", map[string]string{"name": "cache"})))
				}
			}
			m.mu.Lock()
			m.peak[m.phase] = m.peak[m.phase].max(sample)
			m.mu.Unlock()
		})
	}()
}

func (m *operatorSampler) peaks() map[string]Memory {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
}

// resident reads the resident set size of process pid and its anonymous part, in MiB; an
// error once it has exited.
func resident(pid int) (Memory, error) {
	sizes, err := testenv.MemoryMiB(pid, "VmRSS", "RssAnon")
	return Memory{RSSMiB: sizes["VmRSS"], AnonMiB: sizes["RssAnon"]}, err
}

func cpuAndMemory() (model string, memGiB float64) {
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		defer f.Close() //nolint:errcheck
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	if f, err := os.Open("/proc/meminfo"); err == nil {
		defer f.Close() //nolint:errcheck
		var kb float64
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "MemTotal:") {
				_, _ = fmt.Sscan(strings.TrimPrefix(sc.Text(), "MemTotal:"), &kb)
				memGiB = kb / (1 << 20)
			}
		}
	}
	if model == "" {
		model = runtime.GOARCH
	}
	return model, memGiB
}
