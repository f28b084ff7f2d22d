package opencl

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"unsafe"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cl"
	"github.com/streamdag/streamdag/topology"
)

// clStream is one stream of an OpenCL device: an in-order cl.Queue, the
// kernel objects launched on it, its recorded events and its host-task
// goroutine.
type clStream struct {
	d      *clDevice
	idx    int
	q      *cl.Queue
	prefix string // "opencl: opencl0 stream 1: "

	mu      sync.Mutex // orders the stream's enqueues; guards the fields below
	closed  bool
	kernels map[kernelKey]*streamKernel
	events  []*clEvent // recorded markers not yet released, in enqueue order
	evHead  int
	swept   *clEvent // the last recorded event sweep released (it has fired); nil: none
	final   *clEvent // the event Close recorded; Record returns it after Close
	lastCmd uint64   // q.LastCommand() after the stream's last enqueue (seq)
	// fillWaited is the latest zero-fill generation the queue waits
	// behind (clStream.ready).
	fillWaited uint64

	// Host tasks, guarded by hmu; hcur, hci and hti are owned by the
	// running host goroutine.
	hmu     sync.Mutex
	hq      []hostItem
	hclosed bool
	hwake   chan struct{} // 1-buffered
	hcur    []hostItem
	hci     int
	hti     int

	pmu     sync.Mutex
	panicE  *gpu.PanicError
	panicsN int
}

// hostItem is a batch of host tasks: they run once mark (a checkpoint
// after the commands before them) has completed; then done is completed,
// releasing the commands enqueued after them.
type hostItem struct {
	mark *cl.Event
	done *cl.UserEvent
	ts   []gpu.Task
}

// kernelKey names a kernel object of a stream: its program and entry
// point.
type kernelKey struct {
	p     *cl.Program
	entry string
}

// streamKernel is a stream's kernel object for one entry point, with the
// argument values last set on it (so an unchanged argument is not set
// again).
type streamKernel struct {
	k    *cl.Kernel
	args []argVal
}

// argVal is an argument value set on a kernel object: a scalar's size
// and bits, or a buffer (one with a zero handle: NULL). A buffer is
// compared by its
// *Buffer, never by its cl_mem handle: OpenCL reuses the handle value of
// a released buffer for a new one, which must still be set.
type argVal struct {
	size uintptr // 0: never set
	bits uint64
	buf  *cl.Buffer
	mem  bool
}

func (s *clStream) Device() topology.DeviceID { return s.d.id }
func (s *clStream) Index() int                { return s.idx }
func (s *clStream) String() string            { return fmt.Sprintf("%s stream %d", s.d.id, s.idx) }

// lock takes s.mu and returns nil, or an error (closed, lost) with the
// lock released.
func (s *clStream) lock(op string) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fmt.Errorf("%s%s: %w", s.prefix, op, gpu.ErrClosed)
	}
	if err := s.d.lostErr(); err != nil {
		s.mu.Unlock()
		return err
	}
	return nil
}

// seq returns the sequence number of the command the stream's last
// enqueue call made on its queue, or 0 when that call enqueued none (a
// zero-byte copy or fill); s.mu is held (the stream's enqueues are
// serialised on it, so no other command came between).
func (s *clStream) seq() uint64 {
	n := s.q.LastCommand()
	if n == s.lastCmd {
		return 0
	}
	s.lastCmd = n
	return n
}

// mem returns m as memory of this device, or an error naming what.
func (s *clStream) mem(m gpu.Memory, what string) (*clMemory, error) {
	cm, ok := m.(*clMemory)
	switch {
	case m == nil:
		return nil, fmt.Errorf("%s%s: nil memory", s.prefix, what)
	case !ok || cm.d != s.d:
		return nil, fmt.Errorf("%s%s: memory of another device (%s)", s.prefix, what, m.Device())
	case cm.released.Load():
		return nil, fmt.Errorf("%s%s: memory released: %w", s.prefix, what, gpu.ErrClosed)
	}
	return cm, nil
}

