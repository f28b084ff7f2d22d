package exec_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
)

// statuses returns each kernel's status by name: its last launch's (the
// recovery's, after a device loss).
func statuses(rep *exec.Report) map[string]exec.Status {
	out := map[string]exec.Status{}
	for _, l := range rep.Launches() {
		out[l.Kernel] = l.Status
	}
	return out
}

// chainGraph returns n kernels on one chain of value buffers; kernel i
// runs body(i) and then stores i.
func chainGraph(n int, body func(i int)) (*dag.Graph, []dag.Value[int]) {
	g := dag.New()
	var bufs []dag.Value[int]
	for i := range n {
		out := dag.AddValue[int](g, fmt.Sprintf("v%d", i))
		opts := []dag.KernelOption{dag.Writes(out.ID())}
		if i > 0 {
			opts = append(opts, dag.Reads(bufs[i-1].ID()))
		}
		g.AddKernel(fmt.Sprintf("k%d", i), func(_ context.Context, l dag.Launch) error {
			body(i)
			return dag.Put(l, out, i)
		}, opts...)
		bufs = append(bufs, out)
	}
	return g, bufs
}

// A kernel that calls runtime.Goexit takes its stream's worker with it:
// its launch fails as torn down, its dependents are skipped with its
// failure, an unrelated branch on the same stream still runs, and the run
// returns.
func TestGoexitInKernel(t *testing.T) { bothTimings(t, testGoexitInKernel) }

func testGoexitInKernel(t *testing.T, timing exec.Option) {
	e := newExecutor(t, 1, timing)
	g := dag.New()
	a, b, c := dag.AddValue[int](g, "a"), dag.AddValue[int](g, "b"), dag.AddValue[int](g, "c")
	g.AddKernel("exits", func(context.Context, dag.Launch) error { runtime.Goexit(); return nil }, dag.Writes(a.ID()))
	g.AddKernel("after", func(_ context.Context, l dag.Launch) error { return dag.Put(l, b, 1) }, dag.Reads(a.ID()), dag.Writes(b.ID()))
	g.AddKernel("other", func(_ context.Context, l dag.Launch) error { return dag.Put(l, c, 2) }, dag.Writes(c.ID()))
	res, err := e.Run(context.Background(), g)
	require.NoError(t, err)
	defer res.Close()
	st := statuses(res.Report)
	assert.Equal(t, map[string]exec.Status{"exits": exec.StatusFailed, "after": exec.StatusSkipped, "other": exec.StatusOK}, st)
	var torn *failgraph.KernelPanicError
	require.ErrorAs(t, res.Err(), &torn)
	assert.Equal(t, "runtime.Goexit", torn.Value)
	v, err := res.Value(c.ID())
	require.NoError(t, err)
	assert.Equal(t, 2, v)
}

// A panic in the middle of a stream's list fails that launch only: the
// launches after it on the same stream run.
func TestPanicMidStream(t *testing.T) { bothTimings(t, testPanicMidStream) }

func testPanicMidStream(t *testing.T, timing exec.Option) {
	e := newExecutor(t, 1, timing)
	g := dag.New()
	var outs []dag.Value[int]
	for i := range 6 {
		out := dag.AddValue[int](g, fmt.Sprintf("o%d", i))
		outs = append(outs, out)
		g.AddKernel(fmt.Sprintf("k%d", i), func(_ context.Context, l dag.Launch) error {
			if i == 2 || i == 4 {
				panic(fmt.Sprintf("boom %d", i))
			}
			return dag.Put(l, out, i)
		}, dag.Writes(out.ID()))
	}
	res, err := e.Run(context.Background(), g)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, 4, res.Report.Count(exec.StatusOK))
	assert.Equal(t, 2, res.Report.Count(exec.StatusFailed))
	for i, out := range outs {
		v, err := res.Value(out.ID())
		if i == 2 || i == 4 {
			var torn *failgraph.KernelPanicError
			require.ErrorAs(t, err, &torn, "o%d", i)
			assert.Equal(t, fmt.Sprintf("boom %d", i), torn.Value)
			continue
		}
		require.NoError(t, err)
		assert.Equal(t, i, v)
	}
}

// Cancelling ctx in the middle of a chain: launches already run stay ok,
// the rest are cancelled, and the cancelled buffers read as the cause.
func TestCancelMidChain(t *testing.T) {
	e := newExecutor(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	g, bufs := chainGraph(50, func(i int) {
		if i == 19 {
			cancel()
		}
	})
	res, err := e.Run(ctx, g)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, 20, res.Report.Count(exec.StatusOK))
	assert.Equal(t, 30, res.Report.Count(exec.StatusCancelled))
	_, err = res.Value(bufs[49].ID())
	assert.ErrorIs(t, err, context.Canceled)
	v, err := res.Value(bufs[19].ID())
	require.NoError(t, err)
	assert.Equal(t, 19, v)
}

