package exec

import (
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
)

// StreamID is a logical stream. Logical streams fold onto a scheduler's
// MaxStreams slots (slot = id mod MaxStreams), so distinct logical streams
// can share a slot; errors stay attributed to the logical stream that
// registered the work.
type StreamID uint32

// Strategy is how ExecuteStreams hands queued tasks to the backend.
type Strategy uint8

const (
	// Sequential enqueues each stream's tasks on its own backend stream,
	// then flushes that stream, stream by stream.
	Sequential Strategy = iota
	// Interleave flushes every stream but the first, then enqueues all
	// queued tasks round-robin (the r-th task of each stream in turn) on
	// the first stream and flushes it. It falls back to Sequential while
	// any of the streams requires isolation, and always on a concurrent
	// backend (see Backend.Concurrent), where moving a stream's tasks onto
	// another stream would break the stream's own order.
	Interleave
)

// SchedulerOptions configure a Scheduler. Zero fields take the defaults.
type SchedulerOptions struct {
	MaxStreams int      // slots; default 4
	MaxTasks   int      // a slot's queue executes when it reaches this length; default 64
	Strategy   Strategy // default Sequential
}

// Backend is what a Scheduler drives: a device's streams, created lazily
// per slot. Methods are called by one goroutine at a time (the scheduler
// serialises them).
type Backend interface {
	// Concurrent reports whether the backend's streams may run
	// concurrently (the CPU device, GPUs), so cross-stream order needs
	// event waits; false for backends whose streams feed one in-order
	// queue, where flushing the producer streams first is enough.
	Concurrent() bool
	// NewStream creates the backend stream of slot. It is called once per
	// slot, on the slot's first use.
	NewStream(slot int) (BackendStream, error)
}

// BackendStream is one backend stream.
type BackendStream interface {
	// Enqueue stages t; Flush hands everything staged to the device.
	Enqueue(t gpu.Task)
	Flush() error
	// Record returns an event that fires when everything flushed so far
	// has run. Wait makes later flushed work wait for e.
	Record() gpu.Event
	Wait(e gpu.Event) error
	// RequiresIsolation reports whether the stream must not take other
	// streams' tasks now (a capture window, say).
	RequiresIsolation() bool
}

// Scheduler queues tasks per stream and hands them to a Backend, aligning
// streams so that a task runs after the work already registered on the
// streams its arguments live on. It follows CubeCL's SchedulerMultiStream
// (see the seed docs), with event waits on concurrent backends, errors
// attributed to logical streams, and deferred frees for buffers that other
// streams may still read.
//
// A Scheduler is safe for concurrent use; its methods serialise on one
// mutex. The zero value is not usable; call NewScheduler.
type Scheduler struct {
	mu       sync.Mutex
	opts     SchedulerOptions
	backend  Backend
	slots    []*slot // nil until first use
	failures *failgraph.Store
	errs     map[StreamID][]error
	frees    []deferredFree
}

type slot struct {
	stream BackendStream
	queue  []queued
}

type queued struct {
	task   gpu.Task
	stream StreamID
}

type deferredFree struct {
	events []gpu.Event
	free   func()
}

// NewScheduler returns a scheduler over backend with the device's failure
// store (nil: a new empty one).
func NewScheduler(backend Backend, failures *failgraph.Store, opts SchedulerOptions) *Scheduler {
	if opts.MaxStreams <= 0 {
		opts.MaxStreams = 4
	}
	if opts.MaxTasks <= 0 {
		opts.MaxTasks = 64
	}
	if failures == nil {
		failures = failgraph.New(nil)
	}
	return &Scheduler{opts: opts, backend: backend, slots: make([]*slot, opts.MaxStreams),
		failures: failures, errs: map[StreamID][]error{}}
}

// Options returns the scheduler's options with defaults filled in.
func (s *Scheduler) Options() SchedulerOptions { return s.opts }

// Backend returns the backend, e.g. to change the configuration new
// streams are created with; streams already created are unaffected.
func (s *Scheduler) Backend() Backend { return s.backend }

func (s *Scheduler) slotOf(id StreamID) int { return int(id) % s.opts.MaxStreams }

