package cl

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"
)

// ExecStatus is an OpenCL command execution status
// (CL_EVENT_COMMAND_EXECUTION_STATUS): Queued, Submitted, Running,
// Complete, or a negative Status when the command failed.
type ExecStatus int32

// The execution statuses (CL_QUEUED … CL_COMPLETE).
const (
	Complete  ExecStatus = 0
	Running   ExecStatus = 1
	Submitted ExecStatus = 2
	Queued    ExecStatus = 3
)

// String returns "complete", "running", "submitted", "queued", or the
// failure's Status name.
func (s ExecStatus) String() string {
	switch s {
	case Complete:
		return "complete"
	case Running:
		return "running"
	case Submitted:
		return "submitted"
	case Queued:
		return "queued"
	}
	return Status(s).String()
}

// Event is a point on a queue (a marker, from Queue.Marker) or a user
// event (UserEvent.Event). It completes when every command enqueued
// before it on its queue and every event in its wait list has completed.
//
// Completion is observed on the host by the queue's waiter goroutine, and
// so are failures: Err reports every command covered by the event that the
// device reported failed (a *CommandError each) and the errors of the
// events it waited on, whatever status the OpenCL implementation gives the
// marker itself (a marker after a failed command may complete with
// CL_COMPLETE). The methods are safe for concurrent use.
type Event struct {
	h        uintptr
	q        *Queue // nil for a user event
	ctx      *Context
	seq      uint64
	done     chan struct{}
	err      error
	refs     atomic.Int32 // the user's, the waiter's and each later marker's hold
	released atomic.Bool

	// Set at enqueue, read by the waiter (or, for a passive marker, by
	// settlePassive).
	covers     []pendingCmd
	waits      []*Event
	internal   bool
	passive    bool
	settleOnce sync.Once
}

// Done returns a channel closed when the event has completed (succeeded or
// failed). It is never closed for an event whose queue never runs it.
func (e *Event) Done() <-chan struct{} { return e.done }

// Err returns nil before Done is closed; after, nil when everything the
// event covers succeeded, else the failures joined (*CommandError for a
// failed command of its queue, the waited event's error for a failed wait
// or a user event completed with an error).
func (e *Event) Err() error {
	select {
	case <-e.done:
		return e.err
	default:
		return nil
	}
}

// Wait blocks until the event completes or ctx is done, and returns Err,
// or ctx.Err() if ctx ended first (the event is not affected). It blocks
// no OS thread.
func (e *Event) Wait(ctx context.Context) error {
	select {
	case <-e.done:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Seq returns the event's sequence number on its queue (commands and
// markers are numbered from 1 in enqueue order); 0 for a user event.
func (e *Event) Seq() uint64 { return e.seq }

// Status asks the OpenCL implementation for the event's execution status
// now. It does not see failures tracked on the host: use Err for those.
// Errors: ErrClosed after Release.
func (e *Event) Status() (ExecStatus, error) {
	if e.released.Load() {
		return 0, fmt.Errorf("opencl: event status: %w", ErrClosed)
	}
	st := new(int32)
	if err := check("clGetEventInfo", syscall(cl.getEventInfo, e.h, clEventCommandExecutionStatus, 4, uintptr(unsafe.Pointer(st)), 0)); err != nil {
		return 0, err
	}
	return ExecStatus(*st), nil
}

// Release drops the caller's hold on the event; the OpenCL event is freed
// once the queue's waiter and every marker waiting on it are done with it.
// Done and Err stay valid. It is idempotent. An event must not be passed
// to Marker or Wait after (or while) it is released.
func (e *Event) Release() {
	if e.released.CompareAndSwap(false, true) {
		e.unref()
	}
}

func (e *Event) unref() {
	if e.refs.Add(-1) == 0 {
		syscall(cl.releaseEvent, e.h)
	}
}

const clEventCommandExecutionStatus = 0x11D3

// UserEvent is an event the host completes: a bridge from work outside
// the context (another device, a host computation) into a queue's wait
// list. Complete may be called once.
type UserEvent struct {
	ev   *Event
	ctx  *Context
	once sync.Once
}

// NewUserEvent creates an incomplete user event. Context.Close completes
// it with ErrClosed if the caller has not. Errors: ErrClosed after Close.
func (c *Context) NewUserEvent() (*UserEvent, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	var st int32
	h := syscall(cl.createUserEvent, c.h, uintptr(unsafe.Pointer(&st)))
	if err := check("clCreateUserEvent", uintptr(uint32(st))); err != nil {
		return nil, err
	}
	e := &Event{h: h, ctx: c, done: make(chan struct{})}
	e.refs.Store(2) // the user's Event hold and Complete's
	u := &UserEvent{ev: e, ctx: c}
	c.users[u] = struct{}{}
	return u, nil
}

// Event returns the event to put in wait lists (Queue.Marker, Queue.Wait).
// Release it when done with it; the UserEvent still owns completing it.
func (u *UserEvent) Event() *Event { return u.ev }

// SetStatusForTest sets the OpenCL execution status of u's event to st
// (negative: failed, as a failed command leaves its event) without
// completing it on the host: Complete must still be called. It exists
// for the tests that check how a device-reported failure is tracked
// (PoCL may abort on a failed status in a wait list).
func (u *UserEvent) SetStatusForTest(st int32) error {
	return check("clSetUserEventStatus", syscall(cl.setUserEventStatus, u.ev.h, uintptr(uint32(st))))
}

// Complete marks the event complete with err (nil for success). The
// OpenCL event always completes with CL_COMPLETE, so commands waiting on
// it run; a non-nil err is carried on the host to every event that covers
// it (a failed status in an OpenCL wait list can abort PoCL 3.1). It
// returns an error if the event was already completed.
func (u *UserEvent) Complete(err error) error {
	first := false
	u.once.Do(func() {
		first = true
		u.ev.err = err
		close(u.ev.done)
		u.ctx.mu.Lock()
		delete(u.ctx.users, u)
		u.ctx.mu.Unlock()
	})
	if !first {
		return errors.New("opencl: user event completed twice")
	}
	r := check("clSetUserEventStatus", syscall(cl.setUserEventStatus, u.ev.h, uintptr(Complete)))
	u.ev.unref()
	return r
}
