package exec

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"slices"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// Executor plans and runs graphs on one device, or on several (NewMulti)
// with placement by a cost model and copies between them. The zero value
// is not usable; call New or NewMulti. An Executor does not own its
// devices: closing them is the caller's job, after the last Run returned.
type Executor struct {
	devs      []gpu.Device
	pools     []*buffers.Pool
	topo      *topology.Topology
	placement Placement
	backend   *gpu.Backend
}

// Option configures an Executor.
type Option func(*config)

type config struct {
	alloc     memory.Allocator
	budget    *buffers.Budget
	backend   *gpu.Backend
	placement Placement
}

// WithPlacement sets a multi-device executor's placement strategy
// (default PlaceHEFT).
func WithPlacement(p Placement) Option { return func(c *config) { c.placement = p } }

// WithBackend names the GPU backend the executor's device came from (see
// gpu.Backend.Acquire); every Report then carries the backend's metrics
// snapshot taken when the run ended.
func WithBackend(b *gpu.Backend) Option { return func(c *config) { c.backend = b } }

// WithAllocator makes the executor allocate buffers and kernels' Arrow
// data through alloc (default memory.DefaultAllocator). Tests pass a
// memory.CheckedAllocator to assert that a run leaks no byte.
func WithAllocator(alloc memory.Allocator) Option { return func(c *config) { c.alloc = alloc } }

// WithBudget limits the bytes of raw buffers a run allocates on the
// device (default: the device's memory when its facts give it, else
// buffers.DefaultBudgetBytes); on a multi-device executor it is shared by
// all devices. A buffer larger than the whole budget can never be
// reserved: it reads as an unallocated failure (see Execute).
func WithBudget(b *buffers.Budget) Option { return func(c *config) { c.budget = b } }

// New returns an executor for dev.
func New(dev gpu.Device, opts ...Option) *Executor {
	e, _ := NewMulti([]gpu.Device{dev}, nil, opts...) // one device: nothing can fail
	return e
}

// NewMulti returns an executor over devs (at least one; all with the same
// stream count), placing kernels by topo's transfer costs (nil: transfers
// cost nothing in the model). Each device gets its own buffer pool, whose
// budget is the device's memory when its facts give it (simulated GPUs
// carry their model's memory). Errors: no devices, duplicate IDs, or
// devices with different stream counts.
func NewMulti(devs []gpu.Device, topo *topology.Topology, opts ...Option) (*Executor, error) {
	if len(devs) == 0 {
		return nil, errors.New("exec: an executor needs a device")
	}
	var c config
	for _, o := range opts {
		o(&c)
	}
	e := &Executor{devs: devs, topo: topo, placement: c.placement, backend: c.backend}
	seen := map[topology.DeviceID]bool{}
	for _, d := range devs {
		if seen[d.ID()] {
			return nil, fmt.Errorf("exec: device %s given twice", d.ID())
		}
		seen[d.ID()] = true
		if d.NumStreams() != devs[0].NumStreams() {
			return nil, fmt.Errorf("exec: %s has %d streams, %s has %d: devices must have the same stream count",
				d.ID(), d.NumStreams(), devs[0].ID(), devs[0].NumStreams())
		}
		budget := c.budget
		if budget == nil && d.Info().MemoryBytes > 0 && d.ID().Kind == topology.KindGPU {
			budget = buffers.NewBudget(d.Info().MemoryBytes)
		}
		e.pools = append(e.pools, buffers.NewPool(d.ID(), c.alloc, budget))
	}
	return e, nil
}

// Device returns the executor's first device (its only one, for New).
func (e *Executor) Device() gpu.Device { return e.devs[0] }

// Devices returns the executor's devices, by index.
func (e *Executor) Devices() []gpu.Device { return slices.Clone(e.devs) }

// RunOption configures one run.
type RunOption func(*runConfig)

type runConfig struct {
	inputs map[dag.BufferID]any
	loss   *LossSpec
}

// WithInput stores v into input buffer id before the run starts; the
// buffer takes over the caller's reference (see buffers.Buffer.Store).
func WithInput(id dag.BufferID, v any) RunOption {
	return func(c *runConfig) {
		if c.inputs == nil {
			c.inputs = map[dag.BufferID]any{}
		}
		c.inputs[id] = v
	}
}

