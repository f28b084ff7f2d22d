package exec

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// Code devices. A plan places a kernel on a gpu.CodeDevice only when the
// kernel has a variant of the kind the device's Code names, and touches
// no value buffer; the buffers such a kernel reads and writes
// have instances in the device's memory (gpu.Memory, reserved with the
// run's other buffers; when it ends the memory is released and its bytes
// go back to the budget, or, with WithKeepDeviceMemory, the memory goes
// to the plan for its next run with its bytes still taken:
// Plan.ReleaseDeviceMemory), and the plan's copy
// launches between a host instance and a device instance run on the code
// device's stream as CopyIn or CopyOut. Every graph buffer's own instance
// (the one a Result reads) lives on a device that is not a code device.
// Bytes a code device writes are copied back by the run only where a
// launch elsewhere reads them; those that end a run on a code device alone
// are copied home by the Result's first read of the buffer (run.fetch),
// which keeps the run's device memory until Result.Close.
//
// Each code stream's list is driven by one goroutine (a codeRun) that
// enqueues the launches in order and settles them in order as the device
// completes them:
//
//   - a launch's wait for a launch of another code stream of the same
//     device is taken on the device when that stream's driver has
//     enqueued the launch's commands and recorded an event after them by
//     the time the waiting stream reaches it (the producer's device
//     stream has the event of the launch's last command:
//     gpu.CodeStream.CommandEvent): the waiting stream enqueues
//     Stream.Wait on that event, with no settle and no host round trip
//     between them. Such a wait is safe to leave on the device whatever
//     happens to the run's ctx: its producer's commands are already
//     enqueued, so it is satisfied. When the producer has not got that
//     far, the wait is taken on the host, as one for another device is;
//   - a launch's waits for launches on other devices are taken on the
//     host, on the run's per-stream progress (the launches it waits for
//     have settled), after the stream has settled what it enqueued
//     before: a device's queue runs in order, so nothing the launch
//     precedes could have started sooner, and a device never holds a
//     command whose producers may not run. (Waits enqueued on the device,
//     Stream.Wait on a settle event, cannot be withdrawn when the run's
//     ctx ends: the device would then wait for work that will not come,
//     or have to be let go before what the command must follow has
//     finished, a CopyOut into host memory that a host kernel still
//     reads, say.);
//   - the launch itself: LaunchKernel with the variant's shape and
//     arguments, or the copy;
//   - a Record after a launch another stream waits on, and at the end of
//     the list (or of the enqueue window); the failures a recorded event
//     reports (*gpu.CommandError) are mapped back to the launches it
//     covers by sequence number: each enqueue returns its command's, and
//     the driver keeps those of each launch (a kernel's label, its name,
//     is for people only).
//
// Settling a launch follows the CPU device's contract, in settle order (a
// launch that waited on the device settles after what it waited for):
// once the launches it waits for have settled, a launch whose required read is tainted is
// skipped with the root failure and its chain (never enqueued, when the
// driver knew the taint before enqueueing it; its outcome discarded
// otherwise); a launch the device reports failed fails with the
// *gpu.CommandError; a kernel whose status word (dag.StatusArg) holds a
// non-zero value fails with a *StatusError; otherwise its writes are
// clean (a copy carries its source's taint byte for byte). Settled
// progress is published as on a CPU stream, so other streams' waits see
// it. When the run's ctx is done the driver stops enqueueing; launches it
// did not enqueue are cancelled once the run has quiesced, and enqueued
// ones run to completion (a device cannot withdraw them) before the run
// returns. So that this is little, a run whose ctx can end enqueues only
// about codeAhead of device time ahead of what has settled, and one whose
// device does not finish within codeGrace of ctx's end abandons it (see
// ErrAbandoned). A device that refuses a launch because it was closed is
// treated alike: the driver stops, the launch and the rest of the list
// are cancelled with one error per device saying it refused the run's
// work (wrapping gpu.ErrClosed; see refusals), and the run returns that
// error. A device that reports its loss (an enqueue, or a recorded
// event's failure of this device, matching gpu.ErrDeviceLost) is lost for
// the run (run.deviceLost): the launch and those after it that have not
// settled are lost with it, and the run recovers on the other devices
// (see Executor.Execute); a second device lost in the same run is a refusal
// naming both.
//
// Since a device is only ever given commands whose producers have
// settled or are enqueued on the device before them, every command it
// holds can run to completion: runs that share a code device interleave
// their commands on its queues without waiting for one another.

// codeWindow bounds how many launches a code stream enqueues ahead of the
// oldest it has not settled. It is deep enough that a driver enqueueing
// short kernels rarely waits for the device mid-list (a device's own
// launch queue is about as deep: CUDA's holds 1024 launches).
const codeWindow = 1024

// codeAhead is the device time a code stream's driver lets its enqueued
// and unsettled launches add up to, when the run's ctx can end: a device
// cannot withdraw what it was given, so this bounds what a cancel still
// lets run. The window is then the launches that fill codeAhead at the
// stream's measured device time per launch, plus one: from 2 (long
// kernels: the one running and the next) to codeWindow (short kernels
// still batch). Each settled segment measures its launches' device time
// (from when the device could start its first, the later of its enqueue
// and the previous segment's end, to when its event is seen fired) and
// sets the window for what follows (pace: it shrinks at once and at most
// doubles); a stream starts at the window its plan's last run ended with,
// or at 2. A stream whose launches turn long after many short ones can
// hold one window of them before the first of them settles.
const codeAhead = 10 * time.Millisecond

// codeGrace is how long a code stream's driver waits, once the run's ctx
// is done, for the device to finish what the driver enqueued before it
// abandons it (see ErrAbandoned): a device cannot interrupt a running
// kernel, so this bounds how long after its ctx a run returns.
const codeGrace = time.Second

// ErrAbandoned is matched (errors.Is) by the error of a launch on a code
// device that had not finished one second (the grace a device gets to
// finish what it was given) after its run's ctx ended: the
// launch fails with it, the launches behind it on its stream are
// cancelled, the run returns without waiting for them, and the device is
// marked unusable (gpu.Abandoner, where the device offers it), so later
// work on it is refused. The host buffers the abandoned copies to host
// memory would write are not released (nor their bytes given back to
// their budgets): the device may still write them.
var ErrAbandoned = errors.New("exec: launch abandoned")

// segmentOf is the most launches one recorded event covers in a window
// of w launches when no other need for a Record comes first: a quarter
// of it, so a full window waits for its oldest quarter while three run
// on.
func segmentOf(w int) int { return max(1, w/4) }

// statusStride is the distance in bytes between the status words of a
// code stream's launches in its status memory: a multiple of every
// device's base address alignment (OpenCL requires sub-buffer origins
// aligned to CL_DEVICE_MEM_BASE_ADDR_ALIGN, at most 4096 bits in
// practice).
const statusStride = 512

// StatusError is a launch of device code that reported a soft failure:
// its status word (dag.StatusArg) held Value, not zero, when it ended.
type StatusError struct {
	Kernel string
	Value  int32
}

