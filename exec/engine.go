package exec

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// The run engine. A plan is known ahead, so each host stream is handed
// its whole launch list at once, as one gpu.List queued on the device
// stream (gpu.Lister.EnqueueList; a code device's stream is driven instead
// by a goroutine of the run: codestream.go). The device's worker runs the
// list in order. An event is a (stream, count) pair of the device: the
// list publishes its progress (gpu.Progress.Publish) after each launch
// another stream waits on, at the steps the device asks for, and when it
// ends, and a wait for (t, n) is satisfied once stream t's count, as its
// device keeps it (the counter gpu.Lister.EnqueueList gave t's list),
// reaches t's list start plus n.
// A satisfied wait costs one atomic load; an unsatisfied one is the
// count's WaitFor under the run's ctx, which gives up once ctx is done.
// The lists of a run start together, once all are queued (a gpu.HostEvent
// every list waits on), so each knows where the others start.
// Per launch there is no goroutine, channel, lock or allocation on the
// clean path; with launch timing off (the default), a plain kernel in a
// run with nothing failed costs a call and a status store
// (streamRun.fast). ctx is looked at where a stream waits, and per launch
// only when it can be done (the slow path).

// compiled is the part of a plan's execution that does not change from
// run to run: each global stream's launches in order, as compact records
// laid out in the order the stream runs them, and each launch's required
// reads (those whose taint skips it; optional reads excluded).
type compiled struct {
	lists    [][]hotLaunch
	base     []int                       // by global stream: where its launches' slots start
	slot     []int32                     // by plan index: the launch's slot in a run's outcomes (stream-major, so streams write apart)
	waits    [][]Wait                    // by global stream: the waits of its launches, in order
	optional map[int32][]buffers.Binding // the required reads of each launch with an optional read, by plan index
	raw      []int32                     // plan buffers with bytes (reserved before a run); the rest are values
}

// hotLaunch is what a stream reads to run one launch on the clean path;
// the rest is in the plan's PlannedLaunch.
type hotLaunch struct {
	fn     dag.KernelFunc // nil for a copy
	idx    int32          // plan index
	waits  int32          // end of its waits in the stream's waits (they start where the previous launch's end)
	option bool           // some read is optional
	record bool           // another stream waits on it: publish the stream's progress after it
	odd    bool           // option, or a copy (fn nil): not for the fast path
}

// compiled returns p's launch lists, built once per plan. The lists are
// windows of one array in stream-major order (so a launch's slot is its
// index there), and so are the streams' waits: a few allocations per
// plan, whatever its size.
func (p *Plan) compiled() *compiled {
	p.compileOnce.Do(func() {
		ns := p.NumGlobalStreams()
		n := len(p.launches)
		c := &compiled{lists: make([][]hotLaunch, ns), waits: make([][]Wait, ns)}
		// Count each stream's launches and waits, then place each launch
		// at its stream's next slot.
		counts := make([]int, 2*ns+2)
		lat, wat := counts[:ns+1], counts[ns+1:]
		for i := range p.launches {
			gs := p.sbase[p.launches[i].Device] + p.launches[i].Stream
			lat[gs+1]++
			wat[gs+1] += len(p.launches[i].Waits)
		}
		for gs := range ns {
			lat[gs+1] += lat[gs]
			wat[gs+1] += wat[gs]
		}
		hot := make([]hotLaunch, n)
		var waits []Wait
		if wat[ns] > 0 {
			waits = make([]Wait, wat[ns])
		}
		// Fill by index, with cursors in counts, and make the windows
		// after: a slice header stored per launch would cost a write
		// barrier each while the collector runs.
		c.base = make([]int, ns)
		wbase := make([]int, ns)
		for gs := range ns {
			c.base[gs], wbase[gs] = lat[gs], wat[gs]
		}
		c.slot = make([]int32, n)
		for i := range p.launches {
			l := &p.launches[i]
			gs := p.sbase[l.Device] + l.Stream
			at := lat[gs]
			lat[gs]++
			c.slot[i] = int32(at)
			wat[gs] += copy(waits[wat[gs]:], l.Waits)
			h := &hot[at]
			h.fn, h.idx, h.waits, h.record, h.odd = l.fn, int32(i), int32(wat[gs]-wbase[gs]), p.record[i], l.fn == nil
			if opt := p.optional(i); opt != nil {
				h.option, h.odd = true, true
				var req []buffers.Binding
				for j, rd := range l.Reads {
					if j >= len(opt) || !opt[j] {
						req = append(req, rd)
					}
				}
				if c.optional == nil {
					c.optional = map[int32][]buffers.Binding{}
				}
				c.optional[int32(i)] = req
			}
		}
		for gs := range ns {
			if lo, hi := c.base[gs], lat[gs]; lo < hi {
				c.lists[gs] = hot[lo:hi:hi]
			}
			if wlo, whi := wbase[gs], wat[gs]; wlo < whi {
				c.waits[gs] = waits[wlo:whi:whi]
			}
		}
		for i := range p.bufs {
			if p.bufs[i].SizeBytes != 0 {
				c.raw = append(c.raw, int32(i))
			}
		}
		p.comp = c
	})
	return p.comp
}

