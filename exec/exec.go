package exec

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// Executor plans and runs graphs on one device. The zero value is not
// usable; call New. An Executor does not own its device: closing the
// device is the caller's job, after the last Run returned.
type Executor struct {
	dev  gpu.Device
	pool *buffers.Pool
}

// Option configures an Executor.
type Option func(*config)

type config struct {
	alloc  memory.Allocator
	budget *buffers.Budget
}

// WithAllocator makes the executor allocate buffers and kernels' Arrow
// data through alloc (default memory.DefaultAllocator). Tests pass a
// memory.CheckedAllocator to assert that a run leaks no byte.
func WithAllocator(alloc memory.Allocator) Option { return func(c *config) { c.alloc = alloc } }

// WithBudget limits the bytes of raw buffers a run allocates on the device
// (default buffers.DefaultBudgetBytes). A buffer larger than the whole
// budget fails the run before any launch.
func WithBudget(b *buffers.Budget) Option { return func(c *config) { c.budget = b } }

// New returns an executor for dev.
func New(dev gpu.Device, opts ...Option) *Executor {
	var c config
	for _, o := range opts {
		o(&c)
	}
	return &Executor{dev: dev, pool: buffers.NewPool(dev.ID(), c.alloc, c.budget)}
}

// Device returns the executor's device.
func (e *Executor) Device() gpu.Device { return e.dev }

// RunOption configures one run.
type RunOption func(*runConfig)

type runConfig struct {
	inputs map[dag.BufferID]any
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
	if p.Streams > e.dev.NumStreams() {
		return nil, fmt.Errorf("exec: plan uses %d streams, device %s has %d", p.Streams, e.dev.ID(), e.dev.NumStreams())
	}
	start := time.Now()
	g := p.Graph
	r := &run{
		ctx:    ctx,
		device: e.dev.ID(),
		alloc:  e.pool.Allocator(),
		store:  failgraph.New(func(id buffers.ID) string { return g.Buffer(id).Name }),
	}
	if err := r.allocate(ctx, e.pool, g, rc.inputs); err != nil {
		return nil, err
	}
	states := make([]launchState, len(p.Launches))
	for i := range p.Launches {
		states[i] = launchState{run: r, k: g.Kernel(p.Launches[i].Kernel), stream: p.Launches[i].Stream}
	}
	submitErr := e.submit(p, states)
	// Wait for every queued launch, whatever ctx says.
	for s := range p.Streams {
		_ = e.dev.Stream(s).Synchronize(context.Background())
	}
	res := &Result{graph: g, bufs: r.bufs, store: r.store, Report: newReport(p, states, e.dev.ID(), time.Since(start))}
	if submitErr != nil {
		return res, submitErr
	}
	return res, nil
}

// submitBatch is the most launches queued on one stream under one lock;
// launches are handed over in batches so a stream's worker does not park
// and wake once per launch while the plan is being submitted.
const submitBatch = 256

// submit queues the plan's launches and event waits on their streams, in
// plan order per stream. Launches are batched per stream; a batch is
// handed over before a wait or an event record on its stream, when full,
// and at the end. On a device error the launches not queued are marked
// cancelled and the error is returned.
func (e *Executor) submit(p *Plan, states []launchState) error {
	pending := make([][]gpu.Task, p.Streams)
	events := make([]gpu.Event, len(p.Launches))
	var err error
	flush := func(s int) {
		if len(pending[s]) == 0 {
			return
		}
		if err == nil {
			if qerr := e.dev.Stream(s).LaunchBatch(pending[s]); qerr != nil {
				err = fmt.Errorf("exec: queue on stream %d: %w", s, qerr)
			}
		}
		if err != nil { // nothing of this batch was queued
			for _, t := range pending[s] {
				t.(*launchState).cancel(err)
			}
		}
		pending[s] = pending[s][:0]
	}
	for i := range p.Launches {
		pl := &p.Launches[i]
		if err != nil {
			states[i].cancel(err)
			continue
		}
		st := e.dev.Stream(pl.Stream)
		if len(pl.Waits) > 0 {
			flush(pl.Stream)
			for _, w := range pl.Waits {
				if err == nil {
					if werr := st.Wait(events[w.Launch]); werr != nil {
						err = fmt.Errorf("exec: wait on stream %d: %w", w.Stream, werr)
					}
				}
			}
		}
		pending[pl.Stream] = append(pending[pl.Stream], &states[i])
		if p.record[i] || len(pending[pl.Stream]) == submitBatch {
			flush(pl.Stream)
		}
		if p.record[i] && err == nil {
			events[i] = st.Record()
		}
	}
	for s := range pending {
		flush(s)
	}
	return err
}

