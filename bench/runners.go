package bench

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	gtf "github.com/noneback/go-taskflow"
	"golang.org/x/sync/errgroup"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/topology"
)

// Work is a kernel body: what every kernel of a shape runs.
type Work struct {
	Name   string
	Kernel dag.KernelFunc
}

// EmptyWork runs Empty: it measures pure scheduling overhead.
var EmptyWork = Work{Name: "empty", Kernel: Empty}

// SpinWork returns kernels that spin for about SpinTarget (0.5 µs) of CPU
// time each; the loop count is calibrated once per process (see
// SpinIterations).
func SpinWork() Work {
	n := SpinIterations()
	return Work{Name: "spin-0.5us", Kernel: func(context.Context, dag.Launch) error {
		spin(n)
		return nil
	}}
}

// SpinTarget is how long one SpinWork kernel runs.
const SpinTarget = 500 * time.Nanosecond

var (
	spinOnce  sync.Once
	spinIters int
	spinSink  atomic.Uint64 // defeats dead-code elimination of spin
)

// SpinIterations returns the loop count of a SpinWork kernel: measured
// once per process, the fastest of five timings of a 200,000-iteration
// spin, scaled to SpinTarget (at least 1).
func SpinIterations() int {
	spinOnce.Do(func() {
		const probe = 200_000
		best := time.Duration(1 << 62)
		for range 5 {
			t := time.Now()
			spin(probe)
			best = min(best, time.Since(t))
		}
		spinIters = max(1, int(float64(probe)*float64(SpinTarget)/float64(max(best, 1))))
	})
	return spinIters
}

// spin runs n steps of a 64-bit LCG: a dependent chain of multiplies the
// compiler cannot fold.
func spin(n int) {
	x := uint64(n)
	for range n {
		x = x*6364136223846793005 + 1442695040888963407
	}
	if x == 0x5eed { // practically never; keeps the loop alive
		spinSink.Add(1)
	}
}

// NopLaunch is the dag.Launch the baselines hand kernels: it names no
// kernel and has no buffers (the benchmark kernels never ask).
type NopLaunch struct{}

var _ dag.Launch = NopLaunch{}

// Kernel returns "".
func (NopLaunch) Kernel() string { return "" }

// Device returns topology.CPU.
func (NopLaunch) Device() topology.DeviceID { return topology.CPU }

// Stream returns 0.
func (NopLaunch) Stream() int { return 0 }

// Allocator returns memory.DefaultAllocator.
func (NopLaunch) Allocator() memory.Allocator { return memory.DefaultAllocator }

// Buffer returns an *dag.AccessError: the launch declared no buffer.
func (NopLaunch) Buffer(id dag.BufferID, acc dag.Access) (*buffers.Buffer, error) {
	return nil, &dag.AccessError{Buffer: id, Access: acc}
}

// Missing returns an *dag.AccessError: the launch declared no read.
func (NopLaunch) Missing(id dag.BufferID) error {
	return &dag.AccessError{Buffer: id, Access: dag.AccessRead}
}

// Wrote returns an *dag.AccessError: the launch declared no write.
func (NopLaunch) Wrote(id dag.BufferID, offset, length int64) error {
	return &dag.AccessError{Buffer: id, Access: dag.AccessWrite}
}

// Runner executes every kernel of a graph once, respecting its
// dependencies (a kernel runs after the writers of every buffer it reads).
type Runner struct {
	Name string
	// Prepare does, outside the timer, what can be reused across runs of
	// g (validate, plan, build a peer's task graph, start a device), and
	// returns run, which executes g once, and done, which releases what
	// Prepare made. g must be valid.
	Prepare func(g *dag.Graph) (run func() error, done func(), err error)
}