// required returns the reads launch i (l, of the plan) cannot run
// without: its reads less its optional ones.
func (c *compiled) required(i int, l *PlannedLaunch) []buffers.Binding {
	if !l.optional {
		return l.Reads
	}
	return c.optional[int32(i)]
}

// progressSrc is where a global stream's progress in a run is read: the
// counter the device gave its list (gpu.Lister.EnqueueList), from the
// list's start (first); nil for a list no device took, whose launches
// all settled before any list started (every count reached).
type progressSrc struct {
	c     *gpu.Counter
	first uint64
}

// progressOf returns how many launches of global stream gs have settled
// in the run (at least; a device may count further).
func (r *run) progressOf(gs int) uint64 {
	s := &r.src[gs]
	if s.c == nil {
		return math.MaxUint64
	}
	return sinceFirst(s.c.Load(), s.first)
}

// awaitProgress waits until global stream gs has settled n launches of the
// run, or ctx is done; it returns the progress it saw, and ctx.Err() when
// it gave up.
func (r *run) awaitProgress(ctx context.Context, gs int, n uint64) (uint64, error) {
	s := &r.src[gs]
	if s.c == nil {
		return math.MaxUint64, nil
	}
	c, err := s.c.WaitFor(ctx, s.first+n)
	return sinceFirst(c, s.first), err
}

// publish publishes n settled launches of code stream gs on its list's
// counter, from the list's goroutine. The last launch is left for the
// device to publish once the driver has returned (gpu.Lister), so that
// what the run does after its lists (release the status words' memory,
// read the outcomes) comes after all the driver does.
func (r *run) publish(gs int, n uint64) {
	if s := &r.src[gs]; s.c != nil {
		s.c.Publish(s.first + min(n, uint64(len(r.runs[gs].list)-1)))
	}
}

// sinceFirst is a stream count c less a list's start first, at least 0.
func sinceFirst(c, first uint64) uint64 {
	if c < first {
		return 0
	}
	return c - first
}

// outcomes are the launches' results of one run phase, by plan index. A
// launch's slot is written only by the stream that runs it; the rare
// details (errors, failures, copied bytes) go to extra under mu.
type outcomes struct {
	plan   *Plan
	base   time.Time // the run's start; times are offsets from it
	slot   []int32   // by plan index: the launch's slot in status and times
	status []byte    // Status by slot
	times  []int64   // start, end per slot (ns since base); nil without launch timing
	mu     sync.Mutex
	extra  map[int]*launchExtra
	roots  []failgraph.Failure // the failures in the graph once the phase ended
}

// launchExtra is what a launch that did not simply succeed leaves behind.
type launchExtra struct {
	failure  failgraph.FailureID
	err      error
	chain    []string
	copied   int64 // bytes a copy launch moved
	degraded bool  // it ran while an optional read was missing
}

func newOutcomes(p *Plan, base time.Time, timing bool) *outcomes {
	o := &outcomes{plan: p, base: base, slot: p.compiled().slot, status: make([]byte, len(p.launches)), extra: map[int]*launchExtra{}}
	if timing {
		o.times = make([]int64, 2*len(p.launches))
	}
	return o
}

// get returns launch i's status.
func (o *outcomes) get(i int) Status { return Status(o.status[o.slot[i]]) }

// set sets launch i's status.
func (o *outcomes) set(i int, s Status) { o.status[o.slot[i]] = byte(s) }

// note records detail for launch i.
func (o *outcomes) note(i int, f func(x *launchExtra)) {
	o.mu.Lock()
	x := o.extra[i]
	if x == nil {
		x = &launchExtra{}
		o.extra[i] = x
	}
	f(x)
	o.mu.Unlock()
}

// detail returns launch i's details (zero when it has none). It is read
// after the run.
func (o *outcomes) detail(i int) launchExtra {
	if x := o.extra[i]; x != nil {
		return *x
	}
	return launchExtra{}
}

