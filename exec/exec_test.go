package exec_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

func newExecutor(t *testing.T, streams int, opts ...exec.Option) *exec.Executor {
	t.Helper()
	dev, err := cpu.New(cpu.WithStreams(streams))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.Close()) })
	return exec.MustNew(t, dev, append([]exec.Option{exec.WithAllocator(leaktest.Allocator(t))}, opts...)...)
}

// bothTimings runs f with launch timing on (the default) and off: off,
// streams run their launches on the fast path, which must settle
// failures, panics and skips exactly as the general one.
func bothTimings(t *testing.T, f func(t *testing.T, timing exec.Option)) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("timing=%v", on), func(t *testing.T) { f(t, exec.WithLaunchTiming(on)) })
	}
}

func nop(context.Context, dag.Launch) error { return nil }

// A producer pinned to stream 0 and a consumer pinned to stream 1: the
// consumer always sees the producer's bytes, through one event wait.
func TestCrossStreamReadSeesWrite(t *testing.T) {
	e := newExecutor(t, 2)
	for i := range 200 {
		g := dag.New()
		x := g.AddBuffer("x", 8)
		y := g.AddBuffer("y", 8)
		g.AddKernel("produce", func(_ context.Context, l dag.Launch) error {
			binary.LittleEndian.PutUint64(bytesOf(l, x), uint64(i)+1)
			return nil
		}, dag.Writes(x), dag.OnStream(0))
		g.AddKernel("consume", func(_ context.Context, l dag.Launch) error {
			v := binary.LittleEndian.Uint64(bytesOf(l, x))
			binary.LittleEndian.PutUint64(bytesOf(l, y), v*2)
			return nil
		}, dag.Reads(x), dag.Writes(y), dag.OnStream(1))
		res, err := e.Run(t.Context(), g)
		require.NoError(t, err)
		require.NoError(t, res.Err())
		assert.Equal(t, 1, res.Report.Waits)
		b, err := res.Buffer(y)
		require.NoError(t, err)
		require.Equal(t, uint64(i+1)*2, binary.LittleEndian.Uint64(b.Bytes()))
		res.Close()
	}
}

// Waits are inserted only where a hazard crosses streams and no earlier
// wait covers it.
func TestPlanWaits(t *testing.T) {
	cases := []struct {
		name         string
		build        func(g *dag.Graph)
		waits, hazds int
	}{
		{"chain on one stream", func(g *dag.Graph) {
			a, b := g.AddBuffer("a", 1), g.AddBuffer("b", 1)
			g.AddKernel("k1", nop, dag.Writes(a))
			g.AddKernel("k2", nop, dag.Reads(a), dag.Writes(b))
			g.AddKernel("k3", nop, dag.Reads(b))
		}, 0, 0},
		{"fan-out and fan-in over two streams", func(g *dag.Graph) {
			src := g.AddBuffer("src", 1)
			l, r := g.AddBuffer("l", 1), g.AddBuffer("r", 1)
			g.AddKernel("source", nop, dag.Writes(src))
			g.AddKernel("left", nop, dag.Reads(src), dag.Writes(l))
			g.AddKernel("right", nop, dag.Reads(src), dag.Writes(r))
			g.AddKernel("join", nop, dag.Reads(l, r))
		}, 2, 2}, // right waits for source; join waits for right (or left)
		{"transitive wait covers an older hazard", func(g *dag.Graph) {
			a, b := g.AddBuffer("a", 1), g.AddBuffer("b", 1)
			g.AddKernel("w", nop, dag.Writes(a), dag.OnStream(0))
			g.AddKernel("m", nop, dag.Reads(a), dag.Writes(b), dag.OnStream(1))
			// r reads a (hazard with w on stream 0) and b (hazard with m on
			// stream 1); waiting for m also covers w.
			g.AddKernel("r", nop, dag.Reads(a, b), dag.OnStream(2))
		}, 2, 3},
		{"disjoint ranges need no wait", func(g *dag.Graph) {
			a := g.AddBuffer("a", 8)
			g.AddKernel("lo", nop, dag.WritesRange(a, 0, 4), dag.OnStream(0))
			g.AddKernel("hi", nop, dag.WritesRange(a, 4, 4), dag.OnStream(1))
			g.AddKernel("readlo", nop, dag.ReadsRange(a, 0, 4), dag.OnStream(0))
		}, 0, 0},
		{"write-after-write across streams", func(g *dag.Graph) {
			a, d := g.AddBuffer("a", 4), g.AddBuffer("d", 1)
			g.AddKernel("w1", nop, dag.Writes(a, d), dag.OnStream(0))
			g.AddKernel("w2", nop, dag.Reads(d), dag.Writes(a), dag.OnStream(1))
		}, 1, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			e := newExecutor(t, 3)
			g := dag.New()
			c.build(g)
			p, err := e.Plan(g)
			require.NoError(t, err)
			assert.Equal(t, c.waits, p.Waits(), p.String())
			assert.Equal(t, c.hazds, p.Hazards(), p.String())
			res, err := e.Execute(t.Context(), p)
			require.NoError(t, err)
			require.NoError(t, res.Err())
			res.Close()
		})
	}
}

