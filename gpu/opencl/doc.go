// Package opencl is streamdag's OpenCL device: a gpu.CodeDevice
// (NewDevice; importing the package registers the driver kind "opencl"
// for gpu.Open) built on a small typed API over the OpenCL 1.2 calls a
// device backend needs, loaded at run time from
// libOpenCL.so.1 (the Khronos ICD loader, which every vendor's OpenCL
// driver registers with: PoCL on CPUs, NVIDIA, AMD and Intel on GPUs)
// with purego, so the package builds with CGO_ENABLED=0 and a binary
// without OpenCL installed still runs (Available says why there is none).
//
// # Layer
//
// Layer 1, beside the other device kinds: it imports only gpu (the
// device boundary it implements) and topology, and nothing of exec.
//
// # The device
//
// NewDevice (or gpu.Open with kind "opencl": every available device, as
// opencl0, opencl1, …) puts one Context behind a gpu.CodeDevice: each
// stream is a Queue, its kernel objects and a host-task goroutine.
// Kernel launches, copies, fills and markers are enqueued and return;
// CopyIn and CopyOut are asynchronous, with the Go memory pinned until
// the queue's waiter has seen the copy complete. Host tasks are ordered
// with the queue as cudaLaunchHostFunc orders them. Record's events
// report the failures of the commands before them as *gpu.CommandError
// (the label is the launch's); Wait on an event of the same device is a
// marker wait list, on any other event a user event a goroutine
// completes. A failure that leaves the device unusable matches
// ErrDeviceLost and gpu.ErrGPULost, and so does the refusal of a device
// given up on (gpu.Abandoner: a kernel that never ends), whose Close
// returns an error after a bounded wait (WithCloseWait) instead of
// hanging, leaking what the stuck commands hold. NewDevice's doc has the
// contract.
//
// The driver is a gpu.Enumerator too: its Enumerate lists the available
// devices (type, vendor, memory, and the UUID and PCI bus ID where the
// device reports them) without opening any, so a lease.Backend leases them
// (a GPU of any vendor; a CPU device such as PoCL when asked for) and
// opens a leased one with OpenDevice; an NVIDIA GPU NVML lists is matched
// to its OpenCL device by UUID or PCI bus ID.
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
// another. When a marker completes, the waiter reads the execution status
// of every command enqueued since the previous marker and frees their
// events, then closes the marker's Done channel (from a Go goroutine: no
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
// (Status's String gives the CL_* name); errors.Is(err, opencl.OutOfResources)
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
// The device, its streams, events and memory, and Context, Queue, Buffer,
// Program, Event and UserEvent methods are safe for concurrent use; a Kernel is not (set its arguments and launch it
// from one goroutine at a time). Context.Close completes outstanding user
// events, closes every queue (waiting for its work), releases everything
// and stops every goroutine the package started.
package opencl
