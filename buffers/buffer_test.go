package buffers_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"testing/synctest"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// int64s builds an arrow array of vals with mem. The caller owns one
// reference.
func int64s(mem memory.Allocator, vals ...int64) *array.Int64 {
	bld := array.NewInt64Builder(mem)
	defer bld.Release()
	bld.AppendValues(vals, nil)
	return bld.NewInt64Array()
}

// dirty is an allocator that hands out memory full of 0xAA, as a pooled
// or C allocator may, so tests see whether Allocate zeroes it.
type dirty struct{ memory.Allocator }

func (d dirty) Allocate(size int) []byte {
	b := d.Allocator.Allocate(size)
	for i := range b {
		b[i] = 0xAA
	}
	return b
}

func (d dirty) Reallocate(size int, old []byte) []byte {
	n := len(old)
	b := d.Allocator.Reallocate(size, old)
	for i := n; i < len(b); i++ {
		b[i] = 0xAA
	}
	return b
}

func TestAllocate(t *testing.T) {
	const total = 1024
	for _, size := range []int64{0, 1, 63, 100, total} {
		t.Run(fmt.Sprintf("size=%d", size), func(t *testing.T) {
			mem := leaktest.Allocator(t)
			p := buffers.NewDeviceAllocator(topology.GPU(3), dirty{mem}, buffers.NewBudget(total))
			b, err := p.Allocate(t.Context(), 7, "x", size)
			require.NoError(t, err)
			assert.Equal(t, buffers.ID(7), b.ID())
			assert.Equal(t, "x", b.Name())
			assert.Equal(t, size, b.SizeBytes())
			assert.Equal(t, topology.GPU(3), b.Device())
			assert.Nil(t, b.Value())

			bs := b.Bytes()
			if size == 0 {
				assert.Nil(t, bs)
				assert.Zero(t, mem.CurrentAlloc())
			} else {
				require.Len(t, bs, int(size))
				assert.Equal(t, make([]byte, size), bs, "bytes are zeroed")
				assert.GreaterOrEqual(t, int64(mem.CurrentAlloc()), size)
				bs[0], bs[size-1] = 1, 2 // the slice is the buffer's memory
				assert.Equal(t, byte(2), b.Bytes()[size-1])
			}
			assert.Equal(t, size == total, !p.Budget().TryAcquire(1), "budget taken")

			b.Release()
			assert.Nil(t, b.Bytes())
			assert.Zero(t, mem.CurrentAlloc())
		})
	}
}

func TestReleaseIdempotent(t *testing.T) {
	mem := leaktest.Allocator(t)
	budget := buffers.NewBudget(256)
	p := buffers.NewDeviceAllocator(topology.CPU, mem, budget)
	b, err := p.Allocate(t.Context(), 0, "x", 256)
	require.NoError(t, err)
	require.NoError(t, b.Store(int64s(mem, 1, 2, 3)))
	b.Release()
	b.Release()
	assert.Zero(t, mem.CurrentAlloc())
	assert.Nil(t, b.Value())

	// The bytes came back exactly once: the whole budget is free, and not
	// more than it (a double release would panic in the semaphore).
	require.True(t, budget.TryAcquire(256), "budget not returned")
	budget.Release(256)
	require.NoError(t, budget.Acquire(t.Context(), 256))
	budget.Release(256)
	b2, err := p.Allocate(t.Context(), 1, "y", 256)
	require.NoError(t, err)
	b2.Release()
}