// get returns slot i, creating its backend stream on first use. A
// creation error is attributed to stream id and returned.
func (s *Scheduler) get(i int, id StreamID) (*slot, error) {
	if sl := s.slots[i]; sl != nil {
		return sl, nil
	}
	bs, err := s.backend.NewStream(i)
	if err != nil {
		err = fmt.Errorf("exec: stream %d (slot %d): %w", id, i, err)
		s.errs[id] = append(s.errs[id], err)
		return nil, err
	}
	s.slots[i] = &slot{stream: bs}
	return s.slots[i], nil
}

// Register queues task on stream so that it runs after the work already
// registered on every stream of argStreams (the streams its arguments live
// on). Arg streams on another slot are executed first; on a concurrent
// backend the target stream then waits on an event of each (its own
// queued work is executed before the wait, so the wait holds back only
// what follows). Then the task is queued; a queue reaching MaxTasks
// executes. Errors (a backend stream that cannot be created or flushed)
// are returned and attributed to the logical stream concerned.
func (s *Scheduler) Register(stream StreamID, task gpu.Task, argStreams []StreamID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	target := s.slotOf(stream)
	var align []StreamID
	for _, a := range argStreams {
		if s.slotOf(a) != target && s.slots[s.slotOf(a)] != nil {
			align = append(align, a)
		}
	}
	var errs []error
	if len(align) > 0 {
		if err := s.execute(align); err != nil {
			errs = append(errs, err)
		}
	}
	sl, err := s.get(target, stream)
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if len(align) > 0 && s.backend.Concurrent() {
		if err := s.waitOn(sl, stream, align); err != nil {
			errs = append(errs, err)
		}
	}
	sl.queue = append(sl.queue, queued{task, stream})
	if len(sl.queue) >= s.opts.MaxTasks {
		if err := s.execute([]StreamID{stream}); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// waitOn makes the backend stream of sl (stream's slot) wait for
// everything flushed on the slots of align. Caller holds mu.
func (s *Scheduler) waitOn(sl *slot, stream StreamID, align []StreamID) error {
	if len(sl.queue) > 0 {
		if err := s.execute([]StreamID{stream}); err != nil {
			return err
		}
	}
	seen := make([]bool, s.opts.MaxStreams)
	for _, a := range align {
		i := s.slotOf(a)
		if seen[i] {
			continue
		}
		seen[i] = true
		if err := sl.stream.Wait(s.slots[i].stream.Record()); err != nil {
			err = fmt.Errorf("exec: stream %d waiting on stream %d: %w", stream, a, err)
			s.errs[stream] = append(s.errs[stream], err)
			return err
		}
	}
	return nil
}

// Record executes stream's queue and returns an event that fires when all
// of the stream's work so far has run.
func (s *Scheduler) Record(stream StreamID) (gpu.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, err := s.get(s.slotOf(stream), stream)
	if err != nil {
		return nil, err
	}
	err = s.execute([]StreamID{stream})
	return sl.stream.Record(), err
}

// Wait executes stream's queue, then makes the work registered on stream
// afterwards wait for e.
func (s *Scheduler) Wait(stream StreamID, e gpu.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, err := s.get(s.slotOf(stream), stream)
	if err != nil {
		return err
	}
	if err := s.execute([]StreamID{stream}); err != nil {
		return err
	}
	if err := sl.stream.Wait(e); err != nil {
		err = fmt.Errorf("exec: stream %d: wait: %w", stream, err)
		s.errs[stream] = append(s.errs[stream], err)
		return err
	}
	return nil
}

// ExecuteStreams hands the queued tasks of the given streams to the
// backend with the scheduler's strategy. Streams sharing a slot, and
// duplicates, are executed once, in first-seen order; streams never used
// are ignored.
func (s *Scheduler) ExecuteStreams(ids []StreamID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.execute(ids)
}

type schedule struct {
	slot  *slot
	tasks []queued
}

// execute is ExecuteStreams with mu held.
func (s *Scheduler) execute(ids []StreamID) error {
	var scheds []schedule
	seen := make([]bool, s.opts.MaxStreams)
	isolate := false
	for _, id := range ids {
		i := s.slotOf(id)
		if seen[i] || s.slots[i] == nil {
			continue
		}
		seen[i] = true
		sl := s.slots[i]
		isolate = isolate || sl.stream.RequiresIsolation()
		scheds = append(scheds, schedule{sl, sl.queue})
		sl.queue = nil
	}
	if len(scheds) == 0 {
		return nil
	}
	// Interleaving moves a stream's tasks onto another backend stream. That
	// keeps every stream's order only when all backend streams feed one
	// in-order queue; on a concurrent backend a task moved away could run
	// after work registered later on its own stream, so it runs Sequential.
	if s.opts.Strategy == Interleave && !isolate && !s.backend.Concurrent() {
		return s.interleave(scheds)
	}
	var errs []error
	for _, sc := range scheds {
		for _, q := range sc.tasks {
			sc.slot.stream.Enqueue(q.task)
		}
		errs = append(errs, s.flush(sc.slot, sc.tasks))
	}
	return errors.Join(errs...)
}

func (s *Scheduler) interleave(scheds []schedule) error {
	var errs []error
	for _, sc := range scheds[1:] {
		errs = append(errs, s.flush(sc.slot, nil))
	}
	first := scheds[0].slot
	var all []queued
	for r := 0; ; r++ {
		took := false
		for _, sc := range scheds {
			if r < len(sc.tasks) {
				first.stream.Enqueue(sc.tasks[r].task)
				all = append(all, sc.tasks[r])
				took = true
			}
		}
		if !took {
			break
		}
	}
	errs = append(errs, s.flush(first, all))
	return errors.Join(errs...)
}

// flush flushes a backend stream and attributes an error to the logical
// streams whose tasks were in the flush.
func (s *Scheduler) flush(sl *slot, tasks []queued) error {
	err := sl.stream.Flush()
	if err == nil {
		return nil
	}
	var owners []StreamID
	for _, q := range tasks {
		if !slices.Contains(owners, q.stream) {
			owners = append(owners, q.stream)
			s.errs[q.stream] = append(s.errs[q.stream], err)
		}
	}
	return fmt.Errorf("exec: flush of streams %v: %w", owners, err)
}

// FlushAll executes every initialized slot's queue, then flushes every
// initialized backend stream, and runs the deferred frees whose events
// have fired.
func (s *Scheduler) FlushAll() error {
	ready, err := s.flushAll()
	runFrees(ready)
	return err
}

func (s *Scheduler) flushAll() (ready []func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var ids []StreamID
	for i, sl := range s.slots {
		if sl != nil {
			ids = append(ids, StreamID(i))
		}
	}
	errs := []error{s.execute(ids)}
	for _, sl := range s.slots {
		if sl != nil {
			errs = append(errs, s.flush(sl, nil))
		}
	}
	ready, _ = s.collect()
	return ready, errors.Join(errs...)
}

// Streams returns the initialized backend streams in slot order. Asking
// never creates one.
func (s *Scheduler) Streams() []BackendStream {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []BackendStream
	for _, sl := range s.slots {
		if sl != nil {
			out = append(out, sl.stream)
		}
	}
	return out
}

// StreamIDs returns one synthetic id per initialized slot (the slot
// index), in order.
func (s *Scheduler) StreamIDs() []StreamID {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []StreamID
	for i, sl := range s.slots {
		if sl != nil {
			out = append(out, StreamID(i))
		}
	}
	return out
}

// Owner returns the backend stream of stream's slot if it exists; it never
// creates one (asking who owns a buffer must not create a stream).
func (s *Scheduler) Owner(stream StreamID) (BackendStream, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl := s.slots[s.slotOf(stream)]
	if sl == nil {
		return nil, false
	}
	return sl.stream, true
}

// StreamAndFailures returns stream's backend stream (created on first
// use) and the device's failure store together, for the paths that
// allocate, bind or clean up memory on a stream.
func (s *Scheduler) StreamAndFailures(stream StreamID) (BackendStream, *failgraph.Store, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sl, err := s.get(s.slotOf(stream), stream)
	if err != nil {
		return nil, s.failures, err
	}
	return sl.stream, s.failures, nil
}

// Errors returns the errors attributed to logical stream id (flush or
// creation failures of the work it registered), oldest first.
func (s *Scheduler) Errors(id StreamID) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs[id])
}

