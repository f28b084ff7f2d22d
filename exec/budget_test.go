package exec_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

// A buffer larger than the whole device budget can never be reserved: it
// reads as that failure, the launch that would write it is skipped with
// it, and unrelated branches run on.
func TestOverBudgetBufferIsAnUnallocatedFailure(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	defer dev.Close()
	e := exec.MustNew(t, dev, exec.WithAllocator(leaktest.Allocator(t)), exec.WithBudget(buffers.NewBudget(1024)))
	g := dag.New()
	small := g.AddBuffer("small", 512)
	big := g.AddBuffer("big", 4096)
	other := g.AddBuffer("other", 8)
	ran, otherRan := false, false
	g.AddKernel("k", func(_ context.Context, _ dag.Launch) error { ran = true; return nil }, dag.Writes(small, big))
	g.AddKernel("unrelated", func(_ context.Context, _ dag.Launch) error { otherRan = true; return nil }, dag.Writes(other))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	assert.False(t, ran)
	assert.True(t, otherRan)
	k := res.Report.Launches()[0]
	assert.Equal(t, exec.StatusSkipped, k.Status)
	assert.ErrorIs(t, k.Err, buffers.ErrOverBudget)
	assert.Equal(t, []string{"allocate big"}, k.Chain)
	for _, id := range []dag.BufferID{small, big} {
		_, err = res.Buffer(id)
		var ue *failgraph.UnwrittenError
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, k.Failure, ue.Failure)
		assert.ErrorIs(t, err, buffers.ErrOverBudget)
		assert.ErrorContains(t, err, `"big"`)
	}
	_, err = res.Buffer(other)
	assert.NoError(t, err)
}

// noHang runs f and fails the test when f has not returned within a
// minute. It guards tests of hangs: a correct f returns at once, so the
// limit never decides a passing run.
func noHang(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(time.Minute):
		t.Fatalf("%s hangs", what)
	}
}

// Raw buffers that each fit the budget but not all together: the run
// reserves what fits, in plan order, and the rest read as over-budget
// failures at once, even with a context that is never done.
func TestBuffersOverBudgetTogether(t *testing.T) {
	cases := []struct {
		name    string
		streams int
	}{{"1 stream", 1}, {"2 streams", 2}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev, err := cpu.New(cpu.WithStreams(c.streams))
			require.NoError(t, err)
			defer dev.Close()
			budget := buffers.NewBudget(1024)
			e := exec.MustNew(t, dev, exec.WithAllocator(leaktest.Allocator(t)), exec.WithBudget(budget))
			g := dag.New()
			var bufs [3]dag.BufferID
			for i := range bufs {
				bufs[i] = g.AddBuffer(fmt.Sprint("b", i), 512)
				g.AddKernel(fmt.Sprint("w", i), nop, dag.Writes(bufs[i]))
			}
			var res *exec.Result
			noHang(t, "Run", func() { res, err = e.Run(context.Background(), g) })
			require.NoError(t, err)
			defer res.Close()
			st := statuses(res.Report)
			assert.Equal(t, map[string]exec.Status{"w0": exec.StatusOK, "w1": exec.StatusOK, "w2": exec.StatusSkipped}, st)
			_, err = res.Buffer(bufs[2])
			require.ErrorIs(t, err, buffers.ErrOverBudget)
			assert.ErrorContains(t, err, `"b2"`)
			assert.ErrorContains(t, err, "1536 bytes of a budget of 1024")
			for _, id := range bufs[:2] {
				_, err := res.Buffer(id)
				assert.NoError(t, err)
			}
			assert.ErrorIs(t, res.Err(), buffers.ErrOverBudget)
			res.Close()
			assert.True(t, budget.TryAcquire(1024), "the run gave every byte back")
			budget.Release(1024)
		})
	}
}

// A run waits for budget that a concurrent run holds, and takes all its
// bytes at once: it never holds part of the budget while it waits.
func TestRunWaitsForBudgetHeldByAnother(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	defer dev.Close()
	budget := buffers.NewBudget(1024)
	e := exec.MustNew(t, dev, exec.WithAllocator(leaktest.Allocator(t)), exec.WithBudget(budget))
	g := dag.New()
	a, b := g.AddBuffer("a", 512), g.AddBuffer("b", 512)
	g.AddKernel("w", nop, dag.Writes(a, b))
	first, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	require.NoError(t, first.Err())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = e.Run(ctx, g)
	require.ErrorIs(t, err, context.Canceled, "the budget is held: the second run waits until ctx is done")
	first.Close()
	second, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer second.Close()
	assert.NoError(t, second.Err())
}

// A run whose inputs name a buffer it does not have does not start: it
// gives back every reserved byte and releases each input value exactly
// once, whichever inputs it had stored before it met the bad one.
func TestBadInputReleasesEverythingOnce(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	defer dev.Close()
	mem := leaktest.Allocator(t)
	budget := buffers.NewBudget(1024)
	e := exec.MustNew(t, dev, exec.WithAllocator(mem), exec.WithBudget(budget))
	g := dag.New()
	raw := g.AddBuffer("raw", 512)
	var ins []dag.BufferID
	for i := range 8 {
		in := dag.AddValue[any](g, fmt.Sprint("in", i), dag.Input()).ID()
		ins = append(ins, in)
		g.AddKernel(fmt.Sprint("k", i), nop, dag.Reads(in), dag.Writes(dag.AddValue[any](g, fmt.Sprint("out", i)).ID()))
	}
	g.AddKernel("w", nop, dag.Writes(raw))
	p, err := e.Plan(g)
	require.NoError(t, err)
	for run := range 20 { // inputs are stored in map order: many orders
		vals := make([]*soleInput, len(ins)+1)
		opts := make([]exec.RunOption, 0, len(vals))
		for i := range vals {
			vals[i] = &soleInput{v: i}
			id := dag.BufferID(99)
			if i < len(ins) {
				id = ins[i]
			}
			opts = append(opts, exec.WithInput(id, vals[i]))
		}
		res, err := e.Execute(t.Context(), p, opts...)
		assert.Nil(t, res)
		require.EqualError(t, err, "exec: input for unknown or unallocated buffer id 99")
		for i, v := range vals {
			assert.Equal(t, int32(1), v.releases.Load(), "run %d: releases of input %d", run, i)
		}
		require.True(t, budget.TryAcquire(1024), "run %d: the run gave every byte back", run)
		budget.Release(1024)
		mem.AssertSize(t, 0)
	}
}

