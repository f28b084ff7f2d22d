package cl

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/ebitengine/purego"
)

// checkpointEvery is how many commands a queue keeps unexamined before it
// enqueues a marker of its own so the waiter can check and free their
// events; failures found there are reported by the next user marker.
const checkpointEvery = 256

// pendingCmd is an enqueued command whose event the waiter has not yet
// examined.
type pendingCmd struct {
	ev    uintptr
	seq   uint64
	op    string
	pin   *runtime.Pinner // the Go memory of an asynchronous copy, unpinned once examined
	waits []*Event        // the events a Wait marker waits on, whose failures it reports
}

// Queue is one in-order OpenCL command queue (a stream): commands run in
// the order they are enqueued; commands of different queues may overlap.
// Enqueue methods return once the command is enqueued; Write and Read
// block until their copy is done. Queue methods are safe for concurrent
// use (each enqueue is atomic; their order is the order of the calls).
//
// Each queue has a waiter goroutine, locked to its OS thread, that blocks
// in clWaitForEvents on the queue's markers in order, examines the events
// of the commands each marker covers, records failures on the host and
// closes the marker's Done channel. Close stops it.
type Queue struct {
	h     uintptr
	ctx   *Context
	index int

	mu      sync.Mutex // guards the enqueue side and scratch
	closed  bool
	seq     uint64 // the last sequence number given (commands and markers)
	last    uint64 // the sequence number of the last command enqueued (LastCommand)
	pending []pendingCmd
	kernels map[kernelKey]*Kernel
	scratch struct { // C-visible arguments of the hot calls; heap, under mu
		ev            uintptr
		global, local [3]uintptr
		wait          [8]uintptr
	}

	wmu     sync.Mutex // guards wq and wclosed
	wq      []*Event
	wclosed bool
	wake    chan struct{}
	wdone   chan struct{}
	wstatus int32             // the waiter's clGetEventInfo result, heap for C
	free    chan []pendingCmd // covers slices the waiter is done with, for reuse
	settled atomic.Uint64     // the Seq of the latest marker seen complete (Settled)
	// passives are the passive markers (PassiveMarker) not yet seen
	// settled, in enqueue order; guarded by wmu.
	passives []*Event
}

type kernelKey struct {
	p    *Program
	name string
}

// NewQueue creates an in-order command queue on the context's device and
// starts its waiter goroutine. Index numbers the context's queues from 0
// in creation order. Errors: ErrClosed after Close; an *Error from
// clCreateCommandQueue.
func (c *Context) NewQueue() (*Queue, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	var st int32
	h := syscall(cl.createCommandQueue, c.h, c.dev.id, 0, uintptr(unsafe.Pointer(&st)))
	if err := check("clCreateCommandQueue", uintptr(uint32(st))); err != nil {
		return nil, fmt.Errorf("opencl: new queue on %s: %w", c.dev.info.Name, err)
	}
	q := &Queue{h: h, ctx: c, index: c.nqueues, kernels: map[kernelKey]*Kernel{},
		wake: make(chan struct{}, 1), wdone: make(chan struct{}), free: make(chan []pendingCmd, 4)}
	c.nqueues++
	c.queues[q] = struct{}{}
	go q.waiter()
	return q, nil
}

// Index returns the queue's number within its context (0, 1, …).
func (q *Queue) Index() int { return q.index }