// Launch timing: off by default (starts and ends are zero, the report
// says so and the wall time is still measured; a trace is refused); on,
// every ok launch has start <= end, and a stream's launches do not
// overlap.
func TestLaunchTiming(t *testing.T) {
	g, _ := chainGraph(20, func(int) {})
	cases := []struct {
		name string
		opts []exec.Option
		on   bool
	}{
		{"default", nil, false},
		{"off", []exec.Option{exec.WithLaunchTiming(false)}, false},
		{"on", []exec.Option{exec.WithLaunchTiming(true)}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newExecutor(t, 2, tc.opts...)
			res, err := e.Run(context.Background(), g)
			require.NoError(t, err)
			defer res.Close()
			rep := res.Report
			assert.Equal(t, tc.on, rep.LaunchTiming)
			ls := rep.Launches()
			require.Len(t, ls, 20)
			assert.Positive(t, rep.Wall)
			var prevEnd time.Time
			for _, l := range ls {
				assert.Equal(t, exec.StatusOK, l.Status, l.Kernel)
				if !tc.on {
					assert.True(t, l.Start.IsZero() && l.End.IsZero(), l.Kernel)
					continue
				}
				require.False(t, l.Start.IsZero(), l.Kernel)
				assert.False(t, l.End.Before(l.Start), l.Kernel)
				assert.False(t, l.Start.Before(prevEnd), "%s starts before its predecessor ended", l.Kernel)
				prevEnd = l.End
			}

			b, err := json.Marshal(rep)
			require.NoError(t, err)
			var doc struct {
				Timing   bool `json:"launch_timing"`
				Launches []struct {
					StartNs int64 `json:"start_ns"`
					EndNs   int64 `json:"end_ns"`
				} `json:"launches"`
			}
			require.NoError(t, json.Unmarshal(b, &doc))
			assert.Equal(t, tc.on, doc.Timing)
			require.Len(t, doc.Launches, 20)
			if !tc.on {
				for i, l := range doc.Launches {
					assert.Zero(t, l.StartNs, i)
					assert.Zero(t, l.EndNs, i)
				}
			} else {
				assert.Positive(t, doc.Launches[19].EndNs)
			}

			var buf bytes.Buffer
			err = rep.WriteTrace(&buf)
			if tc.on {
				require.NoError(t, err)
				assert.Positive(t, buf.Len())
			} else {
				require.ErrorIs(t, err, exec.ErrNoLaunchTiming)
				assert.Zero(t, buf.Len(), "nothing is written")
			}
		})
	}
}

// A closed Result refuses reads with ErrResultClosed; the next run of the
// same plan reuses its buffer slots and sees its own values.
func TestResultClosedAndSlotsReused(t *testing.T) {
	e := newExecutor(t, 2)
	var mu sync.Mutex
	round := 0
	g, bufs := chainGraph(10, func(int) {})
	tagged := dag.AddValue[int](g, "tagged")
	g.AddKernel("tag", func(_ context.Context, l dag.Launch) error {
		mu.Lock()
		defer mu.Unlock()
		return dag.Put(l, tagged, round)
	}, dag.Writes(tagged.ID()))
	p, err := e.Plan(g)
	require.NoError(t, err)
	for r := range 3 {
		mu.Lock()
		round = r
		mu.Unlock()
		res, err := e.Execute(context.Background(), p)
		require.NoError(t, err)
		v, err := res.Value(tagged.ID())
		require.NoError(t, err)
		assert.Equal(t, r, v)
		v, err = res.Value(bufs[9].ID())
		require.NoError(t, err)
		assert.Equal(t, 9, v)
		require.NoError(t, res.Close())
		require.NoError(t, res.Close(), "idempotent")
		_, err = res.Value(bufs[9].ID())
		assert.ErrorIs(t, err, exec.ErrResultClosed)
		assert.EqualError(t, err, `exec: result closed: cannot read buffer "v9"`)
	}
}

// Runs sharing a device, each with cross-stream waits, run concurrently
// without deadlock and each sees its own values.
func TestConcurrentRunsShareStreams(t *testing.T) {
	e := newExecutor(t, 3)
	g := dag.New()
	var last dag.Value[int]
	prev := []dag.Value[int]{}
	for lvl := range 30 {
		var cur []dag.Value[int]
		for j := range 3 {
			out := dag.AddValue[int](g, fmt.Sprintf("v%d_%d", lvl, j))
			opts := []dag.KernelOption{dag.Writes(out.ID())}
			for _, p := range prev {
				opts = append(opts, dag.Reads(p.ID()))
			}
			ins := prev
			g.AddKernel(fmt.Sprintf("k%d_%d", lvl, j), func(_ context.Context, l dag.Launch) error {
				sum := 1
				for _, in := range ins {
					sum += valueOf(l, in)
				}
				return dag.Put(l, out, sum%1_000_003)
			}, opts...)
			cur = append(cur, out)
			last = out
		}
		prev = cur
	}
	p, err := e.Plan(g)
	require.NoError(t, err)
	require.Positive(t, p.Waits())
	want := -1
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	vals := make(chan any, 8)
	for range 8 {
		wg.Go(func() {
			res, err := e.Execute(context.Background(), p)
			if err != nil {
				errs <- err
				return
			}
			defer res.Close()
			v, err := res.Value(last.ID())
			if err != nil {
				errs <- err
				return
			}
			vals <- v
		})
	}
	wg.Wait()
	close(errs)
	close(vals)
	for err := range errs {
		t.Error(err)
	}
	for v := range vals {
		if want < 0 {
			want = v.(int)
		}
		assert.Equal(t, want, v)
	}
}

