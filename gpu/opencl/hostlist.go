package opencl

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"

	"github.com/streamdag/streamdag/gpu"
)

// A stream's lists (gpu.Lister) each run on a host goroutine of their own,
// concurrently with the stream's other lists and host tasks: a list holds
// nothing on the device's queue, and the commands it enqueues while it
// runs go on the stream in the order it enqueues them. Each list counts
// its steps on a counter of its own, from 0.

var (
	_ gpu.Lister   = (*clStream)(nil)
	_ gpu.Progress = (*clList)(nil)
)

// clList is a list queued on a stream: n steps, started once after has
// fired, counted on count.
type clList struct {
	s     *clStream
	l     gpu.List
	after gpu.Event
	n     uint64
	count gpu.Counter
}

// EnqueueList starts l on a host goroutine of the device (Close waits for
// it). See gpu.Lister. After Close it returns gpu.ErrClosed; a lost device
// takes l, and its Publish answers the loss.
func (s *clStream) EnqueueList(after gpu.Event, n uint64, l gpu.List) (*gpu.Counter, uint64, error) {
	if l == nil || n == 0 {
		return nil, 0, fmt.Errorf("%senqueue list: a nil or empty list (%d steps)", s.prefix, n)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, 0, fmt.Errorf("%senqueue list: %w", s.prefix, gpu.ErrClosed)
	}
	lr := &clList{s: s, l: l, after: after, n: n}
	s.d.wg.Add(1) // under s.mu: Close marks the stream closed under it before it waits
	go lr.run()
	return &lr.count, 0, nil
}

// Publish marks the list's first n steps complete. It asks for no extra
// publishes and returns the device's loss once it has one.
func (lr *clList) Publish(n uint64) (uint64, error) {
	lr.count.Publish(min(n, lr.n))
	return math.MaxUint64, lr.s.d.lostErr()
}

// run waits for the list's after event (Close waits for it, as for a
// bridged wait), calls Run, and completes the list's steps. A panic
// escaping Run is the stream's panic (Synchronize); after a Goexit, Run is
// called again on a new goroutine.
func (lr *clList) run() {
	s := lr.s
	defer s.d.wg.Done()
	if lr.after != nil && !lr.after.Done() {
		_ = lr.after.Wait(context.Background())
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		if r := recover(); r != nil {
			s.notePanic(&gpu.PanicError{Device: s.d.id, Stream: s.idx, Value: r, Stack: debug.Stack()})
			lr.count.Publish(lr.n)
			return
		}
		s.d.wg.Add(1)
		go lr.run()
	}()
	lr.l.Run(lr)
	returned = true
	lr.count.Publish(lr.n)
}
