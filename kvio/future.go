package kvio

import (
	"context"
	"fmt"
	"sync"
)

// Future is a read or write started by File.ReadAsync or File.WriteAsync.
// It completes on its own, whether or not Wait is called; Wait returns its
// result. A Future is safe for concurrent use; the zero value is not valid.
type Future struct {
	file   *File
	op     opKind
	p      []byte // the part of the caller's buffer to transfer
	want   int    // len of the caller's buffer
	off    int64
	task   int
	ctx    context.Context // the request's; canceled by a Wait's ctx too
	cancel context.CancelCauseFunc
	slots  context.Context    // done once no chunk is left to claim: ends waits for a pool slot
	stop   context.CancelFunc // cancels slots
	done   chan struct{}

	mu      sync.Mutex
	counts  []int // bytes transferred by each chunk that ran
	next    int   // next chunk to claim
	running int   // chunks being transferred
	workers int   // pool goroutines of the request that have not exited
	failed  error // first chunk failure
	n       int   // result, set before done is closed
	err     error
}

// start creates the Future of a request and starts it.
func (f *File) start(ctx context.Context, op opKind, p []byte, off int64) *Future {
	fu := &Future{file: f, op: op, p: p, want: len(p), off: off, task: int(min(f.opts.TaskSizeBytes, 1<<40)), done: make(chan struct{})}
	if err := f.begin(ctx, op, off); err != nil {
		fu.err = err
		close(fu.done)
		return fu
	}
	if int64(len(p)) <= f.opts.GDSThresholdBytes {
		fu.n, fu.err = f.inline(op, p, off)
		if op == opWrite {
			f.grow(off, fu.n)
		}
		close(fu.done) // before Done: Close waits for in-flight requests, so the Future must be done first
		f.inflight.Done()
		return fu
	}
	if op == opRead {
		fu.p = p[:min(int64(len(p)), max(f.Size()-off, 0))]
	}
	chunks := (len(fu.p) + fu.task - 1) / fu.task
	fu.counts = make([]int, chunks)
	fu.ctx, fu.cancel = context.WithCancelCause(ctx)
	fu.slots, fu.stop = context.WithCancel(fu.ctx)
	// One goroutine per pool slot the request can use, not one per chunk;
	// where reads can tell cached pages from the device, only as many as
	// can copy cached pages at once, more joining while reads wait for the
	// device (see Options.NumThreads).
	fu.workers = min(f.opts.NumThreads, chunks)
	if f.probes() {
		fu.workers = min(fu.workers, cpuWorkers())
	}
	if chunks == 0 {
		fu.mu.Lock()
		fu.maybeDone()
		fu.mu.Unlock()
		return fu
	}
	for range fu.workers {
		go fu.work()
	}
	return fu
}

// work runs chunks of the request, in file order, each while holding one of
// the File's pool slots, until none is left to claim, or until a chunk
// found all its pages cached while more goroutines than cpuWorkers run.
func (fu *Future) work() {
	sem := fu.file.sem
	for sem.Acquire(fu.slots, 1) == nil {
		i := fu.claim()
		if i < 0 {
			sem.Release(1)
			break
		}
		n, cached, err := fu.run(i)
		sem.Release(1)
		fu.finish(i, n, err)
		if cached && fu.shrink() {
			return
		}
	}
	fu.mu.Lock()
	fu.workers--
	fu.maybeDone()
	fu.mu.Unlock()
}

// blocking is called by a goroutine about to wait for the device: it starts
// one more pool goroutine, up to Options.NumThreads, while chunks are left
// to claim, so the device keeps as many reads in flight as the pool allows.
func (fu *Future) blocking() {
	fu.mu.Lock()
	defer fu.mu.Unlock()
	if fu.workers < fu.file.opts.NumThreads && fu.next < len(fu.counts) && fu.failed == nil && fu.slots.Err() == nil {
		fu.workers++
		go fu.work()
	}
}

