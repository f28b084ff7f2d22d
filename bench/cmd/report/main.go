// Command report runs streamdag's executor benchmarks beside their
// baselines and writes the results to a folder.
//
//	go run ./bench/cmd/report [-out DIR] [-min-time 300ms] [-skip-1m] [-duckdb-runs 5]
//
// By default it writes a new folder under the system's temporary folder
// and names it when it starts and when it ends, so trying it leaves the
// clone as it was; -out bench/results, run from the repository root,
// replaces the committed results, a deliberate step.
//
// For every shape of bench.Shapes and bench.RandomDAG, with empty kernels
// and with ~0.5 µs spinning kernels, it measures every bench.Runner
// (sequential walk, streamdag with launch timing off, streamdag-timed with
// it on, goroutine per task, errgroup, go-taskflow):
// ns per launch, launches/s, allocations per launch, and the ratios to the
// sequential walk and to go-taskflow. With empty kernels it also measures
// a one-shot run of every shape (bench.PrepareOneShot: the graph built,
// planned and run once with Executor.Run, what a user who runs a graph
// once pays), against the reused plan in back-to-back pairs. It measures
// graph build, validation and planning per kernel, counts the event waits
// each plan inserts, and measures what one cross-stream wait costs
// (bench.WaitCost). It compares the flights job with DuckDB: it builds
// `streamdag` and bench/duckdb's flightsduck (a separate module, so the
// core module never depends on DuckDB) and runs the two as whole
// processes in alternation on $STREAMDAG_DATA/flights-3m.parquet
// (-duckdb-runs times each, after a warm-up run); when it cannot (no
// data, the module's dependencies not downloaded, -duckdb-runs 0), it
// says why and how to run it, and shows the figures of the last report
// that did, from the committed bench/results/results.json. Last, it
// CPU-profiles the worst graph build and streamdag on the empty-kernel
// shape furthest from the sequential walk, 3 s each, and splits the
// samples into categories (bench.ProfileCPU with bench.BuildCategories
// and bench.ExecCategories): where the time goes, in ns per kernel or
// launch.
//
// It writes results.md (the tables and the targets, met or not),
// results.json (every figure, the profiles' breakdowns included), and PNG charts: ns-per-launch-empty.png,
// ns-per-launch-spin.png (log scale, one line per runner) and build.png.
// On a 2-core machine it takes about three minutes.
package main

import (
	"cmp"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"

	"github.com/streamdag/streamdag/bench"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
)

// Targets of the executor (empty kernels, 2 cores).
const (
	targetVsSequential = 6.0  // streamdag ns/launch at most this × sequential, averaged over the four shapes
	targetVsTaskflow   = 10.0 // and at least this × faster than go-taskflow
	targetLaunchesPerS = 20e6 // on the 1M-kernel random DAG
	targetBuildNs      = 150  // graph build ns per kernel
	targetOneShotNs    = 400  // one-shot Run (build + plan + run) ns per kernel, worst of the four shapes
	targetPlanNs       = 200  // planning (Plan without its Validate) ns per kernel, worst of the four shapes
	targetDefaultRatio = 1.5  // the default Execute at most this × the launch-timing-off path
	targetDuckWall     = 1.0  // streamdag run flights at most this × DuckDB's wall time, whole process
	targetDuckPeak     = 2.0  // and at most this × its peak memory
)

// OneShot is one shape with empty kernels run once (bench.PrepareOneShot):
// the graph built, planned and run with Executor.Run, per kernel.
type OneShot struct {
	Shape           string
	Kernels         int
	Runs            int
	NsPerKernel     float64 // the median run's
	CPUNsPerKernel  float64 // process CPU time (all threads) per kernel, the mean of the runs
	AllocsPerKernel float64
	// VsReused is NsPerKernel ÷ the reused plan's ns/launch (the
	// streamdag runner): on graphs of up to 100,000 kernels the median of
	// 8 back-to-back pairs of runs, else the ratio of the two means.
	VsReused float64
}

// Result is one runner on one shape with one kind of kernel.
type Result struct {
	Shape, Work, Runner string
	Kernels             int
	Runs                int
	NsPerLaunch         float64
	CPUNsPerLaunch      float64 // process CPU time (all threads) per launch
	LaunchesPerS        float64
	AllocsPerLaunch     float64
	BytesPerLaunch      float64
	VsSequential        float64 // NsPerLaunch / the sequential walk's
}

// Build is the cost of building and validating one shape's graph.
type Build struct {
	Shape                        string
	Kernels                      int
	BuildNsPerKernel             float64
	BuildCPUNsPerKernel          float64
	BuildAllocsPerKernel         float64
	ValidateNsPerKernel          float64
	PlanNsPerKernel              float64
	Waits, Hazards, Streams, Ops int
}

// Report is everything results.json holds.
type Report struct {
	Machine      map[string]string
	Results      []Result
	Builds       []Build
	WaitChain    int
	Waits        int
	NsPerWait    float64
	BuildFloorNs float64 // ns/kernel of bench.ChainFloor(10,000)
	SameStreamNs float64 // ns/launch of the chain on one stream
	AltStreamNs  float64 // ns/launch of the chain alternating streams
	OneShots     []OneShot
	DuckDB       *Duck // nil when neither measured nor recorded
	Profiles     []Profile
	Elapsed      time.Duration
}