// An input for a raw buffer that only device code writes (its host bytes
// are made by the Result's first read) is stored, not dropped: the
// buffer holds it and releases it once, at Close.
func TestInputOfBufferOnlyDeviceCodeWrites(t *testing.T) {
	const w = 4
	d := newFakeCode(topology.OpenCL(7), 1, fakeKernels)
	e := cpuAnd(t, 1, d)
	g := dag.New()
	a := g.AddBuffer("a", 8*w)
	x := g.AddBuffer("x", 8*w, dag.Input())
	g.AddKernel("src", putU64(a, 0, 5, nil), dag.Writes(a))
	g.AddKernel("scale", nil, dag.Reads(a), dag.Writes(x),
		dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(a), dag.BufferArg(x), dag.ScalarArg(uint64(3)), dag.ScalarArg(uint64(1))))
	v := &soleInput{v: 1}
	res, err := e.Run(t.Context(), g, exec.WithInput(x, v))
	require.NoError(t, err)
	require.NoError(t, res.Err())
	b, err := res.Buffer(x)
	require.NoError(t, err)
	assert.Equal(t, uint64(16), u64(b.Bytes(), 0), "5×3+1 from the device")
	assert.Same(t, v, b.Value())
	assert.Zero(t, v.releases.Load())
	res.Close()
	assert.Equal(t, int32(1), v.releases.Load())
	require.NoError(t, d.Close())
	assert.Zero(t, d.live())
}

// A run that cannot start, because its graph does not validate or its
// plan does not fit the executor (another device count, or other
// devices), or it was given no graph or plan, releases its input values
// once.
func TestRunThatCannotStartReleasesInputs(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	defer dev.Close()
	e := exec.MustNew(t, dev, exec.WithAllocator(leaktest.Allocator(t)))
	g := dag.New()
	in := dag.AddValue[any](g, "in", dag.Input()).ID()
	g.AddKernel("k", nop, dag.Reads(in), dag.Writes(dag.AddValue[any](g, "out").ID()))
	p, err := twoSimGPUs(t, 1).Plan(g)
	require.NoError(t, err)
	// A plan for a CPU device and a code device, on an executor of two
	// simulated GPUs: as many devices, with enough streams, but others.
	code := dag.New()
	cin := dag.AddValue[any](code, "in", dag.Input()).ID()
	a, b := code.AddBuffer("a", 8), code.AddBuffer("b", 8)
	code.AddKernel("src", put(a, 1), dag.Reads(cin), dag.Writes(a))
	code.AddKernel("scale", nil, dag.Reads(a), dag.Writes(b),
		dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(a), dag.BufferArg(b), dag.ScalarArg(uint64(3)), dag.ScalarArg(uint64(1))))
	pc, err := cpuAnd(t, 1, fakeDevice(t, 7, 1)).Plan(code)
	require.NoError(t, err)
	sims := twoSimGPUs(t, 2)
	bad := dag.New()
	x := dag.AddValue[any](bad, "x", dag.Input()).ID()
	bad.AddKernel("k", nop, dag.Reads(x), dag.Reads(bad.AddBuffer("y", 8))) // y is never written
	for _, tc := range []struct {
		name string
		run  func(v *soleInput) error
		want string
	}{
		{"invalid graph", func(v *soleInput) error {
			_, err := e.Run(t.Context(), bad, exec.WithInput(x, v))
			return err
		}, `dag: kernel "k" reads bytes [0:8) of buffer "y"`},
		{"plan for another executor", func(v *soleInput) error {
			_, err := e.Execute(t.Context(), p, exec.WithInput(in, v))
			return err
		}, "exec: plan for 2 devices, executor has 1"},
		{"plan for other devices", func(v *soleInput) error {
			_, err := sims.Execute(t.Context(), pc, exec.WithInput(cin, v))
			return err
		}, "exec: plan for cpu as device 0, the executor's is gpu0"},
		{"nil plan", func(v *soleInput) error {
			_, err := e.Execute(t.Context(), nil, exec.WithInput(in, v))
			return err
		}, "exec: nil plan"},
		{"nil plan to capture", func(v *soleInput) error {
			_, _, err := e.Capture(t.Context(), nil, exec.WithInput(in, v))
			return err
		}, "exec: nil plan"},
		{"nil graph", func(v *soleInput) error {
			_, err := e.Run(t.Context(), nil, exec.WithInput(in, v))
			return err
		}, "exec: nil graph"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := &soleInput{v: 1}
			assert.ErrorContains(t, tc.run(v), tc.want)
			assert.Equal(t, int32(1), v.releases.Load())
		})
	}
	_, err = e.Plan(nil)
	assert.EqualError(t, err, "exec: nil graph")
	_, _, err = e.Drain(t.Context(), nil, topology.CPU, nil)
	assert.EqualError(t, err, "exec: nil plan")
}