// A plan cannot be edited into an inconsistent state: what its accessors
// return are copies, so a wait that can never fire or a redirected read
// written into them leaves the plan as planned, and it runs to the same
// answer, before and after the edit.
func TestPlanIsOpaque(t *testing.T) {
	e := newExecutor(t, 2)
	g := dag.New()
	src := g.AddBuffer("src", 8)
	l, r := g.AddBuffer("l", 8), g.AddBuffer("r", 8)
	double := func(out dag.BufferID) dag.KernelFunc {
		return func(_ context.Context, l dag.Launch) error {
			binary.LittleEndian.PutUint64(bytesOf(l, out), 2*binary.LittleEndian.Uint64(bytesOf(l, src)))
			return nil
		}
	}
	g.AddKernel("source", putU64(src, 0, 7, nil), dag.Writes(src))
	g.AddKernel("left", double(l), dag.Reads(src), dag.Writes(l))
	g.AddKernel("right", double(r), dag.Reads(src), dag.Writes(r))
	p, err := e.Plan(g)
	require.NoError(t, err)
	before := p.String()
	for i := range p.NumLaunches() {
		launch := p.Launch(i)
		launch.Waits = append(launch.Waits, exec.Wait{Stream: 1, Seq: 1 << 30, Launch: i})
		if len(launch.Reads) > 0 {
			launch.Reads[0].Buffer = 99
		}
		for j := range launch.Deps {
			launch.Deps[j] = -1
		}
	}
	for _, launch := range p.Launches() {
		launch.Writes = nil
	}
	p.Placement().Device[0] = 5
	p.Devices()[0] = topology.GPU(9)
	assert.Equal(t, before, p.String(), "the plan is unchanged")
	res, err := e.Execute(context.Background(), p) // an edit that took would make this hang
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())
	b, err := res.Buffer(r)
	require.NoError(t, err)
	assert.Equal(t, uint64(14), binary.LittleEndian.Uint64(b.Bytes()))
}

// An error and a panic each fail their own launch and skip exactly the
// launches that read what they left unwritten; the rest run.
func TestFailureSkipsExactlyDependents(t *testing.T) {
	for _, mode := range []string{"error", "panic"} {
		t.Run(mode, func(t *testing.T) {
			e := newExecutor(t, 3)
			g := dag.New()
			var bad, good, mid, out, other [3]dag.BufferID
			boom := errors.New("boom")
			for i := range 3 {
				bad[i] = g.AddBuffer(fmt.Sprintf("src%d", i), 8)
				mid[i] = g.AddBuffer(fmt.Sprintf("mid%d", i), 8)
				out[i] = g.AddBuffer(fmt.Sprintf("out%d", i), 8)
				good[i] = g.AddBuffer(fmt.Sprintf("side%d", i), 8)
				other[i] = g.AddBuffer(fmt.Sprintf("sideout%d", i), 8)
				fail := i == 1
				g.AddKernel(fmt.Sprintf("source[%d]", i), func(context.Context, dag.Launch) error {
					if fail && mode == "panic" {
						panic("kaboom")
					}
					if fail {
						return boom
					}
					return nil
				}, dag.Writes(bad[i], good[i]))
				g.AddKernel(fmt.Sprintf("filter[%d]", i), nop, dag.Reads(bad[i]), dag.Writes(mid[i]))
				g.AddKernel(fmt.Sprintf("agg[%d]", i), nop, dag.Reads(mid[i]), dag.Writes(out[i]))
				g.AddKernel(fmt.Sprintf("side[%d]", i), nop, dag.Reads(other[i]))
				g.AddKernel(fmt.Sprintf("sidew[%d]", i), nop, dag.Writes(other[i]))
			}
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			status := map[string]exec.LaunchReport{}
			for _, l := range res.Report.Launches() {
				status[l.Kernel] = l
			}
			root := status["source[1]"]
			require.Equal(t, exec.StatusFailed, root.Status)
			if mode == "panic" {
				assert.ErrorIs(t, root.Err, failgraph.ErrTornDown)
				assert.ErrorContains(t, root.Err, "kaboom")
			} else {
				assert.ErrorIs(t, root.Err, boom)
			}
			for _, k := range []string{"filter[1]", "agg[1]"} {
				assert.Equal(t, exec.StatusSkipped, status[k].Status, k)
				assert.Equal(t, root.Failure, status[k].Failure, k)
			}
			assert.Equal(t, []string{"source[1]"}, status["filter[1]"].Chain)
			assert.Equal(t, []string{"filter[1]", "source[1]"}, status["agg[1]"].Chain)
			assert.Equal(t, 12, res.Report.Count(exec.StatusOK))
			assert.Equal(t, 2, res.Report.Count(exec.StatusSkipped))

			_, err = res.Buffer(out[1])
			var ue *failgraph.UnwrittenError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, root.Failure, ue.Failure)
			assert.Equal(t, []string{"agg[1]", "filter[1]", "source[1]"}, ue.Chain)
			assert.Equal(t, "source[1]", ue.Kernel)
			// The side output of the failed source is tainted too: it left it unwritten.
			_, err = res.Buffer(good[1])
			require.ErrorAs(t, err, &ue)
			for _, i := range []int{0, 2} {
				_, err := res.Buffer(out[i])
				assert.NoError(t, err)
			}
		})
	}
}