// Run plans g and executes the plan: Plan, then Execute.
func (e *Executor) Run(ctx context.Context, g *dag.Graph, opts ...RunOption) (*Result, error) {
	p, err := e.Plan(g)
	if err != nil {
		return nil, err
	}
	return e.Execute(ctx, p, opts...)
}

// Execute runs plan p. It returns an error only when the run could not
// start (a buffer over the budget, a plan for more streams than the
// device has, ctx done while allocating) or the device refused work
// (closed); the launches' own failures are in the Result's Report, and
// Result.Err joins them. Execute returns after every launch it queued
// has returned, even when ctx is cancelled.
func (e *Executor) Execute(ctx context.Context, p *Plan, opts ...RunOption) (*Result, error) {
	var rc runConfig
	for _, o := range opts {
		o(&rc)
	}
	if len(p.Devices) != len(e.devs) || p.Streams > e.devs[0].NumStreams() {
		return nil, fmt.Errorf("exec: plan for %d devices × %d streams, executor has %d × %d",
			len(p.Devices), p.Streams, len(e.devs), e.devs[0].NumStreams())
	}
	var loss *deviceLoss
	if rc.loss != nil {
		var err error
		if loss, err = newDeviceLoss(p, *rc.loss); err != nil {
			releaseInputs(rc.inputs)
			return nil, err
		}
	}
	start := time.Now()
	r := &run{
		ctx:   ctx,
		plan:  p,
		devs:  p.Devices,
		alloc: e.pools[0].Allocator(),
		store: failgraph.New(func(id buffers.ID) string { return p.Buffers[id].Name }),
		loss:  loss,
	}
	if err := r.allocate(ctx, e.pools, nil, rc.inputs); err != nil {
		return nil, err
	}
	states, submitErr := e.launch(p, r)
	rep := newReport(p, states, e.topo, 0)
	res := &Result{graph: p.Graph, bufs: r.bufs, store: r.store, Report: rep}
	if submitErr == nil && loss != nil && loss.lost.Load() {
		res, submitErr = e.recover(ctx, p, r, states, rep)
	}
	res.Report.Wall = time.Since(start)
	if e.backend != nil {
		m := e.backend.MetricsSnapshot()
		res.Report.Backend = &m
	}
	if submitErr != nil {
		return res, submitErr
	}
	return res, nil
}

// launch queues plan p's launches for run r, waits for all of them, and
// returns their states.
func (e *Executor) launch(p *Plan, r *run) ([]launchState, error) {
	states := make([]launchState, len(p.Launches))
	for i := range p.Launches {
		l := &p.Launches[i]
		states[i] = launchState{run: r, op: l, required: l.Reads, stream: l.Stream}
		if l.kernel != nil && l.kernel.Optional != nil {
			states[i].required = nil
			for j, rd := range l.Reads {
				if j >= len(l.kernel.Optional) || !l.kernel.Optional[j] {
					states[i].required = append(states[i].required, rd)
				}
			}
		}
		for _, w := range l.Writes {
			if r.bufs[w.Buffer] == nil { // its reservation failed: check it like a tainted read
				states[i].required = append(slices.Clip(states[i].required), w)
			}
		}
	}
	submitErr := e.submit(p, states, r.store)
	// Wait for every queued launch, whatever ctx says.
	for _, d := range e.devs {
		for s := range p.Streams {
			_ = d.Stream(s).Synchronize(context.Background())
		}
	}
	if submitErr != nil {
		for i := range states {
			if states[i].status == StatusPending { // never reached a stream
				states[i].cancel(submitErr)
			}
		}
	}
	return states, submitErr
}

// submitBatch is the scheduler's MaxTasks for a run: launches are handed
// to a device stream in batches of up to this many, so the stream's worker
// does not park and wake once per launch while the plan is submitted.
const submitBatch = 256

