package exec

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// deviceLoss is the state of a run that may lose a device: none until
// one reports its loss (run.deviceLost; dev -1 until then). dev, id and
// err are set before lost is stored true and not changed after, so a
// reader that has loaded lost true reads them without mu.
type deviceLoss struct {
	mu   sync.Mutex // guards activation (run.deviceLost)
	dev  int        // device index; -1: none yet
	id   topology.DeviceID
	lost atomic.Bool
	err  error
	// inputs holds a reference to each of the caller's input values, as
	// the host keeps them: the recovery stores them again where the
	// device that held them was lost (see keep, release). sole marks the
	// inputs whose values have Release but no Retain: the run's buffer
	// holds their only reference, and the recovery moves it (see
	// recovery.releaseFirst) rather than keep one of its own.
	inputs map[dag.BufferID]any
	sole   map[dag.BufferID]bool
}

// newReportedLoss returns the loss state of a run that loses no device
// unless one reports its loss (run.deviceLost).
func newReportedLoss() *deviceLoss { return &deviceLoss{dev: -1} }

// deviceLost marks plan device d lost from now on, because it reported
// cause (an error matching gpu.ErrDeviceLost: a host list's publish or
// enqueue refused with it, a code device's enqueue or recorded event).
// Launches on d that have not run settle as lost, and so do copies out
// of it; its memory counts as gone; and after the run the recovery
// re-plans the unfinished work on the surviving devices (see Execute).
// One device per run is recovered from: another device reported lost
// becomes a refusal of the run's work naming both (see refusals), which
// the run returns as its error, and so does a loss in a run without loss
// state (one device, or a recovery's second phase), and the loss of the
// last device that is not a code device in a plan with code devices
// (their buffers' host copies live there). It is safe for concurrent
// use, and idempotent for d.
func (r *run) deviceLost(d int, cause error) {
	l := r.loss
	if l == nil {
		why := "lost during the recovery from another loss"
		if len(r.devs) < 2 {
			why = "lost, and the run has no other device to recover on"
		}
		r.refused.of(d, r.devs[d], fmt.Errorf("%s: %w", why, cause))
		return
	}
	if r.plan.hasCode() && !r.plan.hostBesides(d) {
		r.refused.of(d, r.devs[d], fmt.Errorf("lost, and a plan with code devices cannot recover from losing its last device that is not one (its buffers' host copies live there): %w", cause))
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.dev < 0:
		l.dev, l.id = d, r.devs[d]
		l.err = fmt.Errorf("exec: %s was lost: %w", l.id, cause)
		l.lost.Store(true)
	case l.dev == d:
	default:
		r.refused.of(d, r.devs[d], fmt.Errorf("lost as well as %s (a run recovers from one lost device): %w", l.id, cause))
	}
}

// hostBesides reports whether p has a device that is not a code device
// besides plan device d.
func (p *Plan) hostBesides(d int) bool {
	for i := range p.devices {
		if i != d && !p.mem[i] {
			return true
		}
	}
	return false
}

// keep takes a reference of its own to each input value that counts its
// references (Arrow arrays and records: Retain), before the run's buffers
// take over the caller's; values without Release are shared as they are;
// a value with Release but no Retain has one reference, which its buffer
// owns: keep marks it sole and holds nothing of it.
func (d *deviceLoss) keep(inputs map[dag.BufferID]any) {
	d.inputs = make(map[dag.BufferID]any, len(inputs))
	for b, v := range inputs {
		switch x := v.(type) {
		case interface{ Retain() }:
			x.Retain()
			d.inputs[b] = v
		case interface{ Release() }:
			if d.sole == nil {
				d.sole = map[dag.BufferID]bool{}
			}
			d.sole[b] = true
		default:
			d.inputs[b] = v
		}
	}
}

// release drops the input references keep took that the recovery did
// not hand on. It is idempotent.
func (d *deviceLoss) release() {
	releaseInputs(d.inputs)
	d.inputs = nil
}

// defers reports whether a launch whose optional reads are missing (err
// is the read check's error) waits for the recovery instead of running
// degraded: some of what it misses was lost with the device, and the
// recovery may recompute it, so its consumers must not see a partial
// result first. A nil d defers nothing.
func (d *deviceLoss) defers(err error) bool {
	return d != nil && errors.Is(err, gpu.ErrDeviceLost)
}

// hits reports whether launch op is lost: the device is gone and op runs
// on it or copies out of it.
func (d *deviceLoss) hits(op *PlannedLaunch) bool {
	return d.lost.Load() && (op.Device == d.dev || op.Copy != nil && op.Copy.From == d.dev)
}

