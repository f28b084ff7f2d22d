package exec_test

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/topology"
)

// planShapes builds the planner's benchmark shapes at about n kernels: a
// chain, a fan-out/fan-in, a binary reduction tree and a square
// wavefront.
func planShapes(n int) map[string]*dag.Graph {
	out := map[string]*dag.Graph{}
	g := dag.New()
	prev := dag.AddValue[any](g, "b0").ID()
	g.AddKernel("k0", nop, dag.Writes(prev))
	for i := 1; i < n; i++ {
		b := dag.AddValue[any](g, fmt.Sprint("b", i)).ID()
		g.AddKernel(fmt.Sprint("k", i), nop, dag.Reads(prev), dag.Writes(b))
		prev = b
	}
	out["chain"] = g

	g = dag.New()
	src := dag.AddValue[any](g, "src").ID()
	g.AddKernel("source", nop, dag.Writes(src))
	outs := make([]dag.BufferID, n)
	for i := range outs {
		outs[i] = dag.AddValue[any](g, fmt.Sprint("w", i)).ID()
		g.AddKernel(fmt.Sprint("worker", i), nop, dag.Reads(src), dag.Writes(outs[i]))
	}
	g.AddKernel("sink", nop, dag.Reads(outs...))
	out["fanout"] = g

	g = dag.New()
	m := 1
	for m < n {
		m *= 2
	}
	m--
	bufs := make([]dag.BufferID, m)
	for i := m - 1; i >= 0; i-- {
		bufs[i] = dag.AddValue[any](g, fmt.Sprint("t", i)).ID()
		if l := 2*i + 1; l < m {
			g.AddKernel(fmt.Sprint("node", i), nop, dag.Reads(bufs[l], bufs[l+1]), dag.Writes(bufs[i]))
		} else {
			g.AddKernel(fmt.Sprint("node", i), nop, dag.Writes(bufs[i]))
		}
	}
	out["tree"] = g

	g = dag.New()
	w := 1
	for w*w < n {
		w++
	}
	cells := make([]dag.BufferID, w*w)
	for i := range w {
		for j := range w {
			c := i*w + j
			cells[c] = dag.AddValue[any](g, fmt.Sprint("c", i, "_", j)).ID()
			opts := []dag.KernelOption{dag.Writes(cells[c])}
			if i > 0 {
				opts = append(opts, dag.Reads(cells[c-w]))
			}
			if j > 0 {
				opts = append(opts, dag.Reads(cells[c-1]))
			}
			g.AddKernel(fmt.Sprint("cell", i, "_", j), nop, opts...)
		}
	}
	out["wavefront"] = g
	return out
}

// Planning allocates per plan, not per kernel: a plan of 16 times the
// kernels (validation included) takes at most a few more allocations
// (arrays that double past their first size), on every shape and with 1,
// 2 and 5 streams.
func TestPlanAllocationsDoNotGrowWithTheGraph(t *testing.T) {
	small, large := planShapes(500), planShapes(8000)
	for _, streams := range []int{1, 2, 5} {
		e := newExecutor(t, streams)
		for name := range small {
			t.Run(fmt.Sprintf("%s/streams=%d", name, streams), func(t *testing.T) {
				// The fewest of several plans: a plan whose pooled
				// tracker was dropped (as sync.Pool may, at random under
				// -race) makes its scratch arrays anew, a fixed number
				// more whatever the graph's size.
				allocs := func(g *dag.Graph) float64 {
					_, err := e.Plan(g)
					require.NoError(t, err)
					least := math.Inf(1)
					for range 5 {
						least = min(least, testing.AllocsPerRun(1, func() { _, _ = e.Plan(g) }))
					}
					return least
				}
				a, b := allocs(small[name]), allocs(large[name])
				assert.LessOrEqual(t, b, a+8, "allocations: %.0f for a plan of %d kernels, %.0f for %d",
					b, large[name].NumKernels(), a, small[name].NumKernels())
				assert.Less(t, b, 64.0, "allocations of a plan of %d kernels", large[name].NumKernels())
			})
		}
	}
}

// A one-device plan checks each kernel as it copies it into its launch,
// in launch order, yet its error names the first kernel by id that the
// device cannot run, as a check in id order would: here "sink" (id 1, the
// lowest rank, launched last) has no code for the CPU device, and so
// does "head" (id 2, at the head of a chain, launched first). With
// estimates the plan ranks again, and checks the same way.
func TestPlanOnOneDeviceNamesTheFirstKernelItCannotRun(t *testing.T) {
	e := newExecutor(t, 2)
	for _, estimate := range []bool{false, true} {
		g := dag.New()
		x, y := g.AddBuffer("x", 8), g.AddBuffer("y", 8)
		chain := dag.AddValue[any](g, "c0").ID()
		g.AddKernel("produce", put(x, 21), dag.Writes(x))
		g.AddKernel("sink", nil, dag.Reads(x), dag.Writes(y),
			dag.OpenCL(doubleCL, "double_it", oneItem, dag.BufferArg(x), dag.BufferArg(y)))
		g.AddKernel("head", nil, dag.Writes(chain), dag.OpenCL(doubleCL, "double_it", oneItem))
		for i := range 4 {
			next := dag.AddValue[any](g, fmt.Sprint("c", i+1)).ID()
			opts := []dag.KernelOption{dag.Reads(chain), dag.Writes(next)}
			if estimate {
				opts = append(opts, dag.Estimate(time.Duration(i+1)*time.Millisecond))
			}
			g.AddKernel(fmt.Sprint("link", i), nop, opts...)
			chain = next
		}
		require.NoError(t, g.Validate())
		_, err := e.Plan(g)
		assert.EqualError(t, err, `exec: kernel "sink": no device of the plan has code for it (the kernel has opencl code; cpu runs go code)`,
			"estimates %v", estimate)
	}
}

