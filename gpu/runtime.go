package gpu

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/streamdag/streamdag/topology"
)

// ErrClosed is returned by calls on a device or stream after Close.
var ErrClosed = errors.New("gpu: device closed")

// ErrDeviceLost is matched (errors.Is) by every error that says a device
// is gone for good: each *LostError (an inventory or health check found
// the GPU lost, or no GPU with its UUID), a driver's device-loss errors
// (an OpenCL device that reported CL_DEVICE_NOT_AVAILABLE, say), and the
// errors of launches and buffers lost with a device in a run.
var ErrDeviceLost = errors.New("gpu: device lost")

// LostError says why a GPU is gone for good, as an inventory (gpu/nvml's
// Discover) or a health check finds it. It matches ErrDeviceLost and unwraps
// to Err as well.
type LostError struct {
	Device topology.DeviceID // the GPU, e.g. gpu3
	UUID   string            // its UUID, "" when unknown
	// Err is what the check found, e.g. nvml.ERROR_GPU_IS_LOST.
	Err error
}

// Error returns "gpu: gpu3 (GPU-…) is lost: WHY".
func (e *LostError) Error() string {
	id := e.Device.String()
	if e.UUID != "" {
		id += " (" + e.UUID + ")"
	}
	return "gpu: " + id + " is lost: " + fmt.Sprint(e.Err)
}

// Unwrap returns ErrDeviceLost and Err.
func (e *LostError) Unwrap() []error { return []error{ErrDeviceLost, e.Err} }

// Task is one unit of work queued on a stream: a launch. Run is called
// exactly once, on the stream's worker, after every task queued before it
// on the same stream has returned and every event the stream was told to
// wait on before it has fired. Run must not block on work queued later on
// the same stream (that would deadlock the stream). A panic in Run is the
// task's own business: the CPU device recovers it only to keep the stream
// alive and reports it through Stream.Synchronize; executors recover
// inside Run to attribute it.
//
// Passing a pointer to a long-lived struct as a Task does not allocate, so
// launches can be queued without an allocation each.
type Task interface {
	Run()
}

// TaskFunc adapts a function to a Task.
type TaskFunc func()

// Run calls f.
func (f TaskFunc) Run() { f() }

// Device is where launches run: the host CPU device or a GPU. A Device owns
// a fixed set of streams created with it.
//
// Implementations are safe for concurrent use. Close is idempotent: it
// waits for every queued task to finish, stops the streams' workers (no
// goroutine outlives it) and returns nil; later calls that queue work
// return ErrClosed.
type Device interface {
	// ID is the device's identity ("cpu", "gpu0", …).
	ID() topology.DeviceID
	// Kind is the kind of the driver the device comes from, as registered
	// ("cpu", "sim", "opencl", …), for reports and errors. What code the
	// device runs is its capabilities, not its kind: a Device that is no
	// CodeDevice runs host code (a kernel's Go function, in a Task) on
	// host-addressable memory; a CodeDevice runs the device code its
	// Code names.
	Kind() string
	// Info returns the device's facts.
	Info() topology.DeviceFacts
	// NumStreams is the number of streams, at least 1.
	NumStreams() int
	// Stream returns stream i, 0 <= i < NumStreams(). It panics for an
	// index out of range (programmer error).
	Stream(i int) Stream
	// Close drains and stops every stream. See the type's doc. It must not
	// be called from a task of the device (it would wait for itself).
	Close() error
}

// Stream is an ordered queue of launches on one device: tasks queued on one
// stream run one after another in queue order; tasks on different streams
// may overlap. Methods are safe for concurrent use, but the order of tasks
// queued concurrently from several goroutines is the order in which the
// calls took the stream's lock.
type Stream interface {
	// Device is the ID of the device the stream belongs to.
	Device() topology.DeviceID
	// Index is the stream's index on its device.
	Index() int
	// Launch queues t. It never blocks on the work itself. After Close it
	// returns ErrClosed and t is not run.
	Launch(t Task) error
	// LaunchBatch queues every task of ts in order, under one lock
	// acquisition. Errors as Launch; on ErrClosed no task of ts is queued.
	LaunchBatch(ts []Task) error
	// Record returns an event that fires when every task queued on this
	// stream before the call has returned and every wait queued before it
	// has been satisfied (so, as in CUDA, a stream that waits on the event
	// also waits, transitively, for the events this stream waited on).
	// Recorded on an idle stream, the event has already fired. Record works
	// after Close.
	Record() Event
	// Wait makes every task queued on this stream after the call wait
	// until e has fired, without blocking the calling goroutine. A wait
	// on an event of the same device is enqueued on the device (on the
	// CPU device, a wait already satisfied when the stream reaches it
	// costs one atomic load; one on the same stream is a no-op). An event
	// of another device, or a host event, is bridged: the stream waits
	// until e fires as seen from the host. A nil e returns an error and
	// queues nothing. After Close it returns ErrClosed.
	Wait(e Event) error
	// Synchronize blocks until every task queued before the call has
	// returned, or ctx is done (returning ctx.Err(); the tasks go on).
	// It returns the first panic recovered from a task of this stream
	// since the previous Synchronize, as an error (*PanicError on the CPU
	// device), if any, and forgets it. It works after Close. It must not be
	// called from a task of the same stream (it would wait for itself).
	Synchronize(ctx context.Context) error
}

