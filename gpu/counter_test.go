package gpu_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
)

// waitParked yields until n waiters are parked on c. Parking is what the
// test is about, so it polls the counter's own state, not a clock.
func waitParked(t *testing.T, c *gpu.Counter, n int) {
	t.Helper()
	for c.ParkedForTest() != n {
		runtime.Gosched()
	}
}

func TestCounterZeroValue(t *testing.T) {
	var c gpu.Counter
	assert.Equal(t, uint64(0), c.Load())
	assert.True(t, c.Event(0).Done(), "target 0 has always been reached")
	assert.False(t, c.Event(1).Done())
	v, err := c.WaitFor(context.Background(), 0)
	require.NoError(t, err)
	assert.Equal(t, uint64(0), v)

	c.Publish(3)
	assert.Equal(t, uint64(3), c.Load())
	for _, n := range []uint64{0, 1, 3} {
		assert.True(t, c.Event(n).Done(), "n=%d", n)
	}
	assert.False(t, c.Event(4).Done())
	assert.Equal(t, "counter event @ 4", fmt.Sprint(c.Event(4)))
}

// A fired event returns nil even when ctx is done; an unfired one returns
// ctx's error with the count it saw.
func TestCounterWaitDoneCtx(t *testing.T) {
	var c gpu.Counter
	c.Publish(2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name string
		n    uint64
		err  error
	}{
		{"reached", 2, nil},
		{"below", 1, nil},
		{"not reached", 3, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v, err := c.WaitFor(ctx, tc.n)
			assert.Equal(t, uint64(2), v)
			if tc.err == nil {
				require.NoError(t, err)
				require.NoError(t, c.Event(tc.n).Wait(ctx))
			} else {
				require.ErrorIs(t, err, tc.err)
				require.ErrorIs(t, c.Event(tc.n).Wait(ctx), tc.err)
			}
		})
	}
	assert.Equal(t, 0, c.ParkedForTest(), "a wait given up leaves nothing registered")
}

// A parked wait gives up when its ctx is done, and leaves no registration
// behind; a later Publish still wakes the other waiters.
func TestCounterParkedWaitHonoursCtx(t *testing.T) {
	var c gpu.Counter
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		v   uint64
		err error
	}
	gaveUp, woken := make(chan result, 1), make(chan result, 1)
	go func() {
		v, err := c.WaitFor(ctx, 5)
		gaveUp <- result{v, err}
	}()
	go func() {
		v, err := c.WaitFor(context.Background(), 7)
		woken <- result{v, err}
	}()
	waitParked(t, &c, 2)
	c.Publish(1) // below both targets: wakes nobody
	cancel()
	r := <-gaveUp
	require.ErrorIs(t, r.err, context.Canceled)
	assert.Less(t, r.v, uint64(5))
	waitParked(t, &c, 1)
	c.Publish(7)
	r = <-woken
	require.NoError(t, r.err)
	assert.Equal(t, uint64(7), r.v)
	assert.Equal(t, 0, c.ParkedForTest())
}

// The largest target parks like any other and is woken by the one
// Publish that reaches it.
func TestCounterMaxTarget(t *testing.T) {
	var c gpu.Counter
	woken := make(chan error, 1)
	go func() {
		_, err := c.WaitFor(context.Background(), math.MaxUint64)
		woken <- err
	}()
	waitParked(t, &c, 1)
	c.Publish(math.MaxUint64 - 1)
	assert.Equal(t, 1, c.ParkedForTest(), "one below the target wakes nobody")
	c.Publish(math.MaxUint64)
	require.NoError(t, <-woken)
	assert.Equal(t, 0, c.ParkedForTest())
}

// Waiters on many targets are each woken once the count reaches theirs,
// and see what the publisher wrote before publishing (-race checks the
// happens-before).
func TestCounterPublishWakesWaiters(t *testing.T) {
	tests := []struct {
		name    string
		waiters int
		steps   uint64 // counts published: 1..steps
	}{
		{"one waiter", 1, 1},
		{"one step many waiters", 16, 1},
		{"many steps", 16, 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var c gpu.Counter
			data := make([]uint64, tc.steps+1) // data[k] written before Publish(k)
			var wg sync.WaitGroup
			errs := make([]error, tc.waiters)
			for w := range tc.waiters {
				target := 1 + uint64(w)%tc.steps
				wg.Go(func() {
					v, err := c.WaitFor(context.Background(), target)
					switch {
					case err != nil:
						errs[w] = err
					case v < target:
						errs[w] = fmt.Errorf("waiter %d: woken at %d, below its target %d", w, v, target)
					case data[target] != target:
						errs[w] = fmt.Errorf("waiter %d: data[%d] = %d before its publish", w, target, data[target])
					}
				})
			}
			for k := uint64(1); k <= tc.steps; k++ {
				data[k] = k
				c.Publish(k)
			}
			wg.Wait()
			for _, err := range errs {
				assert.NoError(t, err)
			}
			assert.Equal(t, 0, c.ParkedForTest())
		})
	}
}

