package exec_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
)

// Chains follow the bytes read: "low" and "high" are skipped writers of
// two halves of y, and "reader" needs only the low half, so its chain
// names "low", on any number of streams and in every run.
func TestChainFollowsBytesOnAnyStreams(t *testing.T) {
	boom := errors.New("boom")
	for _, streams := range []int{1, 2, 4} {
		t.Run(fmt.Sprint("streams=", streams), func(t *testing.T) {
			e := newExecutor(t, streams)
			g := dag.New()
			x, y, z := g.AddBuffer("x", 16), g.AddBuffer("y", 16), g.AddBuffer("z", 8)
			g.AddKernel("root", func(context.Context, dag.Launch) error { return boom }, dag.Writes(x))
			g.AddKernel("low", nop, dag.ReadsRange(x, 0, 8), dag.WritesRange(y, 0, 8), dag.OnStream(0))
			g.AddKernel("high", nop, dag.ReadsRange(x, 8, 8), dag.WritesRange(y, 8, 8), dag.OnStream(1))
			g.AddKernel("reader", nop, dag.ReadsRange(y, 0, 8), dag.Writes(z), dag.OnStream(2))
			for run := range 20 {
				res, err := e.Run(t.Context(), g)
				require.NoError(t, err)
				ls := map[string]exec.LaunchReport{}
				for _, l := range res.Report.Launches() {
					ls[l.Kernel] = l
				}
				require.Equal(t, exec.StatusSkipped, ls["reader"].Status, "run %d", run)
				assert.Equal(t, []string{"low", "root"}, ls["reader"].Chain, "run %d", run)
				assert.ErrorIs(t, ls["reader"].Err, boom, "run %d", run)
				_, err = res.Buffer(z)
				var ue *failgraph.UnwrittenError
				require.ErrorAs(t, err, &ue)
				assert.Equal(t, []string{"reader", "low", "root"}, ue.Chain, "run %d", run)
				res.Close()
			}
		})
	}
}

// Every launch cancelled with one cause carries the same failure id, also
// launches that write nothing.
func TestCancelledLaunchesShareOneFailure(t *testing.T) {
	e := newExecutor(t, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	g := dag.New()
	g.AddKernel("cancel", func(context.Context, dag.Launch) error { cancel(); return nil })
	for i := range 4 {
		g.AddKernel(fmt.Sprint("sink", i), nop) // writes nothing
	}
	out := g.AddBuffer("out", 8)
	g.AddKernel("writer", nop, dag.Writes(out))
	p, err := e.Plan(g)
	require.NoError(t, err)
	res, err := e.Execute(ctx, p)
	require.NoError(t, err)
	defer res.Close()
	require.Equal(t, 5, res.Report.Count(exec.StatusCancelled))
	var ids []failgraph.FailureID
	for _, l := range res.Report.Launches() {
		if l.Status == exec.StatusCancelled {
			ids = append(ids, l.Failure)
		}
	}
	for _, id := range ids {
		assert.Equal(t, ids[0], id, "cancelled launches %v", ids)
	}
	_, err = res.Buffer(out)
	var ue *failgraph.UnwrittenError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, ids[0], ue.Failure)
}

// A kernel that declares an empty range of a buffer whose reservation
// failed runs, and gets a buffer (with no bytes), never nil.
func TestEmptyRangeOfUnallocatedBufferIsNotNil(t *testing.T) {
	e := newExecutor(t, 1, exec.WithBudget(buffers.NewBudget(1024)))
	g := dag.New()
	big, small := g.AddBuffer("big", 4096), g.AddBuffer("small", 8)
	var in, out *buffers.Buffer
	g.AddKernel("fill", nop, dag.Writes(big))
	g.AddKernel("empty read", func(_ context.Context, l dag.Launch) error {
		var err error
		in, err = l.Buffer(big, dag.AccessRead)
		return err
	}, dag.ReadsRange(big, 0, 0), dag.Writes(small))
	g.AddKernel("empty write", func(_ context.Context, l dag.Launch) error {
		var err error
		out, err = l.Buffer(big, dag.AccessWrite)
		return err
	}, dag.WritesRange(big, 16, 0))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, map[string]exec.Status{"fill": exec.StatusSkipped, "empty read": exec.StatusOK, "empty write": exec.StatusOK},
		statuses(res.Report))
	require.NotNil(t, in, "Launch.Buffer of an empty read of an unallocated buffer")
	require.NotNil(t, out, "Launch.Buffer of an empty write of an unallocated buffer")
	assert.Equal(t, "big", in.Name())
	assert.Empty(t, in.Bytes())
	_, err = res.Buffer(big)
	assert.ErrorIs(t, err, buffers.ErrOverBudget)
}