// LaunchKernel enqueues k on the stream's kernel object for k.Entry.
// Errors name the stream, the launch's label and, for a bad argument, its
// index: a program of another device, an unknown entry point, memory of
// another device or released, an offset out of range or not aligned to
// the device's base address alignment, a scalar of another type than the
// six, an argument that does not fit its parameter (memory for a scalar
// or a __local pointer, a scalar for a pointer or of another size), an
// argument count other than the entry point's, a bad shape or one past
// the device's limits, gpu.ErrDeviceLost, gpu.ErrClosed. It returns the
// launch's sequence number (gpu.CodeStream).
func (s *clStream) LaunchKernel(k *gpu.KernelLaunch) (uint64, error) {
	if k == nil {
		return 0, fmt.Errorf("%slaunch: nil KernelLaunch", s.prefix)
	}
	label := k.Label
	if label == "" {
		label = "launch " + k.Entry
	}
	p, ok := k.Program.(*clProgram)
	if !ok || p.d != s.d {
		return 0, fmt.Errorf("%s%s: program not built by this device (%T)", s.prefix, label, k.Program)
	}
	if err := s.lock(label); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	sk, err := s.kernel(p.p, k.Entry)
	if err != nil {
		return 0, fmt.Errorf("%s%s: %w", s.prefix, label, err)
	}
	if n := sk.k.NumParams(); len(k.Args) != n {
		return 0, fmt.Errorf("%s%s: kernel %q takes %d arguments, the launch binds %d", s.prefix, label, k.Entry, n, len(k.Args))
	}
	for i, a := range k.Args {
		if err := s.setArg(sk, i, a); err != nil {
			return 0, fmt.Errorf("%s%s: argument %d: %w", s.prefix, label, i, err)
		}
	}
	if err := s.q.LaunchLabel(sk.k, k.Global, k.Local, label); err != nil {
		return 0, s.d.enqueueErr(s.prefix, err)
	}
	return s.seq(), nil
}

// kernel returns the stream's kernel object for (p, entry); s.mu is held.
func (s *clStream) kernel(p *cl.Program, entry string) (*streamKernel, error) {
	key := kernelKey{p, entry}
	if sk, ok := s.kernels[key]; ok {
		return sk, nil
	}
	k, err := s.q.Kernel(p, entry)
	if err != nil {
		return nil, err
	}
	sk := &streamKernel{k: k}
	s.kernels[key] = sk
	return sk, nil
}

// setArg sets argument i of sk to a unless it already holds that value;
// s.mu is held. Memory is bound as a buffer from its byte offset (NULL
// for zero-byte memory), after the memory's zero fill (ready).
func (s *clStream) setArg(sk *streamKernel, i int, a gpu.KernelArg) error {
	var v argVal
	if a.Mem != nil {
		m, ok := a.Mem.(*clMemory)
		if !ok || m.d != s.d {
			return fmt.Errorf("memory of another device (%s)", a.Mem.Device())
		}
		b, err := m.at(a.Offset)
		if err != nil {
			return err
		}
		if err := s.ready(m); err != nil {
			return err
		}
		v = argVal{size: unsafe.Sizeof(uintptr(0)), buf: b, mem: true}
	} else {
		switch x := a.Scalar.(type) {
		case int32:
			v = argVal{size: 4, bits: uint64(uint32(x))}
		case uint32:
			v = argVal{size: 4, bits: uint64(x)}
		case int64:
			v = argVal{size: 8, bits: uint64(x)}
		case uint64:
			v = argVal{size: 8, bits: x}
		case float32:
			v = argVal{size: 4, bits: uint64(math.Float32bits(x))}
		case float64:
			v = argVal{size: 8, bits: math.Float64bits(x)}
		case nil:
			return errors.New("neither memory nor a scalar")
		default:
			return fmt.Errorf("scalar of type %T: want int32, uint32, int64, uint64, float32 or float64", a.Scalar)
		}
	}
	for len(sk.args) <= i {
		sk.args = append(sk.args, argVal{})
	}
	if sk.args[i] == v {
		return nil
	}
	var err error
	switch {
	case v.mem:
		err = sk.k.SetBuffer(i, v.buf)
	case v.size == 4:
		err = sk.k.Set32(i, uint32(v.bits), a.Scalar)
	default:
		err = sk.k.Set64(i, v.bits, a.Scalar)
	}
	if err != nil {
		sk.args[i] = argVal{}
		return err
	}
	sk.args[i] = v
	return nil
}

