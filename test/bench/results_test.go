//go:build bench

package bench

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"example.com/cache-operator/test/harness/testenv"
)

// Result is everything one benchmark run measured.
type Result struct {
	Machine      Machine  `json:"machine"`
	Caches       int      `json:"caches"`
	Replicas     int      `json:"replicas"`
	ScaleTo      int      `json:"scaleTo"`
	Nodes        int      `json:"nodes"`
	OperatorArgs []string `json:"operatorArgs"`
	// V1Served is whether the CRD served v1 beside v2 (-unserve-v1 not given).
	V1Served bool `json:"v1Served"`
	// AuthTLS is whether the Caches had spec.auth and spec.tls (-auth-tls).
	AuthTLS bool `json:"authTLS,omitempty"`
	// FloorSkipped is whether the run had no floor rounds (-skip-floor).
	FloorSkipped bool `json:"floorSkipped,omitempty"`
	// Rounds are the floor and create rounds, in order; the later phases run on the last
	// round's Caches.
	Rounds      []Round           `json:"rounds"`
	LoadedFloor *LoadedFloorPhase `json:"loadedFloor,omitempty"`
	SpreadFloor *SpreadFloorPhase `json:"spreadFloor,omitempty"`
	Steady      SteadyPhase       `json:"steady"`
	Scale       ScalePhase        `json:"scale"`
	Restart     RestartPhase      `json:"restart"`
	Change      ChangePhase       `json:"change"`
	Delete      DeletePhase       `json:"delete"`
	Memory      map[string]Memory `json:"memoryPeakByPhase"`
	Steal       []PhaseSteal      `json:"stealByPhase"`
	Timeline    []Sample          `json:"timeline"`
}

type Machine struct {
	CPUs      int     `json:"cpus"`
	CPUModel  string  `json:"cpuModel"`
	MemoryGiB float64 `json:"memoryGiB"`
	GoVersion string  `json:"goVersion"`
	Date      string  `json:"date"`
}

// Round is a floor round and the create round right after it.
type Round struct {
	Floor       FloorPhase        `json:"floor"`
	WritesFloor *WritesFloorPhase `json:"writesFloor,omitempty"`
	ReplayFloor *ReplayFloorPhase `json:"replayFloor,omitempty"`
	Create      CreatePhase       `json:"create"`
}

// ratio is how many times the floor creating took.
func (r Round) ratio() float64 { return r.Create.AllReadySeconds / r.Floor.AllReadySeconds }

// medianRatio is the median of the rounds' ratios to their floors; of an even number, the
// higher of the middle two.
func (r *Result) medianRatio() float64 {
	var ratios []float64
	for _, round := range r.Rounds {
		ratios = append(ratios, round.ratio())
	}
	slices.Sort(ratios)
	return ratios[len(ratios)/2]
}

type CreatePhase struct {
	AllReadySeconds float64            `json:"allReadySeconds"`
	ReadyP50Seconds float64            `json:"readyP50Seconds"`
	ReadyP99Seconds float64            `json:"readyP99Seconds"`
	Requests        map[string]float64 `json:"requestsPerCache"`
	Writes          map[string]float64 `json:"writesPerCache"`
	Conflicts       map[string]float64 `json:"conflictsPerCache"`
	// Reconciles is the operator's passes over Caches per Cache, until every Cache was Ready.
	Reconciles float64 `json:"reconcilesPerCache"`
	// CPU is what the operator and its catalogue took from the start of the phase until every
	// Cache was Ready.
	CPU CPUCurve `json:"operatorAndCatalogueCPU"`
}

type SteadyPhase struct {
	Seconds    float64        `json:"seconds"`
	Writes     map[string]int `json:"writes"`
	Reconciles float64        `json:"reconciles"`
}

type ScalePhase struct {
	AllReadySeconds    float64            `json:"allReadySeconds"`
	ObservedP50Seconds float64            `json:"observedGenerationP50Seconds"`
	ObservedP99Seconds float64            `json:"observedGenerationP99Seconds"`
	Requests           map[string]float64 `json:"requestsPerCache"`
	Conflicts          map[string]float64 `json:"conflictsPerCache"`
}