// Error returns "exec: kernel "k" set its status word to 3".
func (e *StatusError) Error() string {
	return fmt.Sprintf("exec: kernel %q set its status word to %d", e.Kernel, e.Value)
}

// codeArg is one argument of a code launch, bound to the plan: a buffer
// instance (inst >= 0) at off, a scalar, or the status word.
type codeArg struct {
	inst   buffers.ID // plan buffer; -1 for a scalar or the status word
	off    int64
	scalar any
	status bool
}

// codeOp is what a code stream needs to enqueue one launch, built once
// per plan (codeOps).
type codeOp struct {
	kernel   bool
	variant  *dag.Variant
	args     []codeArg
	argBytes []int64   // the ShapeFunc's input
	shape    dag.Shape // the launch shape (the ShapeFunc of argBytes)
	shapeErr error     // why shape cannot be launched, if so
	status   bool      // the kernel has a status word
	// A copy: from host bytes into device memory (in), device memory out
	// to host bytes (out), or within the device (neither).
	in, out bool
}

// hasCode reports whether the plan has launches on code devices.
func (p *Plan) hasCode() bool { return slices.Contains(p.mem, true) }

// codeOps returns, by plan index, what a code stream enqueues for each
// launch on a code device (zero for the others), built once per plan.
func (p *Plan) codeOps() []codeOp {
	p.codeOnce.Do(func() {
		ops := make([]codeOp, len(p.launches))
		for i := range p.launches {
			l := &p.launches[i]
			if !p.mem[l.Device] {
				continue
			}
			op := &ops[i]
			if l.Copy != nil {
				src, dst := l.Reads[0].Buffer, l.Writes[0].Buffer
				op.in = !p.mem[p.bufs[src].Device]
				op.out = !p.mem[p.bufs[dst].Device]
				continue
			}
			op.kernel, op.variant = true, p.variant(i)
			for _, a := range op.variant.Args {
				switch bd, ok := a.Buffer(); {
				case ok:
					x, _ := p.instanceOf(l, bd.Buffer, dag.AccessAny) // dag binds only declared buffers
					op.args = append(op.args, codeArg{inst: x.Buffer, off: bd.Offset})
					op.argBytes = append(op.argBytes, bd.Length)
				case a.Status():
					op.args = append(op.args, codeArg{inst: -1, status: true})
					op.argBytes = append(op.argBytes, 0)
					op.status = true
				default:
					v, _ := a.Scalar()
					op.args = append(op.args, codeArg{inst: -1, scalar: v})
					op.argBytes = append(op.argBytes, 0)
				}
			}
			// A pure function of the plan's sizes (dag.ShapeFunc): once
			// per plan, not per launch.
			op.shape = op.variant.Shape(op.argBytes)
			if err := op.shape.Check(); err != nil {
				op.shapeErr = fmt.Errorf("exec: kernel %q: %w", l.Name, err)
			}
		}
		p.cops = ops
		p.pace = make([]atomic.Int64, len(p.sdev))
	})
	return p.cops
}

// instanceOf returns launch l's first binding of graph buffer b with
// access acc (its reads, then its writes), redirected to the instance
// (plan buffer) the launch uses, or false when it declared none.
// O(bindings of l).
func (p *Plan) instanceOf(l *PlannedLaunch, b dag.BufferID, acc dag.Access) (buffers.Binding, bool) {
	for i, bs := range [2][]buffers.Binding{l.Reads, l.Writes} {
		if acc&(dag.AccessRead<<i) == 0 {
			continue
		}
		for _, x := range bs {
			if p.bufs[x.Buffer].Of == b {
				return x, true
			}
		}
	}
	return buffers.Binding{}, false
}

// allocMem makes plan buffer i's device memory on its code device,
// reading as zeroes as a new buffer does: the memory an earlier run of
// the plan left in its cache (r.cached; zeroed again, ordered before the
// run's commands on it), or a new allocation. A failure reads as the
// buffer's unallocated failure, as an over-budget reservation does, and
// gives its budget bytes back.
func (r *run) allocMem(i int32) {
	b := &r.plan.bufs[i]
	if r.mems == nil {
		r.mems = make([]gpu.Memory, len(r.plan.bufs))
	}
	if r.cached != nil {
		if m := r.cached[i]; m != nil && m.Bytes() == b.SizeBytes {
			r.cached[i] = nil
			if m.Zero() == nil {
				r.mems[i] = m
				return
			}
			m.Release() // a new allocation says what is wrong
		}
	}
	cd, _ := r.gdevs[b.Device].(gpu.CodeDevice)
	m, err := cd.Alloc(b.SizeBytes)
	if err != nil {
		r.pools[b.Device].Budget().Release(b.SizeBytes)
		r.store.FailUnallocated("allocate "+b.Name, buffers.ID(i),
			fmt.Errorf("exec: allocate %q (%d bytes) on %s: %w", b.Name, b.SizeBytes, r.devs[b.Device], err))
		if r.unalloc == nil {
			r.unalloc = &unallocated{bufs: make([]bool, len(r.plan.bufs))}
		}
		r.unalloc.bufs[i] = true
		return
	}
	r.mems[i] = m
}

// bufBudget returns the budget of plan buffer i's device.
func (r *run) bufBudget(i int) *buffers.Budget { return r.pools[r.plan.bufs[i].Device].Budget() }

// takeCached takes the plan's kept device memory (run.memc) for the run:
// the instances' memory with the budget bytes the cache holds for it,
// which the run holds from then on (allocate reserves no more for them),
// and the status words' memory, whose bytes go back to the budgets (a
// run counts no status words). Memory the run's buffers cannot use is
// released with its bytes. It returns the bytes now held, by budget.
func (r *run) takeCached() map[*buffers.Budget]int64 {
	mems, status, mbud, sbud := r.memc.take(r.gdevs)
	for gs, m := range status {
		if m != nil {
			sbud[gs].Release(m.Bytes())
		}
	}
	held := map[*buffers.Budget]int64{}
	for i, m := range mems {
		if m == nil {
			continue
		}
		if i >= len(r.plan.bufs) || !r.plan.mem[r.plan.bufs[i].Device] || m.Bytes() != r.plan.bufs[i].SizeBytes || mbud[i] != r.bufBudget(i) {
			mbud[i].Release(m.Bytes())
			m.Release()
			mems[i] = nil
			continue
		}
		held[mbud[i]] += m.Bytes()
	}
	r.cached, r.cachedStatus = mems, status
	return held
}

// dropCached releases the memory the run took from the plan's cache and
// did not use (run.cached), with the budget bytes it held for it.
func (r *run) dropCached() {
	for i, m := range r.cached {
		if m != nil {
			r.bufBudget(i).Release(m.Bytes())
			m.Release()
		}
	}
	r.cached = nil
}

