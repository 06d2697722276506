//go:build bench

package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// CPUCurve is the CPU time some processes took, interval by interval from the start of a phase.
type CPUCurve struct {
	IntervalSeconds float64 `json:"intervalSeconds"`
	// Seconds holds the CPU seconds taken in each interval.
	Seconds []float64 `json:"seconds"`
}

// total is the CPU seconds taken over the whole curve.
func (c CPUCurve) total() float64 {
	var s float64
	for _, v := range c.Seconds {
		s += v
	}
	return s
}

// cores is the CPU taken at the given time since the start, in cores; none after the end.
func (c CPUCurve) cores(elapsed time.Duration) float64 {
	i := int(elapsed.Seconds() / c.IntervalSeconds)
	if i >= len(c.Seconds) {
		return 0
	}
	return c.Seconds[i] / c.IntervalSeconds
}

// cpuEvery is how often recordCPU reads the processes' CPU time: short enough for the burst of
// first passes at the start of a create phase to keep its shape when replayed.
const cpuEvery = 250 * time.Millisecond

// recordCPU records the CPU time that the processes take from now until the function it
// returns is called, which returns the curve.
func recordCPU(t *testing.T, pids ...int) (stop func() CPUCurve) {
	t.Helper()
	taken := func() float64 {
		var s float64
		for _, pid := range pids {
			cpu, err := cpuSeconds(pid)
			if err != nil {
				t.Error(err)
			}
			s += cpu
		}
		return s
	}
	curve := CPUCurve{IntervalSeconds: cpuEvery.Seconds()}
	done := make(chan struct{})
	var wg sync.WaitGroup
	last := taken()
	wg.Go(func() {
		everyTick(cpuEvery, done, func() {
			now := taken()
			curve.Seconds = append(curve.Seconds, now-last)
			last = now
		})
	})
	return func() CPUCurve { close(done); wg.Wait(); return curve }
}

// clockTicks is the unit of the CPU times in /proc/PID/stat, USER_HZ, which Linux fixes at 100
// a second for user space whatever the kernel's own tick.
const clockTicks = 100

// cpuSeconds is the CPU time, user and system, that process pid has taken so far.
func cpuSeconds(pid int) (float64, error) {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name, in parentheses, may hold spaces; the fields after it are counted from
	// the state, field 3: utime and stime are fields 14 and 15.
	_, after, ok := strings.Cut(string(stat), ") ")
	fields := strings.Fields(after)
	if !ok || len(fields) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: unexpected %q", pid, stat)
	}
	var ticks float64
	for _, f := range fields[11:13] {
		n, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return ticks / clockTicks, nil
}

// burnCPU keeps as many cores busy as cores says at each moment since the call, up to two,
// until the function it returns is called. Each of two goroutines spins for its half of that
// share of every 10 ms tick, so the load comes in short bursts, as a busy process's does.
func burnCPU(cores func(elapsed time.Duration) float64) (stop func()) {
	const period = 10 * time.Millisecond
	start := time.Now()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			everyTick(period, done, func() {
				// Timed from the wake-up, not from the tick, which a wake-up can follow by a
				// millisecond or more: timed from the tick, 0.5 of a core was 0.2.
				woke := time.Now()
				busy := time.Duration(min(cores(woke.Sub(start))/2, 1) * float64(period))
				for time.Since(woke) < busy { // spinning is the point
				}
			})
		})
	}
	return func() { close(done); wg.Wait() }
}

// PhaseSteal is the share of the machine's CPU time that its host gave to other guests during
// one phase (steal): on a shared virtual machine, what tells a slow machine from a slow phase.
type PhaseSteal struct {
	Phase   string  `json:"phase"`
	Percent float64 `json:"percent"`
}

// machineCPU reads the machine's CPU time so far, in clock ticks: stolen by the host, and in all.
func machineCPU() (steal, all float64, err error) {
	stat, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0, err
	}
	line, _, _ := strings.Cut(string(stat), "\n")
	fields := strings.Fields(line)
	// cpu user nice system idle iowait irq softirq steal ...: guest time is counted in user too.
	if len(fields) < 9 || fields[0] != "cpu" {
		return 0, 0, fmt.Errorf("/proc/stat: unexpected %q", line)
	}
	for i, f := range fields[1:9] {
		v, err := strconv.ParseFloat(f, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("/proc/stat: %w", err)
		}
		all += v
		if i == 7 {
			steal = v
		}
	}
	return steal, all, nil
}

// measureSteal runs phase and returns the share of the machine's CPU time stolen meanwhile.
func measureSteal(t *testing.T, name string, phase func()) PhaseSteal {
	t.Helper()
	steal0, all0, err := machineCPU()
	if err != nil {
		t.Fatal(err)
	}
	phase()
	steal1, all1, err := machineCPU()
	if err != nil {
		t.Fatal(err)
	}
	s := PhaseSteal{Phase: name}
	if all1 > all0 {
		s.Percent = 100 * (steal1 - steal0) / (all1 - all0)
	}
	return s
}
