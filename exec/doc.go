// Package exec plans and runs a dag.Graph on a device (layer 3).
//
// Planning ([Executor.Plan]) takes the graph's topological order, assigns
// each kernel a stream (a chain stays on one stream: a kernel continues the
// stream of the first predecessor whose stream no other successor has
// continued; other kernels go to the least-loaded stream), and then aligns
// the streams: a launch waits on an event of another stream only when a
// read-after-write, write-after-read or write-after-write hazard on
// overlapping bytes crosses streams and no earlier wait already covers it.
// Coverage is tracked with per-stream vector clocks, so a wait on a launch
// also covers everything that launch itself waited for. The number of
// waits is part of the plan.
//
// Running ([Executor.Execute], [Executor.Run]) allocates the graph's
// buffers, queues every launch on its stream with its event waits, and
// settles each launch through the error graph (package failgraph): a
// launch whose reads are tainted is skipped and passes the root failure on
// to its writes; a kernel error or panic fails the launch and taints its
// writes; unrelated branches run on. When ctx is cancelled, launches not
// yet started are marked cancelled (their writes are tainted with one
// "cancelled" failure) and Run returns after every launch that started has
// returned.
//
// The [Result] gives buffer contents only through the error graph's read
// check, so failed work can never be read as if it succeeded, and a
// [Report] per run: every launch with kernel, device, stream, status,
// start, end, error and chain; the waits inserted and the wall time.
//
// An Executor is safe for concurrent use; each Run has its own buffers and
// error graph.
package exec