// releaseMems releases the run's device memory with its budget bytes, or,
// when the run keeps it (WithKeepDeviceMemory), hands it to the plan's
// cache (run.memc) with the bytes still taken: its code streams' status
// words too, each taking its bytes from its budget now, or released when
// they are not free. A full cache (a concurrent run's memory) releases
// what it is handed. What the run took from the cache and did not use is
// released. It is called once the code streams' drivers have ended, and
// is idempotent.
func (r *run) releaseMems() {
	r.dropCached()
	releaseAll(r.cachedStatus) // their bytes went back when taken
	r.cachedStatus = nil
	if r.memc != nil && r.keepMem && (r.mems != nil || r.status != nil) {
		mbud := make([]*buffers.Budget, len(r.mems))
		for i, m := range r.mems {
			if m != nil {
				mbud[i] = r.bufBudget(i)
			}
		}
		sbud := make([]*buffers.Budget, len(r.status))
		for gs, m := range r.status {
			if m == nil {
				continue
			}
			if bud := r.pools[r.plan.sdev[gs]].Budget(); bud.TryAcquire(m.Bytes()) {
				sbud[gs] = bud
			} else {
				m.Release()
				r.status[gs] = nil
			}
		}
		r.memc.put(r.gdevs, r.mems, r.status, mbud, sbud)
	} else {
		for i, m := range r.mems {
			if m != nil {
				m.Release()
				r.bufBudget(i).Release(r.plan.bufs[i].SizeBytes)
			}
		}
		releaseAll(r.status)
	}
	r.mems, r.status = nil, nil
}

// releaseAll releases every non-nil memory of ms.
func releaseAll(ms []gpu.Memory) {
	for _, m := range ms {
		if m != nil {
			m.Release()
		}
	}
}

// memCache is a plan's device memory between its runs: one run's
// instances on code devices (mems, by plan buffer) and status words
// (status, by global stream), on devs (the executor's devices that run
// used), with the budgets (mbud, sbud, parallel to them) from which the
// cache holds each memory's bytes. It holds no reference to its Plan, so
// that the Plan's cleanup (runtime.AddCleanup) can release it. Methods
// are safe for concurrent use.
type memCache struct {
	mu         sync.Mutex
	full       bool
	devs       []gpu.Device
	mems       []gpu.Memory
	status     []gpu.Memory
	mbud, sbud []*buffers.Budget
}

// take empties the cache and returns its memory, and with it the budget
// bytes held for it, when it is of devs; nil otherwise (memory of other
// devices is released, with its bytes).
func (c *memCache) take(devs []gpu.Device) (mems, status []gpu.Memory, mbud, sbud []*buffers.Budget) {
	c.mu.Lock()
	full, cdevs, mems, status, mbud, sbud := c.full, c.devs, c.mems, c.status, c.mbud, c.sbud
	c.full, c.devs, c.mems, c.status, c.mbud, c.sbud = false, nil, nil, nil, nil, nil
	c.mu.Unlock()
	if full && !slices.Equal(cdevs, devs) {
		releaseHeld(mems, mbud)
		releaseHeld(status, sbud)
		return nil, nil, nil, nil
	}
	return mems, status, mbud, sbud
}

// put keeps mems and status (memory of devs, each holding its bytes of
// the budget beside it in mbud and sbud) when the cache is empty, and
// releases them with their bytes otherwise.
func (c *memCache) put(devs []gpu.Device, mems, status []gpu.Memory, mbud, sbud []*buffers.Budget) {
	c.mu.Lock()
	if !c.full {
		c.full, c.devs, c.mems, c.status, c.mbud, c.sbud = true, devs, mems, status, mbud, sbud
		mems, status = nil, nil
	}
	c.mu.Unlock()
	releaseHeld(mems, mbud)
	releaseHeld(status, sbud)
}

// release releases the cached memory and gives its bytes back to their
// budgets; the cache stays usable.
func (c *memCache) release() { c.take(nil) }

// releaseHeld releases every non-nil memory of ms and gives its bytes
// back to its budget, buds[i].
func releaseHeld(ms []gpu.Memory, buds []*buffers.Budget) {
	for i, m := range ms {
		if m != nil {
			buds[i].Release(m.Bytes())
			m.Release()
		}
	}
}

// memCache returns p's device memory cache, made on first use, with a
// cleanup that releases it once p is unreachable.
func (p *Plan) memCache() *memCache {
	if c := p.memc.Load(); c != nil {
		return c
	}
	c := &memCache{}
	if !p.memc.CompareAndSwap(nil, c) {
		return p.memc.Load()
	}
	runtime.AddCleanup(p, (*memCache).release, c)
	return c
}

// ReleaseDeviceMemory releases the device memory p keeps between runs
// and gives its bytes back to the budgets.
//
// The rule: a run of a plan with code devices takes the memory its
// instances on code devices need from the plan (what the last run to
// finish left there, with the budget bytes held for it), allocating what
// is missing, and when it ends (or, where its Result may still fetch
// bytes from a code device, at Result.Close) releases it and gives its
// bytes back, unless the run was given WithKeepDeviceMemory: then it
// hands the memory back to the plan, and the plan holds its bytes of each
// device's budget (the executor's, see WithBudget) for as long as it
// keeps it, so a run of another plan that needs them waits for them as
// for any bytes of the budget, or reads as over budget. So after the last
// Result.Close nothing stays allocated unless a run asked to keep it. A
// run that finds the plan's memory taken by a concurrent run allocates
// its own, and of two runs handing memory back the second releases its
// own. Kept memory is released by ReleaseDeviceMemory, by a run that does
// not keep, by a run on other devices than those it was allocated on, and
// once p is unreachable. A run still going (or a Result still open) when
// ReleaseDeviceMemory is called keeps memory again if it was asked to:
// call it after the last Result.Close to leave nothing allocated.
// ReleaseDeviceMemory is safe for concurrent use, also with runs of p;
// Executor.Run, whose plan runs once, and a run that lost a device keep
// nothing, and a plan with no code devices keeps none.
func (p *Plan) ReleaseDeviceMemory() {
	if c := p.memc.Load(); c != nil {
		c.release()
	}
}

// fetch is a range of a graph buffer's final bytes that a run leaves on
// a code device alone: in plan buffer inst (device memory of device dev),
// bytes [off, end). A Result copies them home when it first reads the
// buffer (fetch), so no run copies back what only device code reads.
type fetch struct {
	inst     buffers.ID
	dev      int
	off, end int64
}

