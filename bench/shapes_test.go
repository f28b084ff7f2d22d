package bench_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/bench"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
)

// TestShapes checks that every benchmark shape is a valid graph with the
// documented kernel count and runs cleanly.
func TestShapes(t *testing.T) {
	want := map[string]int{"chain-10k": 10_000, "fanout-10k": 10_002, "tree-d14": 1<<14 - 1, "wavefront-100x100": 10_000}
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	defer dev.Close()
	e, err := exec.New(dev)
	require.NoError(t, err)
	for _, s := range bench.Shapes {
		g := s.Build(bench.Empty)
		require.NoError(t, g.Validate(), s.Name)
		require.Equal(t, want[s.Name], g.NumKernels(), s.Name)
		res, err := e.Run(t.Context(), g)
		require.NoError(t, err)
		require.NoError(t, res.Err())
		require.Equal(t, want[s.Name], res.Report.Count(exec.StatusOK))
		res.Close()
	}
}

func TestRandomIsSeededAndValid(t *testing.T) {
	a, b := bench.Random(5000, 7, bench.Empty), bench.Random(5000, 7, bench.Empty)
	require.NoError(t, a.Validate())
	require.NoError(t, b.Validate())
	assert.Equal(t, a.Predecessors(), b.Predecessors(), "same seed, same graph")
	c := bench.Random(5000, 8, bench.Empty)
	assert.NotEqual(t, a.Predecessors(), c.Predecessors(), "another seed, another graph")
	edges, roots := 0, 0
	for k, ps := range a.Predecessors() {
		edges += len(ps)
		if len(ps) == 0 {
			roots++
		}
		for _, p := range ps {
			assert.Less(t, int(p), k)
			assert.LessOrEqual(t, k-int(p), bench.RandomWindow)
		}
	}
	assert.InDelta(t, 5000, edges, 500, "about one read per kernel on average")
	assert.InDelta(t, 5000/3, roots, 300, "a third of the kernels read nothing")
}

// smallShapes are small versions of every shape, for tests.
var smallShapes = []bench.GraphShape{
	{Name: "chain", Build: func(fn dag.KernelFunc) *dag.Graph { return bench.Chain(200, fn) }},
	{Name: "fanout", Build: func(fn dag.KernelFunc) *dag.Graph { return bench.FanOutIn(200, fn) }},
	{Name: "tree", Build: func(fn dag.KernelFunc) *dag.Graph { return bench.Tree(7, fn) }},
	{Name: "wavefront", Build: func(fn dag.KernelFunc) *dag.Graph { return bench.Wavefront(12, fn) }},
	{Name: "random", Build: func(fn dag.KernelFunc) *dag.Graph { return bench.Random(3000, 1, fn) }},
}

// TestRunners checks that every runner runs every kernel exactly once and
// only after all of its predecessors, twice in a row (runs are reusable).
func TestRunners(t *testing.T) {
	for _, s := range smallShapes {
		for _, r := range bench.Runners {
			t.Run(s.Name+"/"+r.Name, func(t *testing.T) {
				g := s.Build(bench.Empty)
				require.NoError(t, g.Validate())
				preds := g.Predecessors()
				ran := make([]atomic.Int32, g.NumKernels())
				var bad atomic.Int32
				for id := range g.NumKernels() {
					g.SetFunc(dag.KernelID(id), func(context.Context, dag.Launch) error {
						for _, p := range preds[id] {
							if ran[p].Load() != ran[id].Load()+1 {
								bad.Add(1)
							}
						}
						ran[id].Add(1)
						return nil
					})
				}
				run, done, err := r.Prepare(g)
				require.NoError(t, err)
				defer done()
				for i := range 2 {
					require.NoError(t, run())
					for k := range ran {
						require.EqualValues(t, i+1, ran[k].Load(), "kernel %d runs once per run", k)
					}
				}
				assert.Zero(t, bad.Load(), "no kernel ran before a predecessor")
			})
		}
	}
}

func TestRunnersReturnKernelErrors(t *testing.T) {
	for _, r := range bench.Runners {
		t.Run(r.Name, func(t *testing.T) {
			g := bench.FanOutIn(10, bench.Empty)
			g.SetFunc(3, func(context.Context, dag.Launch) error { return fmt.Errorf("boom") })
			require.NoError(t, g.Validate())
			run, done, err := r.Prepare(g)
			require.NoError(t, err)
			defer done()
			assert.Error(t, run(), "the failure of kernel 3 is reported")
		})
	}
}

func TestSpinWork(t *testing.T) {
	n := bench.SpinIterations()
	require.Positive(t, n)
	assert.Equal(t, n, bench.SpinIterations(), "calibrated once")
	require.NoError(t, bench.SpinWork().Kernel(t.Context(), bench.NopLaunch{}))
}

func TestMeasureAndWaitCost(t *testing.T) {
	calls := 0
	st, err := bench.Measure(func() error { calls++; return nil }, 3, 5, 0)
	require.NoError(t, err)
	assert.Equal(t, 3, st.Runs)
	assert.Equal(t, 4, calls, "one warm-up run")
	assert.Positive(t, st.MedianNsPerOp)
	assert.LessOrEqual(t, st.MedianNsPerOp, 3*st.NsPerOp, "the median of 3 runs is at most their sum")
	_, err = bench.Measure(func() error { return nil }, 0, 0, 0)
	assert.ErrorContains(t, err, "bench: measure at most 0 runs")
	waits, _, same, alt, err := bench.WaitCost(50, time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, 49, waits, "every launch of the alternating chain waits on the other stream")
	assert.Positive(t, same.Runs)
	assert.Positive(t, alt.Runs)
}
