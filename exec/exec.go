package exec

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"
)

// Executor plans and runs graphs on one device, or on several (NewMulti)
// with placement by a cost model and copies between them. The zero value
// is not usable; call New or NewMulti. An Executor does not own its
// devices: closing them is the caller's job, after the last Run returned.
type Executor struct {
	devs      []gpu.Device
	pools     []*buffers.DeviceAllocator
	topo      *topology.Topology
	placement Placement
	backend   *lease.Backend
	timing    bool
}

// Option configures an Executor (New, NewMulti). An option given bad
// input returns an error, which New and NewMulti return prefixed with
// "exec: ", building no executor. Options are applied once, at
// construction; nil options are skipped.
type Option func(*config) error

type config struct {
	timing    bool
	alloc     memory.Allocator
	budget    *buffers.Budget
	backend   *lease.Backend
	placement Placement
}

// WithPlacement sets a multi-device executor's placement strategy
// (default PlaceHEFT). Errors: p is none of the Place constants.
func WithPlacement(p Placement) Option {
	return func(c *config) error {
		if p > PlaceLeastLoaded {
			return fmt.Errorf("WithPlacement: unknown placement %v", p)
		}
		c.placement = p
		return nil
	}
}

// WithLaunchTiming turns the per-launch clock readings on (true) or off
// (false, the default). With timing, every launch that ran has its Start
// and End in the report (a launch that directly follows another on its
// stream starts when that one ended, so a launch costs one clock reading,
// a few tens of ns) and Report.LaunchTiming is true; without it they are
// zero and a launch costs no clock reading at all, which matters for
// kernels of a few hundred ns or less. Either way the report holds every
// launch's status, failure, error and chain, the event waits and the
// run's Wall (two clock readings per run). Like CUDA's
// cudaEventDisableTiming, it trades visibility for launch overhead: turn
// it on to trace a run (WriteTrace needs it) or to report when each
// launch ran.
func WithLaunchTiming(on bool) Option { return func(c *config) error { c.timing = on; return nil } }

// WithBackend names the GPU backend the executor's device came from (see
// lease.Backend.Acquire); every Report then carries the backend's metrics
// snapshot taken when the run ended. Errors: a nil b.
func WithBackend(b *lease.Backend) Option {
	return func(c *config) error {
		if b == nil {
			return errors.New("WithBackend: nil backend")
		}
		c.backend = b
		return nil
	}
}

// WithAllocator makes the executor allocate buffers and kernels' Arrow
// data through alloc (default memory.DefaultAllocator). Tests pass a
// memory.CheckedAllocator to assert that a run leaks no byte. Errors: a
// nil alloc.
func WithAllocator(alloc memory.Allocator) Option {
	return func(c *config) error {
		if alloc == nil {
			return errors.New("WithAllocator: nil allocator")
		}
		c.alloc = alloc
		return nil
	}
}

// WithBudget limits the bytes of raw buffers a run allocates on the
// device (default: the device's memory when its facts give it, else
// buffers.DefaultBudgetBytes); on a multi-device executor it is shared by
// all devices. A run takes all its bytes of one budget at once, waiting
// while concurrent runs hold them. A raw buffer that can never be
// reserved, because it is larger than the budget or than what the budget
// leaves after the run's other buffers, is not waited for: it reads as an
// unallocated failure wrapping buffers.ErrOverBudget, the launches that
// write or need it are skipped, and unrelated branches run on (see
// Execute). Device memory a plan keeps between runs
// (WithKeepDeviceMemory) holds its bytes of the budget while kept.
// Errors: a nil b.
func WithBudget(b *buffers.Budget) Option {
	return func(c *config) error {
		if b == nil {
			return errors.New("WithBudget: nil budget")
		}
		c.budget = b
		return nil
	}
}

// New returns an executor for dev. Errors are NewMulti's: a nil dev, a
// code device that declares no kind of device code, an option's error.
func New(dev gpu.Device, opts ...Option) (*Executor, error) {
	return NewMulti([]gpu.Device{dev}, nil, opts...)
}

