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
func chainGraph(n int, body func(i int)) (*dag.Graph, []dag.BufferID) {
	g := dag.New()
	var bufs []dag.BufferID
	for i := range n {
		out := g.AddValue(fmt.Sprintf("v%d", i))
		opts := []dag.KernelOption{dag.Writes(out)}
		if i > 0 {
			opts = append(opts, dag.Reads(bufs[i-1]))
		}
		g.AddKernel(fmt.Sprintf("k%d", i), func(_ context.Context, l dag.Launch) error {
			body(i)
			return l.Out(0).Store(i)
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
	a, b, c := g.AddValue("a"), g.AddValue("b"), g.AddValue("c")
	g.AddKernel("exits", func(context.Context, dag.Launch) error { runtime.Goexit(); return nil }, dag.Writes(a))
	g.AddKernel("after", func(_ context.Context, l dag.Launch) error { return l.Out(0).Store(1) }, dag.Reads(a), dag.Writes(b))
	g.AddKernel("other", func(_ context.Context, l dag.Launch) error { return l.Out(0).Store(2) }, dag.Writes(c))
	res, err := e.Run(context.Background(), g)
	require.NoError(t, err)
	defer res.Close()
	st := statuses(res.Report)
	assert.Equal(t, map[string]exec.Status{"exits": exec.StatusFailed, "after": exec.StatusSkipped, "other": exec.StatusOK}, st)
	var torn *failgraph.KernelPanicError
	require.ErrorAs(t, res.Err(), &torn)
	assert.Equal(t, "runtime.Goexit", torn.Value)
	v, err := res.Value(c)
	require.NoError(t, err)
	assert.Equal(t, 2, v)
}

// A panic in the middle of a stream's list fails that launch only: the
// launches after it on the same stream run.
func TestPanicMidStream(t *testing.T) { bothTimings(t, testPanicMidStream) }

func testPanicMidStream(t *testing.T, timing exec.Option) {
	e := newExecutor(t, 1, timing)
	g := dag.New()
	var outs []dag.BufferID
	for i := range 6 {
		out := g.AddValue(fmt.Sprintf("o%d", i))
		outs = append(outs, out)
		g.AddKernel(fmt.Sprintf("k%d", i), func(_ context.Context, l dag.Launch) error {
			if i == 2 || i == 4 {
				panic(fmt.Sprintf("boom %d", i))
			}
			return l.Out(0).Store(i)
		}, dag.Writes(out))
	}
	res, err := e.Run(context.Background(), g)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, 4, res.Report.Count(exec.StatusOK))
	assert.Equal(t, 2, res.Report.Count(exec.StatusFailed))
	for i, out := range outs {
		v, err := res.Value(out)
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
	_, err = res.Value(bufs[49])
	assert.ErrorIs(t, err, context.Canceled)
	v, err := res.Value(bufs[19])
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
	tagged := g.AddValue("tagged")
	g.AddKernel("tag", func(_ context.Context, l dag.Launch) error {
		mu.Lock()
		defer mu.Unlock()
		return l.Out(0).Store(round)
	}, dag.Writes(tagged))
	p, err := e.Plan(g)
	require.NoError(t, err)
	for r := range 3 {
		mu.Lock()
		round = r
		mu.Unlock()
		res, err := e.Execute(context.Background(), p)
		require.NoError(t, err)
		v, err := res.Value(tagged)
		require.NoError(t, err)
		assert.Equal(t, r, v)
		v, err = res.Value(bufs[9])
		require.NoError(t, err)
		assert.Equal(t, 9, v)
		require.NoError(t, res.Close())
		require.NoError(t, res.Close(), "idempotent")
		_, err = res.Value(bufs[9])
		assert.ErrorIs(t, err, exec.ErrResultClosed)
		assert.EqualError(t, err, `exec: result closed: cannot read buffer "v9"`)
	}
}

// Runs sharing a device, each with cross-stream waits, run concurrently
// without deadlock and each sees its own values.
func TestConcurrentRunsShareStreams(t *testing.T) {
	e := newExecutor(t, 3)
	g := dag.New()
	var last dag.BufferID
	prev := []dag.BufferID{}
	for lvl := range 30 {
		var cur []dag.BufferID
		for j := range 3 {
			out := g.AddValue(fmt.Sprintf("v%d_%d", lvl, j))
			opts := []dag.KernelOption{dag.Writes(out)}
			for _, p := range prev {
				opts = append(opts, dag.Reads(p))
			}
			g.AddKernel(fmt.Sprintf("k%d_%d", lvl, j), func(_ context.Context, l dag.Launch) error {
				sum := 1
				for i := range l.NumIn() {
					sum += l.In(i).Value().(int)
				}
				return l.Out(0).Store(sum % 1_000_003)
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
			v, err := res.Value(last)
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
	x, y, z := g.AddValue("x"), g.AddValue("y"), g.AddValue("z")
	g.AddKernel("w1", func(_ context.Context, l dag.Launch) error {
		if err := l.Out(0).Store("first"); err != nil {
			return err
		}
		return l.Out(1).Store("y")
	}, dag.Writes(x, y))
	g.AddKernel("r", func(_ context.Context, l dag.Launch) error { return l.Out(0).Store(l.In(0).Value()) },
		dag.Reads(x), dag.Writes(z))
	g.AddKernel("w2", func(_ context.Context, l dag.Launch) error { return l.Out(0).Store("second") },
		dag.Reads(y), dag.Writes(x))
	tail := z
	for i := range 5 { // a long path after r gives it the higher rank
		out := g.AddValue(fmt.Sprintf("tv%d", i))
		g.AddKernel(fmt.Sprintf("t%d", i), func(_ context.Context, l dag.Launch) error { return l.Out(0).Store(i) },
			dag.Reads(tail), dag.Writes(out))
		tail = out
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
	v, err := res.Value(z)
	require.NoError(t, err)
	assert.Equal(t, "second", v)
}

// A device closed before the run: Execute says so, and every launch is
// cancelled with the device's error.
func TestClosedDeviceCancelsLaunches(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	e := exec.New(dev, exec.WithAllocator(leaktest.Allocator(t)))
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
	level := make([]dag.BufferID, leaves)
	for i := range level {
		level[i] = g.AddValue(fmt.Sprintf("leaf%d", i))
		g.AddKernel(fmt.Sprintf("load%d", i), func(_ context.Context, l dag.Launch) error {
			return l.Out(0).Store(1)
		}, dag.Writes(level[i]))
	}
	internal := 0
	for len(level) > 1 {
		next := make([]dag.BufferID, len(level)/2)
		for i := range next {
			next[i] = g.AddValue(fmt.Sprintf("sum%d", internal))
			g.AddKernel(fmt.Sprintf("add%d", internal), func(_ context.Context, l dag.Launch) error {
				return l.Out(0).Store(l.In(0).Value().(int) + l.In(1).Value().(int))
			}, dag.Reads(level[2*i], level[2*i+1]), dag.Writes(next[i]))
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
	v, err := res.Value(level[0])
	require.NoError(t, err)
	assert.Equal(t, leaves, v)
}