// Close enqueues a last marker, waits for every command enqueued so far to
// finish (blocking; a command waiting on a user event never completed
// keeps it waiting: Context.Close completes those first), stops the
// waiter, and releases the queue's kernels and the queue. It returns the
// failures the last marker found (those no user marker reported). It is
// idempotent; after it, enqueue methods return ErrClosed.
func (q *Queue) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	last, err := q.markerLocked(nil, false)
	q.mu.Unlock()
	q.wmu.Lock()
	q.wclosed = true
	q.wmu.Unlock()
	q.signal()
	<-q.wdone
	q.wmu.Lock()
	passives := q.passives
	q.passives = nil
	q.wmu.Unlock()
	for _, e := range passives {
		e.settlePassive()
	}
	for _, c := range q.pending { // left when the last marker failed to enqueue
		if c.pin != nil {
			c.pin.Unpin()
		}
	}
	errs := []error{err}
	if last != nil {
		errs = append(errs, last.err)
		last.Release()
	}
	for _, k := range q.kernels {
		errs = append(errs, check("clReleaseKernel", syscall(cl.releaseKernel, k.h)))
	}
	errs = append(errs, check("clReleaseCommandQueue", syscall(cl.releaseCommandQueue, q.h)))
	q.ctx.mu.Lock()
	delete(q.ctx.queues, q)
	q.ctx.mu.Unlock()
	return errors.Join(errs...)
}

// lockOpen takes q.mu and reports ErrClosed if the queue is closed (then
// the lock is not held).
func (q *Queue) lockOpen(op string) error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return fmt.Errorf("opencl: queue %d: %s: %w", q.index, op, ErrClosed)
	}
	return nil
}

// enqueued records a command just enqueued with its event in
// q.scratch.ev (and the pinned Go memory it uses, if any); q.mu is held.
func (q *Queue) enqueued(op string, pin *runtime.Pinner) {
	q.seq++
	q.last = q.seq
	q.pending = append(q.pending, pendingCmd{ev: q.scratch.ev, seq: q.seq, op: op, pin: pin})
	if len(q.pending) >= checkpointEvery {
		if e, err := q.markerLocked(nil, true); err == nil {
			e.Release()
		}
	}
}

// LastCommand returns the sequence number of the last command (a launch,
// an asynchronous copy or a fill; not a marker or a blocking transfer)
// enqueued on q, the Seq a *CommandError of its failure carries; 0 before
// the first. Numbers increase with each command and marker, so a caller
// that serialises its own enqueues on q learns the number of a command
// it just enqueued (a call that enqueued nothing, a zero-byte copy say,
// leaves it unchanged).
func (q *Queue) LastCommand() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.last
}

// Settled returns the sequence number of the latest marker (a Marker, a
// Checkpoint, one the queue enqueues itself every checkpointEvery
// commands, or a PassiveMarker once settled; not a Wait's) seen complete
// successfully, or 0 before the first: every command whose number is
// lower has then finished on the device, so memory it used may be
// reused. It never decreases. A marker that fails leaves it unchanged
// (its predecessors are not known to have finished); the next one that
// succeeds advances it. It does not block (one atomic load).
func (q *Queue) Settled() uint64 { return q.settled.Load() }

// Launch enqueues the kernel k (made by q.Kernel) over an NDRange of
// global work-items per dimension (1 to 3 dimensions) in work-groups of
// local (nil: the implementation chooses; else the same length as global,
// each dividing its global size). The arguments are those set on k at
// the time of the call: k may be changed and launched again at once.
// Errors: ErrClosed; an *Error from clEnqueueNDRangeKernel (for example
// CL_INVALID_KERNEL_ARGS when an argument was never set,
// CL_INVALID_WORK_GROUP_SIZE); a failure the device reports later comes
// as a *CommandError from the next marker's Err.
func (q *Queue) Launch(k *Kernel, global, local []int) error {
	if k == nil || k.q != q {
		return fmt.Errorf("opencl: queue %d: launch: kernel not made by this queue's Kernel", q.index)
	}
	return q.LaunchLabel(k, global, local, k.op)
}

