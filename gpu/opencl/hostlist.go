package opencl

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"

	"github.com/streamdag/streamdag/gpu"
)

// A stream's lists (gpu.Lister) run on its host worker, in queue order
// with its host tasks. A list holds nothing on the device's queue: the
// commands it enqueues while it runs go on the stream in the order it
// enqueues them. Lists take numbers in a sequence of their own (lcount),
// apart from the device commands' (gpu.CommandError.Seq).

var (
	_ gpu.Lister   = (*clStream)(nil)
	_ gpu.Progress = (*clList)(nil)
)

// clList is a list queued on a stream: n steps from first+1, started once
// after has fired.
type clList struct {
	s     *clStream
	l     gpu.List
	after gpu.Event
	first uint64
	n     uint64
}

// EnqueueList queues l on the stream's host worker. See gpu.Lister. After
// Close it returns gpu.ErrClosed; on a lost device, the loss.
func (s *clStream) EnqueueList(after gpu.Event, n uint64, l gpu.List) (uint64, error) {
	if l == nil || n == 0 {
		return 0, fmt.Errorf("%senqueue list: a nil or empty list (%d steps)", s.prefix, n)
	}
	if err := s.lock("enqueue list"); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	s.hmu.Lock()
	lr := &clList{s: s, l: l, after: after, first: s.lqueued, n: n}
	s.lqueued += n
	s.hq = append(s.hq, hostItem{list: lr})
	s.hmu.Unlock()
	s.hsignal()
	return lr.first, nil
}

// Count is the count of the stream's list steps completed.
func (s *clStream) Count() *gpu.Counter { return &s.lcount }

// Publish marks the list's first n steps complete. It asks for no extra
// publishes and returns the device's loss once it has one.
func (lr *clList) Publish(n uint64) (uint64, error) {
	lr.s.lcount.Publish(lr.first + min(n, lr.n))
	return math.MaxUint64, lr.s.d.lostErr()
}

// runList runs a list item on the host worker: it waits for the list's
// after event (Close waits for it, as for a bridged wait), calls Run, and completes its steps. A
// panic escaping Run is the stream's panic (Synchronize); a Goexit starts a
// replacement worker that calls Run again (the item is not yet done).
func (s *clStream) runList(lr *clList) {
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
			s.lcount.Publish(lr.first + lr.n)
			return
		}
		s.d.wg.Add(1)
		go s.hostWork()
	}()
	lr.l.Run(lr)
	returned = true
	s.lcount.Publish(lr.first + lr.n)
}