// FreeAfter defers free until every stream of readers has run the work
// registered on it so far: a buffer shared across streams is not reused or
// freed while another stream may still read it. The readers' queues are
// executed and an event recorded on each; free runs from a later FlushAll
// or Collect once all have fired (at once if readers is empty, or none of
// them has a stream). Frees run without the scheduler's lock held, so free
// may call the scheduler.
func (s *Scheduler) FreeAfter(readers []StreamID, free func()) error {
	ready, err := s.freeAfter(readers, free)
	runFrees(ready)
	return err
}

func (s *Scheduler) freeAfter(readers []StreamID, free func()) (ready []func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var d deferredFree
	d.free = free
	var errs []error
	seen := make([]bool, s.opts.MaxStreams)
	for _, r := range readers {
		i := s.slotOf(r)
		if seen[i] || s.slots[i] == nil {
			continue
		}
		seen[i] = true
		errs = append(errs, s.execute([]StreamID{r}))
		d.events = append(d.events, s.slots[i].stream.Record())
	}
	s.frees = append(s.frees, d)
	ready, _ = s.collect()
	return ready, errors.Join(errs...)
}

// Collect runs the deferred frees whose events have all fired and returns
// how many are still pending. It never blocks (beyond the frees
// themselves, which run without the scheduler's lock held).
func (s *Scheduler) Collect() int {
	s.mu.Lock()
	ready, pending := s.collect()
	s.mu.Unlock()
	runFrees(ready)
	return pending
}

