package exec

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/gpu/cpu"
)

// A wait that can never be satisfied (a plan edited so that a launch
// waits for more launches than its source stream has) gives up when ctx
// is done: Execute returns, the launches left are cancelled with ctx's
// error, and Result.Err carries it.
func TestUnsatisfiableWaitHonoursCtx(t *testing.T) {
	for _, timing := range []bool{true, false} {
		t.Run(map[bool]string{true: "timing", false: "no timing"}[timing], func(t *testing.T) {
			dev, err := cpu.New(cpu.WithStreams(2))
			require.NoError(t, err)
			defer dev.Close()
			e := MustNew(t, dev, WithLaunchTiming(timing))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			g := dag.New()
			x, y, z := dag.AddValue[int](g, "x"), dag.AddValue[int](g, "y"), dag.AddValue[int](g, "z")
			g.AddKernel("produce", func(_ context.Context, l dag.Launch) error { return dag.Put(l, x, 1) }, dag.Writes(x.ID()), dag.OnStream(0))
			g.AddKernel("consume", func(_ context.Context, l dag.Launch) error { return dag.Put(l, y, 2) },
				dag.Reads(x.ID()), dag.Writes(y.ID()), dag.OnStream(1))
			g.AddKernel("after", func(_ context.Context, l dag.Launch) error { return dag.Put(l, z, 3) },
				dag.Reads(y.ID()), dag.Writes(z.ID()), dag.OnStream(1))
			g.AddKernel("cancel", func(context.Context, dag.Launch) error { cancel(); return nil }, dag.Reads(x.ID()), dag.OnStream(0))
			p, err := e.Plan(g)
			require.NoError(t, err)
			var edited bool
			for i := range p.launches {
				if p.launches[i].Name == "consume" {
					require.Len(t, p.launches[i].Waits, 1)
					p.launches[i].Waits[0].Seq = 1000 // stream 0 never gets there
					edited = true
				}
			}
			require.True(t, edited)

			done := make(chan struct{})
			var res *Result
			go func() {
				defer close(done)
				res, err = e.Execute(ctx, p)
			}()
			select {
			case <-done:
			case <-time.After(time.Minute): // a hang guard: a correct run returns at once
				t.Fatal("Execute hangs on a wait that never fires")
			}
			require.NoError(t, err)
			defer res.Close()
			got := map[string]Status{}
			for _, l := range res.Report.Launches() {
				got[l.Kernel] = l.Status
				if l.Status == StatusCancelled {
					assert.ErrorIs(t, l.Err, context.Canceled, l.Kernel)
				}
			}
			assert.Equal(t, map[string]Status{"produce": StatusOK, "cancel": StatusOK,
				"consume": StatusCancelled, "after": StatusCancelled}, got)
			assert.ErrorIs(t, res.Err(), context.Canceled)
			_, err = res.Value(z.ID())
			assert.ErrorIs(t, err, context.Canceled)
		})
	}
}

// nested tells a nested run by its ctx alone: the marker of a run whose
// launches are going, carried by the kernel's ctx and by any ctx derived
// from it (context.WithoutCancel keeps values, so it stays nested).
func TestNestedFromCtx(t *testing.T) {
	assert.False(t, nested(context.Background()), "no marker")
	r := &run{}
	ctx := context.WithValue(context.Background(), runKey{}, r)
	assert.False(t, nested(ctx), "the marker of a run whose launches are not going")
	r.running.Store(true)
	assert.True(t, nested(ctx))
	derived, cancel := context.WithCancel(ctx)
	defer cancel()
	assert.True(t, nested(derived), "a ctx derived from the kernel's")
	assert.True(t, nested(context.WithoutCancel(ctx)), "a ctx detached from the kernel's cancellation")
	r.running.Store(false)
	assert.False(t, nested(derived), "the marker of a run that has finished")
}

// A stream's progress in a run is its device's count: a kernel on one
// stream that waits for another stream to settle its launches sees their
// writes; a wait not reached honours its ctx; n = 0 is reached.
func TestProgressIsTheDevices(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	defer dev.Close()
	e := MustNew(t, dev)
	g := dag.New()
	a, b, seen := dag.AddValue[int](g, "a"), dag.AddValue[int](g, "b"), dag.AddValue[[2]Status](g, "seen")
	g.AddKernel("writeA", func(_ context.Context, l dag.Launch) error { return dag.Put(l, a, 1) }, dag.Writes(a.ID()), dag.OnStream(1))
	g.AddKernel("writeB", func(_ context.Context, l dag.Launch) error { return dag.Put(l, b, 2) }, dag.Writes(b.ID()), dag.OnStream(1))
	g.AddKernel("watch", func(ctx context.Context, l dag.Launch) error {
		r := ctx.Value(runKey{}).(*run)
		if r.src[1].c == nil || r.runs[1].count != r.src[1].c {
			return errors.New("stream 1's list is not on its device")
		}
		if n, err := r.awaitProgress(ctx, 1, 0); n != 0 && n != 1 && n != 2 || err != nil {
			return fmt.Errorf("a wait for 0 launches returned %d, %v", n, err)
		}
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := r.awaitProgress(cctx, 1, 3); !errors.Is(err, context.Canceled) {
			return fmt.Errorf("a wait past the stream's launches under a cancelled ctx returned %v", err)
		}
		if n, err := r.awaitProgress(ctx, 1, 2); n < 2 || err != nil {
			return fmt.Errorf("a wait for stream 1's 2 launches returned %d, %v", n, err)
		}
		// Stream 1's launches have settled: their statuses are in.
		var st [2]Status
		for i := range r.plan.launches {
			switch r.plan.launches[i].Name {
			case "writeA":
				st[0] = r.out.get(i)
			case "writeB":
				st[1] = r.out.get(i)
			}
		}
		return dag.Put(l, seen, st)
	}, dag.Writes(seen.ID()), dag.OnStream(0))
	p, err := e.Plan(g)
	require.NoError(t, err)
	res, err := e.Execute(t.Context(), p)
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())
	got, err := res.Value(seen.ID())
	require.NoError(t, err)
	assert.Equal(t, [2]Status{StatusOK, StatusOK}, got)
}
