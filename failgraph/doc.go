// Package failgraph records which bytes failed or skipped launches left
// unwritten, and why, so that no read takes them as good (layer 2).
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
// A read error is walked with the standard library. A read of bytes one
// failure left unwritten returns that *UnwrittenError itself (bytes of
// several failures: one each, joined with errors.Join, the one place with
// several causes). Its Unwrap gives a single path to the root: a
// *SkipError per skipped kernel of its Chain, newest first, each
// unwrapping to the next, and the last to the root error, the root
// kernel's own (a *KernelPanicError when the kernel panicked). errors.Is and
// errors.As reach the root and every link, and a chain printer, one line
// per level from the read to the root, is a loop:
//
//	for e := err; e != nil; e = errors.Unwrap(e) {
//		fmt.Println(e)
//	}
//
// (for a joined error, run it over each error of Unwrap() []error).
//
// A capture window (Store.BeginCapture, CubeCL's capture window) watches
// the scopes settled while it is open: a failed or skipped scope dooms it,
// keeping the first one's failure (a *DoomError), and a clean scope adds
// the byte ranges it wrote to its write set; outside a window nothing is
// doomed or recorded. The executor opens one for a run it captures for
// replay, and refuses to replay a doomed one.
//
// A Store is safe for concurrent use. Its clean path (Written and SkipIfTainted
// when nothing is tainted and no capture window is open) takes no lock: one
// atomic load.
package failgraph
