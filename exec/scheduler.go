package exec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/gpu"
)

// StreamID is a logical stream of a Scheduler. Logical streams fold onto
// the scheduler's MaxStreams slots (slot = id mod MaxStreams), so distinct
// logical streams can share a slot; errors stay attributed to the logical
// stream that registered the work.
type StreamID uint32

// FlushPolicy is how a Scheduler lays out the queued tasks of the slots it
// executes together in one run.
type FlushPolicy uint8

const (
	// Sequential runs each slot's tasks, in registration order, on the
	// slot's own stream; the slots of one run run concurrently.
	Sequential FlushPolicy = iota
	// Interleave runs every task of the run on the stream of the first
	// slot executed, in rounds: the r-th task of each slot in turn, slots
	// in the order they were asked for.
	Interleave
)

// String returns "sequential" or "interleave".
func (p FlushPolicy) String() string {
	switch p {
	case Sequential:
		return "sequential"
	case Interleave:
		return "interleave"
	}
	return fmt.Sprintf("FlushPolicy(%d)", uint8(p))
}

// SchedulerOption configures a Scheduler (NewScheduler). An option given
// bad input returns an error, which NewScheduler returns prefixed with
// "exec: "; nil options are skipped.
type SchedulerOption func(*schedulerSettings) error

type schedulerSettings struct {
	maxStreams int
	maxTasks   int
	policy     FlushPolicy
}

// WithMaxStreams sets the scheduler's number of slots n (default 4): the
// logical streams fold onto them (slot = id mod n). Errors: n < 1.
func WithMaxStreams(n int) SchedulerOption {
	return func(s *schedulerSettings) error {
		if n < 1 {
			return fmt.Errorf("WithMaxStreams(%d): want at least 1 slot", n)
		}
		s.maxStreams = n
		return nil
	}
}

// WithMaxTasks makes a slot's queue execute when it reaches n tasks
// (default 64). Errors: n < 1.
func WithMaxTasks(n int) SchedulerOption {
	return func(s *schedulerSettings) error {
		if n < 1 {
			return fmt.Errorf("WithMaxTasks(%d): want at least 1 task", n)
		}
		s.maxTasks = n
		return nil
	}
}

// WithPolicy sets how the queued tasks of one run are laid out (default
// Sequential). Errors: p is neither Sequential nor Interleave.
func WithPolicy(p FlushPolicy) SchedulerOption {
	return func(s *schedulerSettings) error {
		if p != Sequential && p != Interleave {
			return fmt.Errorf("WithPolicy: unknown policy %v", p)
		}
		s.policy = p
		return nil
	}
}

// ErrSchedulerClosed is returned by a Scheduler's methods after Close.
var ErrSchedulerClosed = errors.New("exec: scheduler closed")

// Scheduler queues host tasks per logical stream and runs them through an
// Executor, so that a task runs after the work already registered on its
// own slot and on the streams its arguments live on. It is a multi-stream
// scheduler in the manner of CubeCL's SchedulerMultiStream, as a
// front-end of the executor: executing queues (ExecuteStreams, a queue reaching
// MaxTasks, Record, FlushAll, …) builds one dag.Graph of the queued tasks,
// each a kernel pinned to its slot's stream (dag.OnStream; on the device
// placement chose, which for host tasks is a device that runs Go
// functions), chained per slot through one-byte token buffers so the
// engine keeps each slot's order, and runs it with Executor.Execute. The
// run starts once the earlier runs it follows have ended: those of its
// slots, those of the argument streams its tasks were registered with,
// and the events given to Wait. Runs that follow nothing of each other
// run concurrently.
//
// Errors: a task's failure (its error, a recovered panic, a cancellation)
// comes back through the run's Report and is attributed to the logical
// stream that registered the task (Errors) once the run has ended; a run
// that cannot be planned or started is an error of the call that executed
// it, attributed to every logical stream with a task in it. A failed task
// does not stop the tasks after it.
//
// A Scheduler is safe for concurrent use; its methods serialise on one
// mutex, and no task runs under it. Close drains it. The zero value is not
// usable; call NewScheduler.
type Scheduler struct {
	ex   *Executor
	opts schedulerSettings

	mu      sync.Mutex
	slots   []slot
	errs    map[StreamID][]error
	frees   []deferredFree
	cancels map[*schedRun]context.CancelFunc // runs not ended
	runs    sync.WaitGroup
	tasks   int // tasks put in a graph so far, for unique kernel names
	nruns   int // runs started so far
	closed  bool
	trace   func(string) // test hook: one line per run
}

