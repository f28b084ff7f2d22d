// Package lease hands out exclusive use of this process's GPUs: a
// process-owned device backend and its FIFO lease pool (layer 2, above the
// driver contract of package gpu). A [Backend] owns the GPUs of this
// process and leases them, one run at a time, from a FIFO [Pool]. It
// imports gpu and topology only, no driver package and not gpu/nvml, so it builds
// without cgo: the devices it leases come from what the caller passes
// ([WithDevices], e.g. gpu/nvml's Discover) and from the drivers the
// program registered, reached through gpu's registry.
//
// # Use
//
// An executor gets its devices from a backend:
//
//	inv, err := nvml.Discover(ctx)               // the CPU device and the NVML GPUs, or why none
//	opts := []lease.Option{lease.WithDevices(inv.Devices), lease.WithSource(inv.NVML.String())}
//	if inv.NVML.Available {
//		opts = append(opts, lease.WithHealthCheck(nvml.HealthCheck(nil))) // a GPU found lost later is never leased
//	}
//	b, err := lease.New(opts...)
//	if err != nil { … }                          // ErrBackendAlreadyLive, option errors
//	defer b.CloseAndWait(ctx)
//	a, err := b.BeginAttempt(lease.AttemptRequest{Name: "flights"})
//	acq, err := b.Acquire(ctx, gpu.WithStreams(4)) // FIFO; the leased device, opened
//	defer acq.Release()                          // closes it, then frees the lease
//	… run on acq.Device; acq.Why says what it is …
//	a.Finish(runErr)
//	m := b.MetricsSnapshot()                     // JSON-marshalable, monotonic Generation
//
// # Leases follow the devices
//
// The pool has one slot per GPU of [WithDevices] and per device that
// a driver implementing gpu.Enumerator lists ([WithDrivers]:
// gpu/opencl's "opencl", a GPU of any vendor; a CPU OpenCL device such as
// PoCL when [WithLeaseTypes] names "cpu"), each with its vendor and
// identity (UUID, PCI bus ID, name, memory; [Backend.StartupRecords],
// [Backend.MetricsSnapshot]). A listed device that is one of the GPUs of
// Devices (the same UUID or PCI bus ID, as NVIDIA's OpenCL driver lists
// them) is that GPU's way to run, not a slot of its own.
// [Backend.Acquire] opens the leased device with the driver that found
// it; a GPU that no registered driver runs (streamdag has no CUDA
// driver, and no OpenCL driver lists it) is never used as if it ran: Acquire
// gives its lease back and runs on the CPU device, saying why, as it does
// on a host with no device to lease ([Backend.Claim] answers [ErrNoGPU]
// at once). [Backend.Claim] alone takes a lease (a [Claim]) without
// opening anything.
//
// # Lifecycle
//
// At most one [Backend] is live per process (an owner lease). It has a
// lifecycle gate that [Backend.Close] wins exactly once (it returns nil to
// that caller and [ErrBackendClosing] to every later one) and that refuses new admissions, service reads and
// attempt begins with [ErrBackendClosing]; a close coordinator goroutine
// that runs the cleanup in bounded slices in a fixed phase order
// (service, journal, GPU permits then resource release and owner lease,
// observation); timeouts with late-success accounting
// ([ErrBackendCloseTimeout]); fail-closed cleanup
// ([ErrCleanupFailedClosed]); reentrant close refused
// ([ErrReentrantObservationClose]). Every reason is a sentinel matched
// with errors.Is; [*CloseError] and [*ConstructionError] carry the facts.
// The *Backend is the only public handle: Go has no drop, so there is no
// implicit last-handle close — call Close or CloseAndWait; a [Session]
// holds the GPU resources weakly and the observation side strongly.
//
// The [Pool] is built on golang.org/x/sync/semaphore's FIFO, no-steal
// semaphore: [Pool.Claim] waits in arrival order,
// [Pool.TryClaim] never takes a permit a parked claim is owed, and a
// claim frees its slot before it returns its permit. A [HealthCheck]
// (gpu/nvml's, by UUID) keeps a GPU found lost from being leased again.
//
// # Concurrency
//
// Every type is safe for concurrent use; each method's doc says what may
// block. Nothing here starts a goroutine before [Backend.Close], and
// [Backend.CloseAndWait] returns only after the close coordinator has
// exited (or its ctx is done).
package lease