// CopyIn enqueues an asynchronous copy of src into dst at off; src is
// pinned until the copy is seen complete and must stay unchanged until
// an event recorded after the call has fired. It returns the copy's
// sequence number (gpu.CodeStream).
func (s *clStream) CopyIn(dst gpu.Memory, off int64, src []byte) (uint64, error) {
	m, err := s.mem(dst, "copy in")
	if err != nil {
		return 0, err
	}
	if err := s.lock("copy in"); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if err := s.ready(m); err != nil {
		return 0, err
	}
	if err := s.q.WriteAsync(m.b, off, src); err != nil {
		return 0, s.d.enqueueErr(s.prefix, err)
	}
	return s.seq(), nil
}

// CopyOut enqueues an asynchronous copy of len(dst) bytes of src at off
// into dst, which holds them once an event recorded after the call has
// fired (dst is pinned until then). It returns the copy's sequence
// number (gpu.CodeStream).
func (s *clStream) CopyOut(dst []byte, src gpu.Memory, off int64) (uint64, error) {
	m, err := s.mem(src, "copy out")
	if err != nil {
		return 0, err
	}
	if err := s.lock("copy out"); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if err := s.ready(m); err != nil {
		return 0, err
	}
	if err := s.q.ReadAsync(m.b, off, dst); err != nil {
		return 0, s.d.enqueueErr(s.prefix, err)
	}
	return s.seq(), nil
}

// Copy enqueues a device copy of n bytes (clEnqueueCopyBuffer; the two
// ranges must not overlap within one memory). It returns the copy's
// sequence number (gpu.CodeStream).
func (s *clStream) Copy(dst gpu.Memory, dstOff int64, src gpu.Memory, srcOff, n int64) (uint64, error) {
	dm, err := s.mem(dst, "copy destination")
	if err != nil {
		return 0, err
	}
	sm, err := s.mem(src, "copy source")
	if err != nil {
		return 0, err
	}
	if err := s.lock("copy"); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if err := errors.Join(s.ready(dm), s.ready(sm)); err != nil {
		return 0, err
	}
	if err := s.q.Copy(dm.b, dstOff, sm.b, srcOff, n); err != nil {
		return 0, s.d.enqueueErr(s.prefix, err)
	}
	return s.seq(), nil
}

// Fill enqueues writing pattern over [off, off+n) of dst and returns the
// fill's sequence number (gpu.CodeStream).
func (s *clStream) Fill(dst gpu.Memory, off, n int64, pattern []byte) (uint64, error) {
	m, err := s.mem(dst, "fill")
	if err != nil {
		return 0, err
	}
	if err := s.lock("fill"); err != nil {
		return 0, err
	}
	defer s.mu.Unlock()
	if err := s.ready(m); err != nil {
		return 0, err
	}
	if err := s.q.Fill(m.b, off, n, pattern); err != nil {
		return 0, s.d.enqueueErr(s.prefix, err)
	}
	return s.seq(), nil
}

var errNilTask = errors.New("nil task")

// Launch enqueues the host task t (see NewDevice).
func (s *clStream) Launch(t gpu.Task) error {
	if t == nil {
		return fmt.Errorf("%slaunch: %w", s.prefix, errNilTask)
	}
	return s.launchHost([]gpu.Task{t})
}