type slot struct {
	used  bool
	queue []queued
	// after is what the slot's work so far follows and includes: its
	// latest run, and the events it was told to wait for since (Wait, the
	// arg streams of Register); its next run waits for all of them.
	after []gpu.Event
}

type queued struct {
	name   string
	fn     dag.KernelFunc
	stream StreamID
}

type deferredFree struct {
	events []gpu.Event
	free   func()
}

// schedRun is one run of queued tasks; as a gpu.Event it fires when the
// run has ended and its failures have been attributed.
type schedRun struct {
	seq  int
	done chan struct{}
}

var _ gpu.Event = (*schedRun)(nil)

func (r *schedRun) Done() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *schedRun) Wait(ctx context.Context) error {
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// union appends to events those of more it does not hold yet.
func union(events, more []gpu.Event) []gpu.Event {
	for _, e := range more {
		if !slices.Contains(events, e) {
			events = append(events, e)
		}
	}
	return events
}

// allEvents fires when all of its events have fired.
type allEvents []gpu.Event

func (a allEvents) Done() bool {
	return !slices.ContainsFunc(a, func(e gpu.Event) bool { return !e.Done() })
}

// Wait returns the first error of an event's Wait.
func (a allEvents) Wait(ctx context.Context) error {
	for _, e := range a {
		if err := e.Wait(ctx); err != nil {
			return err
		}
	}
	return nil
}

// firedRun is the event of a slot that has no run yet.
var firedRun = func() *schedRun {
	r := &schedRun{done: make(chan struct{})}
	close(r.done)
	return r
}()

// NewScheduler returns a scheduler that runs its tasks with ex, configured
// by opts in order. It starts no goroutine; each run has one, which ends
// with the run. Errors: a nil ex, the first option's error.
func NewScheduler(ex *Executor, opts ...SchedulerOption) (*Scheduler, error) {
	if ex == nil {
		return nil, errors.New("exec: NewScheduler: nil executor")
	}
	set := schedulerSettings{maxStreams: 4, maxTasks: 64}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&set); err != nil {
			return nil, fmt.Errorf("exec: %w", err)
		}
	}
	return &Scheduler{ex: ex, opts: set, slots: make([]slot, set.maxStreams),
		errs: map[StreamID][]error{}, cancels: map[*schedRun]context.CancelFunc{}}, nil
}

// MaxStreams returns the scheduler's number of slots (WithMaxStreams).
func (s *Scheduler) MaxStreams() int { return s.opts.maxStreams }

// MaxTasks returns the queue length at which a slot executes
// (WithMaxTasks).
func (s *Scheduler) MaxTasks() int { return s.opts.maxTasks }

// Policy returns the scheduler's flush policy (WithPolicy).
func (s *Scheduler) Policy() FlushPolicy { return s.opts.policy }

func (s *Scheduler) slotOf(id StreamID) int { return int(id % StreamID(s.opts.maxStreams)) }

