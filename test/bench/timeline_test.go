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

	"example.com/cache-operator/internal/testenv"
)

// timeline records how many Caches are Ready (for the spec of the current phase) over time.
type timeline struct {
	mu        sync.Mutex
	start     time.Time
	phase     string
	readyN    map[int]int
	remaining int
	points    []Sample
}

func (tl *timeline) setPhase(p string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.phase = p
	tl.addLocked()
}

func (tl *timeline) mark() {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.addLocked()
}

func (tl *timeline) readyChanged(phase int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if tl.readyN == nil {
		tl.readyN = map[int]int{}
	}
	tl.readyN[phase]++
	tl.addLocked()
}

func (tl *timeline) setRemaining(n int) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.remaining = n
	tl.addLocked()
}

// addLocked appends the current state: Ready Caches of the phase's spec (created with the
// first spec, scaled with the second), and during deletion the Caches still there.
func (tl *timeline) addLocked() {
	n := tl.readyN[1]
	switch tl.phase {
	case "scale", "restart":
		n = tl.readyN[2]
	case "delete":
		n = tl.remaining
	}
	tl.points = append(tl.points, Sample{Seconds: time.Since(tl.start).Seconds(), Phase: tl.phase, Ready: n})
}

func (tl *timeline) samples() []Sample {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return tl.points
}

// memorySampler scrapes the operator's RSS and Go heap every half second and keeps each
// phase's peak.
type memorySampler struct {
	mu    sync.Mutex
	phase string
	peak  map[string]Memory
}

func (m *memorySampler) setPhase(p string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.phase = p
}

func (m *memorySampler) run(t *testing.T, current func() *testenv.Operator) {
	m.peak = map[string]Memory{}
	stop := make(chan struct{})
	done := make(chan struct{})
	t.Cleanup(func() { close(stop); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			families := current().Metrics(t)
			if families == nil {
				continue
			}
			rss := testenv.Sum(families, "process_resident_memory_bytes", nil) / (1 << 20)
			heap := testenv.Sum(families, "go_memstats_heap_alloc_bytes", nil) / (1 << 20)
			m.mu.Lock()
			p := m.peak[m.phase]
			p.RSSMiB, p.HeapMiB = max(p.RSSMiB, rss), max(p.HeapMiB, heap)
			m.peak[m.phase] = p
			m.mu.Unlock()
		}
	}()
}

func (m *memorySampler) peaks() map[string]Memory {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peak
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
