package exec_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

// captureGraph builds: an input value "in" ([]uint64 of w values), n
// kernels "fill<i>" writing a<i>[j] = in[j]·(i+1) (an error when in has
// fewer than w values), n kernels "twice<i>" writing s<i> = 2·a<i>, and
// "sum" adding every s<i> into "total". It returns the graph and the
// input's handle.
func captureGraph(n, w int) (*dag.Graph, dag.Value[[]uint64]) {
	g := dag.New()
	in := dag.AddValue[[]uint64](g, "in", dag.Input())
	var outs []dag.BufferID
	for i := range n {
		a, s := g.AddBuffer(fmt.Sprint("a", i), int64(8*w)), g.AddBuffer(fmt.Sprint("s", i), int64(8*w))
		g.AddKernel(fmt.Sprint("fill", i), func(_ context.Context, l dag.Launch) error {
			vals, err := dag.Get(l, in)
			if err != nil {
				return err
			}
			if len(vals) < w {
				return fmt.Errorf("want %d input values, have %d", w, len(vals))
			}
			b := bytesOf(l, a)
			for j := range w {
				binary.LittleEndian.PutUint64(b[8*j:], vals[j]*uint64(i+1))
			}
			return nil
		}, dag.Reads(in.ID()), dag.Writes(a))
		g.AddKernel(fmt.Sprint("twice", i), func(_ context.Context, l dag.Launch) error {
			src, dst := bytesOf(l, a), bytesOf(l, s)
			for j := 0; j < len(src); j += 8 {
				binary.LittleEndian.PutUint64(dst[j:], 2*u64(src, j))
			}
			return nil
		}, dag.Reads(a), dag.Writes(s))
		outs = append(outs, s)
	}
	addSum(g, outs)
	return g, in
}

// seq returns 1, 2, …, w.
func seq(w int, from uint64) []uint64 {
	v := make([]uint64, w)
	for i := range v {
		v[i] = from + uint64(i)
	}
	return v
}

// rawBytes returns a copy of every raw buffer of g's bytes in res, by
// name.
func rawBytes(t *testing.T, g *dag.Graph, res *exec.Result) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	for id := range dag.BufferID(g.NumBuffers()) {
		decl := g.Buffer(id)
		if decl.Value {
			continue
		}
		b, err := res.Buffer(id)
		require.NoError(t, err, decl.Name)
		out[decl.Name] = append([]byte(nil), b.Bytes()...)
	}
	return out
}

// planWrites is every launch's writes of p, fused as a capture's write
// set is.
func planWrites(t *testing.T, p *exec.Plan) []buffers.Binding {
	t.Helper()
	s := failgraph.New(nil)
	w, err := s.BeginCapture()
	require.NoError(t, err)
	defer w.End()
	for _, l := range p.Launches() {
		s.Written(l.Writes)
	}
	return w.Writes()
}