// streamRun is one stream's launch list in one run: the gpu.Task queued
// on the stream. It is also the dag.Launch its kernels see, pointed at
// the launch running now.
type streamRun struct {
	r     *run
	gs    int // global stream
	base  int // its first slot in the run's outcomes
	list  []hotLaunch
	waits []Wait
	seen  []uint64     // by global stream: the progress this stream last saw
	pos   int          // next launch to run
	last  int64        // end of the previous launch (ns since base), with timing
	fresh bool         // the next launch reads the clock at its start
	left  int          // -1, or the first launch not run because a wait gave up (ctx done): cancelled by execute
	prog  gpu.Progress // the device's, once the list started; nil for an inline run
	count *gpu.Counter // the counter the device gave the list (gpu.Lister); nil when it refused it
	code  *codeRun     // a code stream's driver (codeList), nil for a host stream
	first uint64       // the list's start in it
	next  uint64       // the step by whose completion the list publishes next, as the device asked
	dead  error        // the device's sticky error, once a publish returned it: the list stops
	state atomic.Int32
	// wrote holds the ranges (of plan buffers) that launch wroteBy-1 stated
	// written (Launch.Wrote); released by fail should it fail. A list of
	// another launch is stale: the next statement starts afresh.
	wrote   []buffers.Binding
	wroteBy int32
	// Streams run side by side in one array: keep each one's fields,
	// written on every launch, off its neighbours' cache lines.
	_ [64]byte
}

var (
	_ gpu.List   = (*streamRun)(nil)
	_ dag.Launch = (*streamRun)(nil)
)

// States of a streamRun: queued on its stream, started (by the stream or
// inline), or withdrawn by execute before the stream reached it.
const (
	listQueued int32 = iota
	listStarted
	listWithdrawn
)

// Run runs the stream's launches in order, unless execute withdrew the
// list (its ctx is done) before the stream reached it; see run. Called
// again after a kernel ended the worker goroutine (runtime.Goexit), it
// goes on after that launch.
func (b *streamRun) Run(p gpu.Progress) {
	if b.prog == nil {
		if !b.state.CompareAndSwap(listQueued, listStarted) {
			return
		}
		b.prog = p
		b.next = 0 // so the first publish asks the device
		b.publish(0)
	}
	b.run()
}

// publish publishes the list's first n launches as settled, on the
// device's count of the stream; at or past the step the device asks to
// hear of, through its Progress, keeping the next such step and the
// device's sticky error (see gpu.Progress); one matching
// gpu.ErrDeviceLost is the device's reported loss (run.deviceLost), taken
// note of before any later publish, so a stream that sees this list's
// progress past here sees the loss too. An inline run publishes nothing.
func (b *streamRun) publish(n int) {
	if b.prog == nil {
		return
	}
	if uint64(n) < b.next {
		b.count.Publish(b.first + uint64(n))
		return
	}
	next, err := b.prog.Publish(uint64(n))
	b.next = next
	if err != nil && b.dead == nil {
		b.dead = err
		b.r.lostBy(b.gs, err) // before anything later publishes past this step
	}
}

// run runs the list. A kernel that panics fails its launch; one that
// calls runtime.Goexit takes the worker goroutine with it, and the device
// calls Run again for the rest of the list. A bug here that panics cancels
// the rest of the list, so no other stream waits forever.
func (b *streamRun) run() {
	finished := false
	defer func() {
		if finished {
			return
		}
		if v := recover(); v != nil {
			b.r.noteInternal(fmt.Errorf("exec: internal error on stream %d: %v\n%s", b.gs, v, debug.Stack()))
			b.cancelFrom(errInternal)
			return
		}
		// runtime.Goexit in a kernel: the launch settled in stretch, and
		// the device runs the rest on a new goroutine.
		b.publish(b.pos)
	}()
	b.loop()
	finished = true
}

var errInternal = errors.New("exec: the stream stopped on an internal error")

// cancelFrom settles every launch from pos as cancelled with cause.
func (b *streamRun) cancelFrom(cause error) {
	for b.pos < len(b.list) {
		i := int(b.list[b.pos].idx)
		b.pos++
		b.r.cancel(i, &b.r.plan.launches[i], cause)
	}
	b.publish(len(b.list))
}

// settleRest settles the launches from pos of a list its device can run
// no more of (a publish returned the device's sticky error): lost with
// the run's lost device, else cancelled with cause. Each settles, and is
// published, only once what it waits for has settled: a stream's
// progress also says that what its list waited for up to there has (the
// plan's waits rely on that: a wait covers what the stream it waits for
// waited for), so a dead list keeps its waits. When the run's ctx ends
// while a wait is not satisfied, the rest is left to be cancelled
// (left), as in stretch.
func (b *streamRun) settleRest(cause error) {
	r := b.r
	wfrom := 0
	if b.pos > 0 {
		wfrom = int(b.list[b.pos-1].waits)
	}
	for b.pos < len(b.list) {
		h := &b.list[b.pos]
		if !b.awaitAll(b.waits[wfrom:h.waits]) {
			b.left = b.pos
			return
		}
		wfrom = int(h.waits)
		i := int(h.idx)
		b.pos++
		if op := &r.plan.launches[i]; r.loss != nil && r.loss.hits(op) {
			r.lose(i, op)
		} else {
			r.cancel(i, op, cause)
		}
		b.publish(b.pos)
	}
}

