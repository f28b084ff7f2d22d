// Package failgraph is streamdag's error graph (layer 2): it records which
// byte ranges of which buffers were left unwritten by failed or skipped
// launches, and why.
//
// A failure is a node holding the root error, the kernel that raised it,
// and the launches skipped because of it. A taint marks a byte range
// [offset, end) of one buffer with a failure id. Tainting is "set, not
// add": a range tainted by a new failure is taken away from the failure
// that held it; a successful write releases exactly the bytes it covered;
// a failure that holds no byte any more leaves the graph.
//
// The executor uses a Store per run: before a launch, SkipIfTainted (or
// CheckReads, which also returns the root and chain) looks for the first
// tainted read (the launch is then skipped and its writes take the root
// failure); a failed launch calls Fail; a successful one calls Written. A
// host read goes through EnsureWritten, which returns an *UnwrittenError
// naming the failure, the chain of skipped kernels back to the root, and
// the root error. A chain follows the bytes read, not whole buffers, so it
// is the same however the launches were spread over streams. A finished
// run hands out a View: the read side only.
//
// A Store is safe for concurrent use. Its clean path (Written and SkipIfTainted
// when nothing is tainted) takes no lock: one atomic load.
package failgraph