// LaunchLabel is Launch with the label a failure of the launch carries as
// its *CommandError's Op (Launch uses "launch NAME").
func (q *Queue) LaunchLabel(k *Kernel, global, local []int, label string) error {
	if k == nil || k.q != q {
		return fmt.Errorf("opencl: queue %d: launch: kernel not made by this queue's Kernel", q.index)
	}
	if len(global) < 1 || len(global) > 3 || (local != nil && len(local) != len(global)) {
		return fmt.Errorf("opencl: queue %d: %s: global %v, local %v: want 1 to 3 dimensions, local nil or of the same length", q.index, k.op, global, local)
	}
	if err := q.ctx.dev.info.fits(global, local); err != nil {
		return fmt.Errorf("opencl: queue %d: %s: %w", q.index, label, err)
	}
	if err := q.lockOpen(k.op); err != nil {
		return err
	}
	defer q.mu.Unlock()
	s := &q.scratch
	for i, g := range global {
		s.global[i] = uintptr(g)
		if local != nil {
			s.local[i] = uintptr(local[i])
		}
	}
	lp := uintptr(0)
	if local != nil {
		lp = uintptr(unsafe.Pointer(&s.local[0]))
	}
	r, _, _ := purego.SyscallN(cl.enqueueNDRangeKernel, q.h, k.h, uintptr(len(global)), 0, uintptr(unsafe.Pointer(&s.global[0])), lp,
		0, 0, uintptr(unsafe.Pointer(&s.ev)))
	if err := check("clEnqueueNDRangeKernel", r); err != nil {
		return fmt.Errorf("opencl: queue %d: %s: %w", q.index, label, err)
	}
	q.enqueued(label, nil)
	return nil
}

// fits returns an error when the device cannot run an NDRange of global
// work-items in work-groups of local (nil or of global's length): a size
// that is not positive or a local size that does not divide its global
// size, more dimensions than the device has, a global size or a total of
// work-items past the device's size_t (AddressBits), a local size past
// MaxWorkItems or a work-group past MaxWorkGroup. A zero AddressBits or
// MaxWorkGroup and a nil MaxWorkItems (a device that did not say) check
// nothing.
func (i *DeviceInfo) fits(global, local []int) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("global %v, local %v: "+format, append([]any{global, local}, args...)...)
	}
	if n := len(i.MaxWorkItems); n > 0 && len(global) > n {
		return bad("%d dimensions, the device has %d", len(global), n)
	}
	maxSize := uint64(math.MaxUint64)
	if i.AddressBits > 0 && i.AddressBits < 64 {
		maxSize = 1<<i.AddressBits - 1
	}
	total, group := uint64(1), uint64(1)
	for d, g := range global {
		if g <= 0 || (local != nil && (local[d] <= 0 || g%local[d] != 0)) {
			return bad("sizes must be positive and local must divide global")
		}
		hi, lo := bits.Mul64(total, uint64(g))
		if hi != 0 || lo > maxSize {
			return bad("%s work-items exceed the device's %d-bit size_t", workItems(global), i.AddressBits)
		}
		total = lo
		if local == nil {
			continue
		}
		if d < len(i.MaxWorkItems) && local[d] > i.MaxWorkItems[d] {
			return bad("local size %d in dimension %d exceeds the device's %d", local[d], d, i.MaxWorkItems[d])
		}
		hi, group = bits.Mul64(group, uint64(local[d]))
		if hi != 0 || i.MaxWorkGroup > 0 && group > uint64(i.MaxWorkGroup) {
			return bad("a work-group of %s work-items exceeds the device's %d", workItems(local), i.MaxWorkGroup)
		}
	}
	return nil
}

// workItems writes the product of sizes: "4611686018427387904×4611686018427387904".
func workItems(sizes []int) string {
	parts := make([]string, len(sizes))
	for i, s := range sizes {
		parts[i] = strconv.Itoa(s)
	}
	return strings.Join(parts, "×")
}

