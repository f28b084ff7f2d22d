package buffers

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/semaphore"

	"github.com/streamdag/streamdag/topology"
)

// ID identifies a buffer within one pipeline (the dag assigns them densely
// from 0).
type ID int64

// Buffer is a named region of memory on one device. SizeBytes bytes are
// allocated from the owning DeviceAllocator when it is created (zero for a
// buffer that only holds a Go value); the buffer may additionally hold one
// Go value (see Store). A Buffer is not safe for concurrent mutation: the
// executor orders its writers and readers by streams and events.
type Buffer struct {
	id     ID
	name   string
	size   int64
	device topology.DeviceID
	pool   *DeviceAllocator

	mu       sync.Mutex
	mem      *memory.Buffer // nil when size is 0
	value    any
	released bool
}

// ID returns the buffer's id.
func (b *Buffer) ID() ID { return b.id }

// Name returns the buffer's name.
func (b *Buffer) Name() string { return b.name }

// SizeBytes returns the buffer's size in bytes (0 for a value-only buffer).
func (b *Buffer) SizeBytes() int64 { return b.size }

// Device returns the device that holds the buffer.
func (b *Buffer) Device() topology.DeviceID { return b.device }

// Bytes returns the buffer's host bytes (len SizeBytes), or nil for a
// value-only or released buffer. The slice is valid until Release.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mem == nil {
		return nil
	}
	return b.mem.Bytes()
}

// Store keeps v as the buffer's value. If the previous value has a
// Release() method (arrow arrays and record batches do) it is called: the
// buffer owns one reference of the value it holds. Store takes over the
// caller's reference to v. Storing into a released buffer releases v at
// once and returns ErrReleased.
func (b *Buffer) Store(v any) error {
	b.mu.Lock()
	if b.released {
		b.mu.Unlock()
		releaseValue(v)
		return fmt.Errorf("buffers: store into %q: %w", b.name, ErrReleased)
	}
	old := b.value
	b.value = v
	b.mu.Unlock()
	releaseValue(old)
	return nil
}

// Value returns the value last stored, or nil. The buffer keeps its
// reference: callers that keep the value past the buffer's Release must
// Retain it themselves.
func (b *Buffer) Value() any {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.value
}

// Take empties the buffer's value and returns it with the buffer's
// reference: the caller owns it from then on (to Release, or to Store
// elsewhere), and the buffer's Release no longer releases it. It returns
// nil for an empty or released buffer.
func (b *Buffer) Take() any {
	b.mu.Lock()
	defer b.mu.Unlock()
	v := b.value
	b.value = nil
	return v
}

// Release frees the buffer's bytes back to its allocator and releases its
// value. It is idempotent.
func (b *Buffer) Release() {
	b.mu.Lock()
	if b.released {
		b.mu.Unlock()
		return
	}
	b.released = true
	mem, v := b.mem, b.value
	b.mem, b.value = nil, nil
	b.mu.Unlock()
	releaseValue(v)
	if mem != nil {
		mem.Release()
		b.pool.budget.Release(b.size)
	}
}

// ValueAs returns b's value as a T, or an error naming the buffer, the
// type it holds ("nothing" when empty) and T when it holds something else
// (or nothing).
func ValueAs[T any](b *Buffer) (T, error) {
	v := b.Value()
	t, ok := v.(T)
	if !ok {
		held := "nothing"
		if v != nil {
			held = fmt.Sprintf("%T", v)
		}
		return t, fmt.Errorf("buffers: %q holds %s, not %v", b.name, held, reflect.TypeFor[T]())
	}
	return t, nil
}

func releaseValue(v any) {
	if r, ok := v.(interface{ Release() }); ok && r != nil {
		r.Release()
	}
}

// ErrReleased is returned when a released buffer is used.
var ErrReleased = errors.New("buffers: buffer released")

// ErrOverBudget is returned when a request is larger than the whole budget.
var ErrOverBudget = errors.New("buffers: request exceeds the device budget")

// Binding is a buffer plus a byte range [Offset, Offset+Length).
type Binding struct {
	Buffer ID    // the buffer
	Offset int64 // first byte, from the buffer's start
	Length int64 // bytes; 0 is an empty range
}

// End returns Offset+Length.
func (b Binding) End() int64 { return b.Offset + b.Length }

// Overlaps reports whether b and o name the same buffer and share at least
// one byte. Empty ranges overlap nothing.
func (b Binding) Overlaps(o Binding) bool {
	return b.Buffer == o.Buffer && b.Length > 0 && o.Length > 0 &&
		b.Offset < o.End() && o.Offset < b.End()
}

// String returns "buffer ID [off:end)".
func (b Binding) String() string {
	return fmt.Sprintf("buffer %d [%d:%d)", b.Buffer, b.Offset, b.End())
}

// Budget limits the bytes allocated on one device. It is a weighted
// semaphore in bytes (golang.org/x/sync/semaphore), so waiters are served
// FIFO and a large request is not starved by small ones. Safe for
// concurrent use. The zero value is not usable: use NewBudget.
type Budget struct {
	total int64
	sem   *semaphore.Weighted
}

// NewBudget returns a budget of totalBytes (> 0; a budget of 0 or less
// refuses every positive request with ErrOverBudget).
func NewBudget(totalBytes int64) *Budget {
	return &Budget{total: totalBytes, sem: semaphore.NewWeighted(totalBytes)}
}