// Submission order moves independent kernels (by their longest path to
// the end) but never a pair with a hazard: a reader of a buffer with two
// writers reads after both (as in Order), even when the reader heads a
// long path and the second writer does not.
func TestLaunchOrderKeepsHazards(t *testing.T) {
	e := newExecutor(t, 1)
	g := dag.New()
	x, y, z := dag.AddValue[string](g, "x"), dag.AddValue[string](g, "y"), dag.AddValue[string](g, "z")
	g.AddKernel("w1", func(_ context.Context, l dag.Launch) error {
		if err := dag.Put(l, x, "first"); err != nil {
			return err
		}
		return dag.Put(l, y, "y")
	}, dag.Writes(x.ID(), y.ID()))
	g.AddKernel("r", func(_ context.Context, l dag.Launch) error { return dag.Put(l, z, valueOf(l, x)) },
		dag.Reads(x.ID()), dag.Writes(z.ID()))
	g.AddKernel("w2", func(_ context.Context, l dag.Launch) error { return dag.Put(l, x, "second") },
		dag.Reads(y.ID()), dag.Writes(x.ID()))
	tail := z.ID()
	for i := range 5 { // a long path after r gives it the higher rank
		out := dag.AddValue[int](g, fmt.Sprintf("tv%d", i))
		g.AddKernel(fmt.Sprintf("t%d", i), func(_ context.Context, l dag.Launch) error { return dag.Put(l, out, i) },
			dag.Reads(tail), dag.Writes(out.ID()))
		tail = out.ID()
	}
	require.NoError(t, g.Validate())
	pos := map[dag.KernelID]int{}
	for i, k := range g.Order() {
		pos[k] = i
	}
	require.Less(t, pos[2], pos[1], "Order puts every writer of x before its reader")
	res, err := e.Run(context.Background(), g)
	require.NoError(t, err)
	defer res.Close()
	v, err := res.Value(z.ID())
	require.NoError(t, err)
	assert.Equal(t, "second", v)
}

// A device closed before the run: Execute says so, and every launch is
// cancelled with the device's error.
func TestClosedDeviceCancelsLaunches(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	e := exec.MustNew(t, dev, exec.WithAllocator(leaktest.Allocator(t)))
	g, _ := chainGraph(5, func(int) {})
	p, err := e.Plan(g)
	require.NoError(t, err)
	require.NoError(t, dev.Close())
	res, err := e.Execute(context.Background(), p)
	require.ErrorIs(t, err, gpu.ErrClosed)
	require.NotNil(t, res)
	defer res.Close()
	assert.Equal(t, 5, res.Report.Count(exec.StatusCancelled))
	assert.True(t, errors.Is(res.Err(), gpu.ErrClosed) || res.Err() != nil)
}

// A binary reduction tree of 2^11 leaves on two streams: independent
// leaves are given out in blocks, so a subtree stays on one stream and
// only the nodes where blocks meet wait (alternating leaf by leaf, every
// internal node would wait). The sums come out right.
func TestReductionTreeWaitsWhereBlocksMeet(t *testing.T) {
	const depth = 11
	e := newExecutor(t, 2)
	g := dag.New()
	leaves := 1 << depth
	level := make([]dag.Value[int], leaves)
	for i := range level {
		leaf := dag.AddValue[int](g, fmt.Sprintf("leaf%d", i))
		level[i] = leaf
		g.AddKernel(fmt.Sprintf("load%d", i), func(_ context.Context, l dag.Launch) error {
			return dag.Put(l, leaf, 1)
		}, dag.Writes(leaf.ID()))
	}
	internal := 0
	for len(level) > 1 {
		next := make([]dag.Value[int], len(level)/2)
		for i := range next {
			sum, a, b := dag.AddValue[int](g, fmt.Sprintf("sum%d", internal)), level[2*i], level[2*i+1]
			next[i] = sum
			g.AddKernel(fmt.Sprintf("add%d", internal), func(_ context.Context, l dag.Launch) error {
				return dag.Put(l, sum, valueOf(l, a)+valueOf(l, b))
			}, dag.Reads(a.ID(), b.ID()), dag.Writes(sum.ID()))
			internal++
		}
		level = next
	}
	p, err := e.Plan(g)
	require.NoError(t, err)
	assert.Less(t, p.Waits(), internal/8, "waits only where blocks of leaves meet")
	assert.Positive(t, p.Waits(), "both streams work")
	res, err := e.Execute(t.Context(), p)
	require.NoError(t, err)
	defer res.Close()
	v, err := res.Value(level[0].ID())
	require.NoError(t, err)
	assert.Equal(t, leaves, v)
}