// loop runs the list to its end: stretches of launches under one
// recovery each, so a launch costs no defer of its own. When a publish
// returns the device's sticky error, the device can run nothing more:
// the rest of the list is lost with the device when the error is its
// reported loss (see publish), and cancelled with any other.
func (b *streamRun) loop() {
	b.fresh = true
	for b.pos < len(b.list) && b.left < 0 && b.dead == nil {
		b.stretch()
	}
	if b.dead != nil {
		b.settleRest(b.dead)
	}
}

// stretch runs launches from pos until the list ends or a kernel panics.
// A panic fails the running launch with a *failgraph.KernelPanicError carrying
// the value and stack (wrapped: `exec: kernel "K" panicked: V`), and ends
// the stretch; runtime.Goexit fails it the same way, with the value
// "runtime.Goexit" (nothing after the kernel runs then; Run goes on with
// the rest).
func (b *streamRun) stretch() {
	r := b.r
	p := r.plan
	o := r.out
	c := p.compiled()
	done := r.ctx.Done()
	running := -1 // the launch whose kernel is running now
	defer func() {
		if running < 0 {
			return
		}
		v := recover()
		if v == nil {
			v = "runtime.Goexit"
		}
		i := running
		op := &p.launches[i]
		if o.times != nil {
			b.last = int64(time.Since(o.base))
			o.times[2*int(o.slot[i])+1] = b.last
		}
		err := fmt.Errorf("exec: %w", &failgraph.KernelPanicError{Kernel: op.Name, Value: v, Stack: debug.Stack()})
		id := b.fail(i, op, err)
		o.set(i, StatusFailed)
		o.note(i, func(x *launchExtra) { x.failure, x.err = id, err })
		b.fresh = true
		b.publish(b.pos)
	}()
	status := o.status[b.base:]
	var times []int64
	if o.times != nil {
		times = o.times[2*b.base:]
	}
	wfrom := 0
	if b.pos > 0 {
		wfrom = int(b.list[b.pos-1].waits)
	}
	store, slow, ctx, list, waits := r.store, r.slow, r.ctx, b.list, b.waits
	fast := !slow && times == nil
	// Each turn runs what it can on the fast path, then one launch here.
	// b.pos is stored once per launch, before anything that reads it (the
	// Launch view, a panic's recovery).
	for b.pos < len(list) && b.dead == nil {
		if fast {
			wfrom = b.fast(wfrom, &running)
			if b.pos == len(list) {
				break
			}
		}
		pos := b.pos
		h := &list[pos]
		i := int(h.idx)
		k := pos // the launch's slot, from the stream's base
		pos++
		b.pos = pos
		if we := int(h.waits); we != wfrom {
			if !b.awaitAll(waits[wfrom:we]) {
				// ctx is done and the wait may never be satisfied: the
				// launch and the rest of the list do not run. They are
				// cancelled once every launch that runs has returned, so
				// their taint lands after that of the launches they wait
				// for.
				b.pos = pos - 1
				b.left = b.pos
				return
			}
			wfrom = we
		}
		if slow || h.odd || !store.Empty() {
			if !b.ready(i, &p.launches[i], c.required(i, &p.launches[i]), done, o) {
				if h.record || uint64(pos) >= b.next {
					b.publish(pos)
				}
				continue
			}
		}
		if times != nil {
			start := b.last
			if b.fresh {
				start = int64(time.Since(o.base))
				b.fresh = false
			}
			times[2*k] = start
		}
		running = i
		var err error
		if h.fn != nil {
			err = h.fn(ctx, b)
		} else {
			err = b.copy(i)
		}
		running = -1
		if times != nil {
			b.last = int64(time.Since(o.base))
			times[2*k+1] = b.last
		}
		if err == nil && store.Empty() {
			status[k] = byte(StatusOK)
		} else {
			b.settle(i, k, err)
		}
		if h.record || uint64(pos) >= b.next {
			b.publish(pos)
		}
	}
	b.publish(b.pos)
}