// Cancelling ctx stops new launches: those not started are cancelled, and
// Run returns after the running one returned.
func TestCancellation(t *testing.T) {
	e := newExecutor(t, 1)
	g := dag.New()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var prev dag.BufferID = -1
	for i := range 10 {
		b := g.AddBuffer(fmt.Sprintf("b%d", i), 1)
		opts := []dag.KernelOption{dag.Writes(b)}
		if prev >= 0 {
			opts = append(opts, dag.Reads(prev))
		}
		fn := nop
		if i == 3 {
			fn = func(context.Context, dag.Launch) error { cancel(); return nil }
		}
		g.AddKernel(fmt.Sprintf("k%d", i), fn, opts...)
		prev = b
	}
	res, err := e.Run(ctx, g)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, 4, res.Report.Count(exec.StatusOK))
	assert.Equal(t, 6, res.Report.Count(exec.StatusCancelled))
	for _, l := range res.Report.Launches()[4:] {
		assert.ErrorIs(t, l.Err, context.Canceled)
		assert.Equal(t, res.Report.Launches()[4].Failure, l.Failure, "one cancelled failure per run")
	}
	_, err = res.Buffer(prev)
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, res.Err(), "6 cancelled")
}

func TestInvalidGraphIsAnError(t *testing.T) {
	e := newExecutor(t, 1)
	g := dag.New()
	x := g.AddBuffer("x", 1)
	g.AddKernel("k", nop, dag.Reads(x))
	_, err := e.Run(t.Context(), g)
	var ue *dag.NoWriterError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, "x", ue.Buffer)
}

func TestInputsAndBudget(t *testing.T) {
	e := newExecutor(t, 2)
	g := dag.New()
	in := dag.AddValue[int](g, "in", dag.Input())
	out := dag.AddValue[int](g, "out")
	g.AddKernel("double", func(_ context.Context, l dag.Launch) error {
		return dag.Put(l, out, valueOf(l, in)*2)
	}, dag.Reads(in.ID()), dag.Writes(out.ID()))
	res, err := e.Run(t.Context(), g, exec.WithInput(in.ID(), 21))
	require.NoError(t, err)
	v, err := res.Value(out.ID())
	require.NoError(t, err)
	assert.Equal(t, 42, v)
	res.Close()
	_, err = res.Value(99)
	assert.ErrorContains(t, err, "no buffer id 99")
}

// TestOptionErrors checks that New, NewMulti and a run refuse bad options
// with an error naming the option.
func TestOptionErrors(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	defer dev.Close()
	for _, tc := range []struct {
		name string
		opt  exec.Option
		want string
	}{
		{"nil budget", exec.WithBudget(nil), "exec: WithBudget: nil budget"},
		{"nil allocator", exec.WithAllocator(nil), "exec: WithAllocator: nil allocator"},
		{"nil backend", exec.WithBackend(nil), "exec: WithBackend: nil backend"},
		{"unknown placement", exec.WithPlacement(9), "exec: WithPlacement: unknown placement placement(9)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := exec.New(dev, tc.opt)
			assert.EqualError(t, err, tc.want)
			assert.Nil(t, e)
		})
	}
	_, err = exec.NewMulti([]gpu.Device{dev, nil}, nil)
	assert.EqualError(t, err, "exec: device 1 of 2 is nil")
}

// TestRunOptionErrors: a buffer given an input twice fails the run before
// it starts, and both values are released once.
func TestRunOptionErrors(t *testing.T) {
	e := newExecutor(t, 1)
	g := dag.New()
	in := g.AddBuffer("in", 8, dag.Input())
	g.AddKernel("k", nop, dag.Reads(in))
	rel := &released{}
	res, err := e.Run(t.Context(), g, exec.WithInput(in, rel), exec.WithInput(in, rel))
	assert.EqualError(t, err, fmt.Sprintf("exec: WithInput: buffer %v given twice", in))
	assert.Nil(t, res)
	assert.EqualValues(t, 2, rel.n.Load())
}