// The recovery of a run that lost a device is a second phase, planned by
// the same planner as the first over the kernels whose outcome the loss
// took away. recoverLoss goes through it in named steps: which buffers
// survive (carriers), which kernels run again (reruns), where they run
// (migrate), then the second run itself (start, and the merged report).

// recovery is the state of one recovery, filled in step by step.
type recovery struct {
	e      *Executor
	g      *dag.Graph
	p1     *Plan
	r1     *run
	loss   *deviceLoss
	writes [][]dag.KernelID // by graph buffer: its writers

	// carried is, by graph buffer, a first-phase instance on a surviving
	// device that holds every byte's final version, all clean (nil:
	// none); home is its device (-1: none).
	carried []*buffers.Buffer
	home    []int
	ok      []bool // by kernel: its first-phase launch ran and succeeded
	pos     []int  // by kernel: its launch's position in the first phase
	rerun   []bool // by kernel: it runs in the second phase
	cannot  []dag.KernelID
	nocode  []dag.KernelID // kernels of the lost device that no surviving device has code for
	pl      placement.Assignment
	moved   []Migration
}

// recoverLoss runs the second phase of a run that lost a device and
// returns its Result: the second phase's buffers and error graph, and a
// report of both phases. On an error that keeps the second phase from
// starting (ctx done while reserving its memory) it releases every buffer
// of the run and returns (nil, err).
func (e *Executor) recoverLoss(ctx context.Context, p1 *Plan, r1 *run, rep1 *Report) (*Result, error) {
	rc := &recovery{e: e, g: p1.graph, p1: p1, r1: r1, loss: r1.loss}
	rc.carriers()
	rc.reruns()
	rc.migrate()
	p2 := planOn(rc.g, p1.devices, p1.streams, p1.code, p1.mem, rc.pl, &subset{run: rc.rerun, home: rc.home, fallback: rc.fallback(), drained: p1.drained})
	r2, err := rc.start(ctx, p2)
	if err != nil {
		return nil, fmt.Errorf("exec: recover from losing %s: %w", rc.loss.id, err)
	}
	submitErr := r2.execute(e.devs, e.timing)
	rep := rc.report(rep1, newReport(p2, r2.out, r2.store, e.topo))
	return &Result{graph: rc.g, run: r2, store: r2.store, Report: rep}, submitErr
}

// carriers finds, for each graph buffer, an instance of the first phase
// that can stand for it: on a surviving device, planned to end with every
// byte's final version (the buffer itself, or a replica that copies
// brought up to date), and clean, so every write and copy into it
// succeeded. A buffer of the lost device, or one left tainted, has none.
func (rc *recovery) carriers() {
	nb := rc.g.NumBuffers()
	rc.carried, rc.home = make([]*buffers.Buffer, nb), make([]int, nb)
	for b := range nb {
		rc.home[b] = -1
	}
	for i, pb := range rc.p1.bufs {
		b := pb.Of
		if i == int(b) && rc.p1.fetch != nil && rc.p1.fetch[b] != nil {
			// Final bytes left on a code device: gone with it, or
			// fetched home now to be carried.
			if slices.ContainsFunc(rc.p1.fetch[b], func(f fetch) bool { return f.dev == rc.loss.dev }) {
				continue
			}
			rc.r1.fetch(b)
		}
		buf := rc.r1.bufs[i].Load()
		if rc.carried[b] != nil || pb.Device == rc.loss.dev || !pb.final || buf == nil {
			continue
		}
		whole := rc.g.Buffer(b).Whole()
		whole.Buffer = buffers.ID(i)
		if rc.r1.store.EnsureWritten(whole) == nil {
			rc.carried[b], rc.home[b] = buf, pb.Device
		}
	}
}

