package gpu

import (
	"context"
	"errors"
	"fmt"

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