// LaunchBatch enqueues ts as host tasks in order, behind one checkpoint
// and one user event. A nil task is an error naming its index, and
// nothing is queued.
func (s *clStream) LaunchBatch(ts []gpu.Task) error {
	for i, t := range ts {
		if t == nil {
			return fmt.Errorf("%slaunch batch: %w at index %d of %d", s.prefix, errNilTask, i, len(ts))
		}
	}
	if len(ts) == 0 {
		if s.d.closedA.Load() {
			return fmt.Errorf("%slaunch batch: %w", s.prefix, gpu.ErrClosed)
		}
		return nil
	}
	return s.launchHost(append([]gpu.Task(nil), ts...))
}

func (s *clStream) launchHost(ts []gpu.Task) error {
	if err := s.lock("host task"); err != nil {
		return err
	}
	defer s.mu.Unlock()
	mark, err := s.q.Checkpoint()
	if err != nil {
		return s.d.enqueueErr(s.prefix, err)
	}
	done, err := s.d.ctx.NewUserEvent()
	if err != nil {
		mark.Release()
		return s.d.enqueueErr(s.prefix, err)
	}
	if err := s.q.Wait(done.Event()); err != nil {
		_ = done.Complete(nil)
		done.Event().Release()
		mark.Release()
		return s.d.enqueueErr(s.prefix, err)
	}
	s.hmu.Lock()
	s.hq = append(s.hq, hostItem{mark: mark, done: done, ts: ts})
	s.hmu.Unlock()
	s.hsignal()
	return nil
}

func (s *clStream) hsignal() {
	select {
	case s.hwake <- struct{}{}:
	default:
	}
}

// hostWork runs the stream's host tasks in order until Close.
func (s *clStream) hostWork() {
	defer s.d.wg.Done()
	for {
		for s.hci < len(s.hcur) {
			it := s.hcur[s.hci]
			if s.hti == 0 {
				<-it.mark.Done()
			}
			for s.hti < len(it.ts) {
				t := it.ts[s.hti]
				s.hti++ // before running: a replacement goroutine (Goexit) resumes after t
				s.runTask(t)
			}
			s.hci++
			s.hti = 0
			_ = it.done.Complete(nil)
			it.done.Event().Release()
			it.mark.Release()
		}
		clear(s.hcur)
		s.hcur, s.hci = s.hcur[:0], 0
		s.hmu.Lock()
		for len(s.hq) == 0 {
			if s.hclosed {
				s.hmu.Unlock()
				return
			}
			s.hmu.Unlock()
			<-s.hwake
			s.hmu.Lock()
		}
		s.hcur, s.hq = s.hq, s.hcur
		s.hmu.Unlock()
	}
}

// Record enqueues a marker and returns its event (see NewDevice for what
// its Wait reports). After Close it returns the event Close recorded; if
// the marker cannot be enqueued (device lost) the event has fired with
// that error.
func (s *clStream) Record() gpu.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.final
	}
	if err := s.d.lostErr(); err != nil {
		return &clEvent{d: s.d, fixed: err}
	}
	m, err := s.q.Marker()
	if err != nil {
		return &clEvent{d: s.d, fixed: s.d.enqueueErr(s.prefix, err)}
	}
	e := &clEvent{d: s.d, s: s, m: m}
	s.sweep()
	s.events = append(s.events, e)
	return e
}

// sweep releases the markers of recorded events that have completed, in
// order (an in-order queue completes them in order); s.mu is held.
func (s *clStream) sweep() {
	for s.evHead < len(s.events) {
		e := s.events[s.evHead]
		select {
		case <-e.m.Done():
		default:
			return
		}
		e.release()
		s.swept = e
		s.events[s.evHead] = nil
		s.evHead++
		if s.evHead > 64 && s.evHead*2 > len(s.events) {
			n := copy(s.events, s.events[s.evHead:])
			clear(s.events[n:])
			s.events, s.evHead = s.events[:n], 0
		}
	}
}

