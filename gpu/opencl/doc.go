// Package opencl runs launches on OpenCL devices: GPUs of any vendor, or
// PoCL on the CPU cores.
//
// It is streamdag's OpenCL driver: a gpu.CodeDevice (NewDevice; importing
// the package registers the driver kind "opencl" for gpu.Open) over the
// OpenCL 1.2 calls a device backend needs, loaded at run time from
// libOpenCL.so.1 (the Khronos ICD loader, which every vendor's OpenCL driver
// registers with: PoCL on CPUs, NVIDIA, AMD and Intel on GPUs) with purego,
// so the package builds with CGO_ENABLED=0 and a binary without OpenCL
// installed still runs (Devices returns an error wrapping ErrUnavailable
// that says why there is none). The binding itself is internal: a user
// reaches OpenCL through gpu's contract, and lists what is installed with
// Platforms and Devices.
//
// # Layer
//
// Layer 1, beside the other device kinds: it imports only gpu (the
// device boundary it implements) and topology, and nothing of exec.
//
// # The device
//
// NewDevice (or gpu.Open with kind "opencl": every available device, as
// opencl0, opencl1, …) puts one OpenCL context behind a gpu.CodeDevice:
// each stream is an in-order command queue, its kernel objects and a
// host-task goroutine.
// Kernel launches, copies, fills and markers are enqueued and return;
// CopyIn and CopyOut are asynchronous, with the Go memory pinned until
// the queue's waiter has seen the copy complete. Host tasks are ordered
// with the queue as cudaLaunchHostFunc orders them. Record's events
// report the failures of the commands before them as *gpu.CommandError
// (the sequence number is the one the enqueue returned, the label the
// launch's); Wait on an event of the same device is a
// marker wait list, on any other event a user event a goroutine
// completes. A failure that leaves the device unusable (an enqueue that
// returns CL_DEVICE_NOT_AVAILABLE, or a command the device reports failed
// after the fact with CL_DEVICE_NOT_AVAILABLE or CL_OUT_OF_RESOURCES, how
// GPU drivers report a kernel that faulted) loses it: from then on every
// call that enqueues work on it, and Alloc, returns an error matching
// gpu.ErrDeviceLost and wrapping the first such failure, while events
// already recorded still fire; the recovery is the caller's (close the
// device and move the work). So does the refusal of a device
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
// # Concurrency and ownership
//
// The device, its streams, events, memory and programs are safe for
// concurrent use. A device's Close waits for everything enqueued,
// releases its OpenCL objects and stops every goroutine it started
// (unless the device was abandoned: see NewDevice and WithCloseWait).
//
// # Errors
//
// A failure the device reports for a command is a *gpu.CommandError
// naming the device, the stream, the command's sequence number and its
// label; its message gives the OpenCL status ("CL_OUT_OF_RESOURCES
// (-5)"). A compile error is a *BuildError with the compiler's log. Bad
// input (a range outside memory, a launch shape of 4 dimensions or past
// the device's limits, an argument that does not fit its parameter:
// programs are built with -cl-kernel-arg-info and each argument is
// checked against what clGetKernelArgInfo reports) is an error value,
// never a panic and never a call that hands OpenCL a mismatch. A kernel
// that faults (a store far outside its buffer) can kill the process, as
// on any CPU OpenCL: run such code in a subprocess.
package opencl