type RestartPhase struct {
	DrainedSeconds float64        `json:"drainedSeconds"`
	Writes         map[string]int `json:"writes"`
}

type DeletePhase struct {
	AllGoneSeconds float64            `json:"allGoneSeconds"`
	RecordsLeft    int                `json:"catalogueRecordsLeft"`
	Requests       map[string]float64 `json:"requestsPerCache"`
}

// Memory is the operator's peak resident memory, and the anonymous part of it: what its Go
// runtime holds. The rest is the binary's own pages, which the kernel can drop under pressure
// and read back.
type Memory struct {
	RSSMiB  float64 `json:"rssMiB"`
	AnonMiB float64 `json:"rssAnonMiB"`
	HeapMiB float64 `json:"goHeapMiB"`
}

// max is the peak of each measure of m and o.
func (m Memory) max(o Memory) Memory {
	return Memory{RSSMiB: max(m.RSSMiB, o.RSSMiB), AnonMiB: max(m.AnonMiB, o.AnonMiB), HeapMiB: max(m.HeapMiB, o.HeapMiB)}
}

type Sample struct {
	Seconds           float64 `json:"t"`
	Phase             string  `json:"phase"`
	Ready             int     `json:"ready"`
	StatefulSetsReady int     `json:"statefulSetsReady"`
	OperatorQueue     int     `json:"operatorQueue"`
}

func total[V int | float64](m map[string]V) V {
	var n V
	for _, v := range m {
		n += v
	}
	return n
}