// CommandEvent returns the event of the first marker recorded after
// command seq that the stream still holds, or the last one it released
// once that one is past seq (it has fired). After Close: the event Close
// recorded, for a command enqueued before it. See gpu.CodeStream.
func (s *clStream) CommandEvent(seq uint64) (gpu.Event, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if seq == 0 || seq > s.lastCmd {
		return nil, false
	}
	if s.closed {
		return s.final, true
	}
	if e := s.swept; e != nil && e.m.Seq() > seq {
		return e, true
	}
	live := s.events[s.evHead:]
	i, _ := slices.BinarySearchFunc(live, seq, func(e *clEvent, seq uint64) int { return cmp.Compare(e.m.Seq(), seq+1) })
	if i < len(live) {
		return live[i], true
	}
	return nil, false
}

// Wait makes the commands and host tasks enqueued after it wait for e.
// An event of this device that has fired enqueues nothing unless it
// reports failures (they are passed on to the stream's next event).
func (s *clStream) Wait(e gpu.Event) error {
	if e == nil {
		return fmt.Errorf("%swait on a nil event", s.prefix)
	}
	if ce, ok := e.(*clEvent); ok && ce.d == s.d {
		if err := s.lock("wait"); err != nil {
			return err
		}
		defer s.mu.Unlock()
		if ce.s == s {
			return nil // queue order implies it
		}
		ce.mu.Lock()
		if ce.m != nil && !ce.released && !ce.Done() {
			err := s.q.Wait(ce.m)
			ce.mu.Unlock()
			if err != nil {
				return s.d.enqueueErr(s.prefix, err)
			}
			return nil
		}
		ce.mu.Unlock()
		return s.carry(ce.failures())
	}
	if err := s.lock("wait"); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if e.Done() {
		return s.carry(e.Wait(context.Background()))
	}
	u, err := s.d.ctx.NewUserEvent()
	if err != nil {
		return s.d.enqueueErr(s.prefix, err)
	}
	if err := s.q.Wait(u.Event()); err != nil {
		_ = u.Complete(nil)
		u.Event().Release()
		return s.d.enqueueErr(s.prefix, err)
	}
	s.d.wg.Add(1)
	go func() {
		defer s.d.wg.Done()
		_ = u.Complete(e.Wait(context.Background()))
		u.Event().Release()
	}()
	return nil
}

// carry passes the failures of an event that has fired on to the
// stream's next event (a wait on a user event completed with them);
// nil enqueues nothing. s.mu is held.
func (s *clStream) carry(failures error) error {
	if failures == nil {
		return nil
	}
	u, err := s.d.ctx.NewUserEvent()
	if err != nil {
		return s.d.enqueueErr(s.prefix, err)
	}
	_ = u.Complete(failures)
	err = s.q.Wait(u.Event())
	u.Event().Release()
	if err != nil {
		return s.d.enqueueErr(s.prefix, err)
	}
	return nil
}

// Synchronize waits until everything enqueued on the stream before it
// has completed (host tasks included), or ctx is done, and returns the
// first host-task panic since the previous Synchronize (then forgotten),
// or the device's loss. It does not report command failures: those come
// from the events recorded after the commands.
func (s *clStream) Synchronize(ctx context.Context) error {
	s.mu.Lock()
	var m *cl.Event
	if !s.closed {
		var err error
		if m, err = s.q.Checkpoint(); err != nil {
			s.mu.Unlock()
			return s.d.enqueueErr(s.prefix, err)
		}
	}
	s.mu.Unlock()
	if m != nil {
		select {
		case <-m.Done():
			m.Release()
		case <-ctx.Done():
			m.Release()
			return ctx.Err()
		}
	}
	s.pmu.Lock()
	pe := s.panicE
	if pe != nil {
		pe.More = s.panicsN - 1
	}
	s.panicE, s.panicsN = nil, 0
	s.pmu.Unlock()
	if pe != nil {
		return errors.Join(pe, s.d.lostErr())
	}
	return s.d.lostErr()
}