// Copy enqueues a device copy of n bytes from src at srcOff to dst at
// dstOff (both buffers of this context; the ranges must not overlap within
// one buffer). Errors: a range outside a buffer, ErrClosed, an *Error from
// clEnqueueCopyBuffer (CL_MEM_COPY_OVERLAP).
func (q *Queue) Copy(dst *Buffer, dstOff int64, src *Buffer, srcOff int64, n int64) error {
	if err := src.span("copy source", srcOff, n); err != nil {
		return err
	}
	if err := dst.span("copy destination", dstOff, n); err != nil {
		return err
	}
	if err := q.lockOpen("copy"); err != nil {
		return err
	}
	defer q.mu.Unlock()
	if n == 0 {
		return nil
	}
	r, _, _ := purego.SyscallN(cl.enqueueCopyBuffer, q.h, src.h, dst.h, uintptr(srcOff), uintptr(dstOff), uintptr(n), 0, 0,
		uintptr(unsafe.Pointer(&q.scratch.ev)))
	if err := check("clEnqueueCopyBuffer", r); err != nil {
		return fmt.Errorf("opencl: queue %d: copy %d bytes: %w", q.index, n, err)
	}
	q.enqueued("copy", nil)
	return nil
}

// Fill enqueues writing pattern repeatedly over [off, off+n) of b. The
// pattern is 1, 2, 4, …, 128 bytes and off and n are multiples of its
// length; it is copied at the call. Errors: a range outside b, ErrClosed,
// an *Error from clEnqueueFillBuffer (CL_INVALID_VALUE for a bad pattern
// size or alignment).
func (q *Queue) Fill(b *Buffer, off, n int64, pattern []byte) error {
	if err := b.span("fill", off, n); err != nil {
		return err
	}
	if len(pattern) == 0 {
		return fmt.Errorf("opencl: queue %d: fill: empty pattern", q.index)
	}
	if err := q.lockOpen("fill"); err != nil {
		return err
	}
	defer q.mu.Unlock()
	if n == 0 {
		return nil
	}
	r, _, _ := purego.SyscallN(cl.enqueueFillBuffer, q.h, b.h, uintptr(unsafe.Pointer(&pattern[0])), uintptr(len(pattern)),
		uintptr(off), uintptr(n), 0, 0, uintptr(unsafe.Pointer(&q.scratch.ev)))
	if err := check("clEnqueueFillBuffer", r); err != nil {
		return fmt.Errorf("opencl: queue %d: fill %d bytes: %w", q.index, n, err)
	}
	q.enqueued("fill", nil)
	return nil
}

// Write copies src into b at off, after every command enqueued before it
// on q, and returns when the copy is done (src may be reused at once).
// Errors: a range outside b, ErrClosed, an *Error from
// clEnqueueWriteBuffer.
func (q *Queue) Write(b *Buffer, off int64, src []byte) error {
	return q.transfer("write", cl.enqueueWriteBuffer, "clEnqueueWriteBuffer", b, off, src)
}

// Read copies len(dst) bytes of b at off into dst, after every command
// enqueued before it on q, and returns when dst holds them. It reports
// only its own copy's status: failures of earlier commands come from
// markers. Errors: a range outside b, ErrClosed, an *Error from
// clEnqueueReadBuffer.
func (q *Queue) Read(b *Buffer, off int64, dst []byte) error {
	return q.transfer("read", cl.enqueueReadBuffer, "clEnqueueReadBuffer", b, off, dst)
}

// WriteAsync enqueues a copy of src into b at off and returns at once.
// src is pinned (runtime.Pinner) and must stay unchanged until a marker
// enqueued after the call has completed; the queue's waiter unpins it
// once it has seen the copy complete. Errors: a range outside b,
// ErrClosed, an *Error from clEnqueueWriteBuffer; a failure the device
// reports later comes as a *CommandError (Op "copy in") from the next
// marker's Err.
func (q *Queue) WriteAsync(b *Buffer, off int64, src []byte) error {
	return q.transferAsync("copy in", cl.enqueueWriteBuffer, "clEnqueueWriteBuffer", b, off, src)
}

// ReadAsync enqueues a copy of len(dst) bytes of b at off into dst and
// returns at once; dst holds them once a marker enqueued after the call
// has completed, and is pinned until the queue's waiter has seen the copy
// complete. Errors as WriteAsync's (Op "copy out").
func (q *Queue) ReadAsync(b *Buffer, off int64, dst []byte) error {
	return q.transferAsync("copy out", cl.enqueueReadBuffer, "clEnqueueReadBuffer", b, off, dst)
}