// Event marks a point in one stream's queue. It is a value (stream, sequence
// number) and fires when that stream's count of completed tasks reaches the
// sequence number. An event never "unfires".
type Event interface {
	// Done reports whether the event has fired. It never blocks.
	Done() bool
	// Wait blocks until the event fires or ctx is done (returning
	// ctx.Err()). Once fired it returns nil, or, for an event of a
	// CodeDevice, the failures the device reported for the commands the
	// event covers (*CommandError each, joined).
	Wait(ctx context.Context) error
}

// Lister is the capability of a stream that takes a whole list of host
// work as one queued operation: the fast path of a plan known ahead, where
// a stream's launches run one after another with no per-launch queueing.
// The CPU device's streams (and the simulated GPUs', which are CPU
// streams) run a list on the stream's worker, in queue order with the
// stream's other work; a code device (OpenCL) runs each list on a host
// goroutine of its own, concurrently with its other lists, and the
// device commands a list enqueues go on the stream in the order it
// enqueues them.
//
// A list has n steps. As it runs it publishes how far it got on a
// counter the stream gives it: at first+k once it has completed k steps
// (Progress.Publish(k), or, between the steps its Progress asks to hear
// of, the counter's own Publish(first+k) from the goroutine running the
// list); once List.Run returns, the stream publishes first+n. Another
// list waits for step k by the counter's WaitFor(ctx, first+k); reading
// it is one atomic load.
//
// A device's loss reaches a list through its Progress, never as a
// refusal: a lost device takes lists as before, and their Publish calls
// answer the loss, as those of a list running when the device was lost
// do. So the caller settles a lost device's work in one place, the
// list's body, and the counter goes on counting the steps it settles.
//
// Methods are safe for concurrent use.
type Lister interface {
	Stream
	// EnqueueList queues l, which starts once after has fired (a nil
	// after: at once) and, on a stream that runs lists in queue order,
	// once the work queued before it has completed. It returns the
	// counter l publishes its steps on and first, the counter's value
	// before l's first step (on the CPU device, the stream's count of
	// every operation queued before l; events recorded on the stream
	// after l then fire once l is complete). A lost device still takes
	// l and runs it: its Progress answers every Publish with the loss
	// (see Progress), so the list learns of it at its first publish, as
	// one running when the device is lost does at its next. Errors, with
	// l not run: after Close, ErrClosed; n below 1 or a nil l.
	EnqueueList(after Event, n uint64, l List) (count *Counter, first uint64, err error)
}

// List is host work queued on a Lister as one operation of n steps.
type List interface {
	// Run runs the list on the stream's worker goroutine and reports
	// progress through p. If Run ends its goroutine (runtime.Goexit in
	// work it runs), the stream calls Run again, with the same p, on a
	// new worker goroutine, until a call returns: a list resumes where it
	// stopped. A panic that escapes Run is recovered by the stream and
	// reported by Synchronize, as for a Task.
	Run(p Progress)
}

// Progress is how a running List publishes how far it got.
type Progress interface {
	// Publish marks the list's first n steps complete (n at most the
	// list's length, never less than before): the list's counter
	// becomes first+n. It returns the step by whose completion
	// the list must publish next, even if nothing waits on it
	// (math.MaxUint64 when the stream needs no extra publishes: the
	// CPU device's), and the stream's sticky error once its device has
	// one (an error matching ErrDeviceLost for a lost device, from the
	// first Publish of a list queued after the loss on): the list should
	// then run nothing more on the stream. A list calls Publish(0)
	// before its first step to learn the first such step.
	Publish(n uint64) (next uint64, err error)
}

// HostEvent is an event the host sets, as an OpenCL user event: a stream
// told to Wait on it holds its later work until Set. The zero value is an
// event that has not fired; a HostEvent must not be copied after first
// use. Safe for concurrent use.
type HostEvent struct {
	mk  sync.Once // makes ch
	set sync.Once // closes ch
	ch  chan struct{}
}

// fired returns the channel that Set closes, making it on first use.
func (e *HostEvent) fired() <-chan struct{} {
	e.mk.Do(func() { e.ch = make(chan struct{}) })
	return e.ch
}

// Set fires the event. Later calls do nothing.
func (e *HostEvent) Set() {
	e.fired()
	e.set.Do(func() { close(e.ch) })
}

// Done reports whether Set has been called. It never blocks.
func (e *HostEvent) Done() bool {
	select {
	case <-e.fired():
		return true
	default:
		return false
	}
}

// Wait blocks until Set or until ctx is done (returning ctx.Err()).
func (e *HostEvent) Wait(ctx context.Context) error {
	ch := e.fired()
	select {
	case <-ch:
		return nil
	default:
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		if e.Done() {
			return nil
		}
		return ctx.Err()
	}
}

var _ Event = (*HostEvent)(nil)