// Profile is a CPU profile of one measured case, split into categories
// (bench.ProfileCPU): where the worst graph build and the costliest
// executor shape spend their time.
type Profile struct {
	What      string // what was profiled
	Unit      string // "kernel" or "launch"
	Labelled  bool   // only the working goroutine counted; the rest is in Breakdown.Elsewhere
	Breakdown bench.Breakdown
}

func main() {
	if _, err := report(os.Args[1:], os.Stderr, measure); errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	} else if err != nil {
		log.Fatal(err)
	}
}

// config is what the command line asks of a report.
type config struct {
	out      string        // the folder the report writes
	minTime  time.Duration // least time measured per runner and shape
	skip1M   bool          // leave out the 1,000,000-kernel random DAG
	duckRuns int           // timed runs of each side of the DuckDB comparison
	recorded string        // the folder of the committed results.json (recorded DuckDB figures), "" when unknown
}

// report parses args (the command's flags), makes the output folder
// (-out, created when missing; by default a new folder under
// os.TempDir, so a report never rewrites the committed bench/results
// unless asked to with -out bench/results), names it on logw, then
// measures (measureFn; main passes measure) and writes results.json, results.md and the charts
// there. It returns the folder. Errors: a bad flag, a folder that cannot
// be made or written, measure's.
func report(args []string, logw io.Writer, measureFn func(config, io.Writer) (Report, error)) (string, error) {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(logw)
	out := fs.String("out", "", "folder for results.md, results.json and the PNG charts (default: a new folder under the system's temporary folder; -out bench/results updates the committed results)")
	minTime := fs.Duration("min-time", 300*time.Millisecond, "least time measured per runner and shape (at least 3 runs)")
	skip1M := fs.Bool("skip-1m", false, "leave out the 1,000,000-kernel random DAG")
	duckRuns := fs.Int("duckdb-runs", 5, "timed runs of streamdag and of DuckDB each on the flights job; 0 shows the last recorded figures")
	if err := fs.Parse(args); err != nil {
		return "", err
	}
	if fs.NArg() > 0 {
		return "", fmt.Errorf("report: unexpected argument %q (the flags are -out, -min-time, -skip-1m, -duckdb-runs)", fs.Arg(0))
	}
	cfg := config{out: *out, minTime: *minTime, skip1M: *skip1M, duckRuns: *duckRuns}
	if root, err := repoRoot(); err == nil {
		cfg.recorded = filepath.Join(root, "bench", "results")
	}
	if cfg.out == "" {
		dir, err := os.MkdirTemp("", "streamdag-report-")
		if err != nil {
			return "", fmt.Errorf("report: make the output folder: %w", err)
		}
		cfg.out = dir
	} else if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return "", fmt.Errorf("report: make the output folder: %w", err)
	}
	fmt.Fprintf(logw, "report: writing to %s\n", cfg.out)
	rep, err := measureFn(cfg, logw)
	if err != nil {
		return cfg.out, err
	}
	return cfg.out, write(cfg.out, rep, logw)
}

