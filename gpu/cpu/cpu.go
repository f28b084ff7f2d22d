package cpu

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// Option configures New.
type Option func(*options) error

type options struct {
	streams int
}

// MaxStreams bounds WithStreams: each stream is a worker goroutine, and
// a stream count far above the core count only adds queues to align.
const MaxStreams = 1024

// WithStreams sets the number of streams of the CPU device, that is, the
// number of worker goroutines it runs. The default is
// runtime.GOMAXPROCS(0) at the time New is called. n outside
// [1, MaxStreams] makes New return an error naming n.
func WithStreams(n int) Option {
	return func(o *options) error {
		if n < 1 || n > MaxStreams {
			return fmt.Errorf("cpu: WithStreams(%d): a CPU device has 1 to %d streams", n, MaxStreams)
		}
		o.streams = n
		return nil
	}
}

// New returns the host CPU device: ID topology.CPU, Info
// topology.CPUDevice() (read once, here), and a fixed set of streams (see
// WithStreams). Each stream is one worker goroutine that runs the stream's
// queue in order; the goroutines live until Close, which the caller must
// call. Queuing a task with Launch costs one uncontended mutex acquisition
// and an append to a reused slice: no goroutine, channel or allocation of
// its own (the queue's slice grows, amortised, up to the largest backlog
// seen). LaunchBatch takes the lock once for the whole batch.
//
// Events are (stream, sequence number) values: each stream keeps its
// count of completed entries in a gpu.Counter, every queued task and wait
// takes one sequence number, and an event fires when its stream's count
// reaches its number. Event.Done and a wait that has already fired cost
// one atomic load; an unfired wait makes the waiting worker spin briefly,
// yield, then park until the source stream completes the entry (a stream
// pays one extra atomic load per completed entry while nobody waits on
// it). Record allocates its 16-byte event value when it is boxed in the
// Event interface; a wait on an event of this device, Synchronize and
// Event.Wait allocate nothing in steady state. Stream.Wait on any other
// event (a gpu.Counter's, another device's) bridges it: see Wait.
//
// A task that panics does not stop its stream: the panic is recovered and
// returned, as a *gpu.PanicError, by the stream's next Synchronize, and later
// tasks run. Likewise a task that calls runtime.Goexit: the worker is
// replaced and the stream goes on.
//
// Close must not be called from a task of the device (it would wait for
// itself). Nil options are ignored. New fails only on an invalid
// option; nothing is started then.
func New(opts ...Option) (gpu.Device, error) {
	o := options{streams: runtime.GOMAXPROCS(0)}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return nil, err
		}
	}
	d := &cpuDevice{info: topology.CPUDevice()}
	d.closing, d.giveUp = context.WithCancel(context.Background())
	d.streams = make([]*cpuStream, o.streams)
	for i := range d.streams {
		d.streams[i] = &cpuStream{dev: d, idx: i, wake: make(chan struct{}, 1)}
	}
	d.wg.Add(len(d.streams))
	for _, s := range d.streams {
		go s.work()
	}
	return d, nil
}

// cpuDevice is the host CPU device. Its streams are fixed at construction.
type cpuDevice struct {
	info    topology.DeviceFacts
	streams []*cpuStream
	wg      sync.WaitGroup // one count per live worker goroutine

	closeMu sync.Mutex
	closed  bool

	// closing is done once Close has been called: bridged waits give up.
	closing context.Context
	giveUp  context.CancelFunc
}

var (
	_ gpu.Device = (*cpuDevice)(nil)
	_ gpu.Stream = (*cpuStream)(nil)
	_ gpu.Event  = cpuEvent{}
)

// ID returns topology.CPU.
func (d *cpuDevice) ID() topology.DeviceID { return topology.CPU }

// Kind returns Kind ("cpu").
func (d *cpuDevice) Kind() string { return Kind }