// Register queues fn, named name (for reports and errors), on stream so
// that it runs after the work already registered on stream's slot and on
// every stream of argStreams (the streams its arguments live on). Arg
// streams on another slot are executed first, and stream's own queued
// work then too, so that only what follows waits for them. Then the task
// is queued; a queue reaching MaxTasks executes. fn runs once, on a
// stream of the executor's device that runs Go functions, with a
// dag.Launch that has no buffers (its Stream is the slot's stream). The
// error is that of a run that could not be planned or started (see
// Scheduler), ErrSchedulerClosed, or a nil fn (nothing is queued then).
func (s *Scheduler) Register(stream StreamID, name string, fn dag.KernelFunc, argStreams ...StreamID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrSchedulerClosed
	}
	if fn == nil {
		return fmt.Errorf("exec: register %q on stream %d: nil task function", name, stream)
	}
	target := s.slotOf(stream)
	var align []StreamID
	for _, a := range argStreams {
		if s.slotOf(a) != target && s.slots[s.slotOf(a)].used {
			align = append(align, a)
		}
	}
	var errs []error
	if len(align) > 0 {
		errs = append(errs, s.execute(align))
		var after []gpu.Event
		for _, a := range align {
			after = union(after, s.slots[s.slotOf(a)].after)
		}
		if len(after) > 0 {
			errs = append(errs, s.execute([]StreamID{stream}))
			s.slots[target].after = union(s.slots[target].after, after)
		}
	}
	sl := &s.slots[target]
	sl.used = true
	sl.queue = append(sl.queue, queued{name, fn, stream})
	if len(sl.queue) >= s.opts.maxTasks {
		errs = append(errs, s.execute([]StreamID{stream}))
	}
	return errors.Join(errs...)
}

// Record executes stream's queue and returns an event that fires when all
// of the work registered on stream's slot so far has run, and the events
// the slot was told to wait for have fired (at once when there is none).
// Its Wait returns nil once fired (the tasks' failures are in Errors), or
// the error of a waited-for event's Wait.
func (s *Scheduler) Record(stream StreamID) (gpu.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSchedulerClosed
	}
	sl := &s.slots[s.slotOf(stream)]
	sl.used = true
	err := s.execute([]StreamID{stream})
	switch len(sl.after) {
	case 0:
		return firedRun, err
	case 1:
		return sl.after[0], err
	}
	return allEvents(slices.Clone(sl.after)), err
}

// Wait executes stream's queue, then makes the work registered on
// stream's slot afterwards wait for e (an event of Record, or any
// gpu.Event; nil is an error). A run that waits for e does not start
// before e fires; Close gives up waiting when its ctx ends. Events of
// stream (Record) and work that follows stream (Register's argStreams)
// include e.
func (s *Scheduler) Wait(stream StreamID, e gpu.Event) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrSchedulerClosed
	}
	if e == nil {
		return fmt.Errorf("exec: wait on stream %d: nil event", stream)
	}
	sl := &s.slots[s.slotOf(stream)]
	sl.used = true
	err := s.execute([]StreamID{stream})
	sl.after = union(sl.after, []gpu.Event{e})
	return err
}

// ExecuteStreams runs the queued tasks of the given streams' slots as one
// run, laid out by the scheduler's policy. Streams sharing a slot, and
// duplicates, count once, in first-seen order; slots with empty queues
// are ignored. The error is that of a run that could not be planned or
// started, or ErrSchedulerClosed.
func (s *Scheduler) ExecuteStreams(ids ...StreamID) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrSchedulerClosed
	}
	return s.execute(ids)
}

// FlushAll executes every slot's queue as one run, in slot order, and
// runs the deferred frees whose readers have finished.
func (s *Scheduler) FlushAll() error {
	ready, err := s.flushAll()
	runFrees(ready)
	return err
}

func (s *Scheduler) flushAll() (ready []func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSchedulerClosed
	}
	err = s.execute(s.streamIDs())
	ready, _ = s.collect()
	return ready, err
}

// StreamIDs returns one id per slot used so far (registered on, recorded
// or waited on): the slot index, in order.
func (s *Scheduler) StreamIDs() []StreamID {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.streamIDs()
}

func (s *Scheduler) streamIDs() []StreamID {
	var out []StreamID
	for i := range s.slots {
		if s.slots[i].used {
			out = append(out, StreamID(i))
		}
	}
	return out
}

// Errors returns the errors attributed to logical stream id, oldest
// first: the failures of its tasks in runs that have ended (after an
// event of Record on id fired, those of every run it covers), and the
// errors of runs with its tasks that could not be planned or started.
func (s *Scheduler) Errors(id StreamID) []error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.errs[id])
}

