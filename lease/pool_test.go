package lease_test

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
	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"
)

// newPool is lease.NewPool for devices a test knows are valid.
func newPool(t *testing.T, devs []topology.DeviceFacts, opts ...lease.Option) *lease.Pool {
	t.Helper()
	p, err := lease.NewPool(devs, opts...)
	require.NoError(t, err)
	return p
}

func gpus(indices ...int) []topology.DeviceFacts {
	out := []topology.DeviceFacts{topology.CPUDevice()}
	for _, i := range indices {
		out = append(out, topology.DeviceFacts{ID: topology.GPU(i), Name: "test GPU", NUMANode: -1})
	}
	return out
}

func TestPoolCPUOnly(t *testing.T) {
	for _, tc := range []struct {
		name string
		devs []topology.DeviceFacts
	}{
		{"nil", nil},
		{"cpu only", []topology.DeviceFacts{topology.CPUDevice()}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPool(t, tc.devs)
			assert.Equal(t, 0, p.Capacity())
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // even a done ctx: ErrNoGPU comes first, at once
			l, err := p.Claim(ctx)
			assert.Nil(t, l)
			assert.ErrorIs(t, err, lease.ErrNoGPU)
			l, ok := p.TryClaim()
			assert.Nil(t, l)
			assert.False(t, ok)
			assert.Equal(t, 0, p.PendingClaimers())
			assert.NotNil(t, p.SnapshotLeases())
			assert.Empty(t, p.SnapshotLeases())
		})
	}
	var zero lease.Pool
	_, err := zero.Claim(context.Background())
	assert.ErrorIs(t, err, lease.ErrNoGPU, "the zero Pool is an empty pool")
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
	assert.Equal(t, []lease.SlotState{
		{Slot: 0, Device: "gpu5", Index: 5, Name: "test GPU", Leased: true},
		{Slot: 1, Device: "gpu0", Index: 0, Name: "test GPU", Leased: true},
		{Slot: 2, Device: "gpu2", Index: 2, Name: "test GPU", Leased: false},
	}, p.SnapshotLeases())
	assert.True(t, l0.Release())
	assert.False(t, l0.Release(), "Release is idempotent")
	assert.False(t, (*lease.Claim)(nil).Release())
	l2, err := p.Claim(ctx)
	require.NoError(t, err)
	assert.Equal(t, 0, l2.Slot(), "the freed slot 0 is reused")
	l3, ok := p.TryClaim()
	require.True(t, ok)
	assert.Equal(t, topology.GPU(2), l3.Device().ID)
	_, ok = p.TryClaim()
	assert.False(t, ok, "all leased")
	for _, l := range []*lease.Claim{l1, l2, l3} {
		l.Release()
	}
	for _, e := range p.SnapshotLeases() {
		assert.False(t, e.Leased, e.Device)
	}
}

