// Package exec runs a pipeline: it plans a dag.Graph onto devices and
// streams, runs the launches, and reports what each did (layer 3).
//
// Planning ([Executor.Plan]) orders the kernels as a list schedule:
// among the kernels whose hazards are satisfied, the one with the longest
// path to the end of the graph goes first (HEFT's upward rank), so that
// independent work at the same depth (the cells of one anti-diagonal of a
// wavefront) is interleaved; every pair of kernels with a hazard keeps the
// order [dag.Graph.Order] gives it. It then assigns each kernel a stream
// (a chain stays on one stream: a kernel continues the stream of a
// predecessor whose stream no other successor has continued, the
// least-loaded such stream; a kernel with no predecessor joins the stream
// of the last such kernel while that stream is within a block of the
// least-loaded one, so independent kernels come in blocks and a reduction
// over them waits only where blocks meet (the block is 1 kernel in plans
// under 128 launches per stream, up to 64 in large ones); other kernels go
// to the least-loaded stream), and aligns the streams: a launch waits on an event of another stream only when a
// read-after-write, write-after-read or write-after-write hazard on
// overlapping bytes crosses streams and no earlier wait already covers it.
// Coverage is tracked with per-stream vector clocks, so a wait on a launch
// also covers everything that launch itself waited for. The number of
// waits is part of the plan.
//
// Running ([Executor.Execute], [Executor.Run]) reserves the graph's raw
// buffers (value buffers are made on first use) and hands each device
// stream its whole launch list at once, as one [gpu.List] queued with
// [gpu.Lister.EnqueueList] (a host stream's launches, or a code stream's
// driver). An event is a (stream, count) pair, and every wait is one on
// the [gpu.Counter] the device gave the list it waits on: each list
// publishes its settled launches on it after each launch another stream
// waits on (and where the device asks); a wait that is already satisfied
// costs one atomic load (none when an earlier load already saw enough),
// and only an unsatisfied one spins briefly, yields, then parks, giving up
// when the run's ctx is done. Per launch there is no goroutine, channel,
// lock or allocation on the clean path, and by default no clock reading
// either (launch timing, [WithLaunchTiming](true), reads the clock once
// per launch). Each
// launch is settled through the error graph (package failgraph): a
// launch whose reads are tainted is skipped and passes the root failure on
// to its writes; a kernel error or panic fails the launch and taints its
// writes, less the ranges its host code stated finished with
// [dag.Launch.Wrote] (device code states none: a failed device-code
// launch taints all of its writes); unrelated branches run on. When ctx is cancelled, launches not
// yet started are marked cancelled (their writes are tainted with one
// "cancelled" failure): a wait for another stream gives up, a stream list
// still queued behind other work is withdrawn, and Run returns after
// every launch that started has returned. A kernel may run another graph:
// a run under the kernel's ctx (or one derived from it) is nested and runs
// on the calling goroutine, in plan order, instead of queueing behind the
// kernel (see [Executor.Execute]).
//
// On several devices ([NewMulti]) each kernel runs on the device placement
// chose and reads its device's instance of a buffer: the buffer itself on
// its home device, a replica elsewhere. The planner tracks, by byte range,
// which devices hold each buffer's current bytes, and puts before a read a
// copy launch of each range the reader's device lacks, so a copy follows
// the last write of the bytes it moves; a copy carries the taint of those
// bytes byte for byte, so a reader is skipped exactly when it would be on
// one device. A device loss is what a device reports (a simulated GPU
// made to lose itself after a share of its own launches, sim.WithLoss; a
// driver's error matching gpu.ErrDeviceLost): a host list's publish that
// returns it stops the list there, its launches and those left on the
// device settle as lost, and after the run the same planner plans the
// recovery over the surviving devices (see [Executor.Execute]).
//
// Devices each have their own stream count. What code a device runs is
// its capabilities, never its driver's name: a device that is no
// gpu.CodeDevice runs kernels' Go functions; a code device (a
// gpu.CodeDevice, such as an OpenCL device) runs kernels' variants of the
// kind its Code names (dag.CodeKind) on memory of its own: the buffers
// they read and write get device-memory instances, reserved with the
// run's other buffers and released when it ends (or kept by the plan for
// its next run, still counted in the budget: [WithKeepDeviceMemory]), and
// the copy launches between host and device instances run on the code device's stream as CopyIn and CopyOut. One
// goroutine per code stream enqueues its launches in order (once the
// launches of other streams they wait for have settled; the launch; a
// Record where another stream waits) and settles them in order as their
// events fire, under the same contract as a CPU stream: skipped with the
// root failure when a required read is tainted, failed with the device's
// *gpu.CommandError or a soft failure ([StatusError], through a
// dag.StatusArg status word), cancelled when ctx ended before the launch
// was enqueued (a run whose ctx can end enqueues only a few milliseconds
// of device time ahead, so a cancel takes effect within about a kernel's
// time) or when the device refused it (closed: the run then returns an
// error saying so), lost when the device reported its loss (an enqueue or
// an event's failure matching gpu.ErrDeviceLost: the run then recovers
// as from any reported loss), and failed with [ErrAbandoned] when the
// device had not finished it a grace period after ctx ended (the run
// returns without it and the device is marked unusable). Every graph buffer's own
// instance stays in host memory, so a [Result] reads only host bytes.
//
// A device can also leave gracefully ([Executor.Drain]): between runs of
// a plan, its kernels move to other devices (where a
// placement.Coordinator's Unregister plans) and the device memory the
// plan keeps there goes to them as checkpoints (copied, read back and
// compared), with a [MigrationReport]; a kernel whose buffers cannot
// move stays where it was, and the returned plan launches nothing new
// on the device.
//
// The [Result] gives buffer contents only through the error graph's read
// check, so failed work can never be read as if it succeeded, and a
// [Report] per run: every launch with kernel, device, stream, status,
// error and chain, and with launch timing its start and end (built on
// first use from a status byte per launch, plus its start and end with
// timing); the waits inserted and the wall time, measured either way.
//
// A read of bytes a failure left unwritten ([Result.Value],
// [Result.Buffer]) returns a *failgraph.UnwrittenError (one per failure,
// joined, when the buffer holds several), and the standard library walks
// it to the root: errors.Unwrap gives a *failgraph.SkipError per skipped
// kernel, newest first, then the root kernel's error ("exec: kernel "K":
// ERR", or "exec: kernel "K" panicked: V" wrapping a
// *failgraph.KernelPanicError with the value and stack), then what the kernel
// returned. errors.Is and errors.As reach every level; [Result.Err] joins
// the run's roots. A chain printer is a loop (see the Result.Value
// chain example):
//
//	for e := err; e != nil; e = errors.Unwrap(e) {
//		fmt.Println(e)
//	}
//
// [Scheduler] is the multi-stream scheduler of logical streams (CubeCL's
// SchedulerMultiStream) as a front-end of an Executor: each execution of
// its queues is one graph of host tasks, pinned to the slots' streams and
// chained per slot, run with [Executor.Execute].
//
// A run can be captured for replay ([Executor.Capture]): the run settles
// each launch inside a capture window of its error graph
// (failgraph.Store.BeginCapture), so a launch that fails, is cancelled
// or is skipped dooms the capture with its failure, and one that succeeds
// adds the bytes it wrote to the capture's write set. [Capture.Replay]
// hands each device stream its recorded list again (the report says
// "replayed capture" rather than "ran plan": Report.Ran) and refuses a
// doomed capture with its failure.
//
// An Executor is safe for concurrent use; each Run has its own buffers and
// error graph.
package exec