// Info returns the facts read by New.
func (d *cpuDevice) Info() topology.DeviceFacts {
	info := d.info
	info.CPUAffinity = append([]int(nil), d.info.CPUAffinity...)
	return info
}

// NumStreams returns the number of streams, fixed by New.
func (d *cpuDevice) NumStreams() int { return len(d.streams) }

// Stream returns stream i; it panics when i is out of range.
func (d *cpuDevice) Stream(i int) gpu.Stream {
	if i < 0 || i >= len(d.streams) {
		panic(fmt.Sprintf("cpu: stream %d out of range [0, %d)", i, len(d.streams)))
	}
	return d.streams[i]
}

// String returns "cpu".
func (d *cpuDevice) String() string { return "cpu" }

// Close refuses new work on every stream, lets every queued task and wait
// run, and returns once all worker goroutines have exited. Every call
// (first or later, concurrent or not) waits for that and returns nil.
// Bridged waits (Stream.Wait on an event not of this device) still
// pending give up, so Close never waits for another device: the tasks
// queued behind such a wait run without it, and the stream's next
// Synchronize reports it.
func (d *cpuDevice) Close() error {
	d.closeMu.Lock()
	if !d.closed {
		d.closed = true
		for _, s := range d.streams {
			s.mu.Lock()
			s.closed = true
			s.closedA.Store(true)
			wake := s.sleeping
			s.sleeping = false
			s.mu.Unlock()
			if wake {
				s.wake <- struct{}{}
			}
		}
		d.giveUp()
	}
	d.closeMu.Unlock()
	d.wg.Wait()
	return nil
}

// item is one queue entry: a task (src == nil) or a wait until src's
// completed count reaches seq. A bridged wait is a task (a *bridge).
type item struct {
	task gpu.Task
	src  *cpuStream
	seq  uint64
	list *listRun // a list (EnqueueList); task and src are nil
}

// listRun is a list queued on a stream: it takes n sequence numbers from
// first+1, and starts once after has fired.
type listRun struct {
	s     *cpuStream
	l     gpu.List
	after gpu.Event
	first uint64
	n     uint64
}

var (
	_ gpu.Lister   = (*cpuStream)(nil)
	_ gpu.Progress = (*listRun)(nil)
)

// Publish sets the stream's completed count to first+n. The CPU device
// asks for no extra publishes and has no sticky error.
func (lr *listRun) Publish(n uint64) (uint64, error) {
	if n > lr.n {
		n = lr.n
	}
	lr.s.done.Publish(lr.first + n)
	return math.MaxUint64, nil
}

// EnqueueList queues l as n operations of the stream, counted on the
// stream's count of completed operations. See gpu.Lister.
func (s *cpuStream) EnqueueList(after gpu.Event, n uint64, l gpu.List) (*gpu.Counter, uint64, error) {
	if l == nil || n == 0 {
		return nil, 0, fmt.Errorf("cpu: %v: EnqueueList of a nil or empty list (%d steps)", s, n)
	}
	lr := &listRun{s: s, l: l, after: after, n: n}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, 0, gpu.ErrClosed
	}
	lr.first = s.enq
	s.queue = append(s.queue, item{list: lr})
	s.enq += n
	wake := s.sleeping
	s.sleeping = false
	s.mu.Unlock()
	if wake {
		s.wake <- struct{}{}
	}
	return &s.done, lr.first, nil
}

// cpuStream is one stream of the CPU device: an ordered queue drained by
// one worker goroutine.
//
// Every queue entry, task or wait, takes one sequence number: entry k (from
// 1) is complete when done >= k. An event is (stream, k).
type cpuStream struct {
	dev *cpuDevice
	idx int

	// Guarded by mu.
	mu       sync.Mutex
	queue    []item // entries not yet taken by the worker
	enq      uint64 // entries queued so far
	closed   bool
	sleeping bool // the worker is parked (or about to park) on wake

	closedA atomic.Bool // closed, for lock-free readers

	wake chan struct{} // 1-buffered; one send per park

	// Owned by the running worker goroutine.
	batch []item
	pos   int

	done gpu.Counter // entries completed; published only by the worker

	// First task panic and first bridged wait given up at Close since the
	// last Synchronize, guarded by pmu.
	pmu     sync.Mutex
	panicE  *gpu.PanicError
	panicsN int
	gaveUp  error
}