// BenchmarkPlanOnSimulatedGPUs measures planning per kernel on the eight
// simulated GPUs of dgx1-v100 (2 streams each) under HEFT and
// round-robin placement (placement, copies, hazards, streams and event
// waits), beside planning the same graph on one CPU device, in the same
// run: go test -run '^$' -bench PlanOnSimulatedGPUs ./exec/
func BenchmarkPlanOnSimulatedGPUs(b *testing.B) {
	m, err := topology.LoadMachine("dgx1-v100")
	require.NoError(b, err)
	topo, err := topology.New(m.Facts, topology.WithGPUSpec(m.Spec))
	require.NoError(b, err)
	gpus := topo.GPUs()
	for i := range gpus {
		gpus[i].MemoryBytes = m.MemoryBytes
	}
	set, err := sim.New(gpus, sim.WithStreams(2))
	require.NoError(b, err)
	defer func() { require.NoError(b, set.Close()) }()
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(b, err)
	defer dev.Close()
	executors := []struct {
		name string
		e    *exec.Executor
	}{{"one-device", exec.MustNew(b, dev)}}
	for _, pl := range []exec.Placement{exec.PlaceHEFT, exec.PlaceRoundRobin} {
		e, err := exec.NewMulti(set.Devices(), topo, exec.WithPlacement(pl))
		require.NoError(b, err)
		executors = append(executors, struct {
			name string
			e    *exec.Executor
		}{pl.String(), e})
	}
	shapes := planShapes(10_000)
	for _, name := range []string{"chain", "fanout", "tree", "wavefront"} {
		g := shapes[name]
		for _, x := range executors {
			b.Run(name+"/"+x.name, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, err := x.e.Plan(g); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(g.NumKernels()), "ns/kernel")
			})
		}
	}
}

// Plans made at the same time, from several goroutines (which share the
// planner's pooled scratch arrays), are the plans made one at a time. Each
// goroutine plans graphs of its own: Plan validates its graph, which
// must not run concurrently with anything else on that graph.
func TestPlansInParallelAreTheSame(t *testing.T) {
	e := newExecutor(t, 2)
	// The launches' exported fields, as text.
	launches := func(p *exec.Plan) string {
		var b strings.Builder
		for _, l := range p.Launches() {
			fmt.Fprintf(&b, "%d %s d%d s%d q%d waits %v deps %v reads %v writes %v\n", l.Kernel, l.Name, l.Device, l.Stream, l.Seq,
				l.Waits, l.Deps, l.Reads, l.Writes)
		}
		return b.String()
	}
	want := map[string]string{}
	for name, g := range planShapes(300) {
		p, err := e.Plan(g)
		require.NoError(t, err)
		want[name] = launches(p)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		shapes := planShapes(300)
		wg.Go(func() {
			for r := range 20 {
				for name, g := range shapes {
					p, err := e.Plan(g)
					if err == nil && launches(p) != want[name] {
						err = fmt.Errorf("worker %d, round %d: the plan of %s differs", w, r, name)
					}
					if err != nil {
						errs <- err
						return
					}
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// A one-shot run of a validated graph (plan, run, close) allocates a
// bounded number of bytes per kernel on each shape: the plan's launch
// records, dependencies and stream lists, and the run's outcomes, with no
// per-launch slice kept where a launch needs none (its required reads are
// its reads unless it has optional ones) and the hazard tracker's arrays
// reused from the plan before. Bytes, not times, and the fewest of several
// runs: a tracker another test holds is made anew.
func TestOneShotRunBytesPerKernel(t *testing.T) {
	shapes := planShapes(8000)
	e := newExecutor(t, 2)
	for _, tc := range []struct {
		shape string
		max   float64 // bytes per kernel
	}{
		{"chain", 300},
		{"fanout", 345},
		{"tree", 300},
		{"wavefront", 330},
	} {
		t.Run(tc.shape, func(t *testing.T) {
			g := shapes[tc.shape]
			require.NotNil(t, g)
			run := func() {
				res, err := e.Run(context.Background(), g)
				require.NoError(t, err)
				require.NoError(t, res.Err())
				res.Close()
			}
			run()
			least := uint64(math.MaxUint64)
			var before, after runtime.MemStats
			for range 5 {
				runtime.ReadMemStats(&before)
				run()
				runtime.ReadMemStats(&after)
				least = min(least, after.TotalAlloc-before.TotalAlloc)
			}
			perKernel := float64(least) / float64(g.NumKernels())
			assert.LessOrEqual(t, perKernel, tc.max, "bytes per kernel of a one-shot run of %d kernels", g.NumKernels())
		})
	}
}