// submit registers the plan's launches with a Scheduler over the device,
// in plan order: a launch's event waits first, then the launch, then an
// event record when a later launch waits on it. It returns the first
// error the device gave (a closed device); launches that never reached a
// stream stay pending and are marked cancelled once the streams drained.
func (e *Executor) submit(p *Plan, states []launchState, store *failgraph.Store) error {
	sched := NewScheduler(newMultiBackend(e.devs, p.Streams), store, SchedulerOptions{MaxStreams: len(e.devs) * p.Streams, MaxTasks: submitBatch})
	events := make([]gpu.Event, len(p.Launches))
	var errs []error
	keep := func(err error) { // the first few errors; the launches that missed a stream say the rest
		if err != nil && len(errs) < 8 {
			errs = append(errs, err)
		}
	}
	for i := range p.Launches {
		pl := &p.Launches[i]
		s := StreamID(p.GlobalStream(i))
		for _, w := range pl.Waits {
			keep(sched.Wait(s, events[w.Launch]))
		}
		keep(sched.Register(s, &states[i], nil))
		if p.record[i] {
			ev, err := sched.Record(s)
			events[i] = ev
			keep(err)
		}
	}
	keep(sched.FlushAll())
	return errors.Join(errs...)
}

// run is the state one Execute shares with its launches.
type run struct {
	ctx   context.Context
	plan  *Plan
	devs  []topology.DeviceID
	alloc memory.Allocator
	store *failgraph.Store
	bufs  []*buffers.Buffer // by plan buffer id: the graph's, then replicas
	loss  *deviceLoss       // nil unless a device is to be lost during the run
}

// allocate reserves every planned buffer on its device's pool, except
// those carried over from an earlier phase (carried[i] non-nil).
func (r *run) allocate(ctx context.Context, pools []*buffers.Pool, carried []*buffers.Buffer, inputs map[dag.BufferID]any) error {
	r.bufs = make([]*buffers.Buffer, len(r.plan.Buffers))
	// Value buffers take no bytes: carve them from one slab per device.
	values := make([][]buffers.ValueSpec, len(pools))
	where := make([][]int, len(pools))
	for i, b := range r.plan.Buffers {
		if b.SizeBytes == 0 && (i >= len(carried) || carried[i] == nil) {
			values[b.Device] = append(values[b.Device], buffers.ValueSpec{ID: buffers.ID(i), Name: b.Name})
			where[b.Device] = append(where[b.Device], i)
		}
	}
	for d, specs := range values {
		for j, buf := range pools[d].AllocateValues(specs) {
			r.bufs[where[d][j]] = buf
		}
	}
	for i, b := range r.plan.Buffers {
		if i < len(carried) && carried[i] != nil {
			r.bufs[i] = carried[i]
			continue
		}
		if r.bufs[i] != nil {
			continue
		}
		buf, err := pools[b.Device].Allocate(ctx, buffers.ID(i), b.Name, b.SizeBytes)
		if errors.Is(err, buffers.ErrOverBudget) {
			// The reservation can never succeed: the buffer reads as this
			// failure, launches that would write it are skipped with it,
			// and unrelated branches run on.
			r.store.FailUnallocated("allocate "+b.Name, buffers.ID(i), fmt.Errorf("exec: %w", err))
			continue
		}
		if err != nil {
			for _, done := range r.bufs[:i] {
				if done != nil {
					done.Release()
				}
			}
			releaseInputs(inputs)
			return fmt.Errorf("exec: %w", err)
		}
		r.bufs[i] = buf
	}
	for id, v := range inputs {
		if id < 0 || int(id) >= len(r.plan.Graph.Buffers()) || r.bufs[id] == nil {
			for _, b := range r.bufs {
				if b != nil {
					b.Release()
				}
			}
			releaseInputs(inputs)
			return fmt.Errorf("exec: input for unknown or unallocated buffer id %d", id)
		}
		if err := r.bufs[id].Store(v); err != nil {
			return err
		}
	}
	return nil
}

// releaseInputs drops the references to input values handed to a run
// that could not start.
func releaseInputs(inputs map[dag.BufferID]any) {
	for _, v := range inputs {
		if r, ok := v.(interface{ Release() }); ok {
			r.Release()
		}
	}
}

// Status is the outcome of one launch.
type Status uint8

const (
	// StatusPending: the launch never settled (only seen on a report
	// built while the device refused work).
	StatusPending Status = iota
	// StatusOK: the kernel ran and returned nil.
	StatusOK
	// StatusFailed: the kernel returned an error or panicked.
	StatusFailed
	// StatusSkipped: a read was tainted, so the kernel did not run.
	StatusSkipped
	// StatusCancelled: ctx was done (or the device refused work) before
	// the launch started.
	StatusCancelled
	// StatusLost: the launch's device was lost (or its work superseded by
	// the recovery that followed): the recovery phase's launches say how
	// it ended.
	StatusLost
)