func (q *Queue) transferAsync(op string, fn uintptr, call string, b *Buffer, off int64, p []byte) error {
	if err := b.span(op, off, int64(len(p))); err != nil {
		return err
	}
	if err := q.lockOpen(op); err != nil {
		return err
	}
	defer q.mu.Unlock()
	if len(p) == 0 {
		return nil
	}
	pin := new(runtime.Pinner)
	pin.Pin(&p[0])
	r, _, _ := purego.SyscallN(fn, q.h, b.h, 0, uintptr(off), uintptr(len(p)), uintptr(unsafe.Pointer(&p[0])), 0, 0,
		uintptr(unsafe.Pointer(&q.scratch.ev)))
	if err := check(call, r); err != nil {
		pin.Unpin()
		return fmt.Errorf("opencl: queue %d: %s %d bytes at %d: %w", q.index, op, len(p), off, err)
	}
	q.enqueued(op, pin)
	return nil
}

func (q *Queue) transfer(op string, fn uintptr, call string, b *Buffer, off int64, p []byte) error {
	if err := b.span(op, off, int64(len(p))); err != nil {
		return err
	}
	if err := q.lockOpen(op); err != nil {
		return err
	}
	defer q.mu.Unlock()
	if len(p) == 0 {
		return nil
	}
	const blocking = 1
	r := syscall(fn, q.h, b.h, blocking, uintptr(off), uintptr(len(p)), uintptr(unsafe.Pointer(&p[0])), 0, 0, 0)
	runtime.KeepAlive(p)
	q.seq++
	if err := check(call, r); err != nil {
		return fmt.Errorf("opencl: queue %d: %s %d bytes at %d: %w", q.index, op, len(p), off, err)
	}
	return nil
}

// Marker enqueues a marker that completes when every command enqueued
// before it on q and every event in wait has completed, and returns its
// Event (see Event for how failures are reported). The events in wait
// must be of this context (markers of any of its queues, or user events);
// bridge another context's events through a UserEvent. Release the
// returned event when done with it. Errors: ErrClosed, a released or
// foreign event in wait, an *Error from clEnqueueMarkerWithWaitList.
func (q *Queue) Marker(wait ...*Event) (*Event, error) {
	if err := q.lockOpen("marker"); err != nil {
		return nil, err
	}
	defer q.mu.Unlock()
	return q.markerLocked(wait, false)
}

// Wait makes every command enqueued on q after it wait for the events
// (an in-order marker with a wait list): it returns at once, blocking no
// host thread. A waited event's error is reported by the next Marker of
// q. The wait marker is examined with the commands the next marker
// covers, as a command is: it does not wake the queue's waiter. Errors as
// Marker's.
func (q *Queue) Wait(events ...*Event) error {
	if err := q.lockOpen("wait"); err != nil {
		return err
	}
	defer q.mu.Unlock()
	if err := q.enqueueMarker(events, &q.scratch.ev); err != nil {
		return err
	}
	for _, w := range events {
		w.refs.Add(1)
	}
	q.seq++
	q.pending = append(q.pending, pendingCmd{ev: q.scratch.ev, seq: q.seq, op: "marker", waits: append([]*Event(nil), events...)})
	if len(q.pending) >= checkpointEvery {
		if e, err := q.markerLocked(nil, true); err == nil {
			e.Release()
		}
	}
	return nil
}

// Checkpoint enqueues a marker like Marker's, except that the failures
// it finds are not reported by its Err (always nil) but passed on to the
// next Marker of q, as Wait's are: use it to observe progress (Done)
// without taking the failures from the event that will report them.
// Release the returned event when done with it. Errors: ErrClosed, an
// *Error from clEnqueueMarkerWithWaitList.
func (q *Queue) Checkpoint() (*Event, error) {
	if err := q.lockOpen("checkpoint"); err != nil {
		return nil, err
	}
	defer q.mu.Unlock()
	return q.markerLocked(nil, true)
}