// reruns decides which kernels run in the second phase: every kernel
// whose first-phase launch did not succeed, and, to a fixpoint, every
// writer of a buffer that is not carried. A buffer stops being carried
// when a kernel that runs again writes it (its writers then all run
// again, in order, so the last write wins as before) or reads bytes of it
// that a later writer overwrote (the carried bytes are the final ones,
// not those it read). A kernel that succeeded and whose outputs survive
// keeps its outcome: it never runs twice, so a kernel with effects
// outside the graph (a file it writes) runs once, unless an output it
// wrote was lost and must be recomputed.
func (rc *recovery) reruns() {
	g, nk := rc.g, rc.g.NumKernels()
	rc.ok, rc.pos, rc.rerun = make([]bool, nk), make([]int, nk), make([]bool, nk)
	for i := range rc.p1.launches {
		if k := rc.p1.launches[i].Kernel; k >= 0 {
			rc.pos[k] = i
			rc.ok[k] = rc.r1.out.get(i) == StatusOK
		}
	}
	rc.writes = make([][]dag.KernelID, g.NumBuffers())
	for k := range nk {
		rc.rerun[k] = !rc.ok[k]
		for _, w := range g.KernelWrites(dag.KernelID(k)) {
			rc.writes[w.Buffer] = append(rc.writes[w.Buffer], dag.KernelID(k))
		}
	}
	// A worklist: each kernel that runs again is looked at once; each
	// buffer that loses its carrier puts its writers on the list once.
	var work []dag.KernelID
	for k := range nk {
		if rc.rerun[k] {
			work = append(work, dag.KernelID(k))
		}
	}
	for _, b := range rc.uncarried() {
		work = rc.rerunWriters(b, work)
	}
	for len(work) > 0 {
		k := work[len(work)-1]
		work = work[:len(work)-1]
		for _, w := range g.KernelWrites(k) {
			if rc.uncarry(w.Buffer) {
				work = rc.rerunWriters(w.Buffer, work)
			}
		}
		for _, r := range g.KernelReads(k) {
			if rc.overwrittenAfter(r, int(k)) && rc.uncarry(r.Buffer) {
				work = rc.rerunWriters(r.Buffer, work)
			}
		}
	}
}

// uncarried returns the graph buffers with no carrier.
func (rc *recovery) uncarried() []buffers.ID {
	var out []buffers.ID
	for b, c := range rc.carried {
		if c == nil {
			out = append(out, buffers.ID(b))
		}
	}
	return out
}

// rerunWriters marks every writer of b that was not to run again, and
// adds it to work.
func (rc *recovery) rerunWriters(b buffers.ID, work []dag.KernelID) []dag.KernelID {
	for _, w := range rc.writes[b] {
		if !rc.rerun[w] {
			rc.rerun[w] = true
			work = append(work, w)
		}
	}
	return work
}

// uncarry drops buffer b's carrier and reports whether it had one.
func (rc *recovery) uncarry(b buffers.ID) bool {
	if rc.carried[b] == nil {
		return false
	}
	rc.carried[b], rc.home[b] = nil, -1
	return true
}

// overwrittenAfter reports whether a writer that comes after kernel k
// overwrote bytes of r, one of k's reads.
func (rc *recovery) overwrittenAfter(r buffers.Binding, k int) bool {
	return slices.ContainsFunc(rc.writes[r.Buffer], func(w dag.KernelID) bool {
		return rc.pos[w] > rc.pos[k] && slices.ContainsFunc(rc.g.KernelWrites(w), r.Overlaps)
	})
}

// migrate places the kernels that run again: on their device, unless it
// was lost; then where placement.Spread sends the lost device's kernels
// (the fewest kernels of the first phase's placement, counting the moves
// planned so far, among the surviving devices with code for the kernel).
// A kernel pinned to the lost device cannot move: it does not run, and
// start fails it; one that no surviving device has code for does not run
// either, and start fails it.
func (rc *recovery) migrate() {
	g, p1, loss := rc.g, rc.p1, rc.loss
	load := make([]int, len(p1.devices))
	var lost []string
	for k, d := range p1.placement.Device {
		load[d]++
		if d == loss.dev {
			lost = append(lost, g.KernelName(dag.KernelID(k)))
		}
	}
	var targets []placement.Target
	for d, id := range p1.devices {
		if d != loss.dev && !p1.isDrained(d) {
			targets = append(targets, placement.Target{ID: id, Kernels: load[d]})
		}
	}
	kernel := func(k string) dag.KernelID {
		id, _ := g.KernelByName(k)
		return id
	}
	moves, _ := placement.Spread(loss.id, lost, targets, 0, rc.e.topo, func(k string, to topology.DeviceID) bool {
		return rc.runs(kernel(k), slices.Index(p1.devices, to))
	})
	rc.pl = placement.Assignment{Strategy: p1.placement.Strategy, Device: slices.Clone(p1.placement.Device)}
	target := map[dag.KernelID]int{}
	for _, m := range moves {
		target[kernel(m.Kernel)] = slices.Index(p1.devices, m.Target)
	}
	for k := range rc.rerun {
		id := dag.KernelID(k)
		if !rc.rerun[k] || rc.pl.Device[k] != loss.dev {
			continue
		}
		if pin := g.Kernel(id).Device; pin != nil && *pin == loss.id {
			rc.cannot = append(rc.cannot, id)
			rc.rerun[k] = false
			continue
		}
		to, found := target[id]
		if !found {
			rc.nocode = append(rc.nocode, id)
			rc.rerun[k] = false
			continue
		}
		rc.pl.Device[k] = to
		rc.moved = append(rc.moved, Migration{Kernel: g.KernelName(id), From: loss.id, To: p1.devices[to]})
	}
}

