// Package gpu is streamdag's device boundary (layer 1): the interfaces an
// executor drives on every kind of device ([Device], [Stream], [Event],
// [Task]), the driver registry by kind ([Register], [Open], [Drivers]),
// and the process-owned [Backend] with its lease [Pool]. Nothing here
// needs cgo or loads a vendor library: the driver packages do, and the
// backend reaches them only through the registry.
//
// # Streams, events and device code
//
// A [Stream] enqueues and returns: host tasks ([Stream.Launch]), and on a
// [CodeDevice]'s streams ([CodeStream]) launches of device code
// ([KernelLaunch] of a [Program]), copies between host memory and device
// [Memory], and fills. [Stream.Record] returns an [Event];
// [Stream.Wait] is enqueued on the device for an event of the same
// device and bridged for any other. A failure a device reports after the
// fact comes from [Event.Wait] as a [*CommandError] naming the device,
// the stream and the command's label; a panic in a host task comes from
// [Stream.Synchronize] as a [*PanicError]. [Counter] is the one host-side
// event machine: the CPU device's streams count on it, and so does an
// executor's per-run progress, so every host-observed event is a count
// reaching a target.
//
// # Drivers
//
// Each kind of device lives in its own package, which registers its
// [Driver] in init, as database/sql drivers do: gpu/cpu (kind "cpu", the
// host CPU device), gpu/sim (kind "sim", simulated GPUs of a real
// topology) and gpu/opencl (kind "opencl", OpenCL devices of any vendor,
// CodeDevices). Each device says which it is ([Device.Kind]), which is how
// an executor knows what code it runs. Importing the package makes the
// kind available:
//
//	import _ "github.com/streamdag/streamdag/gpu/cpu"
//
//	set, err := gpu.Open(ctx, "cpu", gpu.Config{Streams: 4})
//	if err != nil { … }                  // unknown kind, bad stream count
//	defer set.Close()
//	dev := set.Devices()[0]
//
// A driver that can list its devices without opening them (gpu/opencl,
// kind "opencl") implements [Enumerator] too ([Enumerate] asks it by
// kind): what it lists, a backend can lease.
//
// The GPU inventory through NVML (which needs cgo) is package gpu/nvml,
// the only package that imports go-nvml; a program that needs only the
// CPU device or simulated GPUs builds dag, exec, gpu, gpu/cpu and gpu/sim
// with CGO_ENABLED=0.
//
// # Backend and Pool (for executors)
//
// An executor gets its devices with gpu/nvml's Open (Discover, then
// [NewBackend] over the GPUs found and the devices the registered
// drivers list):
//
//	b, inv, err := nvml.Open(ctx, nvml.OpenConfig{}) // inv: what Discover found, with its Notes
//	if err != nil { … }                          // ErrBackendAlreadyLive, config errors
//	defer b.CloseAndWait(ctx)
//	a, err := b.BeginAttempt(gpu.AttemptRequest{Name: "flights"})
//	acq, err := b.Acquire(ctx, gpu.Config{Streams: 4}) // FIFO; the leased device, opened
//	defer acq.Release()                          // closes it, then frees the lease
//	… run on acq.Device; acq.Why says what it is …
//	a.Finish(runErr)
//	m := b.MetricsSnapshot()                     // JSON-marshalable, monotonic Generation
//
// Leases follow the devices: the pool has one slot per NVML GPU
// ([BackendConfig].Devices) and per device that a driver implementing
// [Enumerator] lists ([BackendConfig].Drivers: gpu/opencl's "opencl", a
// GPU of any vendor; a CPU OpenCL device such as PoCL when
// [BackendConfig].LeaseTypes names "cpu"), each with its vendor and
// identity (UUID, PCI bus ID, name, memory; [Backend.StartupRecords],
// [Backend.MetricsSnapshot]). A listed device that is one of the NVML
// GPUs (the same UUID or PCI bus ID, as NVIDIA's OpenCL driver lists
// them) is that GPU's way to run, not a slot of its own.
// [Backend.Acquire] opens the leased device with the driver that found
// it; an NVML GPU that no registered driver runs (streamdag has no CUDA
// device yet, and no OpenCL driver lists it) is never used as if it ran:
// Acquire gives its lease back and runs on the CPU device, saying why, as
// it does on a host with no device to lease ([Backend.Claim] answers
// [ErrNoGPU] at once). [Backend.Claim] alone takes a lease without opening
// anything.
//
// The [Backend] follows the seed GpuBackendCore: one live backend per
// process (an owner lease); a lifecycle gate that Close wins exactly once
// and that refuses new admissions, service reads and attempt begins with
// [ErrBackendClosing]; a close coordinator goroutine that runs the cleanup
// in bounded slices in the seed's phase order (service, journal, GPU
// permits then resource release and owner lease, observation); timeouts
// with late-success accounting ([ErrBackendCloseTimeout]); fail-closed
// cleanup ([ErrCleanupFailedClosed]); reentrant close refused
// ([ErrReentrantObservationClose]). The *Backend is the only public handle:
// Go has no drop, so there is no implicit last-handle close — call Close
// or CloseAndWait. The [Pool] follows the seed GpuPool on
// golang.org/x/sync/semaphore's FIFO, no-steal semaphore; a [HealthCheck]
// (gpu/nvml's, by UUID) keeps a GPU found lost from being leased again.
//
// # Concurrency
//
// The registry, the backend, the pool and every device
// are safe for concurrent use; each type's doc says what may block.
package gpu