// close refuses new work and records the stream's final event.
func (s *clStream) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	if m, err := s.q.Marker(); err == nil {
		s.final = &clEvent{d: s.d, s: s, m: m}
	} else {
		s.final = &clEvent{d: s.d, fixed: s.d.enqueueErr(s.prefix, err)}
	}
}

// release waits for the final event and releases every marker the
// stream still holds; called by Close after the host goroutines stopped.
func (s *clStream) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.final.m != nil {
		<-s.final.m.Done()
		_ = s.final.failures()
		s.final.release()
	}
	for _, e := range s.events[s.evHead:] {
		<-e.m.Done()
		e.release()
	}
	s.events, s.evHead = nil, 0
}

// clEvent is an event of an OpenCL device: a marker of one stream, or
// (m nil) an event that fired when it was made, with the error fixed.
type clEvent struct {
	d     *clDevice
	s     *clStream
	m     *cl.Event
	fixed error

	mu       sync.Mutex // held while m is put in a wait list, and to release it
	released bool

	once sync.Once
	err  error
}

// Done reports whether the marker has completed.
func (e *clEvent) Done() bool {
	if e.m == nil {
		return true
	}
	select {
	case <-e.m.Done():
		return true
	default:
		return false
	}
}

// Wait blocks until the marker completes or ctx is done; it returns the
// failures (see NewDevice) or ctx.Err().
func (e *clEvent) Wait(ctx context.Context) error {
	if e.m == nil {
		return e.fixed
	}
	select {
	case <-e.m.Done():
		return e.failures()
	case <-ctx.Done():
		select {
		case <-e.m.Done():
			return e.failures()
		default:
			return ctx.Err()
		}
	}
}

// String returns "opencl0 stream 1 @ 7".
func (e *clEvent) String() string {
	if e.m == nil {
		return e.d.id.String() + " fired event"
	}
	return fmt.Sprintf("%v @ %d", e.s, e.m.Seq())
}

func (e *clEvent) release() {
	e.mu.Lock()
	if !e.released {
		e.released = true
		e.m.Release()
	}
	e.mu.Unlock()
}

// failures converts the marker's Err once it has completed.
func (e *clEvent) failures() error {
	if e.m == nil {
		return e.fixed
	}
	e.once.Do(func() {
		var out []error
		out = e.d.failures(e.m.Err(), out)
		switch len(out) {
		case 0:
		case 1:
			e.err = out[0]
		default:
			e.err = errors.Join(out...)
		}
	})
	return e.err
}

// failures appends the failures in err (a marker's Err) to out: each
// *cl.CommandError of the device's queues as a *gpu.CommandError, each
// *gpu.CommandError (of another device, through a bridged wait) as is,
// any other error whole; a marker that failed only because an event it
// waited on failed is left out (that failure is reported itself). A
// command that failed with a status that loses
// the device marks it lost.
func (d *clDevice) failures(err error, out []error) []error {
	switch e := err.(type) {
	case nil:
		return out
	case *cl.CommandError:
		if e.Op == "marker" && e.Status == cl.ExecStatusErrorForEventsInWaitList {
			// A marker behind a failure: the failure itself is reported.
			return out
		}
		var cause error = e
		if e.Status == cl.DeviceNotAvailable || e.Status == cl.OutOfResources {
			cause = d.markLost(e)
		}
		return append(out, &gpu.CommandError{Device: d.id, Stream: e.Queue, Seq: e.Seq, Label: e.Op, Err: cause})
	case *gpu.CommandError:
		return append(out, e)
	case interface{ Unwrap() []error }:
		for _, x := range e.Unwrap() {
			out = d.failures(x, out)
		}
		return out
	}
	var ce *cl.CommandError
	var ge *gpu.CommandError
	if errors.As(err, &ce) || errors.As(err, &ge) {
		if u := errors.Unwrap(err); u != nil {
			return d.failures(u, out)
		}
	}
	return append(out, err)
}