// write stores the result as benchmark-N.json, benchmark-N.md and benchmark-N.svg.
func (r *Result) write(dir string) error {
	if dir == "" {
		dir = filepath.Join(testenv.Root(), "docs")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	base := filepath.Join(dir, fmt.Sprintf("benchmark-%d", r.Caches))
	j, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(base+".json", append(j, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(base+".svg", []byte(r.svg()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(base+".md", []byte(r.markdown(filepath.Base(base)+".svg")), 0o644)
}

func (r *Result) markdown(chart string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p("## %d Caches (%d → %d replicas)\n\n", r.Caches, r.Replicas, r.ScaleTo)
	served := "v1 and v2 served"
	if !r.V1Served {
		served = "v2 served only (`-unserve-v1`)"
	}
	p("Machine: %d × %s, %.0f GiB, %s, %s. Local kwokctl cluster, QPS limits off, %d simulated nodes, %s. Operator flags: `%s`.\n\n",
		r.Machine.CPUs, r.Machine.CPUModel, r.Machine.MemoryGiB, r.Machine.GoVersion, r.Machine.Date, r.Nodes, served, strings.Join(r.OperatorArgs, " "))
	if r.AuthTLS {
		p("Every Cache with `spec.auth` and `spec.tls` (`-auth-tls`): the operator makes four Secrets and a ConfigMap more for each, " +
			"which the floor does not. No server answers on a simulated node, so each pass of a Cache fails to give its pod the passwords and is retried.\n\n")
	}
	p("| measure | value |\n|---|---|\n")
	first, last := r.Rounds[0], r.Rounds[len(r.Rounds)-1]
	var floors, writesFloors, replayFloors, creates, cpu, ratios, writes, conflicts, passes []string
	for _, round := range r.Rounds {
		floors = append(floors, fmt.Sprintf("%.1f", round.Floor.AllReadySeconds))
		if f := round.WritesFloor; f != nil {
			writesFloors = append(writesFloors, fmt.Sprintf("%.1f s (%.2f ×)", f.AllReadySeconds, f.AllReadySeconds/round.Floor.AllReadySeconds))
		}
		if f := round.ReplayFloor; f != nil {
			replayFloors = append(replayFloors, fmt.Sprintf("%.1f s (%.2f ×; creating %.2f × it)", f.AllReadySeconds,
				f.AllReadySeconds/round.Floor.AllReadySeconds, round.Create.AllReadySeconds/f.AllReadySeconds))
		}
		creates = append(creates, fmt.Sprintf("%.1f", round.Create.AllReadySeconds))
		taken := round.Create.CPU.total()
		cpu = append(cpu, fmt.Sprintf("%.1f s (%.2f cores)", taken, taken/round.Create.AllReadySeconds))
		ratios = append(ratios, fmt.Sprintf("%.2f", round.ratio()))
		writes = append(writes, fmt.Sprintf("%.2f", total(round.Create.Writes)))
		conflicts = append(conflicts, fmt.Sprintf("%.3f", total(round.Create.Conflicts)))
		passes = append(passes, fmt.Sprintf("%.2f", round.Create.Reconciles))
	}
	each := func(values []string) string { return strings.Join(values, ", ") }
	if r.FloorSkipped {
		p("| floor | not run (`-skip-floor`) |\n")
	} else {
		p("| floor: the same StatefulSets and Services created directly, all ready; each round | %s s |\n", each(floors))
	}
	if len(writesFloors) > 0 {
		p("| floor again, with %d writes per StatefulSet to ConfigMaps; each round, against its floor | %s |\n", first.WritesFloor.Writes, each(writesFloors))
	}
	if len(replayFloors) > 0 {
		p("| floor again, taking the CPU that the operator and its catalogue took in the round before's create phase; each round after the first, against its floor, and creating against it | %s |\n", each(replayFloors))
	}
	if f := r.LoadedFloor; f != nil {
		p("| floor again, with %.2f cores kept busy by the benchmark | %.1f s, %.2f × the first floor |\n", f.Cores, f.AllReadySeconds, f.AllReadySeconds/first.Floor.AllReadySeconds)
	}
	if f := r.SpreadFloor; f != nil {
		p("| floor again, created evenly over %.0f s | %.1f s, %.2f × the first floor |\n", f.SpreadSeconds, f.AllReadySeconds, f.AllReadySeconds/first.Floor.AllReadySeconds)
	}
	p("| create: all Ready (observedGeneration = generation); each round | %s s |\n", each(creates))
	if !r.FloorSkipped {
		p("| create against the round's floor; each round, **median** | %s ×, **%.2f ×** |\n", each(ratios), r.medianRatio())
	}
	p("| create: CPU the operator and its catalogue took (on average over the phase); each round | %s |\n", each(cpu))
	p("| create → Ready per Cache, p50 / p99; last round | %.2f s / %.2f s |\n", last.Create.ReadyP50Seconds, last.Create.ReadyP99Seconds)
	p("| create: operator requests per Cache; last round | %.2f (%s) |\n", total(last.Create.Requests), breakdown(last.Create.Requests))
	p("| create: operator writes per Cache (no Lease renewals, no Events); each round, then the last by verb | %s (%s) |\n", each(writes), breakdown(last.Create.Writes))
	p("| create: conflicts per Cache; each round, then the last by verb | %s (%s) |\n", each(conflicts), breakdown(last.Create.Conflicts))
	p("| create: reconciles per Cache until all Ready; each round | %s |\n", each(passes))
	p("| steady state (%.0f s): writes / reconciles | %d / %.0f |\n", r.Steady.Seconds, total(r.Steady.Writes), r.Steady.Reconciles)
	if r.ScaleTo == r.Replicas {
		p("| scale | not run (-scale-to = -replicas) |\n")
	} else {
		p("| scale: spec change → observedGeneration, p50 / p99 | %.2f s / %.2f s |\n", r.Scale.ObservedP50Seconds, r.Scale.ObservedP99Seconds)
		p("| scale: all Ready | %.1f s |\n", r.Scale.AllReadySeconds)
		p("| scale: operator requests per Cache | %.2f (%s) |\n", total(r.Scale.Requests), breakdown(r.Scale.Requests))
		p("| scale: conflicts per Cache | %.3f (%s) |\n", total(r.Scale.Conflicts), breakdown(r.Scale.Conflicts))
	}
	p("| restart: queue drained after start | %.1f s |\n", r.Restart.DrainedSeconds)
	p("| restart: writes | %d |\n", total(r.Restart.Writes))
	p("| one change at a time in a Ready fleet (%d): change → observedGeneration, p50 / p99 | %.3f s / %.3f s |\n",
		r.Change.Samples, r.Change.ObservedP50Seconds, r.Change.ObservedP99Seconds)
	p("| delete: all gone | %.1f s |\n", r.Delete.AllGoneSeconds)
	p("| delete: catalogue records left | %d |\n", r.Delete.RecordsLeft)
	p("| delete: operator requests per Cache | %.2f (%s) |\n", total(r.Delete.Requests), breakdown(r.Delete.Requests))
	var peak Memory
	for _, m := range r.Memory {
		peak = peak.max(m)
	}
	p("| operator peak RSS / its anonymous part (sampled every 0.5 s) / Go heap (every 2 s) | %.0f MiB / %.0f MiB / %.0f MiB |\n",
		peak.RSSMiB, peak.AnonMiB, peak.HeapMiB)
	var steal []string
	for _, s := range r.Steal {
		steal = append(steal, fmt.Sprintf("%s %.1f %%", s.Phase, s.Percent))
	}
	p("| the machine's CPU stolen by its host (steal), phase by phase; a slow machine, not a slow phase | %s |\n\n", strings.Join(steal, ", "))
	p("![Ready Caches over time](%s)\n", chart)
	return b.String()
}

func breakdown(m map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s %.2f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// svg draws, one colour a phase, the Ready Caches (during deletion: the Caches left) as a thick
// line, the StatefulSets with every replica ready as a dashed one, and the operator's queue
// depth as a thin one, all over time.
func (r *Result) svg() string {
	const w, h, pad = 800.0, 300.0, 40.0
	end := 1.0
	if n := len(r.Timeline); n > 0 {
		end = max(end, r.Timeline[n-1].Seconds)
	}
	x := func(s float64) float64 { return pad + s/end*(w-2*pad) }
	y := func(n int) float64 { return h - pad - float64(n)/float64(max(r.Caches, 1))*(h-2*pad) }
	colours := map[string]string{"warm-up": "#c5b0d5", "floor": "#9467bd", "floor-loaded": "#e377c2", "floor-spread": "#bcbd22", "floor-writes": "#dbdb8d", "floor-replay": "#17becf", "change": "#8c564b", "create": "#1f77b4", "steady": "#7f7f7f", "scale": "#2ca02c", "restart": "#ff7f0e", "delete": "#d62728", "clear": "#ff9896"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="11">`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="%.0f" y="16">%d Caches: Ready (thick; during deletion: left), StatefulSets ready (dashed), operator queue (thin)</text>`+"\n", pad, r.Caches)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", pad, h-pad, w-pad, h-pad)
	fmt.Fprintf(&b, `<line x1="%.0f" y1="%.0f" x2="%.0f" y2="%.0f" stroke="black"/>`+"\n", pad, pad, pad, h-pad)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f">%d</text><text x="4" y="%.0f">0</text>`+"\n", 4.0, pad+4, r.Caches, h-pad)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" text-anchor="end">%.0f s</text>`+"\n", w-pad, h-pad+16, end)
	lines := []struct {
		style         string
		value         func(Sample) int
		whileDeleting bool
	}{
		{`stroke-width="2"`, func(s Sample) int { return s.Ready }, true},
		{`stroke-width="1.5" stroke-dasharray="6 3"`, func(s Sample) int { return s.StatefulSetsReady }, false},
		{`stroke-width="0.7"`, func(s Sample) int { return s.OperatorQueue }, true},
	}
	points := make([][]string, len(lines))
	phase := ""
	flush := func() {
		for i, line := range lines {
			if len(points[i]) > 0 && (!deleting(phase) || line.whileDeleting) {
				fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" %s points="%s"/>`+"\n", colours[phase], line.style, strings.Join(points[i], " "))
			}
			points[i] = nil
		}
	}
	for _, s := range r.Timeline {
		if s.Phase != phase {
			flush()
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.0f" x2="%.1f" y2="%.0f" stroke="#ccc" stroke-dasharray="3"/><text x="%.1f" y="%.0f" fill="%s">%s</text>`+"\n",
				x(s.Seconds), pad, x(s.Seconds), h-pad, x(s.Seconds)+2, pad+12, colours[s.Phase], s.Phase)
			phase = s.Phase
		}
		for i, line := range lines {
			points[i] = append(points[i], fmt.Sprintf("%.1f,%.1f", x(s.Seconds), y(line.value(s))))
		}
	}
	flush()
	b.WriteString("</svg>\n")
	return b.String()
}