// fetch copies graph buffer id's final bytes that are on code devices
// alone to its home instance, once per run: the bytes of each range, or,
// where the device instance is tainted (or was never allocated), its
// taint; a copy the device fails taints the range with that failure. The
// run's device memory is kept until release while any fetch may be
// pending. It is safe for concurrent use.
func (r *run) fetch(id dag.BufferID) {
	fs := r.plan.fetch[id]
	if len(fs) == 0 {
		return
	}
	r.fetchMu.Lock()
	defer r.fetchMu.Unlock()
	if r.fetched == nil {
		r.fetched = make([]bool, len(r.plan.fetch))
	}
	if r.fetched[id] {
		return
	}
	r.fetched[id] = true
	pb := &r.plan.bufs[id]
	for _, f := range fs {
		src := buffers.Binding{Buffer: f.inst, Offset: f.off, Length: f.end - f.off}
		dst := buffers.Binding{Buffer: buffers.ID(id), Offset: f.off, Length: f.end - f.off}
		// Named as the plan names a copy (placer.copy): a chain read
		// through it shows the same step.
		name := pb.Name
		if f.off != 0 || f.end != pb.SizeBytes {
			name = fmt.Sprintf("%s[%d:%d)", pb.Name, f.off, f.end)
		}
		op := fmt.Sprintf("copy %s %s→%s", name, r.devs[f.dev], r.devs[pb.Device])
		var m gpu.Memory
		if r.mems != nil {
			m = r.mems[f.inst]
		}
		if r.unalloc != nil && r.unalloc.bufs[id] {
			return // its home was never reserved: a read fails with that
		}
		hb := r.buffer(buffers.ID(id))
		if hb == nil && r.plan.fetchOnly[id] {
			hb, _ = r.pools[pb.Device].AllocateReserved(buffers.ID(id), pb.Name, pb.SizeBytes) // reserved by allocate
			r.bufs[id].Store(hb)
		}
		if m == nil || hb == nil || r.store.EnsureWritten(src) != nil {
			r.store.Carry(op, src, dst) // tainted, or never allocated: nothing worth copying
			continue
		}
		cd, _ := r.gdevs[f.dev].(gpu.CodeDevice)
		st := cd.Stream(0).(gpu.CodeStream)
		_, err := st.CopyOut(hb.Bytes()[f.off:f.end], m, f.off)
		if err == nil {
			err = st.Record().Wait(context.Background())
		}
		if err != nil {
			r.store.Fail(op, fmt.Errorf("exec: %s: %w", op, err), []buffers.Binding{dst})
			continue
		}
		r.store.Carry(op, src, dst)
	}
}

// refusals holds, by device, the error that reports a code device's
// refusal of a run's work (it was closed during the run, or lost): one
// per device, so that the launches it refused are cancelled with one
// failure, and the run returns it (Execute's error). The zero value is ready; methods are
// safe for concurrent use.
type refusals struct {
	mu   sync.Mutex
	errs map[int]error
}

// of returns device d's refusal error, made from cause (an error wrapping
// gpu.ErrClosed or gpu.ErrDeviceLost) on its first refusal.
func (f *refusals) of(d int, id topology.DeviceID, cause error) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err, ok := f.errs[d]; ok {
		return err
	}
	if f.errs == nil {
		f.errs = map[int]error{}
	}
	err := fmt.Errorf("exec: %s refused the run's work: %w", id, cause)
	f.errs[d] = err
	return err
}

// all returns the refusal errors, by device.
func (f *refusals) all() []error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for _, d := range slices.Sorted(maps.Keys(f.errs)) {
		errs = append(errs, f.errs[d])
	}
	return errs
}

// segment is a run of a code stream's launches, [start, end) by position,
// covered by one recorded event.
type segment struct {
	end  int
	ev   gpu.Event
	from time.Time // when its first command was enqueued (zero: none, or not paced)
}

// codeRun is one code stream's launch list in one run: its driver.
type codeRun struct {
	b     *streamRun // the list, its waits and slots; b.left is set as for a CPU stream
	r     *run
	st    gpu.CodeStream
	ops   []codeOp
	progs []gpu.Program // by position: the kernel's program
	state []codeState   // by position
	segs  []segment     // recorded and not settled, oldest first
	pos   int           // next launch to enqueue
	set   int           // next launch to settle
	wfrom int           // where the waits of the launch at pos start
	// status words: device memory, a stride per launch with one, and
	// their host copies (4 bytes each), by position's status slot.
	statusMem  gpu.Memory
	statusHost []byte
	statusSlot []int32 // by position: its slot, or -1
	enqAt      []int64 // by position: when it was enqueued (ns since the run's base), with timing
	lastEnd    int64
	// The window (codeAhead): paced when the run's ctx can end; window
	// is the launches it lets ahead of set; openAt is when the first
	// command no segment covers yet was enqueued, fired when the last
	// settled segment was seen done.
	paced  bool
	window int
	openAt time.Time
	fired  time.Time
	// refused is why the device refused work (see refusals); nil while
	// it takes it.
	refused error
	// abandoned: the device did not finish what the driver enqueued
	// within codeGrace of the run's ctx ending (abandon).
	abandoned bool
	dev       gpu.CodeDevice
	// The launch being enqueued, reused: the stream does not keep it.
	kl   gpu.KernelLaunch
	args []gpu.KernelArg
	// empty is the zero-byte memory bound for a zero-byte buffer (which
	// has no memory of its own), made on first use.
	empty gpu.Memory
}

// codeState is how far a launch of a code stream got.
type codeState struct {
	enqueued bool  // its commands are on the device
	settled  bool  // settled before it was enqueued (skipped, cancelled or lost)
	lost     bool  // not enqueued: its device was lost (simulated, or reported by the device)
	refused  bool  // not enqueued: the device refused it (closed); cancelled with c.refused
	err      error // it failed when it was enqueued (a bad shape, a build error, …)
	copied   int64 // bytes a copy moves
	// seq holds the sequence numbers of its commands on the stream (the
	// kernel or the copy, then the status word's read-back), 0 for none:
	// a failure the device reports is its own when it names one of them.
	seq [2]uint64
	// last is the last of seq once the launch's commands are enqueued (0
	// before, and for a launch that enqueues none), for the other code
	// streams of the device, whose launches wait for it (commandEvent).
	last atomic.Uint64
}

// codeList is a code stream's driver as the gpu.List queued on the
// stream (gpu.Lister): the device runs it on a host goroutine of its own.
type codeList struct {
	c     *codeRun
	slots int
}

// Run drives the list, unless execute withdrew it (the run's ctx ended
// before the device started it). A first publish that answers the
// device's loss (a list queued on a lost device) is the device's reported
// loss (run.deviceLost), noted before the driver starts, as one an
// enqueue reports mid-list is: the launches it hits settle as lost
// without being enqueued.
func (l *codeList) Run(p gpu.Progress) {
	if l.c.b.state.CompareAndSwap(listQueued, listStarted) {
		if _, err := p.Publish(0); err != nil {
			l.c.r.lostBy(l.c.b.gs, err)
		}
		l.c.run(l.c.dev, l.slots)
	}
}

// newCode makes the driver of code stream list b, to queue on the stream.
func (r *run) newCode(b *streamRun, dev gpu.CodeDevice, st gpu.CodeStream) *codeList {
	c := &codeRun{b: b, r: r, st: st, ops: r.plan.codeOps()}
	if r.memc != nil && r.status == nil {
		r.status = make([]gpu.Memory, len(r.plan.sdev)) // startCode runs on one goroutine
	}
	n := len(b.list)
	c.progs = make([]gpu.Program, n)
	c.state = make([]codeState, n)
	c.statusSlot = make([]int32, n)
	if r.out.times != nil {
		c.enqAt = make([]int64, n)
	}
	slots := 0
	for k, h := range b.list {
		c.statusSlot[k] = -1
		if c.ops[h.idx].status {
			c.statusSlot[k] = int32(slots)
			slots++
		}
	}
	c.dev = dev
	b.code = c // before the lists start: the device's other drivers read it (commandEvent)
	return &codeList{c: c, slots: slots}
}

