package gpu_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// newPool is gpu.NewPool for devices a test knows are valid.
func newPool(t *testing.T, devs []topology.Device) *gpu.Pool {
	t.Helper()
	p, err := gpu.NewPool(devs)
	require.NoError(t, err)
	return p
}

func gpus(indices ...int) []topology.Device {
	out := []topology.Device{topology.CPUDevice()}
	for _, i := range indices {
		out = append(out, topology.Device{ID: topology.GPU(i), Name: "test GPU", NUMANode: -1})
	}
	return out
}

func TestPoolCPUOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		devs []topology.Device
	}{
		{"nil", nil},
		{"cpu only", []topology.Device{topology.CPUDevice()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(t, tc.devs)
			assert.Equal(t, 0, p.Capacity())
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // even a done ctx: ErrNoGPU comes first, at once
			l, err := p.Claim(ctx)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, gpu.ErrNoGPU)
			l, ok := p.TryClaim()
			assert.Nil(t, l)
			assert.False(t, ok)
			assert.Equal(t, 0, p.PendingClaimers())
			assert.NotNil(t, p.SnapshotLeases())
			assert.Empty(t, p.SnapshotLeases())
		})
	}
	var zero gpu.Pool
	_, err := zero.Claim(context.Background())
	assert.ErrorIs(t, err, gpu.ErrNoGPU, "the zero Pool is an empty pool")
}

func TestPoolSparseIndicesAndSlotOrder(t *testing.T) {
	devs := gpus(5, 0, 2) // order kept
	p := newPool(t, devs)
	require.Equal(t, 3, p.Capacity())
	ctx := context.Background()
	l0, err := p.Claim(ctx)
	require.NoError(t, err)
	l1, ok := p.TryClaim()
	require.True(t, ok)
	assert.Equal(t, topology.GPU(5), l0.Device().ID, "first free slot is slot 0")
	assert.Equal(t, 1, l1.Slot())
	assert.Equal(t, []gpu.LeaseEntry{
		{Slot: 0, Device: "gpu5", Index: 5, Name: "test GPU", Leased: true},
		{Slot: 1, Device: "gpu0", Index: 0, Name: "test GPU", Leased: true},
		{Slot: 2, Device: "gpu2", Index: 2, Name: "test GPU", Leased: false},
	}, p.SnapshotLeases())
	assert.True(t, l0.Release())
	assert.False(t, l0.Release(), "Release is idempotent")
	assert.False(t, (*gpu.Lease)(nil).Release())
	l2, err := p.Claim(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, l2.Slot(), "the freed slot 0 is reused")
	l3, ok := p.TryClaim()
	require.True(t, ok)
	assert.Equal(t, topology.GPU(2), l3.Device().ID)
	_, ok = p.TryClaim()
	assert.False(t, ok, "all leased")
	for _, l := range []*gpu.Lease{l1, l2, l3} {
		l.Release()
	}
	for _, e := range p.SnapshotLeases() {
		assert.False(t, e.Leased, e.Device)
	}
}

// TestPoolReleaseIdempotentConcurrent: many goroutines release one lease;
// exactly one wins and exactly one permit returns.
func TestPoolReleaseIdempotentConcurrent(t *testing.T) {
	p := newPool(t, gpus(0))
	l, ok := p.TryClaim()
	require.True(t, ok)
	var wins sync.WaitGroup
	var mu sync.Mutex
	n := 0
	for range 32 {
		wins.Go(func() {
			if l.Release() {
				mu.Lock()
				n++
				mu.Unlock()
			}
		})
	}
	wins.Wait()
	assert.Equal(t, 1, n)
	a, ok := p.TryClaim()
	require.True(t, ok)
	_, ok = p.TryClaim()
	assert.False(t, ok, "one permit came back, not 32")
	a.Release()
}

func TestPoolFIFOManyParked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, gpus(3))
		ctx := context.Background()
		hold, err := p.Claim(ctx)
		require.NoError(t, err)
		const n = 50
		var mu sync.Mutex
		var order []int
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				l, err := p.Claim(ctx)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				order = append(order, i)
				mu.Unlock()
				l.Release()
			})
			synctest.Wait() // claimer i is parked before i+1 starts
			assert.Equal(t, i+1, p.PendingClaimers())
		}
		hold.Release()
		wg.Wait()
		want := make([]int, n)
		for i := range want {
			want[i] = i
		}
		assert.Equal(t, want, order, "served in parking order")
		assert.Equal(t, 0, p.PendingClaimers())
	})
}