// measure runs every measurement of the report (see the command's doc)
// under cfg, logging progress on logw.
func measure(cfg config, logw io.Writer) (Report, error) {
	start := time.Now()
	minTime := cfg.minTime
	rep := Report{Machine: machine()}
	// First, while the report's own resident set is small (see peakRSS).
	rep.DuckDB = duckComparison(cfg.recorded, cfg.duckRuns, logw)
	shapes := bench.Shapes
	if !cfg.skip1M {
		shapes = append(shapes[:len(shapes):len(shapes)], bench.RandomDAG)
	}
	works := []bench.Work{bench.EmptyWork, bench.SpinWork()}
	fmt.Fprintf(logw, "spin kernel: %d iterations ≈ %v\n", bench.SpinIterations(), bench.SpinTarget)
	floor, err := bench.Measure(func() error { bench.ChainFloor(10_000); return nil }, 3, 1000, minTime)
	if err != nil {
		return rep, err
	}
	rep.BuildFloorNs = floor.PerLaunch(10_000)
	fmt.Fprintf(logw, "build floor (chain-10k's bytes, no checks) %.0f ns/kernel\n", rep.BuildFloorNs)
	for _, s := range shapes {
		b, err := measureBuild(s, minTime)
		if err != nil {
			return rep, err
		}
		rep.Builds = append(rep.Builds, b)
		fmt.Fprintf(logw, "%-18s build %6.0f ns/kernel, validate %6.0f, plan %6.0f; %d waits for %d hazards\n",
			s.Name, b.BuildNsPerKernel, b.ValidateNsPerKernel, b.PlanNsPerKernel, b.Waits, b.Hazards)
		for _, w := range works {
			g := s.Build(w.Kernel)
			if err := g.Validate(); err != nil {
				return rep, err
			}
			n := g.NumKernels()
			minRuns, maxRuns, mt := 3, 1000, minTime
			if n > 100_000 {
				minRuns, maxRuns, mt = 2, 2, 0
			}
			var seq float64
			// The sequential walk, kept ready for paired ratios.
			if bench.Runners[0].Name != "sequential" {
				return rep, errors.New("report: bench.Runners must start with the sequential walk")
			}
			seqRun, seqDone, err := bench.Runners[0].Prepare(g)
			if err != nil {
				return rep, fmt.Errorf("%s/%s/sequential: %w", s.Name, w.Name, err)
			}
			for _, r := range bench.Runners {
				runFn, done, err := r.Prepare(g)
				if err != nil {
					return rep, fmt.Errorf("%s/%s/%s: %w", s.Name, w.Name, r.Name, err)
				}
				st, err := bench.Measure(runFn, minRuns, maxRuns, mt)
				done()
				if err != nil {
					return rep, fmt.Errorf("%s/%s/%s: %w", s.Name, w.Name, r.Name, err)
				}
				res := Result{Shape: s.Name, Work: w.Name, Runner: r.Name, Kernels: n, Runs: st.Runs,
					NsPerLaunch: st.PerLaunch(n), CPUNsPerLaunch: st.CPUNsPerOp / float64(n), AllocsPerLaunch: st.AllocsPerOp / float64(n),
					BytesPerLaunch: st.BytesPerOp / float64(n)}
				res.LaunchesPerS = 1e9 / res.NsPerLaunch
				if r.Name == "sequential" {
					seq = res.NsPerLaunch
				}
				res.VsSequential = res.NsPerLaunch / seq
				if strings.HasPrefix(r.Name, "streamdag") && n <= 100_000 {
					// The ratio of the target, from A B B A pairs with the
					// walk: drift in the machine's speed cancels in a pair.
					runFn, done, err := r.Prepare(g)
					if err != nil {
						return rep, fmt.Errorf("%s/%s/%s: %w", s.Name, w.Name, r.Name, err)
					}
					res.VsSequential, err = pairedRatio(runFn, seqRun, 8, minTime/8)
					done()
					if err != nil {
						return rep, fmt.Errorf("%s/%s/%s: %w", s.Name, w.Name, r.Name, err)
					}
				}
				rep.Results = append(rep.Results, res)
				fmt.Fprintf(logw, "%-18s %-10s %-10s %9.1f ns/launch (cpu %9.1f) %7.2f allocs/launch %8.1f× seq (%d runs)\n",
					s.Name, w.Name, r.Name, res.NsPerLaunch, res.CPUNsPerLaunch, res.AllocsPerLaunch, res.VsSequential, st.Runs)
				runtime.GC()
			}
			seqDone()
			if w.Name == bench.EmptyWork.Name {
				o, err := measureOneShot(s, g, w, minRuns, maxRuns, mt)
				if err != nil {
					return rep, fmt.Errorf("%s/%s/one-shot: %w", s.Name, w.Name, err)
				}
				rep.OneShots = append(rep.OneShots, o)
				fmt.Fprintf(logw, "%-18s %-10s %-10s %9.1f ns/kernel (cpu %9.1f) %7.2f allocs/kernel %8.1f× the reused plan (%d runs)\n",
					s.Name, w.Name, "one-shot", o.NsPerKernel, o.CPUNsPerKernel, o.AllocsPerKernel, o.VsReused, o.Runs)
				runtime.GC()
			}
		}
	}
	const chain = 10_000
	waits, perWait, same, alt, err := bench.WaitCost(chain, minTime)
	if err != nil {
		return rep, err
	}
	rep.WaitChain, rep.Waits, rep.NsPerWait = chain, waits, perWait
	rep.SameStreamNs, rep.AltStreamNs = same.NsPerOp/chain, alt.NsPerOp/chain
	fmt.Fprintf(logw, "event waits: %d waits, %.0f ns per wait\n", waits, perWait)
	if rep.Profiles, err = profiles(rep, shapes, profileTime); err != nil {
		return rep, err
	}
	rep.Elapsed = time.Since(start)
	return rep, nil
}

// write writes rep's results.json, results.md and charts into out.
func write(out string, rep Report, logw io.Writer) error {
	if err := writeJSON(filepath.Join(out, "results.json"), rep); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "results.md"), []byte(markdown(rep)), 0o644); err != nil {
		return err
	}
	var works []string // the kinds of kernel measured, in the report's order
	for _, r := range rep.Results {
		if !slices.Contains(works, r.Work) {
			works = append(works, r.Work)
		}
	}
	for _, w := range works {
		if err := chartLaunches(rep, w, filepath.Join(out, "ns-per-launch-"+strings.SplitN(w, "-", 2)[0]+".png")); err != nil {
			return err
		}
	}
	if err := chartBuild(rep, filepath.Join(out, "build.png")); err != nil {
		return err
	}
	fmt.Fprintf(logw, "wrote %s in %v\n", out, rep.Elapsed.Round(time.Second))
	return nil
}

// profileTime is how long each profile of the report runs: about 300
// samples per busy core.
const profileTime = 3 * time.Second