// NewMulti returns an executor over devs (at least one; each with its own
// stream count), placing kernels by topo's transfer costs (nil: transfers
// cost nothing in the model). Each device gets its own buffer pool, whose
// budget is the device's memory when its facts give it (simulated GPUs
// carry their model's memory; a code device's budget counts its device
// memory). Each device runs the kernel code its capabilities say (a
// gpu.CodeDevice, its variants of the kind its Code names; any other
// device, kernels' Go functions), whatever driver it comes from. Errors:
// no devices, a nil device, duplicate IDs, a code device whose Code is
// empty or "go" (dag.HostCode), the first option's error.
func NewMulti(devs []gpu.Device, topo *topology.Topology, opts ...Option) (*Executor, error) {
	if len(devs) == 0 {
		return nil, errors.New("exec: an executor needs a device")
	}
	var c config
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return nil, fmt.Errorf("exec: %w", err)
		}
	}
	e := &Executor{devs: devs, topo: topo, placement: c.placement, backend: c.backend, timing: c.timing}
	seen := map[topology.DeviceID]bool{}
	for i, d := range devs {
		if d == nil {
			return nil, fmt.Errorf("exec: device %d of %d is nil", i, len(devs))
		}
		if seen[d.ID()] {
			return nil, fmt.Errorf("exec: device %s given twice", d.ID())
		}
		seen[d.ID()] = true
		budget := c.budget
		cd, code := d.(gpu.CodeDevice)
		if code {
			if k := dag.CodeKind(cd.Code()); k == "" || k == dag.HostCode {
				return nil, fmt.Errorf("exec: device %s is a code device declaring code %q: a code device names a kind of device code, not empty and not %q (host code)", d.ID(), k, dag.HostCode)
			}
		}
		if budget == nil && d.Info().MemoryBytes > 0 && (d.ID().Kind == topology.KindGPU || code) {
			budget = buffers.NewBudget(d.Info().MemoryBytes)
		}
		e.pools = append(e.pools, buffers.NewDeviceAllocator(d.ID(), c.alloc, budget))
	}
	return e, nil
}

// Device returns the executor's first device (its only one, for New).
func (e *Executor) Device() gpu.Device { return e.devs[0] }

// Devices returns the executor's devices, by index.
func (e *Executor) Devices() []gpu.Device { return slices.Clone(e.devs) }

// RunOption configures one run (Run, Execute). An option given bad input
// returns an error, which the run returns prefixed with "exec: " before it
// starts, having released every input value given (WithInput); nil
// options are skipped.
type RunOption func(*runConfig) error

type runConfig struct {
	inputs  map[dag.BufferID]any
	keepMem bool
}

// runOptions applies opts in order and returns the first option's error,
// prefixed with "exec: ". It applies every option even after an error, so
// that the caller can release every input value given. A value given to
// an input twice is released here.
func runOptions(opts []RunOption) (runConfig, error) {
	var rc runConfig
	var first error
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&rc); err != nil && first == nil {
			first = fmt.Errorf("exec: %w", err)
		}
	}
	return rc, first
}

// WithKeepDeviceMemory makes a run of Execute hand its device memory on
// code devices to its plan when it ends (or, where its Result may still
// fetch bytes from a code device, at Result.Close), for the plan's next
// run to use instead of allocating, rather than release it. The kept
// memory stays counted in its device's budget (see WithBudget) until a
// run takes it or Plan.ReleaseDeviceMemory releases it. Without it a run
// still uses memory an earlier run kept, and releases it when it ends.
// It has no effect on Executor.Run (its plan runs once), on a run that
// loses a device, or on a plan with no code devices.
func WithKeepDeviceMemory() RunOption {
	return func(c *runConfig) error { c.keepMem = true; return nil }
}

// WithInput stores v into input buffer id before the run starts; the
// buffer takes over the caller's reference (see buffers.Buffer.Store). An
// input given no value is not an error: a value buffer then holds nil and
// a raw buffer zero bytes, and its readers run on that. Errors: a buffer
// given a value twice in one run (the run releases both values).
func WithInput(id dag.BufferID, v any) RunOption {
	return func(c *runConfig) error {
		if c.inputs == nil {
			c.inputs = map[dag.BufferID]any{}
		}
		if old, dup := c.inputs[id]; dup {
			releaseValue(old)
			c.inputs[id] = v
			return fmt.Errorf("WithInput: buffer %v given twice", id)
		}
		c.inputs[id] = v
		return nil
	}
}

