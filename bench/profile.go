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
// its Funcs anywhere on the sample's stack (inlined frames included).
type Category struct {
	Name string
	// Funcs are prefixes of fully qualified function names, as pprof
	// prints them: "runtime.memclrNoHeapPointers", "strconv.",
	// "github.com/streamdag/streamdag/dag.".
	Funcs []string
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
	Shares []Share       // one per category, in order, then "other" when any sample matched none
	// Elsewhere is the CPU time of goroutines that were not counted (with
	// Labelled: the garbage collector's workers, the runtime), per unit.
	Elsewhere float64
}

// profileLabel marks the goroutine whose samples a labelled profile
// counts.
const profileLabel = "streamdag-bench-profile"

// ProfileCPU runs fn (which does units units of work per call) repeatedly
// for at least minTime under the CPU profiler (pprof, 100 samples per
// second per busy thread) and splits the samples into cats. With labelled
// set it counts only the samples of fn's own goroutine and of goroutines
// fn starts (their pprof labels are inherited), the rest going to
// Elsewhere: for single-goroutine work such as graph building, whose wall
// time is that goroutine's CPU time. Without it every sample counts, as
// for the executor, whose streams run on long-lived worker goroutines.
//
// The precision is that of sampling: with minTime of 3 s, about 300
// samples per busy core, so a share is good to a few percent. ProfileCPU
// returns fn's first error, or an error when the CPU profiler is already
// running (go test -cpuprofile, say) or its output cannot be parsed. It
// must not run concurrently with itself.
func ProfileCPU(fn func() error, units int, minTime time.Duration, labelled bool, cats []Category) (Breakdown, error) {
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
		} else if v == 0 {
			break
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
		for _, loc := range s.Location {
			for _, ln := range loc.Line {
				if ln.Function == nil {
					continue
				}
				for _, f := range c.Funcs {
					if strings.HasPrefix(ln.Function.Name, f) {
						return ci
					}
				}
			}
		}
	}
	return len(cats)
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
// checks), and the shape's own loop.
var BuildCategories = []Category{
	{Name: "garbage collection", Funcs: gcFuncs},
	{Name: "zeroing fresh memory", Funcs: []string{"runtime.memclrNoHeapPointers"}},
	{Name: "allocation", Funcs: []string{"runtime.mallocgc", "runtime.growslice", "runtime.makeslice"}},
	{Name: "caller: formatting names", Funcs: []string{"strconv.", "internal/strconv.", "runtime.slicebytetostring", "github.com/streamdag/streamdag/bench.name", "github.com/streamdag/streamdag/bench.appendPair"}},
	{Name: "caller: random numbers", Funcs: []string{"math/rand"}},
	{Name: "dag: AddKernel, AddValue", Funcs: []string{"github.com/streamdag/streamdag/dag."}},
	{Name: "caller: the shape's loop", Funcs: []string{"github.com/streamdag/streamdag/bench."}},
}

// ExecCategories split the profile of running a plan: the garbage
// collector, the kernels' own code (Empty), event waits that found the
// other stream behind (spinning, yielding, parking), goroutines parking
// and waking (the Go scheduler, futexes: the run handing lists to the
// stream workers and waiting for them), the rest of each stream's loop
// (waits already satisfied, the status of each launch, publishing
// progress), and the run's setup in the caller.
var ExecCategories = []Category{
	{Name: "garbage collection", Funcs: gcFuncs},
	{Name: "kernels", Funcs: []string{"github.com/streamdag/streamdag/bench.Empty"}},
	{Name: "event waits (other stream behind)", Funcs: []string{"github.com/streamdag/streamdag/exec.(*run).await"}},
	{Name: "park and wake (Go scheduler)", Funcs: []string{"runtime.futex", "runtime.schedule", "runtime.findRunnable", "runtime.park_m", "runtime.notesleep", "runtime.gopark", "runtime.goready", "runtime.wakep", "runtime.usleep", "runtime.osyield"}},
	{Name: "stream loop", Funcs: []string{"github.com/streamdag/streamdag/exec.(*streamRun)"}},
	{Name: "run setup", Funcs: []string{"github.com/streamdag/streamdag/exec."}},
}