// profiles profiles streamdag on the empty-kernel shape furthest from
// the sequential walk (every goroutine: the streams' workers and the
// collector), then the worst graph build of the report (the caller's
// goroutine only: building is single-threaded; the graph built last is
// kept until the next is built, as in measureBuild).
func profiles(rep Report, shapes []bench.GraphShape, d time.Duration) ([]Profile, error) {
	byName := func(name string) bench.GraphShape {
		i := slices.IndexFunc(shapes, func(s bench.GraphShape) bool { return s.Name == name })
		return shapes[i]
	}
	var out []Profile
	var far Result
	for _, sh := range bench.Shapes {
		if r, ok := find(rep, sh.Name, "empty", "streamdag"); ok && r.VsSequential > far.VsSequential {
			far = r
		}
	}
	if far.Shape != "" {
		p, err := profileExec(byName(far.Shape), far, d)
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	worst := slices.MaxFunc(rep.Builds, func(a, b Build) int { return cmp.Compare(a.BuildNsPerKernel, b.BuildNsPerKernel) })
	s := byName(worst.Shape)
	var g *dag.Graph
	bd, err := bench.ProfileCPU(func() error { g = s.Build(bench.Empty); return nil }, worst.Kernels, d, true, bench.BuildCategories)
	if err != nil {
		return nil, err
	}
	_ = g // only ever written: it keeps the last graph alive until the next is built
	return append(out, Profile{What: "graph build, " + s.Name + " (the worst shape of this run)", Unit: "kernel", Labelled: true, Breakdown: bd}), nil
}

// profileExec profiles the streamdag runner on s with empty kernels; r is
// its result in the report.
func profileExec(s bench.GraphShape, r Result, d time.Duration) (Profile, error) {
	g := s.Build(bench.Empty)
	if err := g.Validate(); err != nil {
		return Profile{}, err
	}
	i := slices.IndexFunc(bench.Runners, func(r bench.Runner) bool { return r.Name == "streamdag" })
	run, done, err := bench.Runners[i].Prepare(g)
	if err != nil {
		return Profile{}, err
	}
	defer done()
	bd, err := bench.ProfileCPU(run, g.NumKernels(), d, false, bench.ExecCategories)
	if err != nil {
		return Profile{}, err
	}
	return Profile{What: fmt.Sprintf("streamdag, %s, empty kernels (the shape furthest from the sequential walk: %.1f×)", s.Name, r.VsSequential),
		Unit: "launch", Breakdown: bd}, nil
}

// pairedRatio measures run against the sequential walk seq in pairs, the
// two in alternating order (A B, B A, …), each for at least each, and
// returns the median of the pairs' ratios run/seq. A pair's two halves run
// back to back, so a change in the machine's speed during the report (the
// other tenant of a virtual CPU, say) cancels within the pair.
func pairedRatio(run, seq func() error, pairs int, each time.Duration) (float64, error) {
	ratios := make([]float64, pairs)
	for k := range ratios {
		var a, b bench.Stats
		var err error
		if k%2 == 0 {
			if b, err = bench.Measure(seq, 3, 1000, each); err == nil {
				a, err = bench.Measure(run, 3, 1000, each)
			}
		} else {
			if a, err = bench.Measure(run, 3, 1000, each); err == nil {
				b, err = bench.Measure(seq, 3, 1000, each)
			}
		}
		if err != nil {
			return 0, err
		}
		ratios[k] = a.NsPerOp / b.NsPerOp
	}
	slices.Sort(ratios)
	return (ratios[(pairs-1)/2] + ratios[pairs/2]) / 2, nil
}

// measureOneShot measures s run once per call (bench.PrepareOneShot with
// w's kernels), and its ratio to the reused plan of g (s built with w's
// kernels) through the streamdag runner.
func measureOneShot(s bench.GraphShape, g *dag.Graph, w bench.Work, minRuns, maxRuns int, minTime time.Duration) (OneShot, error) {
	n := g.NumKernels()
	one, doneOne, err := bench.PrepareOneShot(s, w.Kernel)
	if err != nil {
		return OneShot{}, err
	}
	defer doneOne()
	i := slices.IndexFunc(bench.Runners, func(r bench.Runner) bool { return r.Name == "streamdag" })
	reused, doneReused, err := bench.Runners[i].Prepare(g)
	if err != nil {
		return OneShot{}, err
	}
	defer doneReused()
	st, err := bench.Measure(one, minRuns, maxRuns, minTime)
	if err != nil {
		return OneShot{}, err
	}
	o := OneShot{Shape: s.Name, Kernels: n, Runs: st.Runs, NsPerKernel: st.MedianNsPerOp / float64(n),
		CPUNsPerKernel: st.CPUNsPerOp / float64(n), AllocsPerKernel: st.AllocsPerOp / float64(n)}
	if n <= 100_000 {
		o.VsReused, err = pairedRatio(one, reused, 8, minTime/8)
	} else {
		var r bench.Stats
		r, err = bench.Measure(reused, minRuns, maxRuns, minTime)
		o.VsReused = st.NsPerOp / r.NsPerOp
	}
	return o, err
}

// duckComparison measures the flights job against DuckDB (measureDuck)
// runs times each; when it cannot (runs 0, no data, a build that fails),
// it logs why and how to run it and returns the figures recorded in the
// results.json of folder recorded by an earlier report, with Recorded
// saying why, or nil.
func duckComparison(recorded string, runs int, logw io.Writer) *Duck {
	why := "-duckdb-runs 0"
	if runs > 0 {
		root, err := repoRoot()
		if err == nil {
			var d Duck
			if d, err = measureDuck(root, duckInput(root), runs, logw); err == nil {
				return &d
			}
		}
		why = err.Error()
	}
	fmt.Fprintf(logw, "DuckDB comparison not measured (%s): %s\n", why, duckHowTo)
	if d, ok := recordedDuck(recorded); ok {
		if d.Recorded == "" {
			d.Recorded = why
		}
		fmt.Fprintf(logw, "DuckDB comparison recorded %s: streamdag %s ms, DuckDB %s ms (whole process, median [range] of %d runs)\n",
			d.Date, d.StreamWallMs, d.DuckWallMs, d.Runs)
		return &d
	}
	return nil
}

// measureBuild times building the shape with empty kernels (the mean of
// at least 3 builds over at least minTime, so the collections a build
// causes are counted in proportion), then validating and planning it (the
// median of at least 3 runs over at least minTime, 3 above 100,000
// kernels: planning a graph already built is what a one-shot run adds,
// and the median is less moved by a run the scheduler left waiting).
func measureBuild(s bench.GraphShape, minTime time.Duration) (Build, error) {
	var g *dag.Graph
	st, err := bench.Measure(func() error { g = s.Build(bench.Empty); return nil }, 3, 1000, minTime)
	if err != nil {
		return Build{}, err
	}
	n := g.NumKernels()
	b := Build{Shape: s.Name, Kernels: n, BuildNsPerKernel: st.PerLaunch(n), BuildCPUNsPerKernel: st.CPUNsPerOp / float64(n),
		BuildAllocsPerKernel: st.AllocsPerOp / float64(n)}
	maxRuns, mt := 1000, minTime
	if n > 100_000 {
		maxRuns, mt = 3, 0
	}
	st, err = bench.Measure(g.Validate, 3, maxRuns, mt)
	if err != nil {
		return Build{}, err
	}
	b.ValidateNsPerKernel = st.MedianNsPerOp / float64(n)
	dev, err := cpu.New()
	if err != nil {
		return Build{}, err
	}
	defer dev.Close()
	e, err := exec.New(dev)
	if err != nil {
		return Build{}, err
	}
	var p *exec.Plan
	st, err = bench.Measure(func() (err error) { p, err = e.Plan(g); return err }, 3, maxRuns, mt)
	if err != nil {
		return Build{}, err
	}
	b.PlanNsPerKernel = st.MedianNsPerOp/float64(n) - b.ValidateNsPerKernel // Plan validates first
	b.Waits, b.Hazards, b.Streams, b.Ops = p.Waits(), p.Hazards(), p.NumStreams(0), p.NumLaunches()
	return b, nil
}

// machine describes where the report ran.
func machine() map[string]string {
	m := map[string]string{
		"os": runtime.GOOS, "arch": runtime.GOARCH, "go": runtime.Version(),
		"cpus": fmt.Sprint(runtime.NumCPU()), "gomaxprocs": fmt.Sprint(runtime.GOMAXPROCS(0)),
		"date": time.Now().UTC().Format("2006-01-02"),
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m["cpu"] = strings.TrimSpace(v)
				break
			}
		}
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/noneback/go-taskflow" {
				m["taskflow"] = d.Version
			}
		}
	}
	return m
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func find(rep Report, shape, work, runner string) (Result, bool) {
	for _, r := range rep.Results {
		if r.Shape == shape && r.Work == work && r.Runner == runner {
			return r, true
		}
	}
	return Result{}, false
}