// A clean capture on the CPU device replays with the same bytes in every
// raw buffer; its write set is exactly what the plan's launches write;
// its lists are the plan's; the reports say which run replayed.
func TestCaptureReplaysSameBytes(t *testing.T) {
	const n, w = 4, 16
	e := newExecutor(t, 3, exec.WithLaunchTiming(true))
	g, in := captureGraph(n, w)
	p, err := e.Plan(g)
	require.NoError(t, err)

	c, res, err := e.Capture(t.Context(), p, exec.WithInput(in.ID(), seq(w, 1)))
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())
	require.NoError(t, c.Err())
	assert.Equal(t, exec.RanPlan, res.Report.Ran)
	assert.Equal(t, exec.ReplayEngineLists, c.ReplayMode())
	assert.Same(t, p, c.Plan())
	want := rawBytes(t, g, res)
	// sum of 2·(i+1)·(1+…+w) over i.
	assert.Equal(t, uint64(2*(n*(n+1)/2)*(w*(w+1)/2)), binary.LittleEndian.Uint64(want["total"]))

	// The write set: every kernel wrote its whole output.
	writes := c.Writes()
	assert.Equal(t, planWrites(t, p), writes)
	require.Len(t, writes, 2*n+1)
	for _, b := range writes {
		decl := g.Buffer(dag.BufferID(b.Buffer))
		assert.Equal(t, decl.Whole(), b, decl.Name)
	}
	// The lists: every launch once, on its stream, in plan order.
	lists := c.Lists()
	require.Len(t, lists, p.NumGlobalStreams())
	seen := 0
	for gs, l := range lists {
		for k, i := range l {
			assert.Equal(t, gs, p.GlobalStream(i), "launch %d", i)
			if k > 0 {
				assert.Less(t, l[k-1], i, "stream %d in plan order", gs)
			}
			seen++
		}
	}
	assert.Equal(t, p.NumLaunches(), seen)
	assert.Equal(t, fmt.Sprintf("capture of %d launches on %d streams (replays engine lists): replayable", p.NumLaunches(), countNonEmpty(lists)), c.String())
	require.Greater(t, countNonEmpty(lists), 1, "the plan spreads over streams")

	for range 3 {
		res2, err := c.Replay(t.Context(), exec.WithInput(in.ID(), seq(w, 1)))
		require.NoError(t, err)
		require.NoError(t, res2.Err())
		assert.Equal(t, exec.ReplayedCapture, res2.Report.Ran)
		assert.Equal(t, p.NumLaunches(), res2.Report.Count(exec.StatusOK))
		assert.Equal(t, want, rawBytes(t, g, res2), "a replay gives the captured run's bytes")
		var trace strings.Builder
		require.NoError(t, exec.WriteTrace(&trace, p, res2.Report))
		assert.Contains(t, trace.String(), `"ran":"replayed capture"`)
		js, err := res2.Report.MarshalJSON()
		require.NoError(t, err)
		assert.Contains(t, string(js), `"ran":"replayed capture"`)
		require.NoError(t, res2.Close())
	}
	// A plain run of the plan says it ran the plan.
	res3, err := e.Execute(t.Context(), p, exec.WithInput(in.ID(), seq(w, 1)))
	require.NoError(t, err)
	defer res3.Close()
	assert.Equal(t, exec.RanPlan, res3.Report.Ran)
	js, err := res3.Report.MarshalJSON()
	require.NoError(t, err)
	assert.Contains(t, string(js), `"ran":"ran plan"`)
}

// countNonEmpty counts the lists with at least one launch.
func countNonEmpty(lists [][]int) int {
	n := 0
	for _, l := range lists {
		if len(l) > 0 {
			n++
		}
	}
	return n
}

// A capture during which a kernel fails (dag.Graph.InjectFailure) is
// doomed with that failure and refused for replay: Replay returns the
// doom, which errors.Is/As walk to the root, runs nothing, and releases
// the inputs it was given. A panicking kernel dooms it the same way,
// with its *failgraph.KernelPanicError.
func TestCaptureFailedKernelRefused(t *testing.T) {
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprintf("panic=%v", panics), func(t *testing.T) {
			e := newExecutor(t, 2)
			g, in := captureGraph(3, 4)
			require.NoError(t, g.InjectFailure("twice1", panics))
			p, err := e.Plan(g)
			require.NoError(t, err)
			c, res, err := e.Capture(t.Context(), p, exec.WithInput(in.ID(), seq(4, 1)))
			require.NoError(t, err)
			defer res.Close()
			require.Error(t, res.Err())
			require.Error(t, c.Err())
			assert.True(t, strings.HasPrefix(c.Err().Error(), `exec: capture doomed: kernel "twice1" failed: exec: kernel "twice1"`), c.Err().Error())
			assert.ErrorIs(t, c.Err(), dag.ErrInjected)
			var d *failgraph.DoomError
			require.ErrorAs(t, c.Err(), &d)
			assert.Equal(t, "twice1", d.Kernel)
			assert.False(t, d.Skipped)
			if panics {
				var kp *failgraph.KernelPanicError
				require.ErrorAs(t, c.Err(), &kp)
				assert.Equal(t, "twice1", kp.Kernel)
			}
			// The launch's failure in the report is the doom's.
			for _, l := range res.Report.Launches() {
				if l.Kernel == "twice1" {
					assert.Equal(t, l.Failure, d.Failure)
				}
			}
			// The write set holds the launches that succeeded, not the
			// failed one's nor the skipped sum's.
			for _, b := range c.Writes() {
				name := g.Buffer(dag.BufferID(b.Buffer)).Name
				assert.NotContains(t, []string{"s1", "total"}, name)
			}
			assert.Contains(t, c.String(), "exec: capture doomed")

			rel := &released{}
			res2, err := c.Replay(t.Context(), exec.WithInput(in.ID(), rel), nil) // a nil option is ignored, as Execute ignores it
			assert.Nil(t, res2)
			require.ErrorIs(t, err, dag.ErrInjected)
			assert.Same(t, c.Err(), err)
			assert.EqualValues(t, 1, rel.n.Load(), "the refused replay's input is released once")
		})
	}
}

