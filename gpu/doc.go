// Package gpu is streamdag's device boundary (layer 1): the interfaces an
// executor drives on every kind of device ([Device], [Stream], [Event],
// [Task]), the driver registry by kind ([Register], [Open], [Drivers]),
// the process-owned [Backend] with its lease [Pool], and the multi-GPU
// [Coordinator]. Nothing here needs cgo or loads a vendor library.
//
// # Drivers
//
// Each kind of device lives in its own package, which registers its
// [Driver] in init, as database/sql drivers do: gpu/cpu (kind "cpu", the
// host CPU device) and gpu/sim (kind "sim", simulated GPUs of a real
// topology). Each device says which it is ([Device.Kind]), which is how
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
// The GPU inventory through NVML (which needs cgo) is package gpu/nvml,
// the only package that imports go-nvml; a program that needs only the
// CPU device or simulated GPUs builds dag, exec, gpu, gpu/cpu and gpu/sim
// with CGO_ENABLED=0.
//
// # Backend and Pool (for executors)
//
// An executor gets its GPUs with gpu/nvml's Open (Discover, then
// [NewBackend] over the GPUs found):
//
//	b, inv, err := nvml.Open(ctx, nvml.OpenConfig{}) // inv: what Discover found, with its Notes
//	if err != nil { … }                          // ErrBackendAlreadyLive, config errors
//	defer b.CloseAndWait(ctx)
//	a, err := b.BeginAttempt(gpu.AttemptRequest{Name: "flights"})
//	lease, err := b.Claim(ctx)                   // FIFO; ErrNoGPU at once on a CPU-only host
//	if errors.Is(err, gpu.ErrNoGPU) { /* run on the CPU device */ }
//	…; lease.Release(); a.Finish(runErr)
//	m := b.MetricsSnapshot()                     // JSON-marshalable, monotonic Generation
//
// On a CPU-only host the same code path runs: the backend owns zero GPUs
// and Claim returns [ErrNoGPU] at once. streamdag has no CUDA device layer
// yet: a lease is exclusive use of a GPU's slot, and nothing here runs
// work on a GPU or pretends to. [Backend.Acquire] gives a run its device
// the same way on every host (the CPU device, through the registry, with
// the reason no GPU is used).
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
// The registry, the backend, the pool, the coordinator and every device
// are safe for concurrent use; each type's doc says what may block.
package gpu
