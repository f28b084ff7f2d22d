package exec_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/topology"
)

// A Result's error graph is read-only: no method of what Failures returns
// taints or releases bytes, so a buffer whose only writer failed stays
// unreadable.
func TestResultFailuresIsReadOnly(t *testing.T) {
	e := newExecutor(t, 1)
	g := dag.New()
	x := g.AddBuffer("x", 8)
	boom := errors.New("boom")
	g.AddKernel("w", func(context.Context, dag.Launch) error { return boom }, dag.Writes(x))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()

	view := res.Failures()
	for _, m := range []string{"Written", "Fail", "Cancel", "FailUnallocated", "Allocated", "SkipIfTainted", "Enter"} {
		_, has := reflect.TypeOf(view).MethodByName(m)
		assert.False(t, has, "Result.Failures() has a method %s that edits the error graph", m)
	}
	_, editable := any(view).(interface{ Written([]buffers.Binding) })
	require.False(t, editable, "Result.Failures() can clear taint")

	require.Equal(t, 1, view.Len())
	fs := view.Failures()
	require.Len(t, fs, 1)
	assert.Equal(t, "w", fs[0].Kernel)
	assert.ErrorIs(t, view.EnsureWritten(g.Buffer(x).Whole()), boom)
	_, err = res.Buffer(x)
	assert.ErrorIs(t, err, boom)
	dot, err := view.MarshalDOT()
	require.NoError(t, err)
	assert.Contains(t, string(dot), `"buffer x"`)
}

// The zero View reads as an empty error graph.
func TestZeroViewIsEmpty(t *testing.T) {
	var v failgraph.View
	assert.True(t, v.Empty())
	assert.Zero(t, v.Len())
	assert.Empty(t, v.Failures())
	assert.NoError(t, v.EnsureWritten(buffers.Binding{Buffer: 0, Length: 8}))
	_, ok := v.Failure(1)
	assert.False(t, ok)
	dot, err := v.MarshalDOT()
	require.NoError(t, err)
	assert.Contains(t, string(dot), "errors")
}

// When no launch failed, Result.Err still carries each root failure, once:
// a reservation over the budget and a kernel pinned to a lost device.
func TestErrCarriesRootsWithoutFailedLaunch(t *testing.T) {
	t.Run("over budget", func(t *testing.T) {
		e := newExecutor(t, 2, exec.WithBudget(buffers.NewBudget(1024)))
		g := dag.New()
		big := g.AddBuffer("big", 4096)
		out := g.AddBuffer("out", 8)
		g.AddKernel("fill", nop, dag.Writes(big))
		g.AddKernel("use", nop, dag.Reads(big), dag.Writes(out))
		g.AddKernel("use2", nop, dag.ReadsRange(big, 0, 8))
		res, err := e.Run(t.Context(), g)
		require.NoError(t, err)
		defer res.Close()
		require.Zero(t, res.Report.Count(exec.StatusFailed))
		require.Equal(t, 3, res.Report.Count(exec.StatusSkipped))
		err = res.Err()
		require.ErrorIs(t, err, buffers.ErrOverBudget)
		assert.ErrorContains(t, err, `"big"`)
		assert.ErrorContains(t, err, "3 launches skipped (fill, use, use2), 0 cancelled")
		assert.Len(t, err.(interface{ Unwrap() []error }).Unwrap(), 2, "one root, once, and the count: %v", err)
	})
	t.Run("pinned to a lost device", func(t *testing.T) {
		e, _ := lossyMachine(t, "dgx1-v100", 1, sim.WithLoss(topology.GPU(3), 0))
		pin := topology.GPU(3)
		g, _ := sumGraph(&pin)
		res, err := e.Run(t.Context(), g)
		require.NoError(t, err)
		defer res.Close()
		err = res.Err()
		require.ErrorIs(t, err, gpu.ErrDeviceLost)
		assert.ErrorContains(t, err, `"source[0]" is pinned to gpu3`)
	})
	t.Run("pinned to a lost device, output unread", func(t *testing.T) {
		e, _ := lossyMachine(t, "dgx1-v100", 1, sim.WithLoss(topology.GPU(3), 0))
		g := dag.New()
		out, other := g.AddBuffer("out", 8), g.AddBuffer("other", 8)
		g.AddKernel("pinned", nop, dag.Writes(out), dag.OnDevice(topology.GPU(3)))
		g.AddKernel("free", nop, dag.Writes(other))
		res, err := e.Run(t.Context(), g)
		require.NoError(t, err)
		defer res.Close()
		_, err = res.Buffer(out)
		require.ErrorIs(t, err, gpu.ErrDeviceLost)
		err = res.Err()
		require.ErrorIs(t, err, gpu.ErrDeviceLost, "a buffer is unreadable: Err says why")
		assert.ErrorContains(t, err, `"pinned" is pinned to gpu3`)
	})
	t.Run("two buffers over budget", func(t *testing.T) {
		e := newExecutor(t, 1, exec.WithBudget(buffers.NewBudget(1024)))
		g := dag.New()
		a, b := g.AddBuffer("a", 600), g.AddBuffer("b", 600)
		big := g.AddBuffer("big", 4096)
		g.AddKernel("fill", nop, dag.Writes(big, a, b))
		res, err := e.Run(t.Context(), g)
		require.NoError(t, err)
		defer res.Close()
		err = res.Err()
		assert.ErrorContains(t, err, `"big"`)
		assert.ErrorContains(t, err, `"b"`, "b's reservation failed too, though no launch met it first")
	})
}