// released counts its Release calls.
type released struct{ n atomic.Int32 }

func (r *released) Release() { r.n.Add(1) }

// A capture whose only doomed scope is a skip dooms too: a raw buffer
// over the budget is never reserved (no launch fails), its writer is
// skipped, and the capture is refused with that root.
func TestCaptureSkippedOnlyDooms(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.Close()) })
	e := exec.MustNew(t, dev, exec.WithAllocator(leaktest.Allocator(t)), exec.WithBudget(buffers.NewBudget(64)))
	g := dag.New()
	small, big := g.AddBuffer("small", 8), g.AddBuffer("big", 128)
	g.AddKernel("fine", func(_ context.Context, l dag.Launch) error { bytesOf(l, small)[0] = 1; return nil }, dag.Writes(small))
	g.AddKernel("huge", nop, dag.Writes(big))
	p, err := e.Plan(g)
	require.NoError(t, err)
	c, res, err := e.Capture(t.Context(), p)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, 0, res.Report.Count(exec.StatusFailed))
	assert.Equal(t, 1, res.Report.Count(exec.StatusSkipped))
	var d *failgraph.DoomError
	require.ErrorAs(t, c.Err(), &d)
	assert.Equal(t, "huge", d.Kernel)
	assert.True(t, d.Skipped)
	assert.ErrorIs(t, c.Err(), buffers.ErrOverBudget)
	assert.Equal(t, []buffers.Binding{{Buffer: buffers.ID(small), Length: 8}}, c.Writes())
	_, err = c.Replay(t.Context())
	assert.ErrorIs(t, err, buffers.ErrOverBudget)
}

// Outside a capture window nothing is doomed or recorded: a replay that
// fails at run time (an input too short for the fill kernels) reports
// its failure like any run, and the capture stays replayable with its
// write set unchanged; so do plain runs of the plan that fail. A
// cancelled capture is doomed with ctx's error.
func TestCaptureOutsideWindowRecordsNothing(t *testing.T) {
	const n, w = 2, 8
	e := newExecutor(t, 2)
	g, in := captureGraph(n, w)
	p, err := e.Plan(g)
	require.NoError(t, err)
	c, res, err := e.Capture(t.Context(), p, exec.WithInput(in.ID(), seq(w, 5)))
	require.NoError(t, err)
	want := rawBytes(t, g, res)
	require.NoError(t, res.Close())
	writes := c.Writes()

	bad, err := c.Replay(t.Context(), exec.WithInput(in.ID(), seq(w-1, 5)))
	require.NoError(t, err)
	assert.Equal(t, exec.ReplayedCapture, bad.Report.Ran)
	assert.Equal(t, n, bad.Report.Count(exec.StatusFailed), "every fill fails on the short input")
	require.Error(t, bad.Err())
	require.NoError(t, bad.Close())
	plain, err := e.Execute(t.Context(), p) // no input at all
	require.NoError(t, err)
	require.Error(t, plain.Err())
	require.NoError(t, plain.Close())

	assert.NoError(t, c.Err(), "failures outside the window doom nothing")
	assert.Equal(t, writes, c.Writes(), "and record nothing")
	good, err := c.Replay(t.Context(), exec.WithInput(in.ID(), seq(w, 5)))
	require.NoError(t, err)
	defer good.Close()
	assert.Equal(t, want, rawBytes(t, g, good))

	// An input for a buffer the graph does not have: the replay does not
	// start, as Execute would not.
	_, err = c.Replay(t.Context(), exec.WithInput(99, 1))
	assert.ErrorContains(t, err, "exec: input for unknown or unallocated buffer id 99")

	// A kernel cancels the run: the launch after it is cancelled.
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	gc := dag.New()
	x, y := gc.AddBuffer("x", 8), gc.AddBuffer("y", 8)
	gc.AddKernel("stop", func(context.Context, dag.Launch) error { cancel(); return nil }, dag.Writes(x))
	gc.AddKernel("late", nop, dag.Reads(x), dag.Writes(y))
	pc, err := e.Plan(gc)
	require.NoError(t, err)
	cc, cres, err := e.Capture(ctx, pc)
	require.NoError(t, err)
	defer cres.Close()
	require.Equal(t, 1, cres.Report.Count(exec.StatusCancelled))
	var d *failgraph.DoomError
	require.ErrorAs(t, cc.Err(), &d)
	assert.Equal(t, "late", d.Kernel)
	assert.ErrorIs(t, cc.Err(), context.Canceled)
	assert.ErrorIs(t, cc.Err(), failgraph.ErrCancelled)

	// A capture that cannot start gives no capture.
	nc, nres, err := e.Capture(t.Context(), p, exec.WithInput(99, 1))
	assert.Error(t, err)
	assert.Nil(t, nc)
	assert.Nil(t, nres)
}