// Run plans g and executes the plan: Plan, then Execute. When planning
// fails it releases the input values (WithInput), as Execute does when a
// run cannot start.
func (e *Executor) Run(ctx context.Context, g *dag.Graph, opts ...RunOption) (*Result, error) {
	p, err := e.Plan(g)
	if err != nil {
		rc, _ := runOptions(opts) // the planning error comes first
		releaseInputs(rc.inputs)
		return nil, err
	}
	return e.execute(ctx, p, false, nil, opts...)
}

// Execute runs plan p. It returns an error only when the run could not
// start (a run option's error, a nil plan, a plan for other devices than the
// executor's or for more streams than a device has, a plan whose graph
// has grown since it was planned, an input for an
// unknown buffer, ctx done while waiting for budget that concurrent runs
// hold, or run from inside a kernel) or a device refused work (closed, or
// lost where the run cannot recover: see below). A raw buffer
// that can never be reserved (see WithBudget; on a code device, device
// memory it cannot allocate) is not such an error: it reads as an
// unallocated failure, and the launches that would write or read it are
// skipped. The launches' own failures are in the Result's Report, and
// Result.Err joins them. An error with no Result leaves nothing reserved,
// and every input value (WithInput) released exactly once.
//
// When ctx is done, launches that have not started are cancelled (a wait
// for another stream gives up, a list still queued behind other work is
// withdrawn) and Result.Err carries ctx's error; Execute returns after
// every launch that started has returned.
//
// A kernel may run another graph. Nesting is told from ctx alone: the ctx
// a kernel gets carries a marker of its run, and so does every ctx
// derived from it (context.WithoutCancel included). A run under such a
// ctx, while the marked run is still going, is nested, from whichever
// goroutine it is started: it runs its launches on the calling goroutine,
// in plan order, rather than queue them on streams behind the kernel that
// waits for it, and takes its budget only when it is free at once. A run
// under a ctx without the marker (context.Background(), say) is an
// independent run even when a kernel starts it: it queues on the streams,
// behind the kernel, and waits for budget, so a kernel that waits for it
// must pass its own ctx (or one derived from it), or it waits until that
// run's ctx ends.
//
// A device loss is what a device reports: a simulated GPU made to lose
// itself (sim.WithLoss) or a real one whose driver reports the loss (an
// error matching gpu.ErrDeviceLost from a list's publish, an enqueue, or
// a code device's recorded event). A run on at least two devices
// recovers from one such loss. From the report on, launches on the lost
// device (and copies out of it) do not run and settle as lost, and the
// device's memory counts as gone. A launch whose optional reads
// (dag.ReadsOptional) miss bytes lost with the device does not run
// degraded: it waits for the recovery, so nothing downstream sees a
// partial result first.
//
// The run then recovers, in a second phase planned like the first over
// the surviving devices: kernels that had not succeeded run again, moved
// by the placement engine's migration plan (placement.Spread) when their
// device was lost; every buffer that no surviving device holds complete
// and clean is recomputed by re-running all its writers (so it reads as
// it would have without the loss, even when every reader of it had
// already run); the caller's inputs, of which the executor keeps a
// reference as the host's copy, are stored again where their device was
// lost. An input value with Release but no Retain has one reference
// only, its buffer's (WithInput): the recovery moves that value, as the
// first phase left it, into the second phase's buffer instead, so it is
// released exactly once, by Result.Close, after every read. A kernel that
// succeeded and whose outputs survive does not run again, so one with
// effects outside the graph runs once unless an output it wrote was
// lost. The report lists every migration and re-run. A kernel pinned to
// the lost device cannot move: it fails with an error naming the device.
// A kernel moves only to a device that has code for it: the surviving
// device with the fewest kernels among those (a kernel of a lost code
// device with a Go function can go to a host device); one with code for
// no surviving device (OpenCL C alone, and no other code device) fails
// with an error naming it and the lost device. A lost code device's
// launches are not enqueued from the loss on, and the bytes its memory
// held count as gone.
//
// A run recovers from one lost device: a second one reported lost, a
// loss in a run on one device, and, in a plan with code devices, the
// loss of its last device that is not a code device (its buffers' host
// copies live there) make Execute return the run's Result and an error
// naming the device (both, for a second loss), wrapping
// gpu.ErrDeviceLost. When the second phase cannot start (ctx ends while
// its memory is reserved), Execute releases every buffer of the run and
// returns a nil Result and an error naming the lost device.
func (e *Executor) Execute(ctx context.Context, p *Plan, opts ...RunOption) (*Result, error) {
	return e.execute(ctx, p, true, nil, opts...)
}