// Report.Err's count line is singular for one launch and names the
// skipped launches, at most three.
func TestErrNamesSkippedLaunches(t *testing.T) {
	for _, tc := range []struct {
		name    string
		readers int
		want    string
	}{
		{"one", 1, "exec: 1 launch skipped (r0), 0 cancelled"},
		{"three", 3, "exec: 3 launches skipped (r0, r1, r2), 0 cancelled"},
		{"five", 5, "exec: 5 launches skipped (r0, r1, r2, …), 0 cancelled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newExecutor(t, 1)
			g := dag.New()
			a := g.AddBuffer("a", 8)
			g.AddKernel("w", func(context.Context, dag.Launch) error { return errors.New("boom") }, dag.Writes(a))
			for i := range tc.readers {
				g.AddKernel(fmt.Sprintf("r%d", i), nop, dag.Reads(a))
			}
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			assert.ErrorContains(t, res.Err(), tc.want)
		})
	}
}

// levels returns the message of each level errors.Unwrap reaches from err.
func levels(err error) []string {
	var out []string
	for e := err; e != nil; e = errors.Unwrap(e) {
		out = append(out, e.Error())
	}
	return out
}

// A read of a buffer a failure left unwritten unwraps, one link per
// level, through each skipped kernel to the root kernel's error, and
// errors.As finds the UnwrittenError and each SkipError on the way.
func TestResultReadUnwrapsToRoot(t *testing.T) {
	e := newExecutor(t, 2)
	g := dag.New()
	raw, clean, total := dag.AddValue[int](g, "raw").ID(), dag.AddValue[int](g, "clean").ID(), dag.AddValue[int](g, "total").ID()
	g.AddKernel("load", func(context.Context, dag.Launch) error { return dag.ErrInjected }, dag.Writes(raw))
	g.AddKernel("filter", nop, dag.Reads(raw), dag.Writes(clean))
	g.AddKernel("agg", nop, dag.Reads(clean), dag.Writes(total))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()

	_, err = res.Value(total)
	assert.Equal(t, []string{
		`failgraph: total was not written: failure #1 (taints 3 buffers): agg ← filter ← load: exec: kernel "load": dag: injected failure`,
		`kernel "agg" skipped: kernel "filter" skipped: exec: kernel "load": dag: injected failure`,
		`kernel "filter" skipped: exec: kernel "load": dag: injected failure`,
		`exec: kernel "load": dag: injected failure`,
		`dag: injected failure`,
	}, levels(err))
	var ue *failgraph.UnwrittenError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, "total", ue.Buffer)
	assert.Equal(t, []string{"agg", "filter", "load"}, ue.Chain)
	var se *failgraph.SkipError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "agg", se.Kernel)
	assert.ErrorIs(t, err, dag.ErrInjected)

	_, err = res.Buffer(raw)
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, []string{ue.Error(), `exec: kernel "load": dag: injected failure`, "dag: injected failure"}, levels(err),
		"the root kernel's own write unwraps straight to its error")
	assert.ErrorIs(t, res.Err(), dag.ErrInjected)
}