// run drives the list: prepare, enqueue within the window while settling
// what the device has finished, then settle the rest; it returns once
// every command it enqueued has finished. A bug here that panics fails
// what is left of the list as an internal error, after the device has
// finished what was enqueued.
func (c *codeRun) run(dev gpu.CodeDevice, slots int) {
	r, b := c.r, c.b
	defer func() {
		if v := recover(); v != nil {
			r.noteInternal(fmt.Errorf("exec: internal error on code stream %d: %v\n%s", b.gs, v, debug.Stack()))
			_ = c.st.Record().Wait(context.Background())
			b.left = -1 // cancelled here, not again once the run has quiesced
			for c.set < len(b.list) {
				i := int(b.list[c.set].idx)
				if !c.state[c.set].settled {
					r.cancel(i, &r.plan.launches[i], errInternal)
				}
				c.set++
			}
			r.publish(b.gs, uint64(len(b.list)))
		}
		c.releaseStatus()
	}()
	c.prepare(dev, slots)
	done := r.ctx.Done()
	c.window = codeWindow
	if c.paced = done != nil; c.paced {
		c.window = max(int(r.plan.pace[b.gs].Load()), 2)
	}
	for c.pos < len(b.list) {
		if c.refused != nil || c.abandoned {
			break
		}
		if done != nil {
			select {
			case <-done:
				if b.left < 0 { // else a settled launch gave up earlier
					b.left = c.pos
				}
			default:
			}
			if b.left >= 0 {
				break
			}
		}
		for len(c.segs) > 0 && c.segs[0].ev.Done() {
			c.settleSegment()
		}
		if c.pos-c.set >= c.window {
			c.recordTo(c.pos)
			c.settleSegment()
			continue
		}
		c.enqueue()
	}
	if !c.abandoned {
		c.recordTo(c.pos)
	}
	for len(c.segs) > 0 {
		c.settleSegment()
	}
	if c.refused != nil {
		// What the device refused and what follows it: cancelled with
		// the refusal, after what ran has settled.
		for ; c.set < len(b.list); c.set++ {
			if i := int(b.list[c.set].idx); !c.state[c.set].settled {
				r.cancel(i, &r.plan.launches[i], c.refused)
			}
		}
		b.left = -1
	}
	if c.paced {
		r.plan.pace[b.gs].Store(int64(c.window))
	}
	if b.left < 0 {
		r.publish(b.gs, uint64(len(b.list)))
	}
}

// prepare builds the list's programs (a build error fails the launches
// of that kernel when they are enqueued) and zeroes the status words.
func (c *codeRun) prepare(dev gpu.CodeDevice, slots int) {
	p := c.r.plan
	// By source: kernels of one source share its program (each kernel
	// has a variant of its own).
	built := map[string]gpu.Program{}
	failed := map[string]error{}
	builtBy := map[string]string{} // a failed source's first kernel, which named the build
	for k, h := range c.b.list {
		op := &c.ops[h.idx]
		if !op.kernel {
			continue
		}
		v := op.variant
		name := p.launches[h.idx].Name
		if prog, ok := built[v.Source]; ok {
			c.progs[k] = prog
			continue
		}
		if err, ok := failed[v.Source]; ok {
			c.state[k].err = fmt.Errorf("exec: kernel %q: the program it shares with kernel %q: %w", name, builtBy[v.Source], err)
			continue
		}
		prog, err := dev.Program(name, v.Source, "")
		if err == nil {
			built[v.Source], c.progs[k] = prog, prog
			continue
		}
		failed[v.Source], builtBy[v.Source] = err, name
		c.state[k].err = fmt.Errorf("exec: kernel %q: %w", name, err) // the device's error names it
	}
	if slots == 0 {
		return
	}
	var m gpu.Memory
	var err error
	if cs := c.r.cachedStatus; cs != nil && cs[c.b.gs] != nil && cs[c.b.gs].Bytes() == int64(slots)*statusStride {
		m, cs[c.b.gs] = cs[c.b.gs], nil // each driver touches its own stream's slot
	} else {
		m, err = dev.Alloc(int64(slots) * statusStride)
	}
	if err == nil {
		_, err = c.st.Fill(m, 0, int64(slots)*statusStride, []byte{0, 0, 0, 0})
	}
	if err != nil {
		if m != nil {
			m.Release()
		}
		err = fmt.Errorf("exec: status words on %s: %w", dev.ID(), err)
		for k := range c.b.list {
			if c.statusSlot[k] >= 0 && c.state[k].err == nil {
				c.state[k].err = err
			}
		}
		return
	}
	c.statusMem, c.statusHost = m, make([]byte, 4*slots)
}

// releaseStatus releases the status words' memory, or keeps it for the
// plan's cache (run.status) when the run has one, and releases the
// zero-byte memory.
func (c *codeRun) releaseStatus() {
	if c.empty != nil {
		c.empty.Release()
		c.empty = nil
	}
	if c.statusMem != nil {
		if c.r.status != nil {
			c.r.status[c.b.gs] = c.statusMem // each driver touches its own stream's slot
		} else {
			c.statusMem.Release()
		}
		c.statusMem = nil
	}
}

// enqueue enqueues the launch at pos, once the launches of other streams
// it waits for have settled, or, on another stream of this device, been
// enqueued (then behind a device wait on their event), and where needed
// a Record. While one has not, the stream first settles what it has
// enqueued (the launch waited for may itself wait for those), then waits
// on the host: the device is given only commands whose producers have
// settled or are enqueued ahead of them, so a run whose ctx ends never
// leaves a device waiting for work that will not come, or running a
// command before what it must follow. When ctx ends during that wait the
// launch is not enqueued: it and the rest of the list are cancelled once
// the run has quiesced. A launch whose taint is known already (every
// launch before it on the stream has settled, and so have those it waits
// for) is settled here instead, without enqueueing.
func (c *codeRun) enqueue() {
	r, b := c.r, c.b
	k := c.pos
	h := &b.list[k]
	l := &r.plan.launches[h.idx]
	devWaited := false
	for _, w := range b.waits[c.wfrom:h.waits] {
		dev, ok := c.await(k, w)
		if !ok {
			return
		}
		devWaited = devWaited || dev
	}
	c.wfrom = int(h.waits)
	c.pos++
	if c.enqAt != nil {
		c.enqAt[k] = int64(time.Since(r.out.base))
	}
	if c.settleUnenqueued(k, l, devWaited) {
		return
	}
	c.enqueueCommands(k, l)
	// Within a long run of launches nothing else asks for, a Record
	// every segmentOf(window) launches: the window then settles one
	// segment at a time while the rest of it runs on.
	if h.record || c.pos == len(b.list) || c.pos-c.covered() >= segmentOf(c.window) {
		c.recordTo(c.pos)
	}
}