// findBuild returns the build figures of shape.
func findBuild(rep Report, shape string) (Build, bool) {
	i := slices.IndexFunc(rep.Builds, func(b Build) bool { return b.Shape == shape })
	if i < 0 {
		return Build{}, false
	}
	return rep.Builds[i], true
}

// worstOf returns the item of xs, among the four shapes of bench.Shapes,
// whose figure is the largest.
func worstOf[T any](xs []T, fig func(T) (shape string, v float64)) (T, bool) {
	var worst T
	found := false
	for _, x := range xs {
		shape, v := fig(x)
		if !slices.ContainsFunc(bench.Shapes, func(s bench.GraphShape) bool { return s.Name == shape }) {
			continue
		}
		if _, w := fig(worst); !found || v > w {
			worst, found = x, true
		}
	}
	return worst, found
}

// summary renders the table of what a user meets first: each shape's
// reused plan and one-shot run against go-taskflow, and the flights job
// against DuckDB.
func summary(rep Report) string {
	var b strings.Builder
	b.WriteString("Summary. Shapes with empty kernels, ns per kernel: a reused plan is Executor.Execute of a plan made once; a one-shot run builds the graph, plans it and runs it once (Executor.Run on a fresh graph), in brackets how many times the reused plan that is; go-taskflow re-runs a task graph it built once. The flights job: whole processes, start to exit, median of the runs")
	if d := rep.DuckDB; d != nil && d.Recorded != "" {
		fmt.Fprintf(&b, " (recorded %s by an earlier report)", d.Date)
	}
	b.WriteString("; `streamdag run flights` builds, plans and runs its graph once.\n\n")
	b.WriteString("| workload | streamdag, reused plan | streamdag, one-shot | peer | streamdag ÷ peer |\n|---|---:|---:|---:|---:|\n")
	for _, o := range rep.OneShots {
		sd, ok1 := find(rep, o.Shape, "empty", "streamdag")
		tf, ok2 := find(rep, o.Shape, "empty", "taskflow")
		if !ok1 || !ok2 {
			continue
		}
		fmt.Fprintf(&b, "| %s, %d empty kernels, ns/kernel | %.0f | %.0f (%.0f×) | go-taskflow, reused graph: %.0f | reused %.3f×, one-shot %.2f× |\n",
			o.Shape, o.Kernels, sd.NsPerLaunch, o.NsPerKernel, o.VsReused, tf.NsPerLaunch, sd.NsPerLaunch/tf.NsPerLaunch, o.NsPerKernel/tf.NsPerLaunch)
	}
	if d := rep.DuckDB; d != nil {
		fmt.Fprintf(&b, "| flights job on %s, whole process: wall ms, peak MiB | — | %.1f ms, %.0f MiB | DuckDB: %.1f ms, %.0f MiB | %.2f×, %.2f× |\n",
			d.Input, d.StreamWallMs.Median, d.StreamPeakMiB.Median, d.DuckWallMs.Median, d.DuckPeakMiB.Median,
			d.StreamWallMs.Median/d.DuckWallMs.Median, d.StreamPeakMiB.Median/d.DuckPeakMiB.Median)
	}
	b.WriteString("\n")
	return b.String()
}