// runs reports whether kernel k can run on device d of the second phase:
// d survives, is not drained (Executor.Drain), and has code for k (see
// Plan.canRun).
func (rc *recovery) runs(k dag.KernelID, d int) bool {
	return d >= 0 && d != rc.loss.dev && !rc.p1.isDrained(d) && rc.p1.canRun(rc.e.devs, k, d)
}

// fallback is the device of the second phase for buffers no kernel of it
// touches: the first surviving device that is not a code device
// (run.deviceLost refuses a loss that leaves none on a plan with code
// devices).
func (rc *recovery) fallback() int {
	for d := range rc.p1.devices {
		if d != rc.loss.dev && !rc.p1.mem[d] && !rc.p1.isDrained(d) {
			return d
		}
	}
	if rc.loss.dev == 0 {
		return 1
	}
	return 0
}

// releaseFirst releases the first phase's memory that is not carried
// over (what was on the lost device is gone), and returns the values it
// took out of the home instances of sole inputs (deviceLoss.sole) that
// no instance carries first: their only reference, which the second
// phase's buffers take over. (A carried instance of a sole input holds
// it, or a copy of its own.)
func (rc *recovery) releaseFirst() map[dag.BufferID]any {
	rc.r1.releaseMems()
	rc.r1.releaseUnfetched()
	kept := make(map[*buffers.Buffer]bool, len(rc.carried))
	for _, b := range rc.carried {
		kept[b] = true
	}
	var moved map[dag.BufferID]any
	for i := range rc.r1.bufs {
		b := rc.r1.bufs[i].Load()
		if b == nil || kept[b] {
			continue
		}
		if id := dag.BufferID(i); i < len(rc.carried) && rc.carried[i] == nil && rc.loss.sole[id] {
			if moved == nil {
				moved = map[dag.BufferID]any{}
			}
			moved[id] = b.Take()
		}
		b.Release()
	}
	return moved
}

// start releases the first phase's memory that is not carried over,
// reserves the second phase's, stores again the caller's inputs that were
// not carried (the executor kept a reference to each, or moved a sole
// input's value out of its first-phase buffer), and fails the kernels
// pinned to the lost device, naming it.
func (rc *recovery) start(ctx context.Context, p2 *Plan) (*run, error) {
	refill := rc.releaseFirst()
	if refill == nil {
		refill = map[dag.BufferID]any{}
	}
	for b, v := range rc.loss.inputs {
		if rc.carried[b] == nil {
			refill[b] = v
		} else {
			releaseInputs(map[dag.BufferID]any{b: v})
		}
	}
	rc.loss.inputs = nil
	r2 := &run{ctx: ctx, plan: p2, devs: p2.devices, gdevs: rc.e.devs, pools: rc.e.pools, alloc: rc.r1.alloc,
		store: failgraph.New(func(id buffers.ID) string { return p2.bufs[id].Name })}
	if err := r2.allocate(ctx, rc.carried, refill); err != nil {
		return nil, err
	}
	for _, k := range rc.cannot {
		name := rc.g.KernelName(k)
		r2.store.Fail(name, fmt.Errorf("exec: kernel %q is pinned to %s, which was lost: %w", name, rc.loss.id, rc.loss.err), rc.g.KernelWrites(k))
	}
	for _, k := range rc.nocode {
		kern := rc.g.Kernel(k)
		r2.store.Fail(kern.Name, fmt.Errorf("exec: kernel %q ran on %s, which was lost, and no other device has code for it (it has %s code): %w",
			kern.Name, rc.loss.id, kern.Codes(), rc.loss.err), kern.Writes)
	}
	return r2, nil
}

// report merges the second phase's report into the first's: first-phase
// launches whose work the recovery redid, and copies that did not
// succeed, are marked lost (the second phase says how they ended).
func (rc *recovery) report(rep, rep2 *Report) *Report {
	r1, p1 := rc.r1, rc.p1
	for i := range r1.out.status {
		k := p1.launches[i].Kernel
		if k >= 0 && rc.rerun[k] || k < 0 && r1.out.get(i) != StatusOK {
			r1.out.set(i, StatusLost)
		}
	}
	rep.phases = append(rep.phases, rep2.phases...)
	rep.Copies = append(rep.Copies, rep2.Copies...)
	for k, n := range rep2.BytesByLink {
		rep.BytesByLink[k] += n
	}
	rep.Waits += rep2.Waits
	lost := rc.loss.id
	rep.Lost = &lost
	rep.Migrations = rc.moved
	for k := range rc.rerun {
		if rc.rerun[k] && rc.ok[k] {
			rep.Reruns = append(rep.Reruns, rc.g.KernelName(dag.KernelID(k)))
		}
	}
	return rep
}