// await makes launch k, not yet enqueued, follow the launch wait w names,
// as enqueue describes: it returns at once when that launch has settled
// (as this stream last saw, or as its stream's progress says now); when
// it is enqueued on another code stream of this device, it enqueues a
// device wait on it (dev true); otherwise it records and settles what
// this stream has enqueued, then waits on the host for it to be enqueued
// there (then a device wait, unless it has settled meanwhile) or, on
// another device, to settle. It reports false when launch k must not be
// enqueued: the stream was abandoned while settling, or the run's ctx
// ended during the wait (b.left is then k, so the launch and the rest of
// the list are cancelled).
func (c *codeRun) await(k int, w Wait) (dev, ok bool) {
	r, b := c.r, c.b
	need := uint64(w.Seq)
	if b.seen[w.Stream] >= need {
		return false, true
	}
	if b.seen[w.Stream] = r.progressOf(w.Stream); b.seen[w.Stream] >= need {
		return false, true
	}
	if pc := r.runs[w.Stream].code; pc != nil && c.sameDevice(w.Stream) {
		if ev, ok := pc.commandEvent(w.Seq); ok {
			c.waitOn(k, w, ev)
			return true, true
		}
	}
	c.recordTo(k)
	for len(c.segs) > 0 {
		c.settleSegment()
	}
	if c.abandoned {
		return false, false
	}
	var err error
	if b.seen[w.Stream], err = r.awaitProgress(r.ctx, w.Stream, need); err != nil {
		b.left = k // ctx is done
		return false, false
	}
	return false, true
}

// settleUnenqueued marks launch k (plan launch l), whose waits are met,
// lost when the run's device loss hits it, and settles it here,
// without enqueueing, when its outcome is known already: it is next to
// settle on the stream (c.set == k) and waits for no device wait
// (devWaited false), and it is lost, or the run checks readiness (slow,
// or taint recorded) and ready says its reads are not all written. It
// reports whether it settled k; a lost launch it does not settle is left
// to settle as lost in order, after what it waits for.
func (c *codeRun) settleUnenqueued(k int, l *PlannedLaunch, devWaited bool) bool {
	r := c.r
	if r.loss != nil && r.loss.hits(l) {
		// Lost with its device (its own, or the device its copy reads):
		// nothing is enqueued, and it settles as lost in order.
		c.state[k].lost = true
		if c.set != k || devWaited {
			return false
		}
		c.state[k].settled = true
		c.lose(k)
	} else {
		if devWaited || c.set != k || !(r.slow || !r.store.Empty()) || c.ready(k) {
			return false
		}
		c.state[k].settled = true
	}
	c.set++
	if c.b.list[k].record {
		r.publish(c.b.gs, uint64(c.set))
	}
	return true
}

// enqueueCommands enqueues the commands of launch k (plan launch l), its
// waits met and its outcome not known yet, unless it is lost (it then
// settles as lost in order) or already failed (a build error, say: then
// nothing is enqueued). A launch the device refuses because it is lost
// (gpu.ErrDeviceLost) marks the device lost for the run (run.deviceLost)
// and is lost with it, its error cleared; one it refuses because it was
// closed (or lost when the run recovers from another device's loss
// already) is marked refused, its error cleared, and c.refused set to
// the device's refusal: it is cancelled with the rest of the list.
func (c *codeRun) enqueueCommands(k int, l *PlannedLaunch) {
	st := &c.state[k]
	if !st.lost && st.err == nil {
		if c.paced && c.openAt.IsZero() {
			c.openAt = time.Now()
		}
		st.err = c.launch(k, l)
	}
	err := st.err
	if err == nil {
		return
	}
	if errors.Is(err, gpu.ErrDeviceLost) {
		c.r.deviceLost(l.Device, err)
		if c.r.loss != nil && c.r.loss.hits(l) {
			st.err, st.lost = nil, true
			return
		}
	}
	if errors.Is(err, gpu.ErrClosed) || errors.Is(err, gpu.ErrDeviceLost) {
		st.err, st.refused = nil, true
		c.refused = c.r.refused.of(l.Device, c.r.devs[l.Device], err)
	}
}

// noteLoss marks the stream's device lost for the run (run.deviceLost)
// when err, the failures a recorded event of the stream reported, says
// so: a *gpu.CommandError of this device, or an error that is none (an
// event the device could not record), matching gpu.ErrDeviceLost.
func (c *codeRun) noteLoss(err error) {
	if err == nil || !errors.Is(err, gpu.ErrDeviceLost) {
		return
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var ce *gpu.CommandError
		if errors.Is(e, gpu.ErrDeviceLost) && (!errors.As(e, &ce) || ce.Device == c.st.Device()) {
			c.r.deviceLost(c.r.plan.sdev[c.b.gs], err)
			return
		}
	}
}

// commandEvent returns the event of the last command of the launch that
// brings the stream to n launches, and true, once its commands are
// enqueued and the stream has recorded an event after them
// (gpu.CodeStream.CommandEvent); nil and false before, and for a launch
// that enqueued no command (it settled without, or its enqueue failed).
// It is called from the drivers of the device's other code streams.
func (c *codeRun) commandEvent(n int) (gpu.Event, bool) {
	seq := c.state[n-1].last.Load()
	if seq == 0 {
		return nil, false
	}
	return c.st.CommandEvent(seq)
}

// sameDevice reports whether global stream gs is another code stream of
// this stream's device: its launches are waited for on the device.
func (c *codeRun) sameDevice(gs int) bool {
	return c.r.plan.sdev[gs] == c.r.plan.sdev[c.b.gs]
}

// waitOn enqueues, before launch k, a device wait on ev, the event
// another code stream of this device recorded after the launch w waits
// for. A wait the device refuses fails launch k, which then enqueues
// nothing.
func (c *codeRun) waitOn(k int, w Wait, ev gpu.Event) {
	if err := c.st.Wait(ev); err != nil && c.state[k].err == nil {
		c.state[k].err = fmt.Errorf("exec: %s: wait for %s: %w", c.r.plan.launches[c.b.list[k].idx].Name, c.r.plan.launches[w.Launch].Name, err)
	}
}

// covered returns where the launches no segment covers start.
func (c *codeRun) covered() int {
	if n := len(c.segs); n > 0 {
		return c.segs[n-1].end
	}
	return c.set
}

// recordTo records an event covering the launches before end that no
// segment covers yet.
func (c *codeRun) recordTo(end int) {
	if end > c.covered() {
		c.segs = append(c.segs, segment{end: end, ev: c.st.Record(), from: c.openAt})
		c.openAt = time.Time{}
	}
}