// duckMarkdown renders the DuckDB comparison, or says how to measure it.
func duckMarkdown(d *Duck) string {
	if d == nil {
		return "\nThe flights job against DuckDB was not measured, and no earlier report recorded it: " + duckHowTo + ".\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nThe flights job against DuckDB (bench/duckdb's flightsduck: the same query through DuckDB's read_parquet, duckdb-go, DuckDB linked statically) on %s: the two built, then run as whole processes in alternation, %d times each after one warm-up run of each; median [range]. ", d.Input, d.Runs)
	if d.Recorded != "" {
		fmt.Fprintf(&b, "These figures were recorded on %s by an earlier report; this one could not measure them (%s): %s. ", d.Date, d.Recorded, duckHowTo)
	} else {
		fmt.Fprintf(&b, "Measured %s. ", d.Date)
	}
	if d.Identical {
		b.WriteString("The two CSVs are byte-identical.\n\n")
	} else {
		b.WriteString("**The two CSVs differ.**\n\n")
	}
	b.WriteString("| | streamdag | DuckDB | streamdag ÷ DuckDB |\n|---|---:|---:|---:|\n")
	fmt.Fprintf(&b, "| whole process, wall ms | %s | %s | %.2f× |\n", d.StreamWallMs, d.DuckWallMs, d.StreamWallMs.Median/d.DuckWallMs.Median)
	fmt.Fprintf(&b, "| whole process, peak RSS MiB | %s | %s | %.2f× |\n", d.StreamPeakMiB, d.DuckPeakMiB, d.StreamPeakMiB.Median/d.DuckPeakMiB.Median)
	fmt.Fprintf(&b, "| in process, ms: streamdag's run (its summary line), DuckDB's query | %s | %s | %.2f× |\n", d.StreamRunMs, d.DuckQueryMs, d.StreamRunMs.Median/d.DuckQueryMs.Median)
	fmt.Fprintf(&b, "| in process, ms: DuckDB opening its database | | %s | |\n", d.DuckOpenMs)
	return b.String()
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

// markdown renders the report's tables.
func markdown(rep Report) string {
	var b strings.Builder
	m := rep.Machine
	fmt.Fprintf(&b, "Machine: %s, %s CPUs (GOMAXPROCS %s), %s/%s, %s, go-taskflow %s; %s; report took %v.\n\n",
		m["cpu"], m["cpus"], m["gomaxprocs"], m["os"], m["arch"], m["go"], m["taskflow"], m["date"], rep.Elapsed.Round(time.Second))

	// Targets.
	var sumSeq, sumTF float64
	n := 0
	for _, s := range bench.Shapes {
		sd, ok1 := find(rep, s.Name, "empty", "streamdag")
		tf, ok2 := find(rep, s.Name, "empty", "taskflow")
		if ok1 && ok2 {
			sumSeq += sd.VsSequential
			sumTF += tf.NsPerLaunch / sd.NsPerLaunch
			n++
		}
	}
	b.WriteString("| target (empty kernels) | goal | measured | |\n|---|---|---|---|\n")
	if n > 0 {
		avgSeq, avgTF := sumSeq/float64(n), sumTF/float64(n)
		fmt.Fprintf(&b, "| streamdag vs sequential walk, mean of the ratios of chain, fan-out, tree and wavefront | ≤ %.0f× | %.1f× | %s |\n", targetVsSequential, avgSeq, met(avgSeq <= targetVsSequential))
		fmt.Fprintf(&b, "| go-taskflow vs streamdag, mean of the same 4 shapes' ratios | ≥ %.0f× | %.1f× | %s |\n", targetVsTaskflow, avgTF, met(avgTF >= targetVsTaskflow))
	}
	if r, ok := find(rep, bench.RandomDAG.Name, "empty", "streamdag"); ok {
		fmt.Fprintf(&b, "| random DAG of 1M kernels | ≥ %.0fM launches/s | %.2fM launches/s | %s |\n", targetLaunchesPerS/1e6, r.LaunchesPerS/1e6, met(r.LaunchesPerS >= targetLaunchesPerS))
	}
	var worst float64
	for _, bd := range rep.Builds {
		worst = max(worst, bd.BuildNsPerKernel)
	}
	fmt.Fprintf(&b, "| graph build, worst shape | ≤ %d ns/kernel | %.0f ns/kernel (build floor, chain-10k's bytes with no checks: %.0f) | %s |\n", targetBuildNs, worst, rep.BuildFloorNs, met(worst <= targetBuildNs))
	if o, ok := worstOf(rep.OneShots, func(o OneShot) (string, float64) { return o.Shape, o.NsPerKernel }); ok {
		fmt.Fprintf(&b, "| one-shot Run (build + plan + run), worst of the four shapes | ≤ %d ns/kernel | %.0f ns/kernel (%s) | %s |\n", targetOneShotNs, o.NsPerKernel, o.Shape, met(o.NsPerKernel <= targetOneShotNs))
	}
	if p, ok := worstOf(rep.Builds, func(b Build) (string, float64) { return b.Shape, b.PlanNsPerKernel }); ok {
		fmt.Fprintf(&b, "| planning (Plan less its Validate: launch order, hazards, streams, event waits), worst of the four shapes | ≤ %d ns/kernel | %.0f ns/kernel (%s) | %s |\n", targetPlanNs, p.PlanNsPerKernel, p.Shape, met(p.PlanNsPerKernel <= targetPlanNs))
	}
	var timed float64
	nt := 0
	for _, s := range bench.Shapes {
		sd, ok1 := find(rep, s.Name, "empty", "streamdag")
		st, ok2 := find(rep, s.Name, "empty", "streamdag-timed")
		if ok1 && ok2 {
			timed += st.NsPerLaunch / sd.NsPerLaunch
			nt++
		}
	}
	if nt > 0 {
		fmt.Fprintf(&b, "| the default Execute (exec.New(dev), a reused plan) against the launch-timing-off path | ≤ %.1f× | 1.0×: the default is launch timing off (with it on, streamdag-timed, %.1f× on average) | %s |\n", targetDefaultRatio, timed/float64(nt), met(true))
	}
	if d := rep.DuckDB; d != nil {
		when := ""
		if d.Recorded != "" {
			when = ", recorded " + d.Date
		}
		wall, peak := d.StreamWallMs.Median/d.DuckWallMs.Median, d.StreamPeakMiB.Median/d.DuckPeakMiB.Median
		fmt.Fprintf(&b, "| `streamdag run flights` ÷ DuckDB on %s, whole process: wall time | ≤ %.1f× | %.2f× (%.1f ms against %.1f%s) | %s |\n", d.Input, targetDuckWall, wall, d.StreamWallMs.Median, d.DuckWallMs.Median, when, met(wall <= targetDuckWall))
		fmt.Fprintf(&b, "| the same: peak memory | ≤ %.1f× | %.2f× (%.0f MiB against %.0f) | %s |\n", targetDuckPeak, peak, d.StreamPeakMiB.Median, d.DuckPeakMiB.Median, met(peak <= targetDuckPeak))
	}
	b.WriteString("\n")
	b.WriteString(summary(rep))

	for _, w := range []string{"empty", "spin-0.5us"} {
		fmt.Fprintf(&b, "Kernels: %s. ns/launch, mean over the runs (× the sequential walk); allocations per launch in brackets. For streamdag and streamdag-timed on graphs of up to 100,000 kernels, the ratio is measured apart: the median of 8 back-to-back pairs of runs with the walk, so it can differ from the ratio of the two ns columns (the machine's speed drifts during a report). streamdag runs with the executor's default, launch timing off, streamdag-timed with it on (exec.WithLaunchTiming(true): one clock reading per launch).\n\n", w)
		b.WriteString("| shape | kernels |")
		for _, r := range bench.Runners {
			fmt.Fprintf(&b, " %s |", r.Name)
		}
		b.WriteString(" streamdag launches/s | streamdag CPU ns/launch | taskflow ÷ streamdag |\n|---|---:|")
		for range bench.Runners {
			b.WriteString("---:|")
		}
		b.WriteString("---:|---:|---:|\n")
		for _, s := range append(bench.Shapes[:len(bench.Shapes):len(bench.Shapes)], bench.RandomDAG) {
			sd, ok := find(rep, s.Name, w, "streamdag")
			if !ok {
				continue
			}
			fmt.Fprintf(&b, "| %s | %d |", s.Name, sd.Kernels)
			for _, r := range bench.Runners {
				x, _ := find(rep, s.Name, w, r.Name)
				if r.Name == "sequential" {
					fmt.Fprintf(&b, " %.1f [%.1f] |", x.NsPerLaunch, x.AllocsPerLaunch)
				} else {
					fmt.Fprintf(&b, " %.0f (%.1f×) [%.1f] |", x.NsPerLaunch, x.VsSequential, x.AllocsPerLaunch)
				}
			}
			tf, _ := find(rep, s.Name, w, "taskflow")
			fmt.Fprintf(&b, " %.2fM | %.0f | %.1f× |\n", sd.LaunchesPerS/1e6, sd.CPUNsPerLaunch, tf.NsPerLaunch/sd.NsPerLaunch)
		}
		b.WriteString("\n")
	}

	b.WriteString("Graph build (AddValue + AddKernel per kernel, names included; the mean of the runs), validation and planning (Plan less its Validate; median runs), per kernel; event waits the plan inserts (GOMAXPROCS streams).\n\n")
	b.WriteString("| shape | kernels | build ns | build CPU ns | build allocs | validate ns | plan ns | cross-stream hazards | event waits |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, bd := range rep.Builds {
		fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.1f | %.0f | %.0f | %d | %d |\n", bd.Shape, bd.Kernels, bd.BuildNsPerKernel,
			bd.BuildCPUNsPerKernel, bd.BuildAllocsPerKernel, bd.ValidateNsPerKernel, bd.PlanNsPerKernel, bd.Hazards, bd.Waits)
	}
	if len(rep.OneShots) > 0 {
		b.WriteString("\nOne-shot runs, empty kernels: the graph built, planned and run once (Executor.Run on a fresh graph; bench.PrepareOneShot), ns per kernel of the median run (CPU: the mean of all threads), against the reused plan (Executor.Execute of a plan made once, the streamdag runner). The ratio is the median of 8 back-to-back pairs of runs on graphs of up to 100,000 kernels. Build, validate and plan are the columns of the table above, measured apart (validate and plan: median runs).\n\n")
		b.WriteString("| shape | kernels | one-shot ns | one-shot CPU ns | allocs | build ns | validate ns | plan ns | reused plan ns | one-shot ÷ reused |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, o := range rep.OneShots {
			bd, _ := findBuild(rep, o.Shape)
			sd, _ := find(rep, o.Shape, "empty", "streamdag")
			fmt.Fprintf(&b, "| %s | %d | %.0f | %.0f | %.2f | %.0f | %.0f | %.0f | %.1f | %.0f× |\n", o.Shape, o.Kernels, o.NsPerKernel, o.CPUNsPerKernel,
				o.AllocsPerKernel, bd.BuildNsPerKernel, bd.ValidateNsPerKernel, bd.PlanNsPerKernel, sd.NsPerLaunch, o.VsReused)
		}
	}
	b.WriteString(duckMarkdown(rep.DuckDB))
	fmt.Fprintf(&b, "\nBuild floor: appending what chain-10k's build stores (the same names formatted and copied, records and bindings of the same sizes, to presized slices, with no checks; bench.ChainFloor) costs **%.0f ns per kernel** on this machine.\n",
		rep.BuildFloorNs)
	fmt.Fprintf(&b, "\nCross-stream waits: a chain of %d empty kernels (launch timing off) costs %.1f ns/launch on one stream and %.1f ns/launch alternating between two streams (%d waits): **%.0f ns per wait**. This is a wait at its worst, a handoff with nothing to overlap it: a cache-line round trip between the cores when the waiting stream catches the other's progress while it spins, a park and wake-up when it does not, so it varies from run to run. Where the streams have other work, as in wavefront, a wait costs less (see the profile).\n",
		rep.WaitChain, rep.SameStreamNs, rep.AltStreamNs, rep.Waits, rep.NsPerWait)
	for _, p := range rep.Profiles {
		bd := p.Breakdown
		wall := float64(bd.Wall.Nanoseconds()) / float64(max(bd.Units, 1))
		fmt.Fprintf(&b, "\nCPU profile of %s: %d runs over %v, %.0f ns/%s of wall time (profiled apart from the tables' measurements); CPU time per %s by category", p.What, bd.Runs, bd.Wall.Round(time.Millisecond*100), wall, p.Unit, p.Unit)
		if p.Labelled {
			fmt.Fprintf(&b, " (the building goroutine only; the other goroutines, mostly the collector's mark workers on the core the build leaves idle, took %.0f ns/%s more)", bd.Elsewhere, p.Unit)
		} else {
			b.WriteString(" (every goroutine: both cores)")
		}
		fmt.Fprintf(&b, ".\n\n| category | CPU ns/%s | share |\n|---|---:|---:|\n", p.Unit)
		for _, sh := range bd.Shares {
			fmt.Fprintf(&b, "| %s | %.1f | %.0f%% |\n", sh.Category, sh.PerUnit, 100*sh.Fraction)
		}
		fmt.Fprintf(&b, "| total | %.1f | |\n", float64(bd.Total)/float64(max(bd.Units, 1)))
	}
	return b.String()
}