// A kernel's panic reads `kernel "sum" panicked: VALUE` (under exec's
// prefix), with its value and stack in a *failgraph.KernelPanicError that
// errors.As finds from a read of its output and of its dependents'.
func TestKernelPanicReadsAsPanicError(t *testing.T) {
	e := newExecutor(t, 1)
	g := dag.New()
	total, doubled := dag.AddValue[int](g, "total").ID(), dag.AddValue[int](g, "doubled").ID()
	g.AddKernel("sum", func(context.Context, dag.Launch) error { panic("boom") }, dag.Writes(total))
	g.AddKernel("double", nop, dag.Reads(total), dag.Writes(doubled))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()

	l := res.Report.Launches()[0]
	require.Equal(t, exec.StatusFailed, l.Status)
	assert.EqualError(t, l.Err, `exec: kernel "sum" panicked: boom`)
	for _, b := range []dag.BufferID{total, doubled} {
		_, err := res.Value(b)
		var pe *failgraph.KernelPanicError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, "sum", pe.Kernel)
		assert.Equal(t, "boom", pe.Value)
		assert.EqualError(t, pe, `kernel "sum" panicked: boom`)
		assert.Contains(t, string(pe.Stack), "exec_test.TestKernelPanicReadsAsPanicError", "the panicking goroutine's stack")
		assert.ErrorIs(t, err, failgraph.ErrTornDown)
	}
	_, err = res.Value(doubled)
	assert.Equal(t, []string{
		`failgraph: doubled was not written: failure #1 (taints 2 buffers): double ← sum: exec: kernel "sum" panicked: boom`,
		`kernel "double" skipped: exec: kernel "sum" panicked: boom`,
		`exec: kernel "sum" panicked: boom`,
		`kernel "sum" panicked: boom`,
	}, levels(err))
	var pe *failgraph.KernelPanicError
	require.ErrorAs(t, res.Err(), &pe)
	assert.Equal(t, "boom", pe.Value)
}

// A graph that grows after it was planned does not reach the plan or its
// results: a Result made before the growth says it has no buffer of the
// new ids (an error, not an index out of range), and Execute, Capture,
// a Replay of a capture of the plan and Drain refuse to run it,
// releasing the inputs they were given, until the graph is planned again.
func TestGraphGrownAfterPlan(t *testing.T) {
	e := twoSimGPUs(t, 2)
	g := dag.New()
	in := dag.AddValue[*soleInput](g, "in", dag.Input())
	b := g.AddBuffer("b", 8)
	g.AddKernel("k", putU64(b, 0, 3, nil), dag.Reads(in.ID()), dag.Writes(b))
	p, err := e.Plan(g)
	require.NoError(t, err)
	c, res, err := e.Capture(t.Context(), p, exec.WithInput(in.ID(), &soleInput{v: 1}))
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, c.Err())

	late := g.AddBuffer("late", 8)
	lateV := dag.AddValue[int64](g, "late value")
	g.AddKernel("fill late", putU64(late, 0, 4, nil), dag.Writes(late))
	assert.Equal(t, uint64(3), uint64Of(t, res, b))
	_, err = res.Buffer(late)
	assert.EqualError(t, err, "exec: result has no buffer id 2")
	_, err = exec.Get(res, lateV)
	assert.EqualError(t, err, "exec: result has no buffer id 3")

	const want = "exec: plan of a graph of 1 kernels and 2 buffers, which has 2 kernels and 4 buffers now: plan it again"
	for name, run := range map[string]func(v *soleInput) error{
		"execute": func(v *soleInput) error {
			_, err := e.Execute(t.Context(), p, exec.WithInput(in.ID(), v))
			return err
		},
		"capture": func(v *soleInput) error {
			_, _, err := e.Capture(t.Context(), p, exec.WithInput(in.ID(), v))
			return err
		},
		"replay": func(v *soleInput) error {
			_, err := c.Replay(t.Context(), exec.WithInput(in.ID(), v))
			return err
		},
	} {
		v := &soleInput{v: 1}
		assert.EqualError(t, run(v), want, name)
		assert.Equal(t, int32(1), v.releases.Load(), name)
	}
	_, _, err = e.Drain(t.Context(), p, topology.GPU(1), nil)
	assert.EqualError(t, err, want)

	p2, err := e.Plan(g)
	require.NoError(t, err)
	res2, err := e.Execute(t.Context(), p2, exec.WithInput(in.ID(), &soleInput{v: 1}))
	require.NoError(t, err)
	defer res2.Close()
	assert.Equal(t, uint64(4), uint64Of(t, res2, late))
}