// TestPoolLeasesOpenCLDevices: OpenCL devices get slots beside GPUs, in
// the order given, with their vendor; only the CPU device is skipped.
func TestPoolLeasesOpenCLDevices(t *testing.T) {
	devs := append(gpus(1), topology.DeviceFacts{ID: topology.OpenCL(0), Name: "cl GPU", Vendor: "Some Vendor", NUMANode: -1})
	p := newPool(t, devs)
	require.Equal(t, 2, p.Capacity())
	assert.Equal(t, []lease.SlotState{
		{Slot: 0, Device: "gpu1", Index: 1, Name: "test GPU"},
		{Slot: 1, Device: "opencl0", Index: 0, Name: "cl GPU", Vendor: "Some Vendor"},
	}, p.SnapshotLeases())
	_, err := lease.NewPool(append(devs, devs[2]))
	assert.EqualError(t, err, "lease: NewPool: opencl0 given twice (entries 2 and 3)")
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
		got := make(chan *lease.Claim)
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
		second := make(chan *lease.Claim)
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

// TestPoolOptionErrors: a pool refuses a nil health check and the options
// that only a Backend takes, naming them.
func TestPoolOptionErrors(t *testing.T) {
	p, err := lease.NewPool(gpus(0), lease.WithHealthCheck(nil))
	assert.Nil(t, p)
	assert.EqualError(t, err, "lease: WithHealthCheck: nil check")
	p, err = lease.NewPool(gpus(0), lease.WithHealthCheck(func(topology.DeviceFacts) error { return nil }), lease.WithStreams(2))
	assert.Nil(t, p)
	assert.EqualError(t, err, "lease: NewPool: WithStreams configures a Backend, not a Pool")
}

// TestPoolRepeatedDevice: a GPU ID given twice is an error naming it, not
// a silent drop; the CPU device is still skipped.
func TestPoolRepeatedDevice(t *testing.T) {
	for _, tc := range []struct {
		name string
		devs []topology.DeviceFacts
		want string
	}{
		{"adjacent", gpus(2, 2), "lease: NewPool: gpu2 given twice (entries 1 and 2)"},
		{"apart", gpus(5, 0, 2, 0), "lease: NewPool: gpu0 given twice (entries 2 and 4)"},
		{"cpu twice is skipped", append(gpus(1), topology.CPUDevice()), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := lease.NewPool(tc.devs)
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

// lostSet is a health check whose lost GPUs a test sets.
type lostSet struct {
	mu   sync.Mutex
	lost map[topology.DeviceID]bool
}

func (s *lostSet) lose(ids ...topology.DeviceID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost == nil {
		s.lost = map[topology.DeviceID]bool{}
	}
	for _, id := range ids {
		s.lost[id] = true
	}
}

func (s *lostSet) check(d topology.DeviceFacts) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost[d.ID] {
		return errors.New("fell off the bus")
	}
	return nil
}

// TestPoolNeverLeasesLostGPU: a GPU the health check reports gone is
// retired at the claim that finds it, never leased again, and named in
// SnapshotLeases and Lost; the claim gets another GPU.
func TestPoolNeverLeasesLostGPU(t *testing.T) {
	var s lostSet
	devs := gpus(0, 1, 2)
	devs[2].UUID = "GPU-0000-lost" // devs[0] is the CPU device
	p := newPool(t, devs, lease.WithHealthCheck(s.check))
	s.lose(topology.GPU(0))
	for round := range 3 {
		a, err := p.Claim(context.Background())
		require.NoError(t, err, "round %d", round)
		b, ok := p.TryClaim()
		require.True(t, ok, "round %d", round)
		assert.Equal(t, []topology.DeviceID{topology.GPU(1), topology.GPU(2)}, []topology.DeviceID{a.Device().ID, b.Device().ID}, "round %d", round)
		_, ok = p.TryClaim()
		assert.False(t, ok, "round %d: the lost GPU is not leased", round)
		a.Release()
		b.Release()
	}
	assert.Equal(t, []lease.SlotState{
		{Slot: 0, Device: "gpu0", Index: 0, Name: "test GPU", Lost: "gpu: gpu0 is lost: fell off the bus"},
		{Slot: 1, Device: "gpu1", Index: 1, Name: "test GPU"},
		{Slot: 2, Device: "gpu2", Index: 2, Name: "test GPU"},
	}, p.SnapshotLeases())
	require.Len(t, p.Lost(), 1)
	lost := p.Lost()[0]
	assert.ErrorIs(t, &lost, gpu.ErrDeviceLost)
	assert.Equal(t, topology.GPU(0), lost.Device)

	// Losing gpu1 (which has a UUID) too leaves gpu2 alone.
	s.lose(topology.GPU(1))
	for range 3 {
		l, err := p.Claim(context.Background())
		require.NoError(t, err)
		assert.Equal(t, topology.GPU(2), l.Device().ID)
		l.Release()
	}
	assert.Equal(t, "gpu: gpu1 (GPU-0000-lost) is lost: fell off the bus", p.SnapshotLeases()[1].Lost)
}

// TestPoolAllLost: when the last GPU is found lost, the claim that found
// it and every claim parked behind it fail with ErrNoGPU and each GPU's
// LostError, and later claims fail at once; nothing hangs.
func TestPoolAllLost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var s lostSet
		p := newPool(t, gpus(4), lease.WithHealthCheck(s.check))
		hold, err := p.Claim(context.Background())
		require.NoError(t, err)
		errs := make(chan error, 3)
		for range 3 {
			go func() {
				l, err := p.Claim(context.Background())
				if l != nil {
					l.Release()
				}
				errs <- err
			}()
		}
		synctest.Wait()
		require.Equal(t, 3, p.PendingClaimers())
		s.lose(topology.GPU(4))
		hold.Release()
		for range 3 {
			err := <-errs
			assert.ErrorIs(t, err, lease.ErrNoGPU)
			assert.ErrorIs(t, err, gpu.ErrDeviceLost)
			var le *gpu.LostError
			require.ErrorAs(t, err, &le)
			assert.Equal(t, topology.GPU(4), le.Device)
			assert.EqualError(t, err, "lease: no GPU left: all 1 GPUs of the pool are lost: gpu4 is lost: fell off the bus")
		}
		assert.Equal(t, 0, p.PendingClaimers())
		_, err = p.Claim(context.Background())
		assert.ErrorIs(t, err, lease.ErrNoGPU, "at once")
		_, ok := p.TryClaim()
		assert.False(t, ok)
	})
}

// TestPoolHealthCheckStress: claimers race while GPUs are lost one by
// one; no lost GPU is leased after it was found lost, one lease per GPU
// holds throughout, and the last claims fail with ErrNoGPU.
func TestPoolHealthCheckStress(t *testing.T) {
	var s lostSet
	p := newPool(t, gpus(0, 1, 2, 3), lease.WithHealthCheck(s.check))
	var mu sync.Mutex
	inUse := map[topology.DeviceID]int{}
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			for i := range 200 {
				if w == 0 && i%50 == 49 {
					s.lose(topology.GPU(i / 50))
				}
				l, err := p.Claim(context.Background())
				if err != nil {
					assert.ErrorIs(t, err, lease.ErrNoGPU)
					return
				}
				id := l.Device().ID
				mu.Lock()
				inUse[id]++
				assert.Equal(t, 1, inUse[id], "one lease per GPU")
				inUse[id]--
				mu.Unlock()
				l.Release()
			}
		})
	}
	wg.Wait()
	s.lose(topology.GPU(0), topology.GPU(1), topology.GPU(2), topology.GPU(3))
	for range 5 { // find any GPU not yet found lost
		if l, err := p.Claim(context.Background()); err == nil {
			l.Release()
		}
	}
	_, err := p.Claim(context.Background())
	assert.ErrorIs(t, err, lease.ErrNoGPU)
	assert.Len(t, p.Lost(), 4)
	assert.Equal(t, 0, p.PendingClaimers())
}
