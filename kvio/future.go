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
	stop   context.CancelFunc // stops the feeder once every chunk is claimed
	done   chan struct{}

	mu      sync.Mutex
	counts  []int // bytes transferred by each chunk that ran
	next    int   // next chunk to claim
	running int   // chunks being transferred
	feeding bool  // the feeder goroutine has not exited
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
			f.grow(off + int64(fu.n))
		}
		f.inflight.Done()
		close(fu.done)
		return fu
	}
	if op == opRead {
		fu.p = p[:min(int64(len(p)), max(f.Size()-off, 0))]
	}
	fu.counts = make([]int, (len(fu.p)+fu.task-1)/fu.task)
	fu.ctx, fu.cancel = context.WithCancelCause(ctx)
	feedCtx, stop := context.WithCancel(fu.ctx)
	fu.stop = stop
	fu.feeding = true
	go fu.feed(feedCtx)
	return fu
}

// feed hands chunks, in file order, to pool goroutines as slots free up.
func (fu *Future) feed(ctx context.Context) {
	sem := fu.file.sem
	for sem.Acquire(ctx, 1) == nil {
		i := fu.claim()
		if i < 0 {
			sem.Release(1)
			break
		}
		go func() {
			n, err := fu.run(i)
			sem.Release(1)
			fu.finish(i, n, err)
		}()
	}
	fu.mu.Lock()
	fu.feeding = false
	fu.maybeDone()
	fu.mu.Unlock()
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

// run transfers chunk i.
func (fu *Future) run(i int) (int, error) {
	start := i * fu.task
	return fu.file.rw(fu.op, fu.p[start:min(start+fu.task, len(fu.p))], fu.off+int64(start))
}

// finish records the outcome of chunk i.
func (fu *Future) finish(i, n int, err error) {
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
	if fu.feeding || fu.running > 0 || isClosed(fu.done) {
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
		f.grow(fu.off + int64(fu.n))
	}
	fu.stop()
	fu.cancel(nil)
	f.inflight.Done()
	close(fu.done)
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
			n, err := fu.run(i)
			fu.finish(i, n, err)
		}
	}
	<-fu.done
	return fu.n, fu.err
}

// Done returns a channel closed when the request is done: every chunk
// finished or skipped, and its result fixed.
func (fu *Future) Done() <-chan struct{} { return fu.done }