// FreeAfter defers free until every stream of readers has run the work
// registered on its slot so far: a buffer shared across streams is not
// reused or freed while another stream may still read it. The readers'
// queues are executed; free runs from a later FlushAll, Collect or Close
// once their runs have ended (at once if readers is empty, or none of
// them has a run). Frees run without the scheduler's lock held, so free
// may call the scheduler.
func (s *Scheduler) FreeAfter(readers []StreamID, free func()) error {
	ready, err := s.freeAfter(readers, free)
	runFrees(ready)
	return err
}

func (s *Scheduler) freeAfter(readers []StreamID, free func()) (ready []func(), err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrSchedulerClosed
	}
	err = s.execute(readers)
	d := deferredFree{free: free}
	for _, r := range readers {
		d.events = union(d.events, s.slots[s.slotOf(r)].after)
	}
	s.frees = append(s.frees, d)
	ready, _ = s.collect()
	return ready, err
}

// Collect runs the deferred frees whose readers have all finished, in
// the order they were deferred, and returns how many are still pending.
// It never blocks (beyond the frees themselves, which run without the
// scheduler's lock held).
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

// Close executes every queue, waits until every run has ended, runs the
// deferred frees whose readers finished, and from then on refuses new
// work with ErrSchedulerClosed. When ctx ends first, the runs not ended
// are cancelled (their tasks not yet started fail as cancelled; a run
// still waiting for an event gives up), Close waits for them to return
// and returns ctx's error. Close is idempotent: a later call only waits
// again. It must not be called from a task (it would wait for itself).
func (s *Scheduler) Close(ctx context.Context) error {
	s.mu.Lock()
	var err error
	if !s.closed {
		err = s.execute(s.streamIDs())
		s.closed = true
	}
	s.mu.Unlock()
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		s.runs.Wait()
	}()
	select {
	case <-ended:
	case <-ctx.Done():
		if s.cancelRuns() > 0 {
			err = errors.Join(err, ctx.Err())
		}
		<-ended
	}
	s.mu.Lock()
	ready, _ := s.collect()
	s.mu.Unlock()
	runFrees(ready)
	return err
}

// cancelRuns cancels the runs not ended and returns how many there were.
func (s *Scheduler) cancelRuns() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, cancel := range s.cancels {
		cancel()
	}
	return len(s.cancels)
}