// chartLaunches draws ns/launch per shape (x) for every runner (a line
// each), log scale.
func chartLaunches(rep Report, work, path string) error {
	p := plot.New()
	p.Title.Text = "ns per launch, " + work + " kernels (log scale; lower is better)"
	p.Y.Label.Text = "ns/launch"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	var names []string
	for _, s := range append(bench.Shapes[:len(bench.Shapes):len(bench.Shapes)], bench.RandomDAG) {
		if _, ok := find(rep, s.Name, work, "streamdag"); ok {
			names = append(names, s.Name)
		}
	}
	for i, r := range bench.Runners {
		pts := make(plotter.XYs, 0, len(names))
		for x, s := range names {
			if res, ok := find(rep, s, work, r.Name); ok && res.NsPerLaunch > 0 {
				pts = append(pts, plotter.XY{X: float64(x), Y: res.NsPerLaunch})
			}
		}
		l, sc, err := plotter.NewLinePoints(pts)
		if err != nil {
			return err
		}
		l.Color, sc.Color = plotutil.Color(i), plotutil.Color(i)
		sc.Shape = plotutil.Shape(i)
		l.Width = vg.Points(1.5)
		p.Add(l, sc)
		p.Legend.Add(r.Name, l, sc)
	}
	p.Legend.Top = true
	p.Legend.Left = true
	p.NominalX(names...)
	p.Add(plotter.NewGrid())
	return p.Save(22*vg.Centimeter, 13*vg.Centimeter, path)
}