// shrink ends the calling pool goroutine, returning true, when more than
// cpuWorkers run: those added while reads waited for the device are not
// needed to copy cached pages.
func (fu *Future) shrink() bool {
	fu.mu.Lock()
	defer fu.mu.Unlock()
	if fu.workers <= cpuWorkers() {
		return false
	}
	fu.workers--
	fu.maybeDone()
	return true
}

// claim returns the next chunk to run, or -1 when none is left or the
// request stopped (failed or canceled).
func (fu *Future) claim() int {
	fu.mu.Lock()
	defer fu.mu.Unlock()
	if fu.next >= len(fu.counts) || fu.failed != nil || fu.ctx.Err() != nil {
		return -1
	}
	i := fu.next
	fu.next++
	fu.running++
	if fu.next == len(fu.counts) {
		fu.stop()
	}
	return i
}

// run transfers chunk i; cached reports that the page cache held all of it.
// Where the File probes, a read first copies what the page cache holds
// without waiting (RWF_NOWAIT); when that is not all, it calls blocking and
// reads the rest the ordinary way.
func (fu *Future) run(i int) (n int, cached bool, err error) {
	start := i * fu.task
	p := fu.p[start:min(start+fu.task, len(fu.p))]
	off := fu.off + int64(start)
	f := fu.file
	if fu.op == opRead && f.probes() {
		var eof bool
		n, eof = f.cached.read(p, off)
		if eof || n == len(p) {
			return n, true, nil
		}
		fu.blocking()
	}
	m, err := f.rw(fu.op, p[n:], off+int64(n))
	return n + m, false, err
}

// finish records the outcome of chunk i.
func (fu *Future) finish(i, n int, err error) {
	fu.file.stats[fu.op].all.Add(int64(n))
	fu.mu.Lock()
	defer fu.mu.Unlock()
	fu.counts[i] = n
	fu.running--
	if err != nil && fu.failed == nil {
		fu.failed = err
		fu.stop()
	}
	fu.maybeDone()
}

// maybeDone completes the Future when nothing runs and nothing will; fu.mu
// is held.
func (fu *Future) maybeDone() {
	if fu.workers > 0 || fu.running > 0 || isClosed(fu.done) {
		return
	}
	got, contiguous := 0, true
	for i, c := range fu.counts {
		got += c
		if contiguous {
			fu.n += c
			contiguous = c == min(fu.task, len(fu.p)-i*fu.task)
		}
	}
	f := fu.file
	switch {
	case fu.failed != nil:
		fu.err = fu.failed
	case fu.next < len(fu.counts):
		fu.err = fmt.Errorf("kvio: %s %s at %d: %w", fu.op, f.name, fu.off, context.Cause(fu.ctx))
	case fu.n < fu.want:
		fu.err = &ShortReadError{File: f.name, Offset: fu.off, Want: int64(fu.want), Got: int64(got)}
	}
	if fu.op == opWrite {
		f.grow(fu.off, fu.n)
	}
	fu.stop()
	fu.cancel(nil)
	close(fu.done) // before Done (see start)
	f.inflight.Done()
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Wait runs chunks of the request that no pool goroutine has claimed yet,
// in file order, then waits until the request is done and returns its
// result (see File.ReadAsync): the bytes transferred contiguously from the
// offset, and an error when fewer than asked. When ctx is done first, Wait
// cancels the request: chunks not yet started are skipped, running ones
// are waited for, and the error wraps ctx's cause. Wait may be called any
// number of times, from several goroutines; each call returns the same
// result once the request is done.
func (fu *Future) Wait(ctx context.Context) (int, error) {
	if fu.counts != nil && !isClosed(fu.done) {
		if ctx.Err() != nil { // before helping, not when AfterFunc gets to it
			fu.cancel(context.Cause(ctx))
		}
		unhook := context.AfterFunc(ctx, func() { fu.cancel(context.Cause(ctx)) })
		defer unhook()
		for i := fu.claim(); i >= 0; i = fu.claim() {
			n, _, err := fu.run(i)
			fu.finish(i, n, err)
		}
	}
	<-fu.done
	return fu.n, fu.err
}

// Done returns a channel closed when the request is done: every chunk
// finished or skipped, and its result fixed.
func (fu *Future) Done() <-chan struct{} { return fu.done }