var statusNames = [...]string{"pending", "ok", "failed", "skipped", "cancelled", "lost"}

// String returns "ok", "failed", "skipped", "cancelled", "lost" or
// "pending".
func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", s)
}

// MarshalText encodes the status as its String.
func (s Status) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// launchState is one launch at run time. It is the gpu.Task queued on the
// stream and the dag.Launch the kernel sees.
type launchState struct {
	run      *run
	op       *PlannedLaunch
	required []buffers.Binding // the reads whose taint skips the launch
	stream   int
	status   Status
	start    time.Time
	end      time.Time
	failure  failgraph.FailureID
	err      error
	copied   int64 // bytes a copy launch moved
	degraded bool  // it ran while an optional read was missing
}

var (
	_ gpu.Task   = (*launchState)(nil)
	_ dag.Launch = (*launchState)(nil)
)

// Run settles the launch: cancelled, skipped, or run inside a failgraph
// write scope and then ok or failed.
func (l *launchState) Run() {
	r := l.run
	if r.loss != nil {
		defer r.loss.settled()
		if r.loss.hits(l.op) {
			l.cancel(r.loss.err)
			l.status = StatusLost
			return
		}
	}
	if err := r.ctx.Err(); err != nil {
		l.cancel(err)
		return
	}
	if id, skip := r.store.SkipIfTainted(l.op.Name, l.required, l.op.Writes); skip {
		l.status, l.failure = StatusSkipped, id
		return
	}
	if l.op.kernel != nil && l.op.kernel.Optional != nil && len(l.required) < len(l.op.Reads) {
		l.degraded = r.store.EnsureWritten(l.op.Reads...) != nil
	}
	scope := r.store.Enter(l.op.Name, l.op.Writes)
	l.start = time.Now()
	torn, err := l.call()
	l.end = time.Now()
	switch {
	case torn != nil:
		l.status, l.err = StatusFailed, fmt.Errorf("exec: %w", torn)
		l.failure = scope.ExitPanic(torn.Value, torn.Stack)
	case err != nil:
		l.status, l.err = StatusFailed, fmt.Errorf("exec: kernel %q: %w", l.op.Name, err)
		l.failure = scope.Exit(l.err)
	default:
		l.status = StatusOK
		scope.Exit(nil)
	}
}

// call runs the kernel (or the copy), turning a panic into a
// TornDownError with the value and stack.
func (l *launchState) call() (torn *failgraph.TornDownError, err error) {
	defer func() {
		if v := recover(); v != nil {
			torn = &failgraph.TornDownError{Kernel: l.op.Name, Value: v, Stack: debug.Stack()}
		}
	}()
	if l.op.Copy != nil {
		l.copied, err = copyBuffer(l.Out(0), l.In(0), l.run.alloc)
		return nil, err
	}
	return nil, l.op.fn(l.run.ctx, l)
}

// cancel marks the launch cancelled and taints its writes with the run's
// single "cancelled" failure.
func (l *launchState) cancel(cause error) {
	l.status, l.err = StatusCancelled, cause
	l.failure = l.run.store.Cancel(l.op.Name, cause, l.op.Writes)
}

func (l *launchState) Kernel() string            { return l.op.Name }
func (l *launchState) Device() topology.DeviceID { return l.run.devs[l.op.Device] }
func (l *launchState) Stream() int               { return l.stream }
func (l *launchState) In(i int) *buffers.Buffer  { return l.run.bufs[l.op.Reads[i].Buffer] }
func (l *launchState) Out(i int) *buffers.Buffer { return l.run.bufs[l.op.Writes[i].Buffer] }
func (l *launchState) NumIn() int                { return len(l.op.Reads) }
func (l *launchState) NumOut() int               { return len(l.op.Writes) }
func (l *launchState) Missing(i int) error {
	return l.run.store.EnsureWritten(l.op.Reads[i])
}
func (l *launchState) Allocator() memory.Allocator { return l.run.alloc }