// TotalBytes returns the budget's size in bytes.
func (b *Budget) TotalBytes() int64 { return b.total }

// Acquire takes n bytes, waiting FIFO until they are free or ctx is done
// (returning ctx.Err() and taking nothing). A request larger than the whole
// budget fails at once with ErrOverBudget rather than waiting forever.
func (b *Budget) Acquire(ctx context.Context, n int64) error {
	if n > b.total {
		return fmt.Errorf("buffers: %d bytes requested, budget is %d: %w", n, b.total, ErrOverBudget)
	}
	if n <= 0 {
		return nil
	}
	return b.sem.Acquire(ctx, n)
}

// TryAcquire takes n bytes if they are free now and no waiter is queued.
func (b *Budget) TryAcquire(n int64) bool {
	if n <= 0 {
		return true
	}
	return n <= b.total && b.sem.TryAcquire(n)
}

// Release returns n bytes taken by Acquire or TryAcquire; n <= 0 does
// nothing. Returning more bytes than are held panics (a programmer error,
// as for semaphore.Weighted).
func (b *Budget) Release(n int64) {
	if n > 0 {
		b.sem.Release(n)
	}
}

// DeviceAllocator allocates buffers on one device from an arrow-go
// allocator under a byte budget. Safe for concurrent use.
type DeviceAllocator struct {
	device topology.DeviceID
	alloc  memory.Allocator
	budget *Budget
}

// DefaultBudgetBytes is the budget a DeviceAllocator gets when none is
// given: 1 TiB, that is, effectively no limit beyond the host's memory.
const DefaultBudgetBytes int64 = 1 << 40

// NewDeviceAllocator returns an allocator for device that allocates
// through alloc (memory.DefaultAllocator when nil) under budget
// (DefaultBudgetBytes when nil).
func NewDeviceAllocator(device topology.DeviceID, alloc memory.Allocator, budget *Budget) *DeviceAllocator {
	if alloc == nil {
		alloc = memory.DefaultAllocator
	}
	if budget == nil {
		budget = NewBudget(DefaultBudgetBytes)
	}
	return &DeviceAllocator{device: device, alloc: alloc, budget: budget}
}

// Device returns the allocator's device.
func (p *DeviceAllocator) Device() topology.DeviceID { return p.device }

// Allocator returns the arrow-go allocator it allocates through, for Arrow
// data that kernels build on its device.
func (p *DeviceAllocator) Allocator() memory.Allocator { return p.alloc }

// Budget returns the allocator's byte budget.
func (p *DeviceAllocator) Budget() *Budget { return p.budget }

// ValueSpec names one value-only buffer for AllocateValues.
type ValueSpec struct {
	ID   ID     // the buffer's ID
	Name string // the buffer's name, for errors and reports
}

// AllocateValues returns value-only buffers (SizeBytes 0, holding one Go
// value each) for specs, in order. They take no bytes of the budget and
// are carved from one allocation, so a run with many small values does
// not allocate once per buffer. Each is released on its own (Release).
func (p *DeviceAllocator) AllocateValues(specs []ValueSpec) []*Buffer {
	slab := make([]Buffer, len(specs))
	out := make([]*Buffer, len(specs))
	for i, s := range specs {
		slab[i] = Buffer{id: s.ID, name: s.Name, device: p.device, pool: p}
		out[i] = &slab[i]
	}
	return out
}

// Allocate returns a zeroed buffer of sizeBytes (>= 0) named name, waiting
// for budget as Budget.Acquire does. Errors: a negative size; ErrOverBudget
// (wrapped, naming the buffer) when sizeBytes exceeds the whole budget;
// ctx.Err() when ctx ends first. Nothing is taken on error.
func (p *DeviceAllocator) Allocate(ctx context.Context, id ID, name string, sizeBytes int64) (*Buffer, error) {
	if sizeBytes < 0 {
		return nil, fmt.Errorf("buffers: allocate %q: negative size %d", name, sizeBytes)
	}
	if err := p.budget.Acquire(ctx, sizeBytes); err != nil {
		return nil, fmt.Errorf("buffers: allocate %q (%d bytes) on %s: %w", name, sizeBytes, p.device, err)
	}
	return p.AllocateReserved(id, name, sizeBytes)
}

// AllocateReserved returns a zeroed buffer of sizeBytes (>= 0) named name
// whose bytes the caller has already taken from the allocator's budget (with
// Budget.Acquire): a caller that needs several buffers takes their sum in
// one Acquire, and so never holds part of what it needs while it waits for
// the rest (two such callers could otherwise each hold part and wait for
// each other forever). The buffer's Release gives the bytes back to the
// budget. The only error is a negative size; nothing is allocated then.
func (p *DeviceAllocator) AllocateReserved(id ID, name string, sizeBytes int64) (*Buffer, error) {
	if sizeBytes < 0 {
		return nil, fmt.Errorf("buffers: allocate %q: negative size %d", name, sizeBytes)
	}
	b := &Buffer{id: id, name: name, size: sizeBytes, device: p.device, pool: p}
	if sizeBytes > 0 {
		b.mem = memory.NewResizableBuffer(p.alloc)
		b.mem.Resize(int(sizeBytes))
		clear(b.mem.Bytes())
	}
	return b, nil
}