// Runners are the executors compared, floor first: the sequential walk,
// streamdag (a prepared plan on the CPU device with GOMAXPROCS streams,
// launch timing off, the default), streamdag-timed (the same with launch
// timing on), one goroutine per kernel waiting on its predecessors'
// channels, errgroup (a goroutine started per kernel once its last
// predecessor finished, through atomic counters), and go-taskflow v1.2.0
// (its Executor with GOMAXPROCS workers, task graph built once).
//
// go-taskflow's time depends on the stack frame its run is called from:
// on chain-10k, from a function whose frame holds 12 KB or more (as
// Measure's, with its two runtime.MemStats) a run takes 1.7–2.9 µs per
// launch on the 2-core machine of the README, from a small frame (go
// test's benchmark loop) 5.5–6.9 µs. (Not through stack shrinking:
// GODEBUG=gcshrinkstackoff=1 changes nothing.) The report's figures are the faster
// ones, so its ratios against go-taskflow are the conservative ones.
var Runners = []Runner{
	{"sequential", prepareSequential},
	{"streamdag", prepareStreamdag},
	{"streamdag-timed", prepareStreamdagTimed},
	{"goroutines", prepareGoroutines},
	{"errgroup", prepareErrgroup},
	{"taskflow", prepareTaskflow},
}

// structure returns the kernels' functions, predecessors and successors.
func structure(g *dag.Graph) (fns []dag.KernelFunc, preds, succs [][]dag.KernelID) {
	preds = g.Predecessors()
	succs = make([][]dag.KernelID, len(preds))
	for k, ps := range preds {
		for _, p := range ps {
			succs[p] = append(succs[p], dag.KernelID(k))
		}
	}
	fns = make([]dag.KernelFunc, g.NumKernels())
	for i, k := range g.Kernels() {
		fns[i] = k.Fn
	}
	return fns, preds, succs
}

// prepareSequential walks the graph's topological order on the calling
// goroutine: the floor any executor is measured against.
func prepareSequential(g *dag.Graph) (func() error, func(), error) {
	if err := g.Validate(); err != nil {
		return nil, nil, err
	}
	order := g.Order()
	fns, _, _ := structure(g)
	ctx := context.Background()
	var l NopLaunch
	return func() error {
		for _, id := range order {
			if err := fns[id](ctx, l); err != nil {
				return err
			}
		}
		return nil
	}, func() {}, nil
}

// prepareStreamdag plans g once on a CPU device with GOMAXPROCS streams,
// the executor's defaults (launch timing off, see exec.WithLaunchTiming);
// each run is Executor.Execute
// (buffers reserved, every stream handed its launch list with its event
// waits, every launch settled through the error graph, the report built),
// a check that every launch is ok (Result.Err otherwise) and
// Result.Close.
func prepareStreamdag(g *dag.Graph) (func() error, func(), error) {
	return prepareStreamdagWith(g)
}

// prepareStreamdagTimed is prepareStreamdag with launch timing on
// (exec.WithLaunchTiming(true)): every launch's start and end are in the
// report.
func prepareStreamdagTimed(g *dag.Graph) (func() error, func(), error) {
	return prepareStreamdagWith(g, exec.WithLaunchTiming(true))
}

func prepareStreamdagWith(g *dag.Graph, opts ...exec.Option) (func() error, func(), error) {
	dev, err := cpu.New()
	if err != nil {
		return nil, nil, err
	}
	e, err := exec.New(dev, opts...)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	p, err := e.Plan(g)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	ctx := context.Background()
	return func() error {
		res, err := e.Execute(ctx, p)
		if err != nil {
			return err
		}
		defer res.Close()
		if res.Report.Count(exec.StatusOK) != res.Report.NumLaunches() {
			return res.Err()
		}
		return nil
	}, func() { dev.Close() }, nil
}

// prepareGoroutines starts one goroutine per kernel per run; each waits
// for its predecessors' channels to close, runs, and closes its own.
func prepareGoroutines(g *dag.Graph) (func() error, func(), error) {
	fns, preds, _ := structure(g)
	ctx := context.Background()
	return func() error {
		n := len(fns)
		done := make([]chan struct{}, n)
		for i := range done {
			done[i] = make(chan struct{})
		}
		errs := make(chan error, 1)
		var wg sync.WaitGroup
		wg.Add(n)
		for k := range n {
			go func() {
				defer wg.Done()
				for _, p := range preds[k] {
					<-done[p]
				}
				if err := fns[k](ctx, NopLaunch{}); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
				close(done[k])
			}()
		}
		wg.Wait()
		select {
		case err := <-errs:
			return err
		default:
			return nil
		}
	}, func() {}, nil
}