// Device returns topology.CPU.
func (s *cpuStream) Device() topology.DeviceID { return topology.CPU }

// Index returns the stream's index on its device.
func (s *cpuStream) Index() int { return s.idx }

// String returns "cpu stream N".
func (s *cpuStream) String() string { return fmt.Sprintf("cpu stream %d", s.idx) }

var errNilTask = errors.New("cpu: nil task")

// Launch queues t. It returns ErrClosed after Close and an error for a nil
// t; in both cases nothing is queued.
func (s *cpuStream) Launch(t gpu.Task) error {
	if t == nil {
		return fmt.Errorf("%w on %v", errNilTask, s)
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return gpu.ErrClosed
	}
	s.queue = append(s.queue, item{task: t})
	s.enq++
	wake := s.sleeping
	s.sleeping = false
	s.mu.Unlock()
	if wake {
		s.wake <- struct{}{}
	}
	return nil
}

// LaunchBatch queues ts in order under one lock acquisition. A nil task in
// ts is an error naming its index, and nothing is queued.
func (s *cpuStream) LaunchBatch(ts []gpu.Task) error {
	for i, t := range ts {
		if t == nil {
			return fmt.Errorf("%w at index %d of a batch of %d on %v", errNilTask, i, len(ts), s)
		}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return gpu.ErrClosed
	}
	for _, t := range ts {
		s.queue = append(s.queue, item{task: t})
	}
	s.enq += uint64(len(ts))
	wake := s.sleeping && len(ts) > 0
	if wake {
		s.sleeping = false
	}
	s.mu.Unlock()
	if wake {
		s.wake <- struct{}{}
	}
	return nil
}

// Record returns the event (s, entries queued so far). It fires at once
// when the stream is idle. It works after Close too (the event has then
// fired, since Close drains the queue).
func (s *cpuStream) Record() gpu.Event {
	s.mu.Lock()
	seq := s.enq
	s.mu.Unlock()
	return cpuEvent{s: s, seq: seq}
}

// Wait queues a wait on e. An event of this device that has already
// fired, or that belongs to this stream, queues nothing, and neither does
// any other event whose Done reports true.
//
// Any other event (a gpu.Counter's, a CodeDevice's, a CPU device's other
// than this one) is bridged: the stream's worker, on reaching the wait,
// checks e.Done and otherwise blocks in e.Wait until it fires, so the
// tasks behind it wait too, and no other goroutine is involved. A bridged
// wait allocates its 32-byte queue record. The event's own outcome (the
// failures e.Wait reports for a CodeDevice's commands) is not the
// stream's: whoever needs it asks the event. Close gives up a bridged
// wait that is still pending (see the device's Close); the next
// Synchronize returns an error wrapping gpu.ErrClosed that names it.
func (s *cpuStream) Wait(e gpu.Event) error {
	if e == nil {
		return fmt.Errorf("cpu: %v: wait on a nil event", s)
	}
	ce, own := e.(cpuEvent)
	own = own && (ce.s == nil || ce.s.dev == s.dev)
	if own && (ce.s == nil || ce.s == s || ce.s.done.Load() >= ce.seq) || !own && e.Done() {
		// Queue order already implies it, or it has fired: nothing to
		// queue, and no lock to take.
		if s.closedA.Load() {
			return gpu.ErrClosed
		}
		return nil
	}
	it := item{src: ce.s, seq: ce.seq}
	if !own {
		it = item{task: &bridge{s: s, ev: e}}
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return gpu.ErrClosed
	}
	if own && ce.s.done.Load() >= ce.seq {
		s.mu.Unlock()
		return nil // fired since the check above
	}
	s.queue = append(s.queue, it)
	s.enq++
	wake := s.sleeping
	s.sleeping = false
	s.mu.Unlock()
	if wake {
		s.wake <- struct{}{}
	}
	return nil
}