// On a real OpenCL device (PoCL on this machine): a clean capture of a
// plan whose scale kernels run as OpenCL C replays with the same bytes,
// its write set holding the device instances the kernels wrote; one
// during which a host kernel fails is refused with that failure.
func TestCaptureOpenCL(t *testing.T) {
	const seed, n, w = 7, 3, 16
	e := cpuAnd(t, 2, openCLDevice(t, 2))
	g, total, want := scaleGraph(seed, n, w, false)
	p, err := e.Plan(g)
	require.NoError(t, err)
	t.Cleanup(p.ReleaseDeviceMemory)
	c, res, err := e.Capture(t.Context(), p)
	require.NoError(t, err)
	require.NoError(t, res.Err())
	require.NoError(t, c.Err())
	assert.Equal(t, want, uint64Of(t, res, total))
	bytes := rawBytes(t, g, res)
	require.NoError(t, res.Close())
	assert.Equal(t, planWrites(t, p), c.Writes())
	var onDevice int
	for _, b := range c.Writes() {
		if pb := p.Buffers()[b.Buffer]; pb.Device == 1 {
			onDevice++
		}
	}
	assert.Equal(t, 2*n, onDevice, "each scale kernel's input and output instance on the device")
	for range 2 {
		res2, err := c.Replay(t.Context(), exec.WithKeepDeviceMemory())
		require.NoError(t, err)
		require.NoError(t, res2.Err())
		assert.Equal(t, exec.ReplayedCapture, res2.Report.Ran)
		assert.Equal(t, bytes, rawBytes(t, g, res2))
		require.NoError(t, res2.Close())
	}

	gf, _, _ := scaleGraph(seed, n, w, false)
	require.NoError(t, gf.InjectFailure("src1", false))
	pf, err := e.Plan(gf)
	require.NoError(t, err)
	t.Cleanup(pf.ReleaseDeviceMemory)
	cf, resf, err := e.Capture(t.Context(), pf)
	require.NoError(t, err)
	defer resf.Close()
	require.ErrorIs(t, cf.Err(), dag.ErrInjected)
	_, err = cf.Replay(t.Context())
	require.ErrorIs(t, err, dag.ErrInjected)
	assert.True(t, strings.HasPrefix(err.Error(), `exec: capture doomed: kernel "src1" failed: `), err.Error())
	assert.True(t, errors.Is(err, dag.ErrInjected))
}

// A run that loses a simulated GPU part-way recovers, and its capture is
// doomed with the loss: Replay refuses it with gpu.ErrDeviceLost.
func TestCaptureDeviceLossDooms(t *testing.T) {
	e, _ := lossyMachine(t, "dgx1-v100", 1, sim.WithLoss(topology.GPU(3), 0.5), exec.WithPlacement(exec.PlaceRoundRobin))
	g, _ := sumGraph(nil)
	p, err := e.Plan(g)
	require.NoError(t, err)
	c, res, err := e.Capture(t.Context(), p)
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err(), "the run recovered")
	require.NotNil(t, res.Report.Lost)
	require.ErrorIs(t, c.Err(), gpu.ErrDeviceLost)
	assert.True(t, strings.HasPrefix(c.Err().Error(), "exec: capture doomed: "), c.Err().Error())
	_, err = c.Replay(t.Context())
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
}
