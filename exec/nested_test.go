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
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
)

// fanInGraph: two sources on different streams and a sum that waits for
// both; it returns the graph and the sum's buffer (a+b = 5).
func fanInGraph() (*dag.Graph, dag.BufferID) {
	g := dag.New()
	a, b, sum := dag.AddValue[int](g, "a"), dag.AddValue[int](g, "b"), dag.AddValue[int](g, "sum")
	g.AddKernel("make a", func(_ context.Context, l dag.Launch) error { return dag.Put(l, a, 2) }, dag.Writes(a.ID()), dag.OnStream(0))
	g.AddKernel("make b", func(_ context.Context, l dag.Launch) error { return dag.Put(l, b, 3) }, dag.Writes(b.ID()), dag.OnStream(1))
	g.AddKernel("add", func(_ context.Context, l dag.Launch) error {
		return dag.Put(l, sum, valueOf(l, a)+valueOf(l, b))
	}, dag.Reads(a.ID(), b.ID()), dag.Writes(sum.ID()), dag.OnStream(0))
	return g, sum.ID()
}

// A kernel that runs another graph on the same device under its ctx, or a
// ctx derived from it, from its goroutine or another: the nested run does
// not queue behind the kernel that waits for it, and the device closes
// afterwards.
func TestKernelRunsGraphOnSameDevice(t *testing.T) {
	ctxs := []struct {
		name  string
		ctx   func(kernel context.Context) (context.Context, context.CancelFunc)
		spawn bool // the nested run is started by a goroutine the kernel waits for
	}{
		{"kernel's ctx", func(k context.Context) (context.Context, context.CancelFunc) { return k, func() {} }, false},
		{"derived ctx with deadline", func(k context.Context) (context.Context, context.CancelFunc) {
			return context.WithTimeout(k, 3*time.Second)
		}, false},
		{"derived ctx without cancel", func(k context.Context) (context.Context, context.CancelFunc) {
			return context.WithoutCancel(k), func() {}
		}, false},
		{"kernel's ctx from another goroutine", func(k context.Context) (context.Context, context.CancelFunc) { return k, func() {} }, true},
	}
	for _, streams := range []int{1, 2, 4} {
		for _, c := range ctxs {
			t.Run(fmt.Sprintf("streams=%d/%s", streams, c.name), func(t *testing.T) {
				dev, err := cpu.New(cpu.WithStreams(streams))
				require.NoError(t, err)
				e := exec.MustNew(t, dev, exec.WithAllocator(leaktest.Allocator(t)))
				inner, sum := fanInGraph()
				outer := dag.New()
				out := dag.AddValue[any](outer, "out")
				outer.AddKernel("outer", func(kctx context.Context, l dag.Launch) error {
					ctx, cancel := c.ctx(kctx)
					defer cancel()
					var res *exec.Result
					var err error
					if c.spawn {
						done := make(chan struct{})
						go func() {
							defer close(done)
							res, err = e.Run(ctx, inner)
						}()
						<-done
					} else {
						res, err = e.Run(ctx, inner)
					}
					if err != nil {
						return err
					}
					defer res.Close()
					if err := res.Err(); err != nil {
						return err
					}
					v, err := res.Value(sum)
					if err != nil {
						return err
					}
					return dag.Put(l, out, v)
				}, dag.Writes(out.ID()))
				var res *exec.Result
				noHang(t, "the outer run", func() { res, err = e.Run(t.Context(), outer) })
				require.NoError(t, err)
				require.NoError(t, res.Err())
				v, err := res.Value(out.ID())
				require.NoError(t, err)
				assert.Equal(t, 5, v)
				res.Close()
				noHang(t, "Device.Close", func() { require.NoError(t, dev.Close()) })
			})
		}
	}
}

// A run whose stream is busy with another run's kernel returns once its
// ctx is done, its launches cancelled, without waiting for the stream.
func TestExecuteHonoursCtxWhileQueued(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	defer dev.Close()
	e := exec.MustNew(t, dev, exec.WithAllocator(leaktest.Allocator(t)))
	started, release := make(chan struct{}), make(chan struct{})
	busy := dag.New()
	busy.AddKernel("busy", func(context.Context, dag.Launch) error {
		close(started)
		<-release
		return nil
	})
	busyDone := make(chan error, 1)
	go func() {
		res, err := e.Run(context.Background(), busy)
		if err == nil {
			err = res.Err()
			res.Close()
		}
		busyDone <- err
	}()
	<-started

	g, sum := fanInGraph()
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var res *exec.Result
	noHang(t, "Execute behind a busy stream", func() { res, err = e.Run(ctx, g) })
	close(release)
	require.NoError(t, <-busyDone)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, 3, res.Report.Count(exec.StatusCancelled))
	assert.ErrorIs(t, res.Err(), context.Canceled)
	_, err = res.Value(sum)
	assert.ErrorIs(t, err, context.Canceled)
}

// A nested run cannot wait for budget that the graph running its kernel
// may hold: it gets an error at once. A run the kernel starts under a ctx
// without its run's marker is an independent run: it waits for the budget
// as any run does, here until its ctx (cancelled already) ends.
func TestNestedRunDoesNotWaitForBudget(t *testing.T) {
	for _, c := range []struct {
		name string
		ctx  func(kernel context.Context) context.Context
		want string
		is   error
	}{
		{"kernel's ctx", func(k context.Context) context.Context { return k },
			"exec: reserve 8 bytes of buffers on cpu: a graph run from inside a kernel cannot wait for budget (8 of 1024 bytes)", nil},
		{"unrelated ctx", func(context.Context) context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, "exec: reserve 8 bytes of buffers on cpu: context canceled", context.Canceled},
	} {
		t.Run(c.name, func(t *testing.T) {
			dev, err := cpu.New(cpu.WithStreams(2))
			require.NoError(t, err)
			defer dev.Close()
			e := exec.MustNew(t, dev, exec.WithAllocator(leaktest.Allocator(t)), exec.WithBudget(buffers.NewBudget(1024)))
			inner := dag.New()
			small := inner.AddBuffer("small", 8)
			inner.AddKernel("fill", nop, dag.Writes(small))
			outer := dag.New()
			all := outer.AddBuffer("all", 1024)
			var nestedErr error
			outer.AddKernel("outer", func(kctx context.Context, _ dag.Launch) error {
				res, err := e.Run(c.ctx(kctx), inner)
				if err == nil {
					res.Close()
				}
				nestedErr = err
				return nil
			}, dag.Writes(all))
			var res *exec.Result
			noHang(t, "the outer run", func() { res, err = e.Run(t.Context(), outer) })
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			assert.EqualError(t, nestedErr, c.want)
			if c.is != nil {
				assert.ErrorIs(t, nestedErr, c.is)
			}
		})
	}
}
