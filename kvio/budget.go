package kvio

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/buffers"
)

// overBudget is the panic value with which a budgetAllocator refuses an
// allocation (memory.Allocator has no error return); safely turns it back
// into its error.
type overBudget struct{ err error }

// budgetAllocator charges the bytes of one ReadPart's allocations to a
// budget and remembers the live ones, so that a failed ReadPart can free
// what arrow-go left allocated. Charges of buffers that outlive the
// ReadPart (the batch's) are returned by Free, whenever the caller releases
// them. Safe for concurrent use.
type budgetAllocator struct {
	mem    memory.Allocator
	budget *buffers.Budget

	mu        sync.Mutex
	live      map[*byte]int // first byte → charged length, of live allocations
	abandoned bool          // after a failure: later Frees are no-ops
	refused   error         // the first over-budget error, which pqarrow's own recover may have swallowed
}

func newBudgetAllocator(mem memory.Allocator, b *buffers.Budget) *budgetAllocator {
	return &budgetAllocator{mem: mem, budget: b, live: map[*byte]int{}}
}

func (a *budgetAllocator) charge(n int) {
	if n > 0 && !a.budget.TryAcquire(int64(n)) {
		err := fmt.Errorf("allocation of %d bytes does not fit in the free bytes of the budget of %d bytes: %w",
			n, a.budget.TotalBytes(), buffers.ErrOverBudget)
		a.mu.Lock()
		if a.refused == nil {
			a.refused = err
		}
		a.mu.Unlock()
		panic(overBudget{err})
	}
}

func key(b []byte) *byte {
	if cap(b) == 0 {
		return nil
	}
	return unsafe.SliceData(b)
}

// Allocate charges size bytes and allocates them from the wrapped
// allocator; it panics with overBudget when they do not fit.
func (a *budgetAllocator) Allocate(size int) []byte {
	a.charge(size)
	b := a.mem.Allocate(size)
	if k := key(b); k != nil && size > 0 {
		a.mu.Lock()
		a.live[k] = size
		a.mu.Unlock()
	}
	return b
}

// Reallocate charges or returns the change in size.
func (a *budgetAllocator) Reallocate(size int, b []byte) []byte {
	a.mu.Lock()
	old := a.live[key(b)]
	a.mu.Unlock()
	a.charge(size - old)
	nb := a.mem.Reallocate(size, b)
	a.mu.Lock()
	delete(a.live, key(b))
	if k := key(nb); k != nil && size > 0 {
		a.live[k] = size
	}
	a.mu.Unlock()
	if size < old {
		a.budget.Release(int64(old - size))
	}
	return nb
}

// Free frees b and returns its charge.
func (a *budgetAllocator) Free(b []byte) {
	a.mu.Lock()
	n, ok := a.live[key(b)]
	delete(a.live, key(b))
	abandoned := a.abandoned
	a.mu.Unlock()
	if abandoned {
		return
	}
	a.mem.Free(b)
	if ok {
		a.budget.Release(int64(n))
	}
}

// abandon frees, after a failed ReadPart, every allocation still live and
// returns its charge; later Frees do nothing. It returns the first
// over-budget error, or nil.
func (a *budgetAllocator) abandon() error {
	a.mu.Lock()
	refused := a.refused
	live := a.live
	a.live, a.abandoned = map[*byte]int{}, true
	a.mu.Unlock()
	for k, n := range live {
		a.mem.Free(unsafe.Slice(k, n))
		a.budget.Release(int64(n))
	}
	return refused
}
