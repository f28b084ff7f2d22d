// Package gpu is streamdag's device layer (layer 1): the stream runtime
// ([Device], [Stream], [Event], and the CPU device [NewCPU]), the GPU
// inventory ([Discover], through NVML via go-nvml), the process-owned
// [Backend] and the lease [Pool].
//
// The CPU device is a first-class device with real streams: each stream is
// one long-lived worker goroutine that drains an ordered queue; an event is
// a (stream, sequence number) pair that fires when the stream's completed
// count reaches it. Queuing a task needs no goroutine, channel or
// allocation of its own.
//
// # Inventory
//
// [Discover] lists the CPU device and the GPUs NVML reports, with NVLink
// links, the P2P matrix (status per caps index, common ancestor) and MIG
// devices. It never fails: what it could not learn is in Inventory.Notes.
// A GPU NVML reports lost (ERROR_GPU_IS_LOST) is left out of Devices and
// listed in Inventory.Lost; one lost later is found by the backend's
// re-check by UUID ([NVMLCheck]) before a claim would hand it out.
// Only this package (and its subpackages, such as gpu/nvmlmock, which
// completes go-nvml's mock servers from real topologies) imports go-nvml.
// NVML is never called after a failed Init, because doing so can kill the
// process, and calls newer drivers added are made only when the library
// exports their symbol.
//
// # Backend and Pool (for executors)
//
// An executor gets its GPUs with [Open]:
//
//	b, err := gpu.Open(ctx, gpu.OpenConfig{})   // Discover + NewBackend
//	if err != nil { … }                          // ErrBackendAlreadyLive, config errors
//	defer b.CloseAndWait(ctx)
//	cpu, _ := gpu.NewCPU()                       // the CPU device, always
//	a, err := b.BeginAttempt(gpu.AttemptRequest{Name: "flights"})
//	lease, err := b.Claim(ctx)                   // FIFO; ErrNoGPU at once on a CPU-only host
//	if errors.Is(err, gpu.ErrNoGPU) { /* run on cpu */ }
//	…; lease.Release(); a.Finish(runErr)
//	m := b.MetricsSnapshot()                     // JSON-marshalable, monotonic Generation
//
// On a CPU-only host the same code path runs: the backend owns zero GPUs
// and Claim returns [ErrNoGPU] at once. streamdag has no CUDA device layer
// yet: a lease is exclusive use of a GPU's slot, and nothing here runs
// work on a GPU or pretends to.
//
// The [Backend] follows the seed GpuBackendCore (shared/seeds/
// GpuBackendCore.txt, NOTES.md section 1): one live backend per process
// (an owner lease); a lifecycle gate that Close wins exactly once and that
// refuses new admissions, service reads and attempt begins with
// [ErrBackendClosing]; a close coordinator goroutine that runs the cleanup
// in bounded slices in the seed's phase order (service, journal, GPU
// permits then resource release and owner lease, observation); timeouts
// with late-success accounting ([ErrBackendCloseTimeout]); fail-closed
// cleanup ([ErrCleanupFailedClosed]); reentrant close refused
// ([ErrReentrantObservationClose]). The *Backend is the only public handle:
// Go has no drop, so there is no implicit last-handle close — call Close
// or CloseAndWait. The [Pool] follows the seed GpuPool (GpuPool.txt,
// NOTES.md section 2) on golang.org/x/sync/semaphore's FIFO, no-steal
// semaphore.
package gpu