// fast runs launches from b.pos for as long as nothing needs more than a
// call and a status store: no launch timing, no cancellation to watch for
// (stretch checks), an empty error graph, and a plain kernel without
// optional reads. A device loss needs no look here: the lost device's own
// lists stop at their next publish (its sticky error), and a launch
// elsewhere reads the lost device's bytes only through a copy launch,
// which is not plain (stretch checks it in ready). It returns, with b.pos
// at the launch it did not run, at the end of the list, at a launch that is not plain, at
// a failure (settled here) and when a wait brings taint into view; wfrom
// is where the next launch's waits start, as in stretch.
//
// The error graph needs no look per launch: a launch's reads come from
// launches of its own stream (a failure there ends the fast path) or of
// streams it waits on, directly or through an earlier wait of its stream,
// and a failing launch taints the graph before its stream publishes the
// progress a wait sees. So one atomic load at the start and one after
// each wait suffice.
//
// running is stretch's record of the launch whose kernel is running, for
// its recovery.
func (b *streamRun) fast(wfrom int, running *int) int {
	r := b.r
	store := r.store
	if !store.Empty() {
		return wfrom
	}
	list, status, ctx := b.list, r.out.status[b.base:], r.ctx
	for pos := b.pos; pos < len(list); {
		h := &list[pos]
		if h.odd {
			return wfrom
		}
		if we := int(h.waits); we != wfrom {
			if !b.awaitAll(b.waits[wfrom:we]) {
				return wfrom // stretch waits again, and gives up
			}
			wfrom = we
			if !store.Empty() {
				return wfrom
			}
		}
		k := pos // the launch's slot, from the stream's base
		pos++
		b.pos = pos
		*running = int(h.idx)
		err := h.fn(ctx, b)
		*running = -1
		if err != nil {
			b.settle(int(h.idx), k, err)
			if h.record || uint64(pos) >= b.next {
				b.publish(pos)
			}
			return wfrom
		}
		status[k] = byte(StatusOK)
		if h.record || uint64(pos) >= b.next {
			b.publish(pos)
			if b.dead != nil {
				return wfrom
			}
		}
	}
	return wfrom
}

// awaitAll waits until every wait of waits is satisfied (true), or until
// the run's ctx is done while one is not (false). seen caches the other
// streams' progress: a wait it covers costs no load of a cache line
// another core keeps writing, and one the counter already satisfies costs
// one atomic load.
func (b *streamRun) awaitAll(waits []Wait) bool {
	r, seen := b.r, b.seen
	if r.inline {
		return true // plan order: what a launch waits for has run
	}
	for _, w := range waits {
		if need := uint64(w.Seq); seen[w.Stream] < need {
			if seen[w.Stream] = r.progressOf(w.Stream); seen[w.Stream] < need {
				var err error
				seen[w.Stream], err = r.awaitProgress(r.ctx, w.Stream, need)
				b.fresh = true
				if err != nil {
					return false
				}
			}
		}
	}
	return true
}

// settle records the outcome of launch i (slot k of the stream) when it
// failed or the run has taint to clear: the clean path's success is a
// single status store in stretch.
func (b *streamRun) settle(i, k int, err error) {
	r := b.r
	op := &r.plan.launches[i]
	if err != nil {
		r.out.status[b.base+k] = byte(StatusFailed)
		err = fmt.Errorf("exec: kernel %q: %w", op.Name, err)
		id := b.fail(i, op, err)
		r.out.note(i, func(x *launchExtra) { x.failure, x.err = id, err })
		return
	}
	r.out.status[b.base+k] = byte(StatusOK)
	if op.Copy != nil {
		r.settleCopy(op)
		return
	}
	r.store.Written(op.Writes)
}

// fail taints the write set of host launch i (op), which failed with
// err, with a new failure and returns its id, except for the ranges the
// launch stated written (Launch.Wrote): those read as written.
func (b *streamRun) fail(i int, op *PlannedLaunch, err error) failgraph.FailureID {
	if b.wroteBy != int32(i)+1 {
		return b.r.store.Fail(op.Name, err, op.Writes)
	}
	id := b.r.store.FailPartly(op.Name, err, op.Writes, b.wrote)
	b.wrote, b.wroteBy = b.wrote[:0], 0
	return id
}

// ready decides whether launch i runs: it is lost with its device,
// cancelled (ctx done) or skipped (a required read is tainted), each
// recorded here, or it runs (true).
func (b *streamRun) ready(i int, op *PlannedLaunch, required []buffers.Binding, done <-chan struct{}, o *outcomes) bool {
	r := b.r
	if r.loss != nil && r.loss.hits(op) {
		r.lose(i, op)
		b.fresh = true
		return false
	}
	if done != nil {
		select {
		case <-done:
			r.cancel(i, op, r.ctx.Err())
			b.fresh = true
			return false
		default:
		}
	}
	if r.unalloc != nil {
		required = r.unalloc.required(required, op.Writes)
	}
	if sk, skip := r.store.CheckReads(op.Name, required, op.Writes); skip {
		o.set(i, StatusSkipped)
		o.note(i, func(x *launchExtra) { x.failure, x.err, x.chain = sk.Failure, sk.Root, sk.Chain })
		b.fresh = true
		return false
	}
	if op.optional && len(required) < len(op.Reads) && op.Copy == nil {
		if err := r.store.EnsureWritten(op.Reads...); err != nil {
			if r.loss.defers(err) {
				r.lose(i, op)
				b.fresh = true
				return false
			}
			o.note(i, func(x *launchExtra) { x.degraded = true })
		}
	}
	return true
}