// execute runs the queues of ids' slots (see ExecuteStreams). Caller
// holds mu.
func (s *Scheduler) execute(ids []StreamID) error {
	var order []int // slots with queued tasks, first-seen
	for _, id := range ids {
		if i := s.slotOf(id); len(s.slots[i].queue) > 0 && !slices.Contains(order, i) {
			order = append(order, i)
		}
	}
	if len(order) == 0 {
		return nil
	}
	var tasks []queued
	var after []gpu.Event
	for _, i := range order {
		sl := &s.slots[i]
		tasks = append(tasks, sl.queue...)
		after = union(after, sl.after)
	}
	g, byKernel := s.graph(order)
	p, err := s.ex.Plan(g)
	for _, i := range order {
		s.slots[i].queue = nil
	}
	if err != nil {
		// The tasks are dropped; what they would have followed stays.
		return s.failRun(tasks, err)
	}
	s.nruns++
	r := &schedRun{seq: s.nruns, done: make(chan struct{})}
	for _, i := range order {
		s.slots[i].after = []gpu.Event{r}
	}
	if s.trace != nil {
		s.trace(traceLine(r, after, p, byKernel))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s.cancels[r] = cancel
	s.runs.Add(1)
	go s.run(ctx, r, p, byKernel, after)
	return nil
}

// graph builds the graph of the queued tasks of order's slots and
// returns it with the task of each kernel, by kernel id; each chain of
// tasks (a slot's, or with Interleave the whole round-robin) reads the
// token its predecessor writes. Caller holds mu.
func (s *Scheduler) graph(order []int) (*dag.Graph, []queued) {
	var chains [][]queued
	var streams []int
	if s.opts.policy == Interleave && len(order) > 1 {
		var all []queued
		for r := 0; ; r++ {
			took := false
			for _, i := range order {
				if q := s.slots[i].queue; r < len(q) {
					all = append(all, q[r])
					took = true
				}
			}
			if !took {
				break
			}
		}
		chains, streams = [][]queued{all}, []int{order[0]}
	} else {
		for _, i := range order {
			chains = append(chains, s.slots[i].queue)
			streams = append(streams, i)
		}
	}
	g := dag.New()
	var kernels []queued
	for c, chain := range chains {
		prev := dag.BufferID(-1)
		for _, q := range chain {
			s.tasks++
			tok := g.AddBuffer(fmt.Sprintf("token %d", s.tasks), 1)
			opts := []dag.KernelOption{dag.Writes(tok), dag.OnStream(streams[c])}
			if prev >= 0 {
				opts = append(opts, dag.ReadsOptional(prev))
			}
			g.AddKernel(fmt.Sprintf("%s (stream %d, task %d)", q.name, q.stream, s.tasks), q.fn, opts...)
			kernels = append(kernels, q)
			prev = tok
		}
	}
	return g, kernels
}

// run waits for after, executes p and attributes its failures to the
// logical streams of tasks (by kernel id), then fires r.
func (s *Scheduler) run(ctx context.Context, r *schedRun, p *Plan, tasks []queued, after []gpu.Event) {
	defer s.runs.Done()
	for _, e := range after {
		if e.Wait(ctx) != nil {
			break // ctx ended: Execute cancels every launch
		}
	}
	res, err := s.ex.Execute(ctx, p)
	s.mu.Lock()
	if err != nil {
		s.failRun(tasks, err)
	}
	if res != nil {
		for i, l := range res.Report.Launches() {
			if k := p.Launch(i).Kernel; k >= 0 && l.Err != nil {
				q := tasks[k]
				s.errs[q.stream] = append(s.errs[q.stream], fmt.Errorf("exec: stream %d: %w", q.stream, l.Err))
			}
		}
		res.Close()
	}
	s.cancels[r]()
	delete(s.cancels, r)
	s.mu.Unlock()
	close(r.done)
}

// failRun attributes err, of a run of tasks that could not be planned or
// started, to each logical stream with a task in it, once, and returns it
// naming them. Caller holds mu.
func (s *Scheduler) failRun(tasks []queued, err error) error {
	var owners []StreamID
	for _, q := range tasks {
		if !slices.Contains(owners, q.stream) {
			owners = append(owners, q.stream)
			s.errs[q.stream] = append(s.errs[q.stream], err)
		}
	}
	return fmt.Errorf("exec: run of streams %v: %w", owners, err)
}

// traceLine describes run r for the test hook: "#3 s1[a b] s0[c] after
// #1 #2", each stream of the plan with its tasks in stream order.
func traceLine(r *schedRun, after []gpu.Event, p *Plan, tasks []queued) string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d", r.seq)
	launches := make([]PlannedLaunch, len(tasks)) // by kernel id
	for _, l := range p.Launches() {
		if l.Kernel >= 0 {
			launches[l.Kernel] = l
		}
	}
	var streams []int // in the order of their first kernel
	byStream := map[int][]PlannedLaunch{}
	for _, l := range launches {
		if _, ok := byStream[l.Stream]; !ok {
			streams = append(streams, l.Stream)
		}
		byStream[l.Stream] = append(byStream[l.Stream], l)
	}
	for _, st := range streams {
		ls := byStream[st]
		slices.SortFunc(ls, func(a, b PlannedLaunch) int { return a.Seq - b.Seq })
		names := make([]string, len(ls))
		for i, l := range ls {
			names[i] = tasks[l.Kernel].name
		}
		fmt.Fprintf(&b, " s%d[%s]", st, strings.Join(names, " "))
	}
	var seqs []int
	events := 0
	for _, e := range after {
		if o, ok := e.(*schedRun); ok {
			seqs = append(seqs, o.seq)
		} else {
			events++
		}
	}
	slices.Sort(seqs)
	for i, q := range seqs {
		if i == 0 {
			b.WriteString(" after")
		}
		fmt.Fprintf(&b, " #%d", q)
	}
	if events > 0 {
		fmt.Fprintf(&b, " +%d events", events)
	}
	return b.String()
}