// launch enqueues the commands of launch k (plan launch l): a copy, or
// the kernel with its status word's read-back. It returns an error the
// launch fails with when it cannot be enqueued; nothing then runs for it.
func (c *codeRun) launch(k int, l *PlannedLaunch) error {
	op := &c.ops[c.b.list[k].idx]
	if l.Copy != nil {
		return c.launchCopy(k, l, op)
	}
	if c.progs[k] == nil {
		return fmt.Errorf("exec: kernel %q has no program", l.Name)
	}
	if op.shapeErr != nil {
		return op.shapeErr
	}
	if slices.Contains(op.shape.Global, 0) {
		// dag.Shape: a zero size runs no work-item. OpenCL refuses an
		// empty NDRange, so nothing is enqueued; the launch succeeds
		// (its status word stays zero).
		c.state[k].enqueued = true
		return nil
	}
	args, err := c.kernelArgs(k, l, op)
	if err != nil {
		return err
	}
	c.kl = gpu.KernelLaunch{Program: c.progs[k], Entry: op.variant.Entry, Global: op.shape.Global, Local: op.shape.Local, Args: args, Label: l.Name}
	seq, err := c.st.LaunchKernel(&c.kl)
	if err != nil {
		return fmt.Errorf("exec: kernel %q: %w", l.Name, err)
	}
	st := &c.state[k]
	st.enqueued, st.seq[0] = true, seq
	if s := c.statusSlot[k]; s >= 0 {
		seq, err := c.st.CopyOut(c.statusHost[4*s:4*s+4], c.statusMem, int64(s)*statusStride)
		if err != nil {
			return fmt.Errorf("exec: kernel %q: read its status word: %w", l.Name, err)
		}
		st.seq[1] = seq
	}
	st.last.Store(max(st.seq[0], st.seq[1]))
	return nil
}

// launchCopy enqueues copy launch k (plan launch l, op its operation): in
// from a host buffer, out to one, or between two device buffers of this
// device, of its read's range. A side without memory (a failed
// reservation) enqueues nothing and returns nil: the copy carries its
// taint. It returns the error the launch fails with when the stream
// refuses the copy.
func (c *codeRun) launchCopy(k int, l *PlannedLaunch, op *codeOp) error {
	r := c.r
	src, dst := l.Reads[0], l.Writes[0]
	off, n := src.Offset, src.Length
	unalloc := func() bool {
		return r.unalloc != nil && (r.unalloc.bufs[src.Buffer] || r.unalloc.bufs[dst.Buffer])
	}
	var seq uint64
	var err error
	switch {
	case op.in:
		hb, m := r.buffer(src.Buffer), c.mem(dst.Buffer)
		if hb == nil || m == nil || unalloc() {
			return nil // a failed reservation: the copy carries its taint
		}
		seq, err = c.st.CopyIn(m, off, hb.Bytes()[off:off+n])
	case op.out:
		m, hb := c.mem(src.Buffer), r.buffer(dst.Buffer)
		if hb == nil || m == nil || unalloc() {
			return nil
		}
		seq, err = c.st.CopyOut(hb.Bytes()[off:off+n], m, off)
	default:
		ms, md := c.mem(src.Buffer), c.mem(dst.Buffer)
		if ms == nil || md == nil {
			return nil
		}
		seq, err = c.st.Copy(md, off, ms, off, n)
	}
	if err != nil {
		return fmt.Errorf("exec: %s: %w", l.Name, err)
	}
	st := &c.state[k]
	st.enqueued, st.copied, st.seq[0] = true, n, seq
	st.last.Store(seq)
	return nil
}

// kernelArgs returns the arguments of kernel launch k (plan launch l, op
// its operation), in c.args (reused, so valid until the next launch): the
// status word's slot, a buffer's memory at its offset, or a scalar. A
// zero-byte buffer without memory binds c.empty, allocated on first use.
// It returns an error naming the argument when a buffer has no device
// memory or the zero-byte allocation fails.
func (c *codeRun) kernelArgs(k int, l *PlannedLaunch, op *codeOp) ([]gpu.KernelArg, error) {
	r := c.r
	args := slices.Grow(c.args[:0], len(op.args))[:len(op.args)]
	c.args = args
	for j, a := range op.args {
		switch {
		case a.status:
			args[j] = gpu.KernelArg{Mem: c.statusMem, Offset: int64(c.statusSlot[k]) * statusStride}
		case a.inst >= 0:
			m := c.mem(a.inst)
			if b := &r.plan.bufs[a.inst]; m == nil && b.SizeBytes == 0 {
				if c.empty == nil {
					cd, _ := r.gdevs[b.Device].(gpu.CodeDevice)
					var err error
					if c.empty, err = cd.Alloc(0); err != nil {
						return nil, fmt.Errorf("exec: kernel %q: argument %d: zero-byte buffer %q: %w", l.Name, j, b.Name, err)
					}
				}
				m = c.empty
			}
			if m == nil {
				return nil, fmt.Errorf("exec: kernel %q: argument %d: buffer %q has no device memory", l.Name, j, r.plan.bufs[a.inst].Name)
			}
			args[j] = gpu.KernelArg{Mem: m, Offset: a.off}
		default:
			args[j] = gpu.KernelArg{Scalar: a.scalar}
		}
	}
	return args, nil
}

// mem returns plan buffer id's device memory, nil when it has none.
func (c *codeRun) mem(id buffers.ID) gpu.Memory {
	if c.r.mems == nil {
		return nil
	}
	return c.r.mems[id]
}

// ready is the CPU stream's ready check for launch k, whose producers
// have settled: it is cancelled (ctx done, before it was enqueued) or
// skipped (a required read is tainted), each recorded here, or it runs
// (true).
func (c *codeRun) ready(k int) bool {
	r := c.r
	i := int(c.b.list[k].idx)
	op := &r.plan.launches[i]
	if c.state[k].refused {
		r.cancel(i, op, c.refused)
		return false
	}
	if !c.state[k].enqueued && r.ctx.Err() != nil {
		r.cancel(i, op, r.ctx.Err())
		return false
	}
	required := r.plan.compiled().required(i, op)
	if r.unalloc != nil {
		required = r.unalloc.required(required, op.Writes)
	}
	if sk, skip := r.store.CheckReads(op.Name, required, op.Writes); skip {
		r.out.set(i, StatusSkipped)
		r.out.note(i, func(x *launchExtra) { x.failure, x.err, x.chain = sk.Failure, sk.Root, sk.Chain })
		return false
	}
	return true
}

// lose settles launch k as lost with the run's lost device.
func (c *codeRun) lose(k int) {
	i := int(c.b.list[k].idx)
	c.r.lose(i, &c.r.plan.launches[i])
}

// settleSegment waits for the oldest segment's event and settles its
// launches in order.
func (c *codeRun) settleSegment() {
	s := c.segs[0]
	fired, err := c.wait(s.ev)
	if !fired {
		c.abandon()
		return
	}
	c.segs = c.segs[1:]
	var end int64
	if c.enqAt != nil {
		end = int64(time.Since(c.r.out.base))
	}
	if c.paced {
		now := time.Now()
		if !s.from.IsZero() {
			c.pace(max(now.Sub(later(s.from, c.fired))/time.Duration(s.end-c.set), 1))
		}
		c.fired = now
	}
	c.noteLoss(err)
	fails := c.attribute(s.end, err)
	for ; c.set < s.end; c.set++ {
		c.settleOne(c.set, fails[c.set], end)
	}
}