// copy runs copy launch i: the buffer into its replica.
func (b *streamRun) copy(i int) error {
	n, err := b.r.runCopy(&b.r.plan.launches[i])
	b.r.out.note(i, func(x *launchExtra) { x.copied = n })
	return err
}

// lose marks launch i lost with the run's lost device: cancelled with the
// loss's error, its status StatusLost.
func (r *run) lose(i int, op *PlannedLaunch) {
	r.cancel(i, op, r.loss.err)
	r.out.set(i, StatusLost)
}

// cancel marks launch i cancelled and taints its writes with the run's
// single "cancelled" failure.
func (r *run) cancel(i int, op *PlannedLaunch, cause error) {
	r.out.set(i, StatusCancelled)
	id := r.store.Cancel(op.Name, cause, op.Writes)
	r.out.note(i, func(x *launchExtra) { x.failure, x.err = id, cause })
}

// noteInternal keeps the first internal error of the run.
func (r *run) noteInternal(err error) {
	r.mu.Lock()
	if r.internal == nil {
		r.internal = err
	}
	r.mu.Unlock()
}

// enqueueMu makes a run's queueing of its stream lists atomic with respect
// to other runs': every run's lists then sit in the same order on every
// stream they share, so a list can only wait on lists queued before it and
// runs sharing devices cannot deadlock.
var enqueueMu sync.Mutex

// execute runs the plan's launches on devs and returns once every launch
// has settled. It returns the first error a device gave when queueing (a
// closed device); the launches of a list that could not be queued are
// cancelled with it.
//
// A run started from inside a kernel of a run that is still going
// (r.inline, see allocate) runs its launches on the calling goroutine
// instead: its lists would otherwise queue behind the kernel that waits
// for them.
//
// When ctx is done, waits that are not satisfied give up (the device's
// count's WaitFor under the run's ctx), lists that no stream has started are
// withdrawn, and once every launch that runs has returned, the launches
// left over are cancelled.
func (r *run) execute(devs []gpu.Device, timing bool) error {
	p := r.plan
	c := p.compiled()
	r.ctx = context.WithValue(r.ctx, runKey{}, r) // what the kernels get: a run they start knows it is nested
	r.out = newOutcomes(p, time.Now(), timing)
	r.slow = r.ctx.Done() != nil || r.unalloc != nil
	runs := make([]streamRun, len(c.lists))
	for gs, list := range c.lists {
		if len(list) == 0 {
			continue
		}
		b := &runs[gs]
		*b = streamRun{r: r, gs: gs, list: list, waits: c.waits[gs], base: c.base[gs], left: -1, next: math.MaxUint64}
		if len(b.waits) > 0 {
			// A capacity of whole cache lines puts the slice on lines
			// of its own (Go's size classes of 64-byte multiples are
			// 64-byte aligned): the streams' seen slices, written on
			// their waits, would otherwise share a line.
			b.seen = make([]uint64, len(c.lists), (len(c.lists)+7)&^7)
		}
	}
	r.running.Store(true)
	defer r.running.Store(false) // deferred: a kernel of an inline run may end its goroutine (runtime.Goexit)
	var errs []error
	r.runs = runs
	if r.inline {
		r.runInline(runs)
	} else {
		errs = r.enqueue(devs)
		r.awaitLists(runs)
	}
	errs = append(errs, r.refused.all()...)
	// Launches a stream left when ctx was done: cancelled now, after
	// every launch that ran has settled, in plan order.
	var left []int
	for gs := range runs {
		if b := &runs[gs]; b.list != nil && b.left >= 0 {
			for _, h := range b.list[b.left:] {
				left = append(left, int(h.idx))
			}
		}
	}
	slices.Sort(left)
	for _, i := range left {
		r.cancel(i, &p.launches[i], r.ctx.Err())
	}
	if !r.store.Empty() {
		// Every failure still in the graph, for Report.Err: also those no
		// launch of this phase met (a reservation, a kernel that could not
		// follow a lost device).
		r.out.roots = r.store.Failures()
	}
	if r.internal != nil {
		errs = append(errs, r.internal)
	}
	return errors.Join(errs...)
}