// collect takes the deferred frees whose events have all fired off the
// pending list and returns them, with how many stay pending. Caller holds
// mu and runs the returned frees after releasing it.
func (s *Scheduler) collect() (ready []func(), pending int) {
	kept := s.frees[:0]
	for _, d := range s.frees {
		if slices.ContainsFunc(d.events, func(e gpu.Event) bool { return !e.Done() }) {
			kept = append(kept, d)
			continue
		}
		ready = append(ready, d.free)
	}
	clear(s.frees[len(kept):])
	s.frees = kept
	return ready, len(kept)
}

func runFrees(ready []func()) {
	for _, f := range ready {
		f()
	}
}

// DeviceBackend drives the streams of a gpu.Device: slot i is the
// device's stream i mod NumStreams. Enqueue stages tasks; Flush hands the
// staged batch to the device stream under one lock (Stream.LaunchBatch).
// Its streams run concurrently, so the scheduler aligns them with events.
type DeviceBackend struct {
	dev gpu.Device
	// StagingCap is the initial capacity of a stream's staging batch;
	// changing it affects only streams created afterwards. Default 64.
	StagingCap int
}

// NewDeviceBackend returns a backend over dev.
func NewDeviceBackend(dev gpu.Device) *DeviceBackend { return &DeviceBackend{dev: dev, StagingCap: 64} }

// Concurrent is true: device streams run concurrently.
func (b *DeviceBackend) Concurrent() bool { return true }

// NewStream returns the backend stream of slot.
func (b *DeviceBackend) NewStream(slot int) (BackendStream, error) {
	if slot < 0 {
		return nil, fmt.Errorf("exec: negative slot %d", slot)
	}
	return &deviceStream{st: b.dev.Stream(slot % b.dev.NumStreams()), staged: make([]gpu.Task, 0, max(b.StagingCap, 1))}, nil
}

type deviceStream struct {
	st     gpu.Stream
	staged []gpu.Task
}

var _ BackendStream = (*deviceStream)(nil)

func (d *deviceStream) Enqueue(t gpu.Task) { d.staged = append(d.staged, t) }

func (d *deviceStream) Flush() error {
	if len(d.staged) == 0 {
		return nil
	}
	err := d.st.LaunchBatch(d.staged)
	clear(d.staged)
	d.staged = d.staged[:0]
	return err
}

func (d *deviceStream) Record() gpu.Event       { return d.st.Record() }
func (d *deviceStream) Wait(e gpu.Event) error  { return d.st.Wait(e) }
func (d *deviceStream) RequiresIsolation() bool { return false }