// Random waiters, some with ctxs cancelled at random points, against a
// publisher: a wait returns nil exactly when the count reached its target
// (or ctx was never cancelled), and an error only when its ctx was
// cancelled while the target was out of reach.
func TestCounterRandomCancel(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		rng := rand.New(rand.NewPCG(seed, seed))
		const steps = 50
		var c gpu.Counter
		n := 1 + rng.IntN(12)
		type waiter struct {
			target uint64
			cancel context.CancelFunc // nil: never cancelled
			ctx    context.Context
			v      uint64
			err    error
		}
		ws := make([]waiter, n)
		for i := range ws {
			ws[i].target = 1 + rng.Uint64N(steps+10) // some beyond the last count
			ws[i].ctx = context.Background()
			if ws[i].target > steps || rng.IntN(2) == 0 {
				ws[i].ctx, ws[i].cancel = context.WithCancel(context.Background())
			}
		}
		cancelAt := make([]uint64, n) // the count after which waiter i's ctx is cancelled
		for i := range cancelAt {
			cancelAt[i] = rng.Uint64N(steps + 1)
		}
		var wg sync.WaitGroup
		for i := range ws {
			w := &ws[i]
			wg.Go(func() { w.v, w.err = c.WaitFor(w.ctx, w.target) })
		}
		for k := uint64(0); k <= steps; k++ {
			if k > 0 {
				c.Publish(k)
			}
			for i := range ws {
				if ws[i].cancel != nil && cancelAt[i] == k {
					ws[i].cancel()
				}
			}
		}
		wg.Wait()
		for i, w := range ws {
			if w.err != nil {
				assert.ErrorIs(t, w.err, context.Canceled, "seed %d waiter %d", seed, i)
				assert.NotNil(t, w.cancel, "seed %d waiter %d: failed without a cancel", seed, i)
				assert.Less(t, w.v, w.target, "seed %d waiter %d: an error with the target reached", seed, i)
				assert.Less(t, cancelAt[i], w.target, "seed %d waiter %d: cancelled after its target was published, yet failed", seed, i)
				continue
			}
			assert.GreaterOrEqual(t, w.v, w.target, "seed %d waiter %d", seed, i)
		}
		for i := range ws {
			if ws[i].cancel != nil {
				ws[i].cancel()
			}
		}
		assert.Equal(t, 0, c.ParkedForTest(), "seed %d", seed)
	}
}

// Counters are a cache line each, and the satisfied wait, the Publish
// nobody waits for and a Load allocate nothing.
func TestCounterCosts(t *testing.T) {
	cs := make([]gpu.Counter, 4)
	var c gpu.Counter
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		c.Publish(c.Load() + 1)
		_, _ = c.WaitFor(ctx, 1)
		_ = cs[1].Load()
	})
	assert.Zero(t, allocs)
	e := c.Event(1)
	allocs = testing.AllocsPerRun(100, func() {
		_ = e.Done()
		_ = e.Wait(ctx)
	})
	assert.Zero(t, allocs)
}

// BenchmarkCounter: the satisfied wait (one load), a Publish with nobody
// parked, and a ping-pong between two goroutines through two counters
// (each handoff a wait that spins, yields or parks) beside the same
// ping-pong over unbuffered channels.
func BenchmarkCounter(b *testing.B) {
	ctx := context.Background()
	b.Run("op=satisfied", func(b *testing.B) {
		var c gpu.Counter
		c.Publish(1)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := c.WaitFor(ctx, 1); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("op=publish", func(b *testing.B) {
		var c gpu.Counter
		n := uint64(0)
		b.ReportAllocs()
		for b.Loop() {
			n++
			c.Publish(n)
		}
	})
	const rounds = 100
	b.Run("impl=counter/pingpong", func(b *testing.B) {
		var ping, pong gpu.Counter
		done := make(chan struct{})
		go func() {
			defer close(done)
			for k := uint64(1); ; k++ {
				if _, err := ping.WaitFor(ctx, k); err != nil || ping.Load() == ^uint64(0) {
					return
				}
				pong.Publish(k)
			}
		}()
		k := uint64(0)
		b.ReportAllocs()
		for b.Loop() {
			for range rounds {
				k++
				ping.Publish(k)
				if _, err := pong.WaitFor(ctx, k); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rounds*2), "ns/handoff")
		ping.Publish(^uint64(0))
		<-done
	})
	b.Run("impl=chan/pingpong", func(b *testing.B) {
		ping, pong := make(chan struct{}), make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range ping {
				pong <- struct{}{}
			}
		}()
		b.ReportAllocs()
		for b.Loop() {
			for range rounds {
				ping <- struct{}{}
				<-pong
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rounds*2), "ns/handoff")
		close(ping)
		<-done
	})
}