// bridge is a wait on an event not of the stream's device, run as a task
// on the waiting stream's worker.
type bridge struct {
	s  *cpuStream
	ev gpu.Event
}

// Run waits for the event, or gives up when the device is closing.
func (w *bridge) Run() {
	if w.ev.Done() {
		return
	}
	closing := w.s.dev.closing
	if err := w.ev.Wait(closing); err != nil && closing.Err() != nil && !w.ev.Done() {
		w.s.pmu.Lock()
		if w.s.gaveUp == nil {
			w.s.gaveUp = fmt.Errorf("cpu: %v: wait on %v given up at Close: %w", w.s, w.ev, gpu.ErrClosed)
		}
		w.s.pmu.Unlock()
	}
}

// Synchronize waits until every entry queued before the call is complete,
// then returns and clears the stream's first recovered task panic (a
// *gpu.PanicError) and its first bridged wait given up at Close (an error
// wrapping gpu.ErrClosed), if any: one of them, or both joined. It returns
// ctx.Err() if ctx is done first; what it would have returned is then kept
// for the next Synchronize. It works after Close.
func (s *cpuStream) Synchronize(ctx context.Context) error {
	s.mu.Lock()
	seq := s.enq
	s.mu.Unlock()
	if _, err := s.done.WaitFor(ctx, seq); err != nil {
		return err
	}
	s.pmu.Lock()
	pe, gaveUp := s.panicE, s.gaveUp
	if pe != nil {
		pe.More = s.panicsN - 1
	}
	s.panicE, s.panicsN, s.gaveUp = nil, 0, nil
	s.pmu.Unlock()
	switch {
	case pe == nil:
		return gaveUp
	case gaveUp == nil:
		return pe
	}
	return errors.Join(pe, gaveUp)
}

// work is the stream's worker loop. It runs the current batch from pos,
// then swaps in the queue, parking on wake while the queue is empty. It
// returns once the stream is closed and its queue is empty.
func (s *cpuStream) work() {
	defer s.dev.wg.Done()
	for {
		for s.pos < len(s.batch) {
			it := s.batch[s.pos]
			s.pos++ // before running: a replacement worker (Goexit) resumes after it
			if it.list != nil {
				s.runList(it.list)
				continue
			}
			if it.src == nil {
				s.run(it.task)
			} else if it.src.done.Load() < it.seq {
				// An event of this device: it fires once the tasks
				// before it have run, which Close lets happen.
				_, _ = it.src.done.WaitFor(context.Background(), it.seq)
			}
			s.complete()
		}
		clear(s.batch)
		if cap(s.batch) > maxKeptBatch {
			s.batch = nil // do not pin the memory of a one-off burst
		}
		s.mu.Lock()
		for len(s.queue) == 0 {
			if s.closed {
				s.mu.Unlock()
				return
			}
			s.sleeping = true
			s.mu.Unlock()
			<-s.wake
			s.mu.Lock()
		}
		s.batch, s.queue = s.queue, s.batch[:0]
		s.pos = 0
		s.mu.Unlock()
	}
}

// maxKeptBatch is the largest queue capacity (entries) a worker keeps for
// reuse after draining it.
const maxKeptBatch = 1 << 16