// chartBuild draws build, validate and plan ns per kernel per shape.
func chartBuild(rep Report, path string) error {
	p := plot.New()
	p.Title.Text = "graph build, validate and plan: ns per kernel"
	p.Y.Label.Text = "ns/kernel"
	names := make([]string, len(rep.Builds))
	series := [3]plotter.Values{}
	for i, b := range rep.Builds {
		names[i] = b.Shape
		series[0] = append(series[0], b.BuildNsPerKernel)
		series[1] = append(series[1], b.ValidateNsPerKernel)
		series[2] = append(series[2], max(b.PlanNsPerKernel, 0))
	}
	w := vg.Points(14)
	for i, label := range []string{"build", "validate", "plan"} {
		bars, err := plotter.NewBarChart(series[i], w)
		if err != nil {
			return err
		}
		bars.Color = plotutil.Color(i)
		bars.LineStyle.Width = 0
		bars.Offset = vg.Length(i-1) * w
		p.Add(bars)
		p.Legend.Add(label, bars)
	}
	target := plotter.NewFunction(func(float64) float64 { return targetBuildNs })
	target.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
	p.Add(target)
	p.Legend.Add(fmt.Sprintf("build target %d ns", targetBuildNs), target)
	p.Legend.Top = true
	p.NominalX(names...)
	return p.Save(22*vg.Centimeter, 12*vg.Centimeter, path)
}
