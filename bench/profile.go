package bench

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/google/pprof/profile"
)

// Category is one bucket of a CPU profile breakdown: a sample belongs to
// the first category, in the order given to ProfileCPU, that has one of
// its Funcs anywhere on the sample's stack (inlined frames included), or,
// with Leaf, in the innermost frame only. A sample no category takes
// counts as "other".
type Category struct {
	Name string
	// Funcs are prefixes of fully qualified function names, as pprof
	// prints them: "runtime.memclrNoHeapPointers", "strconv.",
	// "github.com/streamdag/streamdag/dag.".
	Funcs []string
	// Leaf matches the innermost frame only: for code that is on every
	// sample's stack (a benchmark's own loop), so that what it calls
	// and no category takes still counts as "other".
	Leaf bool
}

// Share is one category's part of a profile: CPU time in nanoseconds,
// its fraction of Breakdown.Total, and that time per unit of work (a
// launch or a kernel built).
type Share struct {
	Category string
	Ns       int64
	Fraction float64
	PerUnit  float64 // ns per unit
}

// Breakdown is a CPU profile of repeated work split into categories.
type Breakdown struct {
	Runs   int           // calls of the profiled function
	Units  int           // units of work done: Runs × units per run
	Wall   time.Duration // wall time of the Runs calls
	Total  int64         // CPU ns sampled in the goroutines counted
	Shares []Share       // one per category, in order, then "other": the samples no category took
	// Elsewhere is the CPU time per unit of the goroutines not counted
	// (when ProfileCPU's labelled is set): every other goroutine, on any
	// core; for single-goroutine work, mostly the garbage collector's
	// mark workers, which take up the cores the work leaves idle.
	Elsewhere float64
}

// profileLabel marks the goroutine whose samples a labelled profile
// counts.
const profileLabel = "streamdag-bench-profile"

// ProfileCPU calls fn once untimed and collects the garbage, then calls
// it repeatedly for at least minTime under the CPU profiler (pprof, 100
// samples per second per busy thread) and splits the samples into cats;
// units is how many units of work (launches, kernels built) one call of
// fn does, for the per-unit figures. With labelled
// set it counts only the samples of fn's own goroutine and of goroutines
// fn starts (their pprof labels are inherited), the rest going to
// Elsewhere: for single-goroutine work such as graph building, whose wall
// time is that goroutine's CPU time. Without it every sample counts, as
// for the executor, whose streams run on long-lived worker goroutines.
//
// The precision is that of sampling: with minTime of 3 s, about 300
// samples per busy core, so a share is good to a few percent. A sample
// taken while the Go scheduler runs on its own stack (a goroutine
// yielding, parking or being woken; runtime.mcall) names none of the
// goroutine's functions, so it can only fall into a category that names
// the scheduler's.
//
// ProfileCPU returns fn's first error; an error when the CPU profiler is
// already running (go test -cpuprofile, say) or its output cannot be
// parsed; and an error for a nil fn or units below 1. It must not run
// concurrently with itself.
func ProfileCPU(fn func() error, units int, minTime time.Duration, labelled bool, cats []Category) (Breakdown, error) {
	if fn == nil || units < 1 {
		return Breakdown{}, fmt.Errorf("bench: ProfileCPU needs work to profile and at least 1 unit of work per call (units %d)", units)
	}
	if err := fn(); err != nil { // warm up outside the profile
		return Breakdown{}, err
	}
	runtime.GC()
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return Breakdown{}, fmt.Errorf("bench: CPU profile: %w", err)
	}
	var b Breakdown
	var err error
	start := time.Now()
	work := func(context.Context) {
		for b.Runs == 0 || time.Since(start) < minTime {
			if err = fn(); err != nil {
				return
			}
			b.Runs++
		}
	}
	if labelled {
		pprof.Do(context.Background(), pprof.Labels(profileLabel, "1"), work)
	} else {
		work(context.Background())
	}
	b.Wall = time.Since(start)
	pprof.StopCPUProfile()
	if err != nil {
		return Breakdown{}, err
	}
	b.Units = b.Runs * units
	p, err := profile.Parse(&buf)
	if err != nil {
		return Breakdown{}, fmt.Errorf("bench: parse CPU profile: %w", err)
	}
	return b.split(p, labelled, cats)
}

