package gpu

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// Counter is the host-side event machine: a monotonically increasing
// count of completed work (launches settled, queue entries done) that
// waiters watch for a target. An event of a Counter is a (counter,
// target) pair and fires when the count reaches the target, so a
// producer publishes its progress with one atomic store and a consumer
// whose wait is already satisfied pays one atomic load. The CPU device's
// streams keep their completed counts in Counters, and so does the
// executor for the progress of each stream in a run.
//
// The zero value is a ready counter at 0. A Counter must not be copied
// after first use (it holds a mutex). It fills one 64-byte cache line, so
// Counters side by side in a slice, written from different cores, do not
// share a line; the waiter state on that line is written only when a
// waiter parks or is woken.
//
// Concurrency: Load, WaitFor and Event (and its events) are safe from any
// number of goroutines at once. Publish has one writer at a time: the
// caller orders its Publish calls (one goroutine owns the count), and each
// publishes a count no lower than the one before. A Publish happens before
// every Load that observes its count, and before the return of every wait
// it satisfies, as a store and load of a sync/atomic value do.
type Counter struct {
	n atomic.Uint64
	// notNeed is the complement of the smallest target of a parked
	// waiter: 0 (the zero value) when none is parked, as if the target
	// were MaxUint64 (which only Publish(MaxUint64) reaches, and which
	// then looks for waiters), so Publish tests it with one comparison.
	notNeed atomic.Uint64

	mu sync.Mutex
	ws []parkedWaiter // guarded by mu

	_ [16]byte // to a whole cache line: n, notNeed, mu and ws take 48 bytes
}

type parkedWaiter struct {
	n  uint64
	ch chan struct{} // 1-buffered; receives one send when the count reaches n
}

// Spin and yield budget of an unsatisfied wait before it parks: a
// producer on another core is usually a few launches away, so a short spin
// saves the park and the wake (a few hundred ns each), and yielding lets a
// producer that shares the waiter's core (more streams than cores) run.
const (
	waitSpins  = 256
	waitYields = 8
)

// Load returns the count: one atomic load.
func (c *Counter) Load() uint64 { return c.n.Load() }

// Publish sets the count to n and wakes the parked waiters whose targets
// n reaches. With no parked waiter whose target n reaches, it costs the
// store and one more atomic load; waking takes the counter's mutex and one
// channel send per waiter woken. n must not be below the current count,
// and Publish calls must not overlap (see the type's doc); neither is
// checked.
func (c *Counter) Publish(n uint64) {
	c.n.Store(n)
	// The order (store n, then load notNeed) pairs with park's (store
	// notNeed, then load n): with sequentially consistent atomics one
	// side sees the other, so no wake-up is lost.
	if n >= ^c.notNeed.Load() {
		c.wake(n)
	}
}

func (c *Counter) wake(n uint64) {
	c.mu.Lock()
	kept := c.ws[:0]
	for _, w := range c.ws {
		if w.n <= n {
			w.ch <- struct{}{} // 1-buffered, one send per registration: never blocks
			continue
		}
		kept = append(kept, w)
	}
	clear(c.ws[len(kept):])
	c.ws = kept
	c.notNeed.Store(^c.minLocked())
	c.mu.Unlock()
}

// minLocked returns the smallest parked target, MaxUint64 when none.
func (c *Counter) minLocked() uint64 {
	m := uint64(math.MaxUint64)
	for _, w := range c.ws {
		m = min(m, w.n)
	}
	return m
}

// WaitFor blocks until the count reaches n, or ctx is done. It returns
// the count it saw, at least n, and nil; or, when ctx was done first, the
// count it last saw (below n) and ctx.Err(). A target already reached
// returns at once, even with ctx done, after one atomic load and no look
// at ctx.
//
// An unsatisfied wait first re-reads the count in a short spin, then
// yields the processor a few times (runtime.Gosched), and then parks: it
// registers under the counter's mutex, with a channel from a pool (no
// allocation in steady state beyond the growth of the waiter list), and
// sleeps until a Publish reaches n or ctx is done. ctx is looked at only
// before parking and while parked; a ctx with a nil Done channel
// (context.Background) is never looked at.
func (c *Counter) WaitFor(ctx context.Context, n uint64) (uint64, error) {
	if v := c.n.Load(); v >= n {
		return v, nil
	}
	for range waitSpins {
		if v := c.n.Load(); v >= n {
			return v, nil
		}
	}
	for range waitYields {
		runtime.Gosched()
		if v := c.n.Load(); v >= n {
			return v, nil
		}
	}
	return c.park(ctx, n)
}

// park registers a waiter for n and sleeps until it is woken or ctx is
// done.
func (c *Counter) park(ctx context.Context, n uint64) (uint64, error) {
	done := ctx.Done()
	if done != nil {
		if err := ctx.Err(); err != nil {
			v := c.n.Load()
			if v >= n {
				return v, nil
			}
			return v, err
		}
	}
	ch := wakeChans.Get().(chan struct{})
	defer wakeChans.Put(ch) // empty again on every path below
	c.mu.Lock()
	c.ws = append(c.ws, parkedWaiter{n: n, ch: ch})
	if n < ^c.notNeed.Load() {
		c.notNeed.Store(^n)
	}
	if v := c.n.Load(); v >= n {
		c.removeLocked(ch)
		c.mu.Unlock()
		return v, nil
	}
	c.mu.Unlock()
	if done == nil {
		<-ch
		return c.n.Load(), nil
	}
	select {
	case <-ch:
		return c.n.Load(), nil
	case <-done:
		c.mu.Lock()
		removed := c.removeLocked(ch)
		c.mu.Unlock()
		if !removed {
			<-ch // reached while we were giving up: the send is in ch already
			return c.n.Load(), nil
		}
		v := c.n.Load()
		if v >= n {
			return v, nil // reached after all: a success, like any fired wait
		}
		return v, ctx.Err()
	}
}

// removeLocked removes ch's registration and reports whether it was
// still there; if not, a wake-up was (or is being) sent on ch under mu.
func (c *Counter) removeLocked(ch chan struct{}) bool {
	for i, w := range c.ws {
		if w.ch != ch {
			continue
		}
		last := len(c.ws) - 1
		c.ws[i] = c.ws[last]
		c.ws[last] = parkedWaiter{}
		c.ws = c.ws[:last]
		c.notNeed.Store(^c.minLocked())
		return true
	}
	return false
}

// wakeChans holds empty 1-buffered channels for parked waiters, so a
// park does not allocate one.
var wakeChans = sync.Pool{New: func() any { return make(chan struct{}, 1) }}

// Event returns the event "the count has reached n": Done is one atomic
// load, and Wait(ctx) is WaitFor(ctx, n) without the count (nil once
// fired, ctx.Err() when ctx is done first; a fired event returns nil even
// with ctx done). The event is a 16-byte value (the counter and n); boxing
// it in the Event interface allocates it, so a hot path that waits many
// times calls Load and WaitFor instead. The counter must outlive the
// event.
func (c *Counter) Event(n uint64) Event { return counterEvent{c: c, n: n} }

// counterEvent fires when c's count reaches n.
type counterEvent struct {
	c *Counter
	n uint64
}

func (e counterEvent) Done() bool { return e.c.n.Load() >= e.n }

func (e counterEvent) Wait(ctx context.Context) error {
	_, err := e.c.WaitFor(ctx, e.n)
	return err
}

// String returns "counter event @ N".
func (e counterEvent) String() string { return fmt.Sprintf("counter event @ %d", e.n) }