func TestAllocateErrors(t *testing.T) {
	mem := leaktest.Allocator(t)
	budget := buffers.NewBudget(100)
	p := buffers.NewDeviceAllocator(topology.GPU(1), mem, budget)

	// Over budget fails at once, even while the budget is fully held
	// (it would wait forever otherwise).
	require.NoError(t, budget.Acquire(t.Context(), 100))
	b, err := p.Allocate(t.Context(), 0, "big", 101)
	assert.Nil(t, b)
	require.ErrorIs(t, err, buffers.ErrOverBudget)
	assert.EqualError(t, err, `buffers: allocate "big" (101 bytes) on gpu1: buffers: 101 bytes requested, budget is 100: buffers: request exceeds the device budget`)
	budget.Release(100)

	b, err = p.Allocate(t.Context(), 0, "neg", -1)
	assert.Nil(t, b)
	require.Error(t, err)
	assert.NotErrorIs(t, err, buffers.ErrOverBudget)
	assert.EqualError(t, err, `buffers: allocate "neg": negative size -1`)

	// Nothing was taken.
	assert.Zero(t, mem.CurrentAlloc())
	assert.True(t, budget.TryAcquire(100))
	budget.Release(100)

	require.ErrorIs(t, budget.Acquire(t.Context(), 101), buffers.ErrOverBudget)
}

func TestAllocateCancelled(t *testing.T) {
	t.Run("while waiting", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			mem := leaktest.Allocator(t)
			budget := buffers.NewBudget(100)
			p := buffers.NewDeviceAllocator(topology.CPU, mem, budget)
			require.NoError(t, budget.Acquire(t.Context(), 100))

			ctx, cancel := context.WithCancel(t.Context())
			type result struct {
				b   *buffers.Buffer
				err error
			}
			done := make(chan result)
			go func() {
				b, err := p.Allocate(ctx, 0, "x", 10)
				done <- result{b, err}
			}()
			synctest.Wait() // the allocation is parked on the budget
			select {
			case r := <-done:
				t.Fatalf("Allocate returned before cancel: %v", r.err)
			default:
			}
			cancel()
			r := <-done
			assert.Nil(t, r.b)
			require.ErrorIs(t, r.err, context.Canceled)
			assert.Contains(t, r.err.Error(), `"x"`)

			// It took nothing and left no waiter queued.
			budget.Release(100)
			assert.True(t, budget.TryAcquire(100))
			budget.Release(100)
			assert.Zero(t, mem.CurrentAlloc())
		})
	})
	t.Run("before the call", func(t *testing.T) {
		mem := leaktest.Allocator(t)
		budget := buffers.NewBudget(100)
		p := buffers.NewDeviceAllocator(topology.CPU, mem, budget)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		b, err := p.Allocate(ctx, 0, "x", 10) // budget free, ctx done: fail
		assert.Nil(t, b)
		require.ErrorIs(t, err, context.Canceled)
		assert.True(t, budget.TryAcquire(100))
		budget.Release(100)
	})
}