// run is the state one Execute shares with its launches.
type run struct {
	ctx    context.Context
	device topology.DeviceID
	alloc  memory.Allocator
	store  *failgraph.Store
	bufs   []*buffers.Buffer
}

func (r *run) allocate(ctx context.Context, pool *buffers.Pool, g *dag.Graph, inputs map[dag.BufferID]any) error {
	r.bufs = make([]*buffers.Buffer, len(g.Buffers()))
	for i, b := range g.Buffers() {
		buf, err := pool.Allocate(ctx, b.ID, b.Name, b.SizeBytes)
		if err != nil {
			for _, done := range r.bufs[:i] {
				done.Release()
			}
			releaseInputs(inputs)
			return fmt.Errorf("exec: %w", err)
		}
		r.bufs[i] = buf
	}
	for id, v := range inputs {
		if id < 0 || int(id) >= len(r.bufs) {
			for _, b := range r.bufs {
				b.Release()
			}
			releaseInputs(inputs)
			return fmt.Errorf("exec: input for unknown buffer id %d", id)
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
)

var statusNames = [...]string{"pending", "ok", "failed", "skipped", "cancelled"}

// String returns "ok", "failed", "skipped", "cancelled" or "pending".
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
	run     *run
	k       *dag.Kernel
	stream  int
	status  Status
	start   time.Time
	end     time.Time
	failure failgraph.FailureID
	err     error
}

var (
	_ gpu.Task   = (*launchState)(nil)
	_ dag.Launch = (*launchState)(nil)
)

// ErrPanic wraps the value of a panic recovered from a kernel.
var ErrPanic = errors.New("kernel panicked")

// Run settles the launch: cancelled, skipped, or run and then ok/failed.
func (l *launchState) Run() {
	r := l.run
	if err := r.ctx.Err(); err != nil {
		l.cancel(err)
		return
	}
	if id, skip := r.store.SkipIfTainted(l.k.Name, l.k.Reads, l.k.Writes); skip {
		l.status, l.failure = StatusSkipped, id
		return
	}
	l.start = time.Now()
	err := l.call()
	l.end = time.Now()
	if err != nil {
		l.status, l.err = StatusFailed, err
		l.failure = r.store.Fail(l.k.Name, err, l.k.Writes)
		return
	}
	l.status = StatusOK
	r.store.Written(l.k.Writes)
}

func (l *launchState) call() (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("exec: kernel %q: %w: %v\n%s", l.k.Name, ErrPanic, v, debug.Stack())
		}
	}()
	if err := l.k.Fn(l.run.ctx, l); err != nil {
		return fmt.Errorf("exec: kernel %q: %w", l.k.Name, err)
	}
	return nil
}

// cancel marks the launch cancelled and taints its writes with the run's
// single "cancelled" failure.
func (l *launchState) cancel(cause error) {
	l.status, l.err = StatusCancelled, cause
	l.failure = l.run.store.Cancel(l.k.Name, cause, l.k.Writes)
}

func (l *launchState) Kernel() string              { return l.k.Name }
func (l *launchState) Device() topology.DeviceID   { return l.run.device }
func (l *launchState) Stream() int                 { return l.stream }
func (l *launchState) In(i int) *buffers.Buffer    { return l.run.bufs[l.k.Reads[i].Buffer] }
func (l *launchState) Out(i int) *buffers.Buffer   { return l.run.bufs[l.k.Writes[i].Buffer] }
func (l *launchState) NumIn() int                  { return len(l.k.Reads) }
func (l *launchState) NumOut() int                 { return len(l.k.Writes) }
func (l *launchState) Allocator() memory.Allocator { return l.run.alloc }