func TestPoolNoSteal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, gpus(0, 1))
		ctx := context.Background()
		a, _ := p.TryClaim()
		b, _ := p.TryClaim()
		got := make(chan *gpu.Lease)
		go func() {
			l, err := p.Claim(ctx)
			assert.NoError(t, err)
			got <- l
		}()
		synctest.Wait()
		require.Equal(t, 1, p.PendingClaimers())
		a.Release()
		// The permit is owed to the parked claimer: TryClaim cannot take it
		// even though slot 0 is free right now.
		l, ok := p.TryClaim()
		assert.False(t, ok)
		assert.Nil(t, l)
		w := <-got
		assert.Equal(t, topology.GPU(0), w.Device().ID, "the waiter finds the freed slot")
		assert.Equal(t, 0, p.PendingClaimers())
		w.Release()
		b.Release()
	})
}

func TestPoolCancelWhileParked(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := newPool(t, gpus(0))
		hold, _ := p.TryClaim()
		ctx, cancel := context.WithCancel(context.Background())
		errc := make(chan error)
		go func() {
			_, err := p.Claim(ctx)
			errc <- err
		}()
		synctest.Wait()
		// A second claimer behind the cancelled one must still be served.
		second := make(chan *gpu.Lease)
		go func() {
			l, err := p.Claim(context.Background())
			assert.NoError(t, err)
			second <- l
		}()
		synctest.Wait()
		require.Equal(t, 2, p.PendingClaimers())
		cancel()
		err := <-errc
		assert.True(t, errors.Is(err, context.Canceled), "%v", err)
		synctest.Wait()
		assert.Equal(t, 1, p.PendingClaimers(), "the cancelled claim stopped counting")
		hold.Release()
		l := <-second
		assert.Equal(t, 0, p.PendingClaimers())
		l.Release()
		again, ok := p.TryClaim()
		require.True(t, ok, "no permit was lost to the cancelled claim")
		again.Release()
	})
}

func TestPoolClaimStress(t *testing.T) {
	p := newPool(t, gpus(0, 2, 4, 6))
	var inUse [8]int32
	var mu sync.Mutex
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for range 50 {
				l, err := p.Claim(context.Background())
				if !assert.NoError(t, err) {
					return
				}
				i := l.Device().ID.Index
				mu.Lock()
				inUse[i]++
				assert.Equal(t, int32(1), inUse[i], "one lease per GPU")
				mu.Unlock()
				mu.Lock()
				inUse[i]--
				mu.Unlock()
				l.Release()
			}
		})
	}
	wg.Wait()
	assert.Equal(t, 0, p.PendingClaimers())
}

// TestPoolRepeatedDevice: a GPU ID given twice is an error naming it, not
// a silent drop; the CPU device is still skipped.
func TestPoolRepeatedDevice(t *testing.T) {
	for _, tc := range []struct {
		name string
		devs []topology.Device
		want string
	}{
		{"adjacent", gpus(2, 2), "gpu: NewPool: gpu2 given twice (entries 1 and 2)"},
		{"apart", gpus(5, 0, 2, 0), "gpu: NewPool: gpu0 given twice (entries 2 and 4)"},
		{"cpu twice is skipped", append(gpus(1), topology.CPUDevice()), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := gpu.NewPool(tc.devs)
			if tc.want == "" {
				require.NoError(t, err)
				assert.Equal(t, 1, p.Capacity())
				return
			}
			assert.Nil(t, p)
			assert.EqualError(t, err, tc.want)
		})
	}
}

// TestPoolClaimDoneContext: a claim with a context that is already done
// fails with its error even though a GPU is free, and leaves the pool
// unchanged (as semaphore.Weighted.Acquire does).
func TestPoolClaimDoneContext(t *testing.T) {
	for _, tc := range []struct {
		name string
		ctx  func() context.Context
		want error
	}{
		{"cancelled", func() context.Context {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			return ctx
		}, context.Canceled},
		{"deadline passed", func() context.Context {
			ctx, cancel := context.WithDeadline(context.Background(), time.Unix(0, 0))
			t.Cleanup(cancel)
			return ctx
		}, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(t, gpus(0, 1))
			l, err := p.Claim(tc.ctx())
			assert.ErrorIs(t, err, tc.want)
			if !assert.Nil(t, l) {
				l.Release()
			}
			for _, e := range p.SnapshotLeases() {
				assert.False(t, e.Leased, e.Device)
			}
			a, ok := p.TryClaim()
			require.True(t, ok)
			b, ok := p.TryClaim()
			require.True(t, ok, "both permits are still there")
			a.Release()
			b.Release()
		})
	}
}