// prepareErrgroup runs each kernel in an errgroup goroutine started by the
// predecessor that brings its count of unfinished predecessors to zero.
func prepareErrgroup(g *dag.Graph) (func() error, func(), error) {
	fns, preds, succs := structure(g)
	ctx := context.Background()
	var roots []int
	for k, ps := range preds {
		if len(ps) == 0 {
			roots = append(roots, k)
		}
	}
	pending := make([]atomic.Int32, len(fns))
	return func() error {
		for k := range pending {
			pending[k].Store(int32(len(preds[k])))
		}
		var eg errgroup.Group
		var task func(k int) func() error
		task = func(k int) func() error {
			return func() error {
				if err := fns[k](ctx, NopLaunch{}); err != nil {
					return err
				}
				for _, s := range succs[k] {
					if pending[s].Add(-1) == 0 {
						eg.Go(task(int(s)))
					}
				}
				return nil
			}
		}
		for _, r := range roots {
			eg.Go(task(r))
		}
		return eg.Wait()
	}, func() {}, nil
}

// prepareTaskflow builds a go-taskflow TaskFlow with one static task per
// kernel and an edge per predecessor, once; each run is Run(tf).Wait() on
// an Executor with GOMAXPROCS workers.
func prepareTaskflow(g *dag.Graph) (func() error, func(), error) {
	fns, preds, _ := structure(g)
	ctx := context.Background()
	tf := gtf.NewTaskFlow("bench")
	tasks := make([]*gtf.Task, len(fns))
	var failed atomic.Pointer[error]
	for k, fn := range fns {
		tasks[k] = tf.NewTask(g.KernelName(dag.KernelID(k)), func() {
			if err := fn(ctx, NopLaunch{}); err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	for k, ps := range preds {
		for _, p := range ps {
			tasks[p].Precede(tasks[k])
		}
	}
	ex := gtf.NewExecutor(uint(runtime.GOMAXPROCS(0)))
	return func() error {
		ex.Run(tf).Wait()
		if err := failed.Load(); err != nil {
			return *err
		}
		return nil
	}, func() {}, nil
}

// Stats are the measurements of one runner on one graph.
type Stats struct {
	Runs    int
	NsPerOp float64 // wall time of one run of the whole graph, the mean of the runs
	// MedianNsPerOp is the median of the runs' wall times: on a shared
	// machine, a run the scheduler left waiting moves it less than the
	// mean.
	MedianNsPerOp float64
	CPUNsPerOp    float64 // CPU time of the process (all threads) per run; 0 where not measured
	AllocsPerOp   float64
	BytesPerOp    float64
}

// PerLaunch returns ns per launch for a graph of n kernels.
func (s Stats) PerLaunch(n int) float64 { return s.NsPerOp / float64(n) }

// Measure calls run once to warm up, then repeatedly until at least
// minRuns runs and minTime have passed (or maxRuns runs), and returns the
// mean wall time, the process's CPU time (all threads, GC included: on a
// machine shared with other work it shows what the runner itself
// consumed) and the allocations per run (runtime.MemStats deltas, which
// include any goroutine the runner left working), and the median wall
// time of a run. A GC runs before the timed runs. It returns run's first
// error.
func Measure(run func() error, minRuns, maxRuns int, minTime time.Duration) (Stats, error) {
	if maxRuns < 1 {
		return Stats{}, fmt.Errorf("bench: measure at most %d runs: need at least 1", maxRuns)
	}
	if err := run(); err != nil {
		return Stats{}, err
	}
	times := make([]time.Duration, 0, maxRuns)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start, cpu := time.Now(), processCPU()
	last := start
	for len(times) < maxRuns && (len(times) < minRuns || last.Sub(start) < minTime) {
		if err := run(); err != nil {
			return Stats{}, err
		}
		now := time.Now()
		times, last = append(times, now.Sub(last)), now
	}
	el, cpuEl := last.Sub(start), processCPU()-cpu
	runtime.ReadMemStats(&after)
	n := len(times)
	slices.Sort(times)
	return Stats{
		Runs:          n,
		NsPerOp:       float64(el.Nanoseconds()) / float64(n),
		MedianNsPerOp: float64(times[(n-1)/2]+times[n/2]) / 2,
		CPUNsPerOp:    float64(cpuEl.Nanoseconds()) / float64(n),
		AllocsPerOp:   float64(after.Mallocs-before.Mallocs) / float64(n),
		BytesPerOp:    float64(after.TotalAlloc-before.TotalAlloc) / float64(n),
	}, nil
}

// WaitCost measures what cross-stream event waits cost in streamdag: a
// chain of n empty kernels all pinned to stream 0 (no wait), then the same
// chain alternating between streams 0 and 1 (every launch waits on the
// other stream: n-1 waits, each a worker handoff), both with launch
// timing off like the streamdag runner. It returns the waits of the
// alternating plan and the extra ns per wait. This is the worst case of a
// wait: nothing overlaps it, and the waiting stream has just finished its
// own launch, so the wait costs a cache-line round trip between the cores
// at best (the other stream's progress caught while spinning) and a park
// and wake-up at worst: from about 90 to 500 ns here.
func WaitCost(n int, minTime time.Duration) (waits int, nsPerWait float64, same, alternating Stats, err error) {
	build := func(alt bool) *dag.Graph {
		g := dag.New()
		prev := dag.BufferID(-1)
		for i := range n {
			out := dag.AddValue[any](g, name("b", i)).ID()
			opts := []dag.KernelOption{dag.Writes(out), dag.OnStream(0)}
			if alt {
				opts[1] = dag.OnStream(i % 2)
			}
			if prev >= 0 {
				opts = append(opts, dag.Reads(prev))
			}
			g.AddKernel(name("k", i), Empty, opts...)
			prev = out
		}
		return g
	}
	dev, err := cpu.New(cpu.WithStreams(2))
	if err != nil {
		return 0, 0, Stats{}, Stats{}, err
	}
	defer dev.Close()
	e, err := exec.New(dev, exec.WithLaunchTiming(false))
	if err != nil {
		return 0, 0, Stats{}, Stats{}, err
	}
	ctx := context.Background()
	var stats [2]Stats
	for i, alt := range []bool{false, true} {
		p, err := e.Plan(build(alt))
		if err != nil {
			return 0, 0, Stats{}, Stats{}, err
		}
		if alt {
			waits = p.Waits()
		}
		stats[i], err = Measure(func() error {
			res, err := e.Execute(ctx, p)
			if err != nil {
				return err
			}
			res.Close()
			return nil
		}, 3, 1000, minTime)
		if err != nil {
			return 0, 0, Stats{}, Stats{}, err
		}
	}
	if waits == 0 {
		return 0, 0, stats[0], stats[1], fmt.Errorf("bench: alternating chain planned no waits")
	}
	return waits, (stats[1].NsPerOp - stats[0].NsPerOp) / float64(waits), stats[0], stats[1], nil
}

// PrepareOneShot returns run, which does what a user who runs a graph
// once pays for, end to end: it builds s's graph with fn's kernels, runs
// it with Executor.Run (validation, planning and one Execute, launch
// timing off, the executor's default) on a CPU device with GOMAXPROCS
// streams, checks that every launch is ok (Result.Err otherwise) and
// closes the result. done closes the device. The graph of each run is new,
// so nothing of an earlier run's plan is reused.
func PrepareOneShot(s GraphShape, fn dag.KernelFunc) (run func() error, done func(), err error) {
	dev, err := cpu.New()
	if err != nil {
		return nil, nil, err
	}
	e, err := exec.New(dev)
	if err != nil {
		dev.Close()
		return nil, nil, err
	}
	ctx := context.Background()
	return func() error {
		res, err := e.Run(ctx, s.Build(fn))
		if err != nil {
			return err
		}
		defer res.Close()
		if res.Report.Count(exec.StatusOK) != res.Report.NumLaunches() {
			return res.Err()
		}
		return nil
	}, func() { dev.Close() }, nil
}