// enqueue queues each stream's list of the run on its device stream
// (gpu.Lister.EnqueueList): a host stream's launches (a streamRun), or a
// code stream's driver (a codeList), under enqueueMu. The lists start
// together once every list is queued (gate), so each list's start on its
// stream (r.src) is known to the others. A lost device takes lists as
// any other does (gpu.Lister), and its loss comes from the lists' first
// publish (streamRun.publish, codeList.Run). A list a device refuses
// (closed, or a stream that takes no lists) is cancelled with its error,
// returned, before any list starts: it has no counter (see progressSrc).
func (r *run) enqueue(devs []gpu.Device) []error {
	p := r.plan
	runs := r.runs
	var errs []error
	r.src = make([]progressSrc, len(runs))
	gate := new(gpu.HostEvent)
	defer gate.Set() // also when something here panics: no list waits forever
	enqueueMu.Lock()
	defer enqueueMu.Unlock()
	refuse := func(gs int, err error) {
		b := &runs[gs]
		d, s := p.StreamOf(gs)
		b.state.Store(listStarted) // not queued: not to be withdrawn
		errs = append(errs, fmt.Errorf("exec: %v stream %d: %w", devs[d].ID(), s, err))
		b.cancelFrom(err)
	}
	for gs := range runs {
		b := &runs[gs]
		if b.list == nil {
			continue
		}
		d, s := p.StreamOf(gs)
		var l gpu.List = b
		if p.mem[d] {
			cd, _ := devs[d].(gpu.CodeDevice)
			st, ok := cd.Stream(s).(gpu.CodeStream)
			if !ok {
				refuse(gs, errors.New("not a gpu.CodeStream"))
				continue
			}
			l = r.newCode(b, cd, st)
		}
		ls, ok := devs[d].Stream(s).(gpu.Lister)
		if !ok {
			refuse(gs, errors.New("takes no launch lists (not a gpu.Lister)"))
			continue
		}
		count, first, err := ls.EnqueueList(gate, uint64(len(b.list)), l)
		if err != nil {
			refuse(gs, err)
			continue
		}
		b.count, b.first = count, first
		r.src[gs] = progressSrc{c: b.count, first: first}
	}
	return errs
}

// lostBy reports the loss of global stream gs's device when err, a
// device's sticky error (gpu.Progress), matches gpu.ErrDeviceLost (see
// run.deviceLost).
func (r *run) lostBy(gs int, err error) {
	if errors.Is(err, gpu.ErrDeviceLost) {
		r.deviceLost(r.plan.sdev[gs], err)
	}
}

// awaitLists returns once every host list the devices took has finished.
// When the run's ctx ends first, the lists no stream has started are
// withdrawn (their launches are left to be cancelled), and the started
// ones are awaited: their waits give up under ctx.
func (r *run) awaitLists(runs []streamRun) {
	for gs := range runs {
		b, src := &runs[gs], &r.src[gs]
		if b.list == nil || b.count == nil {
			continue
		}
		if _, err := src.c.WaitFor(r.ctx, src.first+uint64(len(b.list))); err == nil {
			continue
		}
		for gs := range runs {
			b, src := &runs[gs], &r.src[gs]
			if b.list == nil || b.count == nil {
				continue
			}
			if b.state.CompareAndSwap(listQueued, listWithdrawn) {
				b.left = 0
				continue
			}
			_, _ = src.c.WaitFor(context.Background(), src.first+uint64(len(b.list)))
		}
		return
	}
}

// runKey is the context key under which a run's kernels find the run:
// the marker that makes a run they start nested.
type runKey struct{}

// nested reports whether a run under ctx is started from inside a kernel
// of a run that is still going: ctx is the kernel's, or derived from it,
// and so carries that run's marker.
func nested(ctx context.Context) bool {
	outer, ok := ctx.Value(runKey{}).(*run)
	return ok && outer.running.Load()
}

// runInline runs the lists on the calling goroutine, in plan order (a
// topological order, so every wait is satisfied when it is reached), a
// stretch of consecutive launches of one stream at a time.
func (r *run) runInline(runs []streamRun) {
	p, c := r.plan, r.plan.compiled()
	for i := 0; i < len(p.launches); {
		gs := p.GlobalStream(i)
		j := i + 1
		for j < len(p.launches) && p.GlobalStream(j) == gs {
			j++
		}
		runs[gs].runTo(int(c.slot[j-1]) - c.base[gs] + 1)
		i = j
	}
}

// runTo runs the list's launches before position end on the calling
// goroutine, unless the list stopped (a wait gave up, or an internal
// error cancelled its rest).
func (b *streamRun) runTo(end int) {
	if b.left >= 0 || b.pos >= end {
		return
	}
	full := b.list
	b.list = full[:end]
	finished := false
	defer func() {
		b.list = full
		if finished {
			return
		}
		if v := recover(); v != nil {
			b.r.noteInternal(fmt.Errorf("exec: internal error on stream %d: %v\n%s", b.gs, v, debug.Stack()))
			b.cancelFrom(errInternal)
		}
	}()
	b.loop()
	finished = true
}