// split sorts p's samples into cats.
func (b Breakdown) split(p *profile.Profile, labelled bool, cats []Category) (Breakdown, error) {
	vi := -1
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			vi = i
		}
	}
	if vi < 0 {
		return Breakdown{}, fmt.Errorf("bench: CPU profile has no cpu/nanoseconds sample type (has %v)", p.SampleType)
	}
	ns := make([]int64, len(cats)+1) // the last: other
	var elsewhere int64
	for _, s := range p.Sample {
		v := s.Value[vi]
		if labelled && len(s.Label[profileLabel]) == 0 {
			elsewhere += v
			continue
		}
		b.Total += v
		ns[categorize(s, cats)] += v
	}
	per := func(v int64) float64 { return float64(v) / float64(max(b.Units, 1)) }
	for i, v := range ns {
		name := "other"
		if i < len(cats) {
			name = cats[i].Name
		}
		sh := Share{Category: name, Ns: v, PerUnit: per(v)}
		if b.Total > 0 {
			sh.Fraction = float64(v) / float64(b.Total)
		}
		b.Shares = append(b.Shares, sh)
	}
	b.Elsewhere = per(elsewhere)
	return b, nil
}

// categorize returns the index in cats of sample s's category, or
// len(cats) for none.
func categorize(s *profile.Sample, cats []Category) int {
	for ci, c := range cats {
		for li, loc := range s.Location {
			for j, ln := range loc.Line {
				// A location's lines run from the innermost inlined call
				// out; the first location is the innermost.
				if c.Leaf && (li > 0 || j > 0) {
					break
				}
				if ln.Function != nil && hasPrefix(ln.Function.Name, c.Funcs) {
					return ci
				}
			}
		}
	}
	return len(cats)
}

// hasPrefix reports whether name starts with one of prefixes.
func hasPrefix(name string, prefixes []string) bool {
	for _, p := range prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// gcFuncs are the runtime functions under which the garbage collector
// works: background and assisted marking, sweeping, scavenging, and
// stopping the world.
var gcFuncs = []string{
	"runtime.gcBgMarkWorker", "runtime.gcAssistAlloc", "runtime.bgsweep", "runtime.bgscavenge",
	"runtime.deductSweepCredit", "runtime.gcStart", "runtime.stopTheWorld", "runtime.gcMarkDone",
	"runtime.gcMarkTermination", "runtime.markroot", "runtime.scanobject", "runtime.gcDrain",
	"runtime.suspendG", "runtime.preemptM",
}

// BuildCategories split the profile of building a graph: the garbage
// collector's share, fresh memory being zeroed (page faults included: the
// kernel zeroes pages as the runtime first touches them), the rest of
// allocation, the caller's formatting of names and drawing of random
// numbers, dag's own code (AddKernel, AddValue, copying names in,
// checks), and the shape's own loop (its innermost frame only: the shape's
// builder is on every sample's stack).
var BuildCategories = []Category{
	{Name: "garbage collection", Funcs: gcFuncs},
	{Name: "zeroing fresh memory", Funcs: []string{"runtime.memclrNoHeapPointers"}},
	{Name: "allocation", Funcs: []string{"runtime.mallocgc", "runtime.growslice", "runtime.makeslice"}},
	{Name: "caller: formatting names", Funcs: []string{"strconv.", "internal/strconv.", "runtime.slicebytetostring", "github.com/streamdag/streamdag/bench.name", "github.com/streamdag/streamdag/bench.appendPair"}},
	{Name: "caller: random numbers", Funcs: []string{"math/rand"}},
	{Name: "dag: AddKernel, AddValue", Funcs: []string{"github.com/streamdag/streamdag/dag."}},
	{Name: "caller: the shape's loop", Funcs: []string{"github.com/streamdag/streamdag/bench."}, Leaf: true},
}

// ExecCategories split the profile of running a plan: the garbage
// collector, the kernels' own code (Empty), event waits spinning on the
// other stream's progress, the Go scheduler (yields, parks and wake-ups,
// whose samples name no caller: mostly event waits that spun out and
// yield or park, then the run handing its lists to the stream workers and
// waiting for them, and idle workers), the rest of the
// stream workers' time (their loop: waits already satisfied, each
// launch's status, publishing progress, and the cache misses of reading
// and publishing progress that another core writes or reads), and the
// run's setup in the caller.
var ExecCategories = []Category{
	{Name: "garbage collection", Funcs: gcFuncs},
	{Name: "kernels", Funcs: []string{"github.com/streamdag/streamdag/bench.Empty"}},
	{Name: "event waits, spinning", Funcs: []string{"github.com/streamdag/streamdag/exec.(*run).await"}},
	{Name: "Go scheduler: yields, parks, wake-ups", Funcs: []string{"runtime.mcall", "runtime.gosched_m", "runtime.park_m", "runtime.futex", "runtime.schedule", "runtime.findRunnable", "runtime.notesleep", "runtime.gopark", "runtime.goready", "runtime.wakep", "runtime.usleep", "runtime.osyield"}},
	{Name: "stream loop (the rest of the streams' time)", Funcs: []string{"github.com/streamdag/streamdag/exec.(*streamRun)"}},
	{Name: "run setup", Funcs: []string{"github.com/streamdag/streamdag/exec."}},
}