// runList runs a list item: it waits for the list's after event (given up
// at Close, when the list runs at once: its own waits then give up), calls
// Run, and completes the list's n operations. A panic escaping Run is
// recorded as a task's. If Run ends the goroutine (runtime.Goexit), runList
// steps the batch back to the list and starts a replacement worker, which
// calls Run again.
func (s *cpuStream) runList(lr *listRun) {
	if lr.after != nil && !lr.after.Done() {
		_ = lr.after.Wait(s.dev.closing)
	}
	returned := false
	defer func() {
		if returned {
			return
		}
		if r := recover(); r != nil {
			s.notePanic(&gpu.PanicError{Device: topology.CPU, Stream: s.idx, Value: r, Stack: debug.Stack()})
			s.done.Publish(lr.first + lr.n)
			return
		}
		s.pos-- // the list again, on the replacement worker
		s.dev.wg.Add(1)
		go s.work()
	}()
	lr.l.Run(lr)
	returned = true
	s.done.Publish(lr.first + lr.n)
}

// run calls t.Run, recovering a panic into the stream's panic record. If t
// calls runtime.Goexit, the worker goroutine cannot be saved: run records
// it, completes the entry and starts a replacement worker that resumes the
// batch after t.
func (s *cpuStream) run(t gpu.Task) {
	returned := false
	defer func() {
		if returned {
			return
		}
		r := recover()
		if r != nil {
			s.notePanic(&gpu.PanicError{Device: topology.CPU, Stream: s.idx, Value: r, Stack: debug.Stack()})
			return
		}
		// runtime.Goexit: this goroutine is unwinding and will exit.
		s.notePanic(&gpu.PanicError{Device: topology.CPU, Stream: s.idx, Goexit: true, Stack: debug.Stack()})
		s.complete()
		s.dev.wg.Add(1)
		go s.work()
	}()
	t.Run()
	returned = true
}

func (s *cpuStream) notePanic(pe *gpu.PanicError) {
	s.pmu.Lock()
	if s.panicE == nil {
		s.panicE = pe
	}
	s.panicsN++
	s.pmu.Unlock()
}

// complete marks one more entry complete and wakes the waiters it
// satisfies. Only the stream's worker calls it.
func (s *cpuStream) complete() {
	s.done.Publish(s.done.Load() + 1)
}

// cpuEvent is a point in a CPU stream's queue: it fires when the stream's
// completed count reaches seq.
type cpuEvent struct {
	s   *cpuStream
	seq uint64
}

// Done reports whether the event has fired: one atomic load.
func (e cpuEvent) Done() bool { return e.s == nil || e.s.done.Load() >= e.seq }

// Wait blocks until the event fires (nil) or ctx is done (ctx.Err()). An
// event that has fired returns nil even when ctx is done.
func (e cpuEvent) Wait(ctx context.Context) error {
	if e.s == nil {
		return nil
	}
	_, err := e.s.done.WaitFor(ctx, e.seq)
	return err
}

// String returns "cpu stream N @ seq".
func (e cpuEvent) String() string {
	if e.s == nil {
		return "cpu event (none)"
	}
	return fmt.Sprintf("%v @ %d", e.s, e.seq)
}

// Kind is the driver kind of the CPU device: importing this package
// registers its driver under Kind, so gpu.Open(ctx, cpu.Kind, opts...)
// returns a set of one CPU device with gpu.WithStreams' streams (without
// it, the default of New). The driver takes no driver settings: one is an
// error naming its type.
const Kind = "cpu"

func init() { gpu.Register(Kind, driver{}) }

// driver opens the CPU device for gpu.Open.
type driver struct{}

func (driver) Open(_ context.Context, cfg gpu.Config) (gpu.Set, error) {
	if s := cfg.Settings; len(s) > 0 {
		return nil, fmt.Errorf("cpu: open: a driver setting %T: the CPU driver takes none", s[0])
	}
	var opts []Option
	if n := cfg.Streams; n != 0 {
		opts = append(opts, WithStreams(n))
	}
	d, err := New(opts...)
	if err != nil {
		return nil, err
	}
	return set{d}, nil
}

// set is the one CPU device a driver Open returns.
type set struct{ d gpu.Device }

var _ gpu.Set = set{}

func (s set) Devices() []gpu.Device { return []gpu.Device{s.d} }
func (s set) Close() error          { return s.d.Close() }