// unallocated lists the buffers whose reservation failed in a run: a
// launch that writes one is skipped like one with a tainted read.
type unallocated struct {
	bufs []bool
}

// required returns a launch's required reads plus its writes of
// unallocated buffers.
func (u *unallocated) required(required, writes []buffers.Binding) []buffers.Binding {
	for _, w := range writes {
		if u.bufs[w.Buffer] {
			required = append(slices.Clip(required), w)
		}
	}
	return required
}

// The dag.Launch view of the launch running now.

func (b *streamRun) op() *PlannedLaunch        { return &b.r.plan.launches[b.list[b.pos-1].idx] }
func (b *streamRun) Kernel() string            { return b.op().Name }
func (b *streamRun) Device() topology.DeviceID { return b.r.devs[b.op().Device] }
func (b *streamRun) Stream() int               { return b.op().Stream }

// Buffer resolves graph buffer id to the run's instance the launch
// declared with access acc (see dag.Launch.Buffer).
func (b *streamRun) Buffer(id dag.BufferID, acc dag.Access) (*buffers.Buffer, error) {
	op := b.op()
	x, ok := b.r.plan.instanceOf(op, id, acc)
	if !ok {
		return nil, b.accessError(op, id, acc)
	}
	if buf := b.r.buffer(x.Buffer); buf != nil {
		return buf, nil
	}
	if err := b.r.store.EnsureWritten(x); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("exec: kernel %q: buffer %q has no memory in this run", op.Name, b.r.plan.bufs[x.Buffer].Name)
}

// Missing is the read error of every read of graph buffer id the launch
// declared (see dag.Launch.Missing).
func (b *streamRun) Missing(id dag.BufferID) error {
	op := b.op()
	found := false
	for _, x := range op.Reads {
		if b.r.plan.bufs[x.Buffer].Of != id {
			continue
		}
		found = true
		if err := b.r.store.EnsureWritten(x); err != nil {
			return err
		}
	}
	if !found {
		return b.accessError(op, id, dag.AccessRead)
	}
	return nil
}

// Wrote records that the running launch finished writing [offset,
// offset+length) of graph buffer id (see dag.Launch.Wrote).
func (b *streamRun) Wrote(id dag.BufferID, offset, length int64) error {
	op := b.op()
	x, ok := b.r.plan.instanceOf(op, id, dag.AccessWrite)
	if !ok {
		return b.accessError(op, id, dag.AccessWrite)
	}
	pb := &b.r.plan.bufs[x.Buffer]
	size := pb.SizeBytes
	if pb.Value {
		size = 1
	}
	if !covers(b.r.plan, op.Writes, id, size, offset, length) {
		return &dag.RangeError{Kernel: op.Name, Buffer: id, Name: b.r.plan.graph.Buffer(id).Name, Offset: offset, Length: length, SizeBytes: size}
	}
	if length == 0 {
		return nil
	}
	if i := b.list[b.pos-1].idx + 1; b.wroteBy != i {
		b.wrote, b.wroteBy = b.wrote[:0], i
	}
	b.wrote = append(b.wrote, buffers.Binding{Buffer: x.Buffer, Offset: offset, Length: length})
	return nil
}

// covers reports whether [offset, offset+length) lies in a buffer of
// size bytes and in the union of the bindings of writes that are
// instances of graph buffer id. It walks from offset, each turn past the
// writes that hold the walk's place: O(len(writes)²) at worst.
func covers(p *Plan, writes []buffers.Binding, id dag.BufferID, size, offset, length int64) bool {
	if offset < 0 || length < 0 || offset > size-length {
		return false
	}
	for at, end := offset, offset+length; at < end; {
		next := at
		for _, w := range writes {
			if p.bufs[w.Buffer].Of == id && w.Offset <= at && at < w.End() {
				next = max(next, w.End())
			}
		}
		if next == at {
			return false
		}
		at = next
	}
	return true
}

// accessError is the error of launch op asking for buffer id with an
// access it did not declare.
func (b *streamRun) accessError(op *PlannedLaunch, id dag.BufferID, acc dag.Access) error {
	e := &dag.AccessError{Kernel: op.Name, Buffer: id, Access: acc}
	if g := b.r.plan.graph; id >= 0 && int(id) < g.NumBuffers() {
		e.Name = g.Buffer(id).Name
	}
	return e
}

func (b *streamRun) Allocator() memory.Allocator { return b.r.alloc }