func TestStore(t *testing.T) {
	mem := leaktest.Allocator(t)
	p := buffers.NewDeviceAllocator(topology.CPU, mem, nil)
	b, err := p.Allocate(t.Context(), 0, "vals", 0)
	require.NoError(t, err)

	a1 := int64s(mem, 1, 2, 3)
	require.NoError(t, b.Store(a1))
	one := mem.CurrentAlloc()
	require.Positive(t, one)

	// Storing a new value releases the previous one.
	a2 := int64s(mem, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	two := mem.CurrentAlloc() - one
	require.NoError(t, b.Store(a2))
	assert.Equal(t, two, mem.CurrentAlloc(), "the first array is released")
	assert.Same(t, a2, b.Value())

	// A value without Release is kept as is.
	require.NoError(t, b.Store("plain"))
	assert.Zero(t, mem.CurrentAlloc())
	assert.Equal(t, "plain", b.Value())
	require.NoError(t, b.Store(nil))
	assert.Nil(t, b.Value())

	// Release releases the value.
	require.NoError(t, b.Store(int64s(mem, 1)))
	b.Release()
	assert.Zero(t, mem.CurrentAlloc())
	mem.AssertSize(t, 0)
}

func TestStoreIntoReleased(t *testing.T) {
	mem := leaktest.Allocator(t)
	p := buffers.NewDeviceAllocator(topology.CPU, mem, nil)
	b, err := p.Allocate(t.Context(), 0, "gone", 8)
	require.NoError(t, err)
	b.Release()

	err = b.Store(int64s(mem, 1, 2))
	require.ErrorIs(t, err, buffers.ErrReleased)
	assert.EqualError(t, err, `buffers: store into "gone": buffers: buffer released`)
	assert.Zero(t, mem.CurrentAlloc(), "v is released")
	assert.Nil(t, b.Value())
}

// Take hands the buffer's reference to its value to the caller: the
// buffer's Release no longer releases it.
func TestTake(t *testing.T) {
	mem := leaktest.Allocator(t)
	p := buffers.NewDeviceAllocator(topology.CPU, mem, nil)
	b, err := p.Allocate(t.Context(), 0, "vals", 16)
	require.NoError(t, err)
	a := int64s(mem, 1, 2)
	require.NoError(t, b.Store(a))
	assert.Same(t, a, b.Take())
	assert.Nil(t, b.Value())
	assert.Nil(t, b.Take(), "an empty buffer gives nothing")
	b.Release()
	assert.Equal(t, []int64{1, 2}, a.Int64Values(), "Release left the taken value alone")
	a.Release()
	assert.Nil(t, b.Take(), "a released buffer gives nothing")
	mem.AssertSize(t, 0)
}

func TestValueAs(t *testing.T) {
	mem := leaktest.Allocator(t)
	p := buffers.NewDeviceAllocator(topology.CPU, mem, nil)
	b, err := p.Allocate(t.Context(), 0, "col", 0)
	require.NoError(t, err)
	defer b.Release()

	_, err = buffers.ValueAs[string](b)
	assert.EqualError(t, err, `buffers: "col" holds nothing, not string`)
	_, err = buffers.ValueAs[arrow.Array](b)
	assert.EqualError(t, err, `buffers: "col" holds nothing, not arrow.Array`)

	arr := int64s(mem, 1, 2)
	require.NoError(t, b.Store(arr))
	got, err := buffers.ValueAs[*array.Int64](b)
	require.NoError(t, err)
	assert.Same(t, arr, got)
	iface, err := buffers.ValueAs[arrow.Array](b)
	require.NoError(t, err)
	assert.Equal(t, 2, iface.Len())

	s, err := buffers.ValueAs[string](b)
	assert.Empty(t, s)
	assert.EqualError(t, err, `buffers: "col" holds *array.Int64, not string`)
	_, err = buffers.ValueAs[arrow.RecordBatch](b)
	assert.EqualError(t, err, `buffers: "col" holds *array.Int64, not arrow.RecordBatch`)

	require.NoError(t, b.Store(42))
	_, err = buffers.ValueAs[arrow.Array](b)
	assert.EqualError(t, err, `buffers: "col" holds int, not arrow.Array`)
	_, err = buffers.ValueAs[*array.Int64](b)
	assert.EqualError(t, err, `buffers: "col" holds int, not *array.Int64`)
}

func TestBindingOverlaps(t *testing.T) {
	bd := func(id buffers.ID, off, n int64) buffers.Binding {
		return buffers.Binding{Buffer: id, Offset: off, Length: n}
	}
	tests := []struct {
		name string
		a, b buffers.Binding
		want bool
	}{
		{"identical", bd(0, 0, 10), bd(0, 0, 10), true},
		{"partial", bd(0, 0, 10), bd(0, 5, 10), true},
		{"contained", bd(0, 0, 100), bd(0, 40, 20), true},
		{"one byte", bd(0, 0, 10), bd(0, 9, 1), true},
		{"touching", bd(0, 0, 10), bd(0, 10, 10), false},
		{"apart", bd(0, 0, 10), bd(0, 20, 10), false},
		{"other buffer", bd(0, 0, 10), bd(1, 0, 10), false},
		{"empty inside", bd(0, 0, 10), bd(0, 5, 0), false},
		{"empty at start", bd(0, 0, 10), bd(0, 0, 0), false},
		{"both empty", bd(0, 5, 0), bd(0, 5, 0), false},
		{"negative length", bd(0, 0, 10), bd(0, 8, -4), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.a.Overlaps(tt.b), "%v overlaps %v", tt.a, tt.b)
			assert.Equal(t, tt.want, tt.b.Overlaps(tt.a), "%v overlaps %v", tt.b, tt.a)
		})
	}
}