// execute is Execute; keep says whether the run's device memory comes
// from p's cache, and goes back to it with WithKeepDeviceMemory (see
// Plan.ReleaseDeviceMemory), false for a plan that runs once; cp, when
// not nil, records the run in a capture window (Executor.Capture).
func (e *Executor) execute(ctx context.Context, p *Plan, keep bool, cp *Capture, opts ...RunOption) (*Result, error) {
	rc, err := runOptions(opts)
	if err != nil {
		releaseInputs(rc.inputs)
		return nil, err
	}
	if err := e.fits(p); err != nil {
		releaseInputs(rc.inputs)
		return nil, err
	}
	if p.hasCode() && nested(ctx) {
		releaseInputs(rc.inputs)
		return nil, errors.New("exec: a graph run from inside a kernel cannot launch on a code device")
	}
	var loss *deviceLoss
	if len(p.devices) >= 2 {
		// A device may report its loss (run.deviceLost), and the others
		// recover.
		loss = newReportedLoss()
		loss.keep(rc.inputs)
		defer loss.release()
	}
	start := time.Now()
	r := &run{
		ctx:   ctx,
		plan:  p,
		devs:  p.devices,
		gdevs: e.devs,
		pools: e.pools,
		alloc: e.pools[0].Allocator(),
		store: failgraph.New(func(id buffers.ID) string { return p.bufs[id].Name }),
		loss:  loss,
	}
	if keep && p.hasCode() {
		r.memc, r.keepMem = p.memCache(), rc.keepMem
	}
	if err := r.allocate(ctx, nil, rc.inputs); err != nil {
		return nil, err
	}
	var win *failgraph.Window
	if cp != nil {
		win, _ = r.store.BeginCapture() // the run's own store: no window is open yet
	}
	submitErr := r.execute(e.devs, e.timing)
	if win != nil {
		win.End() // every launch of the run has settled
		runErr := submitErr
		if runErr == nil && loss != nil && loss.lost.Load() {
			runErr = loss.err // the recovery's lists are not the plan's
		}
		cp.record(win, runErr)
	}
	if loss != nil && loss.lost.Load() {
		r.keepMem = false // a lost device's memory is not kept
	}
	if p.fetch == nil {
		r.releaseMems() // no Result reads device memory
	}
	rep := newReport(p, r.out, r.store, e.topo)
	res := &Result{graph: p.graph, run: r, store: r.store, Report: rep}
	if submitErr == nil && loss != nil && loss.lost.Load() {
		if res, submitErr = e.recoverLoss(ctx, p, r, rep); res == nil {
			return nil, submitErr
		}
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

// fits returns nil when p can run on e's devices: as many devices, each
// the one the plan has at its index (the same id, running the same kind
// of code) with at least the streams the plan has for it; and when p's
// graph has not grown since it was planned. A nil p is an error.
func (e *Executor) fits(p *Plan) error {
	if p == nil {
		return errors.New("exec: nil plan")
	}
	if nk, nb := p.graph.NumKernels(), p.graph.NumBuffers(); nk != p.nkernels || nb != p.nbuffers {
		return fmt.Errorf("exec: plan of a graph of %d kernels and %d buffers, which has %d kernels and %d buffers now: plan it again", p.nkernels, p.nbuffers, nk, nb)
	}
	if len(p.devices) != len(e.devs) {
		return fmt.Errorf("exec: plan for %d devices, executor has %d", len(p.devices), len(e.devs))
	}
	for d, n := range p.streams {
		if id, code := e.devs[d].ID(), codeOf(e.devs[d]); id != p.devices[d] || code != p.code[d] {
			return fmt.Errorf("exec: plan for %s as device %d, the executor's is %s (runs %s code, the plan's %s)", p.devices[d], d, id, code, p.code[d])
		}
		if n > e.devs[d].NumStreams() {
			return fmt.Errorf("exec: plan for %d streams on %s, the executor's device has %d", n, e.devs[d].ID(), e.devs[d].NumStreams())
		}
	}
	return nil
}

// run is the state one Execute (or one recovery phase) shares with its
// launches.
type run struct {
	ctx     context.Context
	plan    *Plan
	devs    []topology.DeviceID
	gdevs   []gpu.Device // the executor's devices, by index
	pools   []*buffers.DeviceAllocator
	alloc   memory.Allocator
	store   *failgraph.Store
	loss    *deviceLoss  // nil unless the run can recover from a device's loss (it has two devices or more)
	unalloc *unallocated // nil unless a reservation failed
	slow    bool         // every launch takes the full checks (ctx can be cancelled, or a reservation failed)

	// bufs holds the run's buffers by plan buffer id: the graph's, then
	// replicas. Raw buffers are reserved before the run starts; value
	// buffers take no bytes and are made on first use (buffer).
	bufs []atomic.Pointer[buffers.Buffer]
	made atomic.Int32 // value buffers made (or carried over) in bufs
	// mems holds the run's instances on code devices (device memory), by
	// plan buffer id; nil without any (see codestream.go).
	mems []gpu.Memory
	// memc is the plan's cache the run's device memory comes from (nil:
	// allocated by the run), and goes back to when keepMem
	// (WithKeepDeviceMemory; else the run releases it); cached and
	// cachedStatus are what the run took from it (by plan buffer, with
	// their budget bytes; status words by global stream) until allocMem
	// or a code stream's driver uses it; status holds, by global stream,
	// the status words' memory the drivers leave for releaseMems (nil
	// without memc).
	memc         *memCache
	keepMem      bool
	cached       []gpu.Memory
	cachedStatus []gpu.Memory
	status       []gpu.Memory
	// fetched marks, by graph buffer, the Plan.fetch ranges a Result has
	// copied home (run.fetch); guarded by fetchMu.
	fetchMu sync.Mutex
	fetched []bool
	// refused holds the code devices that refused work mid-run (closed).
	refused refusals

	inline bool // started inside a kernel of a running run: runs on the calling goroutine (see execute)

	out      *outcomes
	runs     []streamRun   // by global stream: its list in this phase
	src      []progressSrc // by global stream: where its progress is read (see progressOf)
	running  atomic.Bool   // the run's launches are going (a run its kernels start is nested)
	mu       sync.Mutex    // guards internal
	internal error
}

// buffer returns plan buffer id, making a value buffer on first use; for
// a raw buffer whose reservation failed, a placeholder with no bytes (its
// reads fail through the error graph, and a launch that needs its bytes is
// skipped). It is safe for concurrent use.
func (r *run) buffer(id buffers.ID) *buffers.Buffer {
	slot := &r.bufs[id]
	if b := slot.Load(); b != nil || r.unalloc != nil && r.unalloc.bufs[id] {
		return b
	}
	pb := &r.plan.bufs[id]
	if pb.SizeBytes != 0 {
		return nil
	}
	b := r.pools[pb.Device].AllocateValues([]buffers.ValueSpec{{ID: id, Name: pb.Name}})[0]
	if !slot.CompareAndSwap(nil, b) {
		b.Release()
		return slot.Load()
	}
	r.made.Add(1)
	return b
}

// allocate reserves every planned raw buffer on its device's pool, except
// those carried over from an earlier phase (carried[i] non-nil), and
// stores inputs. Each budget's bytes are taken in one Acquire, budgets in
// pool order, so a run never holds part of a budget while it waits for the
// rest. A raw buffer that does not fit its budget next to the buffers
// before it (carried ones first, then plan order) can never be reserved:
// instead of waiting for bytes nobody will release, it reads as an
// unallocated failure wrapping buffers.ErrOverBudget, launches that would
// write it are skipped with it, and unrelated branches run on.
func (r *run) allocate(ctx context.Context, carried []*buffers.Buffer, inputs map[dag.BufferID]any) error {
	r.inline = nested(ctx)
	r.bufs = r.plan.bufSlots()
	fits, err := r.reserve(ctx, carried)
	if err != nil {
		r.release()
		releaseInputs(inputs)
		return err
	}
	r.makeBuffers(fits)
	r.dropCached() // what this run's buffers have no use for
	return r.storeInputs(inputs)
}

// reserve stores the carried buffers in the run's slots, takes the
// device memory the plan kept (with memc), marks the raw buffers that can
// never fit their budget unallocated (see fitBudgets), and takes the
// bytes of the rest from their budgets (see acquireBudgets; carried and
// kept bytes are held already). It returns the plan buffers the run is to
// make: the fitting raw buffers, kept ones included, neither carried nor
// value buffers (which are made on first use), in plan order. A negative
// buffer size, or a budget the run cannot take, is an error; the budgets
// it took are given back, and what it stored in the run is left for the
// caller's r.release.
func (r *run) reserve(ctx context.Context, carried []*buffers.Buffer) ([]int32, error) {
	held := map[*buffers.Budget]int64{} // bytes the run holds or will take, by budget
	for i, b := range carried {
		if b != nil {
			r.bufs[i].Store(b)
			r.made.Add(1)
			held[r.bufBudget(i)] += b.SizeBytes()
		}
	}
	// Device memory the plan kept comes with its bytes: held already.
	var kept map[*buffers.Budget]int64
	if r.memc != nil {
		kept = r.takeCached()
		for bud, n := range kept {
			held[bud] += n
		}
	}
	needs := maps.Clone(held) // every raw byte the run needs, by budget, for messages
	raw := r.plan.compiled().raw
	if err := r.addNeeds(raw, carried, needs); err != nil {
		return nil, err
	}
	fits := r.fitBudgets(raw, carried, held, needs)
	// Take the bytes: carried and kept ones are held already.
	for i, b := range carried {
		if b != nil {
			held[r.bufBudget(i)] -= b.SizeBytes()
		}
	}
	for bud, n := range kept {
		held[bud] -= n
	}
	return fits, r.acquireBudgets(ctx, held)
}

// isCarried reports whether plan buffer i is carried over from an earlier
// phase (carried[i] non-nil).
func isCarried(carried []*buffers.Buffer, i int32) bool {
	return int(i) < len(carried) && carried[i] != nil
}

// isKept reports whether plan buffer i has device memory the run took
// from the plan's cache (run.cached).
func (r *run) isKept(i int32) bool { return r.cached != nil && r.cached[i] != nil }

// addNeeds adds to needs, by budget, the size of each buffer of raw (plan
// buffer ids) that is neither carried nor kept. A negative size is an
// error naming the buffer.
func (r *run) addNeeds(raw []int32, carried []*buffers.Buffer, needs map[*buffers.Budget]int64) error {
	for _, i := range raw {
		if isCarried(carried, i) || r.isKept(i) {
			continue
		}
		if n := r.plan.bufs[i].SizeBytes; n < 0 {
			return fmt.Errorf("exec: buffer %q: negative size %d", r.plan.bufs[i].Name, n)
		}
		needs[r.bufBudget(int(i))] += r.plan.bufs[i].SizeBytes
	}
	return nil
}

// fitBudgets returns, in the order of raw (plan buffer ids), the buffers
// of raw that are not carried and fit: kept ones, and those whose size
// fits their budget next to held, the bytes of its budget before them,
// to which it adds theirs. The rest can never be reserved: each is marked
// unallocated (see failOverBudget) with needs, the run's bytes of its
// budget.
func (r *run) fitBudgets(raw []int32, carried []*buffers.Buffer, held, needs map[*buffers.Budget]int64) []int32 {
	fits := make([]int32, 0, len(raw))
	for _, i := range raw {
		if isCarried(carried, i) {
			continue
		}
		if r.isKept(i) {
			fits = append(fits, i)
			continue
		}
		b := &r.plan.bufs[i]
		bud := r.bufBudget(int(i))
		if held[bud]+b.SizeBytes <= bud.TotalBytes() {
			held[bud] += b.SizeBytes
			fits = append(fits, i)
			continue
		}
		r.failOverBudget(i, bud, needs[bud])
	}
	return fits
}

// failOverBudget records raw plan buffer i, which does not fit bud, as an
// unallocated failure wrapping buffers.ErrOverBudget (naming the buffer,
// its device and bud's total, and need, the run's bytes of bud, when the
// buffer alone would fit), marks it in r.unalloc, and stores a buffer with
// no bytes in its slot: a kernel that declares an empty range of it, or
// an optional read, still runs, and never gets nil.
func (r *run) failOverBudget(i int32, bud *buffers.Budget, need int64) {
	b := &r.plan.bufs[i]
	var err error
	if b.SizeBytes > bud.TotalBytes() {
		err = fmt.Errorf("exec: allocate %q (%d bytes) on %s: the budget is %d bytes: %w",
			b.Name, b.SizeBytes, r.devs[b.Device], bud.TotalBytes(), buffers.ErrOverBudget)
	} else {
		err = fmt.Errorf("exec: allocate %q (%d bytes) on %s: the run's buffers need %d bytes of a budget of %d: %w",
			b.Name, b.SizeBytes, r.devs[b.Device], need, bud.TotalBytes(), buffers.ErrOverBudget)
	}
	r.store.FailUnallocated("allocate "+b.Name, buffers.ID(i), err)
	if r.unalloc == nil {
		r.unalloc = &unallocated{bufs: make([]bool, len(r.plan.bufs))}
	}
	r.unalloc.bufs[i] = true
	ph, _ := r.pools[b.Device].AllocateReserved(buffers.ID(i), b.Name, 0)
	r.bufs[i].Store(ph)
}

// acquireBudgets takes from each budget the bytes take gives it, in pool
// order, in one call per budget (a budget shared by several pools is
// taken once; none when it is 0 or less). A run started inside a kernel
// (r.inline) never waits: the bytes may be held by the graph whose kernel
// started it, which cannot release them while it waits for this run, so
// bytes not free now are an error. Otherwise it waits for them until ctx
// ends. On an error it gives back the budgets it took and returns an
// error naming the bytes and the pool's device.
func (r *run) acquireBudgets(ctx context.Context, take map[*buffers.Budget]int64) error {
	taken := map[*buffers.Budget]int64{}
	for _, pool := range r.pools {
		bud := pool.Budget()
		n := take[bud] - taken[bud] // a budget shared by several pools is taken once
		if n <= 0 {
			continue
		}
		var err error
		if r.inline && !bud.TryAcquire(n) {
			err = fmt.Errorf("a graph run from inside a kernel cannot wait for budget (%d of %d bytes)", n, bud.TotalBytes())
		} else if !r.inline {
			err = bud.Acquire(ctx, n)
		}
		if err != nil {
			for t, n := range taken {
				t.Release(n)
			}
			return fmt.Errorf("exec: reserve %d bytes of buffers on %s: %w", n, pool.Device(), err)
		}
		taken[bud] = n
	}
	return nil
}

// makeBuffers makes the reserved buffers fits (plan buffer ids whose
// bytes the run holds): device memory on a code device (allocMem), none
// yet for a buffer only fetched (made by the first fetch, run.fetch, or
// its bytes given back by release), else a buffer of its pool.
func (r *run) makeBuffers(fits []int32) {
	for _, i := range fits {
		b := &r.plan.bufs[i]
		if r.plan.mem[b.Device] {
			r.allocMem(i)
			continue
		}
		if r.plan.fetchOnly != nil && int(i) < len(r.plan.fetchOnly) && r.plan.fetchOnly[i] {
			continue // reserved; made by the first fetch (run.fetch), or its bytes given back by release
		}
		buf, _ := r.pools[b.Device].AllocateReserved(buffers.ID(i), b.Name, b.SizeBytes) // sizes checked by addNeeds
		r.bufs[i].Store(buf)
	}
}

// storeInputs stores each input into its buffer, which takes over the
// caller's reference. On an error (an input for a buffer the graph does
// not have or the run could not reserve) it releases the run's buffers
// and every input value exactly once, and returns the error; the run then
// holds nothing.
func (r *run) storeInputs(inputs map[dag.BufferID]any) error {
	for id := range inputs {
		if id < 0 || int(id) >= r.plan.graph.NumBuffers() || r.unalloc != nil && r.unalloc.bufs[id] {
			r.release()
			releaseInputs(inputs)
			return fmt.Errorf("exec: input for unknown or unallocated buffer id %d", id)
		}
	}
	stored := make(map[dag.BufferID]bool, len(inputs))
	for id, v := range inputs {
		b := r.buffer(buffers.ID(id))
		if b == nil { // a raw buffer only fetches touch: made now, its bytes reserved (see run.fetch)
			pb := &r.plan.bufs[id]
			b, _ = r.pools[pb.Device].AllocateReserved(buffers.ID(id), pb.Name, pb.SizeBytes)
			r.bufs[id].Store(b)
		}
		stored[id] = true // Store releases v when it fails
		if err := b.Store(v); err != nil {
			r.release()
			for id, v := range inputs {
				if !stored[id] {
					releaseValue(v)
				}
			}
			return fmt.Errorf("exec: input for buffer %q: %w", b.Name(), err)
		}
	}
	return nil
}

// release releases every buffer the run holds and hands its slots back
// to the plan for the next run; the run has no buffers after it.
func (r *run) release() {
	r.releaseMems()
	if r.bufs == nil {
		return
	}
	r.releaseUnfetched()
	drop := func(i int) {
		if r.bufs[i].Load() == nil { // a plain load: most value buffers were never made
			return
		}
		if b := r.bufs[i].Swap(nil); b != nil {
			b.Release()
		}
	}
	if r.made.Load() > 0 {
		for i := range r.bufs {
			drop(i)
		}
	} else { // only raw buffers can be there
		for _, i := range r.plan.compiled().raw {
			drop(int(i))
		}
	}
	r.plan.putSlots(r.bufs)
	r.bufs = nil
}

// releaseUnfetched gives back the budget bytes of the run's buffers that
// only fetches touch and that none made (see run.fetch). It is for the
// run's release: a buffer made afterwards would take bytes it no longer
// holds.
func (r *run) releaseUnfetched() {
	for i, only := range r.plan.fetchOnly {
		if only && r.bufs[i].Load() == nil && (r.unalloc == nil || !r.unalloc.bufs[i]) {
			pb := &r.plan.bufs[i]
			r.pools[pb.Device].Budget().Release(pb.SizeBytes)
		}
	}
}

// keptSlots is how many closed runs' buffer slots a plan keeps for reuse.
const keptSlots = 2

// bufSlots returns empty buffer slots for a run of p: one per planned
// buffer, reused from an earlier run's Result.Close when there is one.
func (p *Plan) bufSlots() []atomic.Pointer[buffers.Buffer] {
	p.slotsMu.Lock()
	defer p.slotsMu.Unlock()
	if n := len(p.slots); n > 0 {
		s := p.slots[n-1]
		p.slots[n-1] = nil
		p.slots = p.slots[:n-1]
		return s
	}
	return make([]atomic.Pointer[buffers.Buffer], len(p.bufs))
}

// putSlots keeps s (all nil) for a later run, up to keptSlots of them.
func (p *Plan) putSlots(s []atomic.Pointer[buffers.Buffer]) {
	p.slotsMu.Lock()
	defer p.slotsMu.Unlock()
	if len(p.slots) < keptSlots {
		p.slots = append(p.slots, s)
	}
}

// releaseInputs drops the references to input values handed to a run
// that could not start.
func releaseInputs(inputs map[dag.BufferID]any) {
	for _, v := range inputs {
		releaseValue(v)
	}
}

// releaseValue releases v when it has Release.
func releaseValue(v any) {
	if r, ok := v.(interface{ Release() }); ok {
		r.Release()
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