// Finish enqueues a marker and waits for it (or for ctx): it returns the
// marker's Err, or ctx.Err() if ctx ends first (the work goes on).
func (q *Queue) Finish(ctx context.Context) error {
	e, err := q.Marker()
	if err != nil {
		return err
	}
	defer e.Release()
	return e.Wait(ctx)
}

// markerLocked enqueues a marker for the waiter to settle; q.mu is held.
// An internal marker hands the failures it finds to the next user marker
// instead of reporting them.
func (q *Queue) markerLocked(wait []*Event, internal bool) (*Event, error) {
	e, err := q.newMarker(wait, internal, false)
	if err != nil {
		return nil, err
	}
	q.wmu.Lock()
	q.wq = append(q.wq, e)
	q.wmu.Unlock()
	q.signal()
	return e, nil
}

// newMarker enqueues a marker covering the commands pending since the
// previous one and returns its Event; q.mu is held.
func (q *Queue) newMarker(wait []*Event, internal, passive bool) (*Event, error) {
	e := &Event{q: q, ctx: q.ctx, done: make(chan struct{}), internal: internal, passive: passive}
	if err := q.enqueueMarker(wait, &e.h); err != nil {
		return nil, err
	}
	for _, w := range wait {
		w.refs.Add(1)
	}
	e.refs.Store(2) // the caller's and the waiter's
	q.seq++
	e.seq = q.seq
	if len(wait) > 0 {
		e.waits = append([]*Event(nil), wait...)
	}
	e.covers = q.pending
	select {
	case q.pending = <-q.free:
	default:
		q.pending = nil
	}
	purego.SyscallN(cl.flush, q.h)
	return e, nil
}

// enqueueMarker checks the events of wait and enqueues a marker waiting
// on them, its event handle stored at h; q.mu is held.
func (q *Queue) enqueueMarker(wait []*Event, h *uintptr) error {
	handles := q.scratch.wait[:0]
	if len(wait) > len(q.scratch.wait) {
		handles = make([]uintptr, 0, len(wait))
	}
	for i, w := range wait {
		switch {
		case w == nil:
			return fmt.Errorf("opencl: queue %d: marker: wait event %d is nil", q.index, i)
		case w.released.Load():
			return fmt.Errorf("opencl: queue %d: marker: wait event %d: %w", q.index, i, ErrClosed)
		case w.ctx != q.ctx:
			return fmt.Errorf("opencl: queue %d: marker: wait event %d is of another context (bridge it with a UserEvent)", q.index, i)
		}
		handles = append(handles, w.h)
	}
	wp := uintptr(0)
	if len(handles) > 0 {
		wp = uintptr(unsafe.Pointer(&handles[0]))
	}
	r, _, _ := purego.SyscallN(cl.enqueueMarkerWithWaitList, q.h, uintptr(len(handles)), wp, uintptr(unsafe.Pointer(h)))
	runtime.KeepAlive(handles)
	if err := check("clEnqueueMarkerWithWaitList", r); err != nil {
		return fmt.Errorf("opencl: queue %d: marker: %w", q.index, err)
	}
	return nil
}

// waited appends to errs the failures of the events waits that marker
// seq of q waited on, once each has completed, and drops the marker's
// hold on them.
func (q *Queue) waited(seq uint64, waits []*Event, errs []error) []error {
	for _, w := range waits {
		if w.passive {
			w.settlePassive()
		}
		<-w.done
		if w.err != nil {
			errs = append(errs, fmt.Errorf("opencl: queue %d marker %d waited on a failed event: %w", q.index, seq, w.err))
		}
		w.unref()
	}
	return errs
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// waiter settles the queue's markers in enqueue order until Close.
func (q *Queue) waiter() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	defer close(q.wdone)
	var carry []error
	for {
		q.wmu.Lock()
		batch, closed := q.wq, q.wclosed
		q.wq = nil
		q.wmu.Unlock()
		if len(batch) == 0 {
			if closed {
				return
			}
			<-q.wake
			continue
		}
		for _, e := range batch {
			carry = q.settle(e, carry)
		}
	}
}