// wait waits for ev to fire and returns the failures it reports; once
// the run's ctx is done, it waits at most codeGrace more, and reports
// false if ev has not fired by then.
func (c *codeRun) wait(ev gpu.Event) (bool, error) {
	ctx := c.r.ctx
	if ctx.Done() == nil {
		return true, ev.Wait(context.Background())
	}
	if err := ev.Wait(ctx); ctx.Err() == nil {
		return true, err
	}
	if !ev.Done() {
		grace, cancel := context.WithTimeout(context.Background(), codeGrace)
		defer cancel()
		if ev.Wait(grace) != nil && !ev.Done() {
			return false, nil
		}
	}
	return true, ev.Wait(context.Background())
}

// abandon gives up on what the stream enqueued and has not settled, which
// the device did not finish within codeGrace of the run's ctx ending (see
// ErrAbandoned): the first launch the oldest unfired event covers (the
// one running, as far as the host can tell) fails with ErrAbandoned,
// every other launch left on the list is cancelled with ctx's error, and
// the device is marked unusable. The destinations of abandoned copies to
// host memory are left out of the run's buffers (never released).
func (c *codeRun) abandon() {
	r, b := c.r, c.b
	blamed := false
	for ; c.set < len(b.list); c.set++ {
		st := &c.state[c.set]
		if st.settled {
			continue
		}
		i := int(b.list[c.set].idx)
		l := &r.plan.launches[i]
		if st.enqueued && l.Copy != nil && c.ops[i].out {
			r.bufs[l.Writes[0].Buffer].Store(nil) // the device may still write it
		}
		if st.enqueued && !blamed {
			blamed = true
			err := fmt.Errorf("exec: %s: %w: still running on %s %v after the run's ctx ended (%w); the device is unusable", l.Name, ErrAbandoned, r.devs[l.Device], codeGrace, r.ctx.Err())
			if a, ok := c.dev.(gpu.Abandoner); ok {
				a.Abandon(err)
			}
			r.out.set(i, StatusFailed)
			id := r.store.Fail(l.Name, err, l.Writes)
			r.out.note(i, func(x *launchExtra) { x.failure, x.err = id, err })
			continue
		}
		r.cancel(i, l, r.ctx.Err())
	}
	c.segs, c.abandoned, b.left = nil, true, -1
	r.publish(b.gs, uint64(len(b.list)))
}

// pace sets the window for a measured device time per launch (see
// codeAhead): the launches that fill codeAhead, plus one, at most twice
// the window before (a short launch among long ones, a copy say, widens
// it only so far) and from 2 to codeWindow.
func (c *codeRun) pace(per time.Duration) {
	c.window = int(min(codeAhead/per+1, 2*time.Duration(c.window), codeWindow))
	c.window = max(c.window, 2)
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

// attribute maps the failures a segment's event reported (err: nil, or
// *gpu.CommandError values, joined) to the launches of the segment, from
// c.set to end: a failure of this stream's command to the launch that
// enqueued the command, by its sequence number (codeState.seq); a failure
// of another stream of the device, which a device wait passed on, to
// none (it is that stream's launch's failure, and its consumers here are
// skipped through its taint); anything else (a command no launch of the
// segment enqueued, such as the status words' fill, or an error that is
// no *gpu.CommandError) to every launch of the segment that was enqueued
// (the device's word is all there is).
func (c *codeRun) attribute(end int, err error) map[int]error {
	if err == nil {
		return nil
	}
	var errs []error
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	} else {
		errs = []error{err}
	}
	fails := map[int]error{}
	for _, e := range errs {
		at := -1
		var ce *gpu.CommandError
		if errors.As(e, &ce) && ce.Device == c.st.Device() {
			if ce.Stream != c.st.Index() {
				continue
			}
			for k := c.set; k < end && at < 0; k++ {
				if st := &c.state[k]; st.enqueued && ce.Seq != 0 && (st.seq[0] == ce.Seq || st.seq[1] == ce.Seq) {
					at = k
				}
			}
		}
		if at >= 0 {
			fails[at] = errors.Join(fails[at], e)
			continue
		}
		for k := c.set; k < end; k++ {
			if c.state[k].enqueued {
				fails[k] = errors.Join(fails[k], e)
			}
		}
	}
	return fails
}

// settleOne settles launch k, whose commands (if any) the device has
// finished, failed with cmdErr when the device said so; end is when the
// driver saw them finish (with timing).
func (c *codeRun) settleOne(k int, cmdErr error, end int64) {
	r, b := c.r, c.b
	h := &b.list[k]
	i := int(h.idx)
	st := &c.state[k]
	if st.settled {
		return
	}
	defer func() {
		if h.record {
			r.publish(b.gs, uint64(k+1))
		}
	}()
	wfrom := 0
	if k > 0 {
		wfrom = int(b.list[k-1].waits)
	}
	for _, w := range b.waits[wfrom:h.waits] {
		// A launch waited for on the device settles first: its driver
		// has enqueued it, and settles what it enqueued.
		if need := uint64(w.Seq); c.sameDevice(w.Stream) && b.seen[w.Stream] < need {
			b.seen[w.Stream], _ = r.awaitProgress(context.Background(), w.Stream, need)
		}
	}
	if !b.awaitAll(b.waits[wfrom:h.waits]) {
		// Not reached: a launch is enqueued only once the launches it
		// waits for on other devices have settled.
		panic(fmt.Sprintf("exec: launch %d of code stream %d settled before what it waits for", k, b.gs))
	}
	if c.enqAt != nil {
		slot := 2 * int(r.out.slot[i])
		r.out.times[slot], r.out.times[slot+1] = max(c.enqAt[k], c.lastEnd), end
		c.lastEnd = end
	}
	l := &r.plan.launches[i]
	if r.loss != nil && (st.lost || r.loss.hits(l)) {
		// Lost before it was enqueued, or since: its device memory
		// counts as gone, and the recovery redoes what it wrote.
		c.lose(k)
		return
	}
	if !c.ready(k) {
		return
	}
	err := st.err
	if err == nil && cmdErr != nil {
		err = fmt.Errorf("exec: %s: %w", l.Name, cmdErr)
	}
	if err == nil && l.Copy == nil && !st.enqueued {
		err = fmt.Errorf("exec: kernel %q was not launched", l.Name)
	}
	if err == nil && st.enqueued && c.statusSlot[k] >= 0 {
		s := c.statusSlot[k]
		if v := int32(binary.LittleEndian.Uint32(c.statusHost[4*s:])); v != 0 {
			err = &StatusError{Kernel: l.Name, Value: v}
		}
	}
	if err != nil {
		r.out.set(i, StatusFailed)
		id := r.store.Fail(l.Name, err, l.Writes)
		r.out.note(i, func(x *launchExtra) { x.failure, x.err = id, err })
		return
	}
	r.out.set(i, StatusOK)
	if l.Copy != nil {
		if n := st.copied; n > 0 {
			r.out.note(i, func(x *launchExtra) { x.copied = n })
		}
		r.settleCopy(l)
		return
	}
	r.store.Written(l.Writes)
}
