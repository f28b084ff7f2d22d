// Package cl is the OpenCL 1.2 binding of streamdag's OpenCL driver.
//
// It is a small typed API over the calls a device backend needs, loaded at
// run time from libOpenCL.so.1 (the Khronos ICD loader) with purego, so it
// builds with CGO_ENABLED=0 and a binary without OpenCL installed still runs
// (Platforms returns an error wrapping ErrUnavailable that says why there is
// none). It is internal to gpu/opencl, which puts it behind gpu's contract.
//
// # Layer
//
// Layer 1, inside the OpenCL driver: it imports nothing of streamdag
// (its errors and objects are OpenCL's own; the driver maps them onto
// gpu's).
//
// # Objects
//
// Platforms and Devices list what the ICD loader finds. Open makes a
// Context on one Device; from it come Buffers (opaque device memory;
// Buffer.Sub makes a sub-buffer at an aligned offset), Programs (OpenCL C source built for the device, cached by source and
// options; a compile error is a *BuildError with the compiler's log),
// Queues (one in-order command queue per stream) and UserEvents. A Queue
// makes its own Kernel objects (OpenCL kernel arguments are state on the
// kernel object, so kernels are per queue) and enqueues launches over an
// NDRange, copies, fills, host writes and reads (blocking: Write, Read;
// asynchronous, the Go memory pinned until the waiter has seen the copy
// complete: WriteAsync, ReadAsync), markers with wait lists (Marker
// returns an Event), checkpoints (markers that leave their failures to
// the next Marker) and waits (Wait).
//
// # Completion and failures
//
// Each Queue has one waiter goroutine, locked to its OS thread, that
// blocks in clWaitForEvents on the queue's markers in enqueue order; an
// in-order queue completes them in that order, so no marker waits behind
// another (a Wait's marker is not one of them: it is examined with the
// commands, so a wait wakes no waiter; nor is a passive marker, which
// the waiter of a queue that waited on it settles, or Close). When a marker completes, the
// waiter reads the execution status of every command enqueued since the
// previous marker and frees their events, records the marker's number as
// the queue's Settled point, then closes the marker's Done channel (from a Go goroutine: no
// OpenCL callback runs Go code). Failures are tracked on the host: an
// Event's Err lists the failed commands it covers (*CommandError with the
// queue and the command's sequence number) and the errors of the events
// it waited on, whatever status the implementation gives the marker
// itself (implementations differ: a marker after a failed command may
// complete with CL_COMPLETE). UserEvent.Complete always completes the OpenCL event with
// CL_COMPLETE and carries a failure on the host only, because a failed
// status in a wait list can abort PoCL 3.1 or run the waiting command on
// freed memory.
//
// # Errors
//
// Every failed OpenCL call is an *Error naming the call and the status
// (Status's String gives the CL_* name); errors.Is(err, cl.OutOfResources)
// matches it. Bad input (a range outside a buffer, a launch shape of 4
// dimensions or past the device's limits, a kernel of another queue, an
// argument that does not fit its parameter: programs are built with
// -cl-kernel-arg-info and each argument is checked against what
// clGetKernelArgInfo reports) is an error value, never a panic and never
// a call that hands OpenCL a mismatch. A kernel that faults (a store far outside its buffer) can kill
// the process, as on any CPU OpenCL: run such code in a subprocess.
//
// # Hot paths
//
// Enqueues call the C entry points through purego.SyscallN with the
// pointers purego.Dlsym resolved, not reflection stubs, and pass their
// C-visible arguments in per-queue heap scratch under the queue's mutex;
// the per-command bookkeeping reuses its slices, so a launch allocates
// only what purego.SyscallN does (its argument slice).
//
// # Concurrency and ownership
//
// Context, Queue, Buffer, Program, Event and UserEvent methods are safe
// for concurrent use; a Kernel is not (set its arguments and launch it
// from one goroutine at a time). Context.Close completes outstanding user
// events, closes every queue (waiting for its work), releases everything
// and stops every goroutine the package started.
package cl