// settle waits for the marker e, examines the commands it covers and the
// events it waited on, and completes e (a user marker) or returns the
// failures to carry to the next one (an internal marker).
func (q *Queue) settle(e *Event, carry []error) []error {
	errs := q.examine(e, &q.wstatus, carry)
	if e.internal {
		close(e.done)
		e.unref()
		return errs
	}
	e.err = errors.Join(errs...)
	close(e.done)
	e.unref()
	return nil
}

// examine waits for the marker e, advances Settled to it when it
// succeeded, and appends to errs the failures of the commands it covers
// and of the events it waited on (examined with status, C-visible
// scratch for the calls), freeing the commands' events and unpinning
// their Go memory.
func (q *Queue) examine(e *Event, status *int32, errs []error) []error {
	dev := q.ctx.dev.info.Name
	failed := false
	if st := Status(int32(syscall(cl.waitForEvents, 1, uintptr(unsafe.Pointer(&e.h))))); st != Success {
		errs = append(errs, &CommandError{Device: dev, Queue: q.index, Seq: e.seq, Op: "marker", Status: st})
		failed = true
	} else {
		for old := q.settled.Load(); old < e.seq && !q.settled.CompareAndSwap(old, e.seq); old = q.settled.Load() {
		}
	}
	for _, c := range e.covers {
		*status = 0
		if err := check("clGetEventInfo", syscall(cl.getEventInfo, c.ev, clEventCommandExecutionStatus, 4, uintptr(unsafe.Pointer(status)), 0)); err != nil {
			errs = append(errs, fmt.Errorf("opencl: queue %d command %d (%s): status: %w", q.index, c.seq, c.op, err))
		} else if st := Status(*status); st < 0 {
			failed = true
			if c.waits != nil {
				// A Wait marker fails only for its wait list, as
				// clWaitForEvents reports a marker it waited on.
				st = ExecStatusErrorForEventsInWaitList
			}
			errs = append(errs, &CommandError{Device: dev, Queue: q.index, Seq: c.seq, Op: c.op, Status: st})
		}
		if failed {
			q.ctx.deferRelease(c.ev) // a failure may still be propagating through it
		} else {
			syscall(cl.releaseEvent, c.ev)
		}
		if c.pin != nil {
			c.pin.Unpin()
		}
		errs = q.waited(c.seq, c.waits, errs)
	}
	clear(e.covers)
	if cap(e.covers) > 0 {
		select {
		case q.free <- e.covers[:0]:
		default:
		}
	}
	e.covers = nil
	errs = q.waited(e.seq, e.waits, errs)
	e.waits = nil
	return errs
}

// PassiveMarker is Marker for a marker that only other markers wait on:
// the queue's waiter does not watch it (no host thread wakes for it).
// It is settled (Done closed, Err set, the commands it covers examined,
// Settled advanced) by the waiter of the first queue that settles a
// marker waiting on it (Wait, or Marker's wait list: the waiting marker
// has completed, so settling it blocks no more), or by Close. Release
// the returned event when done with it. Errors as Marker's.
func (q *Queue) PassiveMarker(wait ...*Event) (*Event, error) {
	if err := q.lockOpen("marker"); err != nil {
		return nil, err
	}
	defer q.mu.Unlock()
	e, err := q.newMarker(wait, false, true)
	if err != nil {
		return nil, err
	}
	q.wmu.Lock()
	n := 0
	for n < len(q.passives) && isDone(q.passives[n]) {
		n++
	}
	q.passives = append(q.passives[:copy(q.passives, q.passives[n:])], e)
	q.wmu.Unlock()
	return e, nil
}

// isDone reports whether e's Done channel is closed.
func isDone(e *Event) bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// settlePassive settles the passive marker e once; later and concurrent
// calls wait for the first.
func (e *Event) settlePassive() {
	e.settleOnce.Do(func() {
		e.err = errors.Join(e.q.examine(e, new(int32), nil)...)
		close(e.done)
		e.unref()
	})
}