func TestBindingString(t *testing.T) {
	b := buffers.Binding{Buffer: 3, Offset: 16, Length: 32}
	assert.Equal(t, int64(48), b.End())
	assert.Equal(t, "buffer 3 [16:48)", b.String())
}

func TestTryAcquire(t *testing.T) {
	budget := buffers.NewBudget(100)
	assert.Equal(t, int64(100), budget.TotalBytes())
	steps := []struct {
		n    int64
		want bool
	}{
		{60, true},
		{50, false}, // 40 free
		{40, true},
		{1, false}, // full
		{0, true},  // takes nothing
		{-1, true}, // takes nothing
	}
	for _, s := range steps {
		assert.Equal(t, s.want, budget.TryAcquire(s.n), "TryAcquire(%d)", s.n)
	}
	budget.Release(100)
	assert.False(t, budget.TryAcquire(101), "over the whole budget")
	assert.True(t, budget.TryAcquire(100))
	budget.Release(100)
	budget.Release(0) // no-op
	budget.Release(-5)
	assert.True(t, budget.TryAcquire(100))
	budget.Release(100)
}

// TryAcquire never takes bytes a queued waiter is owed.
func TestTryAcquireNoSteal(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		budget := buffers.NewBudget(100)
		require.True(t, budget.TryAcquire(60))
		done := make(chan error)
		go func() { done <- budget.Acquire(t.Context(), 60) }()
		synctest.Wait()
		assert.False(t, budget.TryAcquire(10), "10 bytes are free but a waiter is queued")
		budget.Release(60)
		require.NoError(t, <-done)
		assert.True(t, budget.TryAcquire(40))
		budget.Release(100)
	})
}

func TestDeviceAllocatorDefaults(t *testing.T) {
	p := buffers.NewDeviceAllocator(topology.GPU(2), nil, nil)
	assert.Equal(t, topology.GPU(2), p.Device())
	assert.Equal(t, memory.DefaultAllocator, p.Allocator())
	assert.Equal(t, buffers.DefaultBudgetBytes, p.Budget().TotalBytes())

	mem := leaktest.Allocator(t)
	budget := buffers.NewBudget(10)
	p = buffers.NewDeviceAllocator(topology.CPU, mem, budget)
	assert.Same(t, mem, p.Allocator())
	assert.Same(t, budget, p.Budget())
}

// TestDeviceAllocatorConcurrent has goroutines allocate more than the budget holds
// at once; they wait for each other's releases. Run it under -race.
func TestDeviceAllocatorConcurrent(t *testing.T) {
	const workers, rounds, size = 8, 50, 48
	mem := leaktest.Allocator(t)
	budget := buffers.NewBudget(2 * size)
	p := buffers.NewDeviceAllocator(topology.CPU, mem, budget)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range rounds {
				b, err := p.Allocate(t.Context(), buffers.ID(w), fmt.Sprintf("w%d", w), size)
				if !assert.NoError(t, err) {
					return
				}
				bs := b.Bytes()
				assert.Equal(t, make([]byte, size), bs)
				bs[0] = byte(i)
				b.Release()
			}
		})
	}
	wg.Wait()
	assert.True(t, budget.TryAcquire(2*size))
	budget.Release(2 * size)
}

func TestAllocateValues(t *testing.T) {
	mem := leaktest.Allocator(t)
	pool := buffers.NewDeviceAllocator(topology.CPU, mem, buffers.NewBudget(16))
	bufs := pool.AllocateValues([]buffers.ValueSpec{{ID: 3, Name: "a"}, {ID: 7, Name: "b"}})
	require.Len(t, bufs, 2)
	assert.Equal(t, buffers.ID(7), bufs[1].ID())
	assert.Equal(t, "b", bufs[1].Name())
	assert.Zero(t, bufs[0].SizeBytes())
	assert.Nil(t, bufs[0].Bytes())
	require.NoError(t, bufs[0].Store(42))
	assert.Equal(t, 42, bufs[0].Value())
	bufs[0].Release()
	bufs[0].Release()
	assert.ErrorIs(t, bufs[0].Store(1), buffers.ErrReleased)
	assert.True(t, pool.Budget().TryAcquire(16), "values take no budget")
}
