package exec

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// Migration is a kernel moved off a device: one that was lost (the
// recovery of a run, Report.Migrations) or drained (Executor.Drain,
// MigrationReport.Migrations).
type Migration struct {
	Kernel   string            // the kernel's name
	From, To topology.DeviceID // its device before and after
}

// MigrationFailure is a kernel Drain left on the drained device, and why:
// Err names the kernel and wraps the cause (a BufferMigration's error, or
// why no device can take it).
type MigrationFailure struct {
	Migration       // To is the target it did not reach; zero when it had none
	Err       error // why it stays on From
}

// MigrationPhase is a step of a resident buffer's migration, in order:
// the checkpoint (the source device memory copied to the host), the
// transfer (memory allocated on the target, within its budget, and the
// checkpoint copied into it), the restore (the target memory read back,
// compared with the checkpoint byte for byte, and handed to the new plan).
// There is no quiescing step: Drain runs between runs of its plan, when
// no command of the plan is on the devices.
type MigrationPhase uint8

const (
	// PhaseCheckpoint copies the source device memory to the host.
	PhaseCheckpoint MigrationPhase = iota + 1
	// PhaseTransfer allocates the target memory and copies the
	// checkpoint into it.
	PhaseTransfer
	// PhaseRestore reads the target memory back, checks it against the
	// checkpoint, and gives it to the new plan.
	PhaseRestore
)

var phaseNames = [...]string{"none", "checkpoint", "transfer", "restore"}

// String returns "checkpoint", "transfer" or "restore", "none" for 0, or
// "phase(N)".
func (ph MigrationPhase) String() string {
	if int(ph) < len(phaseNames) {
		return phaseNames[ph]
	}
	return fmt.Sprintf("phase(%d)", ph)
}

// BufferMigration is the migration of one resident buffer: the device
// memory a plan kept on the drained device (WithKeepDeviceMemory) for
// graph buffer Buffer, copied to its instance on a code device a kernel
// that touches it moved to. Bytes is its size; the durations are each
// phase's wall time (zero for a phase not reached). Err is nil when the
// target holds the same bytes and the new plan keeps them; otherwise it
// names the buffer, the devices and Phase, the step that failed, and
// wraps the device's error (errors.Is(err, gpu.ErrDeviceLost) for a
// target that reported its loss).
type BufferMigration struct {
	Buffer                        string // the graph buffer's name
	From, To                      topology.DeviceID
	Bytes                         int64
	Checkpoint, Transfer, Restore time.Duration
	Phase                         MigrationPhase // the failed step; 0 when Err is nil
	Err                           error
}

// MigrationStats sums a MigrationReport. Migrated and Failed count
// kernels; Checkpoints and FailedCheckpoints count BufferMigrations;
// BytesMoved is the bytes of the restored ones; the durations are the
// phases' wall times summed over every BufferMigration.
type MigrationStats struct {
	Migrated, Failed               int
	Checkpoints, FailedCheckpoints int
	BytesMoved                     int64
	Checkpoint, Transfer, Restore  time.Duration
}

// MigrationReport is what Drain did to device Device: the kernels it
// moved (in kernel id order), those it left there with the reason, and
// the resident buffers it migrated, in the order it copied them (by
// moved kernel, then by the kernel's reads and writes).
type MigrationReport struct {
	Device     topology.DeviceID
	Migrations []Migration
	Failed     []MigrationFailure
	Buffers    []BufferMigration
	Stats      MigrationStats
}

// Drain moves p's work off device dev, as removing a GPU gracefully does
// (a drain, not a loss), and returns the plan to run from then on with
// what it did. p itself is not changed, but its kept device memory moves
// to the new plan: run the returned plan, not p.
//
// Each kernel p places on dev moves to a device that runs its code and is
// not drained: the target moves gives it (placement.Coordinator's
// Unregister plans them: UnregisterResult.Migrations; each must have dev
// as its Source and name a kernel p places there), or, for the kernels
// moves leaves out (nil moves, or the coordinator's orphans), the one
// placement.Spread chooses, as the recovery from a lost device does. The
// new plan is planned like p with those kernels on their targets; its
// buffers' host copies and the buffers no kernel touches live off dev.
//
// The device memory p kept on dev (WithKeepDeviceMemory: the instances on
// a code device, as the last run to end left them) is its resident
// state: for each moved kernel, the instance of each buffer it reads or
// writes goes to the kernel's target when that is a code device on which
// the new plan has an instance of the buffer. Each is migrated through
// the host, not recomputed: checkpoint, transfer, restore (see
// MigrationPhase), and the new plan keeps the target memory, holding its
// bytes of the target's budget, so its next run allocates nothing there.
// (A run still starts every buffer from zeroes, as a new buffer reads:
// the bytes a checkpoint carries are the last run's, there to be read
// until the next run.) A kernel whose buffer fails to migrate stays on
// dev, in the new plan too, with the reason in Failed; a failed
// migration is not a loss (the device keeps serving the kernels that
// stayed), and the target's memory it took is released. A kernel pinned
// to dev, or with code for no other device, stays as well. The rest of
// p's kept memory that the new plan has an instance for is handed to it;
// what is left (dev's memory no kernel needs any more) is released with
// its budget bytes.
//
// From then on the new plan launches nothing on dev but the kernels that
// stayed (and the copies they need), and a Drain of it, or the recovery
// of one of its runs from a lost device, moves no kernel there. Other
// plans of e are not affected: a graph planned anew may use dev (make an
// executor without it for that).
//
// Call Drain between runs of p: memory a run of p still holds when Drain
// starts (an open Result's) is not migrated, and goes back to p. Drain
// blocks while the copies run, one after another on stream 0 of each
// device, until they finish or ctx ends (the copies left then fail with
// ctx's error, and their kernels stay). It is safe for concurrent use
// with runs of other plans. Errors (nothing moves, p keeps its memory):
// ctx done already, p not of e's devices, dev not among them or its last
// device that is not a code device, a move of a kernel p does not place
// on dev or to a device that cannot take it.
func (e *Executor) Drain(ctx context.Context, p *Plan, dev topology.DeviceID, moves []placement.MigrationPlan) (*Plan, *MigrationReport, error) {
	if err := e.fits(p); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("exec: drain %s: %w", dev, err)
	}
	d := slices.Index(p.devices, dev)
	if d < 0 {
		return nil, nil, fmt.Errorf("exec: drain %s: not a device of the plan %v", dev, p.devices)
	}
	dr := &drain{e: e, p: p, d: d, drained: slices.Clone(p.drained), rep: &MigrationReport{Device: dev}}
	if dr.drained == nil {
		dr.drained = make([]bool, len(p.devices))
	}
	dr.drained[d] = true
	if p.hostOff(dr.drained...) < 0 {
		return nil, nil, fmt.Errorf("exec: drain %s: it is the plan's last device that is not a code device (its buffers' host copies live there)", dev)
	}
	if err := dr.targets(moves); err != nil {
		return nil, nil, err
	}
	p2 := dr.plan()
	dr.transfer(ctx, p2)
	if len(dr.rep.Failed) > 0 {
		p2 = dr.plan() // the kernels that failed stay on dev
	}
	dr.handOver(p2)
	dr.report()
	return p2, dr.rep, nil
}

// drain is the state of one Drain.
type drain struct {
	e       *Executor
	p       *Plan
	d       int    // the drained device
	drained []bool // by device: drained, d included
	pl      placement.Assignment
	moved   []dag.KernelID // kernels to move off d, in id order
	rep     *MigrationReport

	// p's kept memory (memCache.take), by p's buffer and global stream.
	mems, status []gpu.Memory
	mbud, sbud   []*buffers.Budget
	// restored holds the target memory of the migrated buffers, by
	// (graph buffer, target device), with the target's budget.
	restored map[[2]int]gpu.Memory
}

// hostOff returns the first device of p that is neither a code device
// nor drained (p.drained, or drained when given), -1 when there is none.
func (p *Plan) hostOff(drained ...bool) int {
	for d, m := range p.mem {
		if !m && !p.isDrained(d) && (d >= len(drained) || !drained[d]) {
			return d
		}
	}
	return -1
}

// canRun reports whether kernel k of p's graph can run on device d of p
// (devs, the executor's devices): d has code for it and, on a code
// device, k touches no value buffer and binds buffers only at offsets the
// device can bind.
func (p *Plan) canRun(devs []gpu.Device, k dag.KernelID, d int) bool {
	kern := p.graph.Kernel(k)
	code := p.code[d]
	if !kern.HasCode(code) {
		return false
	}
	if cd, ok := devs[d].(gpu.CodeDevice); ok && p.mem[d] {
		if _, v := valueAccess(p.graph, kern); v || misaligned(p.graph, kern, code, cd.ArgAlignBytes()) != nil {
			return false
		}
	}
	return true
}

// targets sets dr.pl: p's placement with each kernel of d on its target
// (moves, then placement.Spread), and notes the kernels that cannot move
// in the report. A bad move is an error.
func (dr *drain) targets(moves []placement.MigrationPlan) error {
	p, g, d := dr.p, dr.p.graph, dr.d
	dr.pl = placement.Assignment{Strategy: p.placement.Strategy, Device: slices.Clone(p.placement.Device)}
	target := map[dag.KernelID]int{}
	for _, m := range moves {
		k, ok := g.KernelByName(m.Kernel)
		switch {
		case !ok:
			return fmt.Errorf("exec: drain %s: move of kernel %q, which the graph does not have", p.devices[d], m.Kernel)
		case m.Source != p.devices[d] || p.placement.Device[k] != d:
			return fmt.Errorf("exec: drain %s: move of kernel %q from %s: the plan runs it on %s", p.devices[d], m.Kernel, m.Source, p.devices[p.placement.Device[k]])
		}
		to := slices.Index(p.devices, m.Target)
		if to < 0 || dr.drained[to] || !p.canRun(dr.e.devs, k, to) {
			return fmt.Errorf("exec: drain %s: kernel %q cannot move to %s (not a device of the plan, drained, or without code for it)", p.devices[d], m.Kernel, m.Target)
		}
		target[k] = to
	}
	pinned := func(k dag.KernelID) bool {
		pin := g.Kernel(k).Device
		return pin != nil && *pin == p.devices[d]
	}
	load := make([]int, len(p.devices))
	var rest []string // the kernels Spread places
	for k, kd := range p.placement.Device {
		load[kd]++
		if _, ok := target[dag.KernelID(k)]; kd == d && !ok && !pinned(dag.KernelID(k)) {
			rest = append(rest, g.KernelName(dag.KernelID(k)))
		}
	}
	var ts []placement.Target
	for t, id := range p.devices {
		if !dr.drained[t] {
			ts = append(ts, placement.Target{ID: id, Kernels: load[t]})
		}
	}
	spread, _ := placement.Spread(p.devices[d], rest, ts, 0, dr.e.topo, func(k string, to topology.DeviceID) bool {
		id, _ := g.KernelByName(k)
		return p.canRun(dr.e.devs, id, slices.Index(p.devices, to))
	})
	for _, m := range spread {
		id, _ := g.KernelByName(m.Kernel)
		target[id] = slices.Index(p.devices, m.Target)
	}
	for k, kd := range p.placement.Device {
		id := dag.KernelID(k)
		if kd != d {
			continue
		}
		mig := Migration{Kernel: g.KernelName(id), From: p.devices[d]}
		if pinned(id) {
			dr.fail(mig, fmt.Errorf("exec: kernel %q stays on %s: it is pinned there", mig.Kernel, mig.From))
			continue
		}
		to, ok := target[id]
		if !ok {
			dr.fail(mig, fmt.Errorf("exec: kernel %q stays on %s: no other device that is not drained has code for it", mig.Kernel, mig.From))
			continue
		}
		dr.pl.Device[k] = to
		dr.moved = append(dr.moved, id)
	}
	return nil
}

// fail notes that m's kernel stays on the drained device for err.
func (dr *drain) fail(m Migration, err error) {
	dr.rep.Failed = append(dr.rep.Failed, MigrationFailure{Migration: m, Err: err})
}

// plan plans p's graph with dr.pl on p's devices, the drained ones off
// limits for buffers' homes.
func (dr *drain) plan() *Plan {
	p := dr.p
	return planOn(p.graph, p.devices, p.streams, p.code, p.mem, dr.pl, &subset{fallback: p.hostOff(dr.drained...), drained: dr.drained})
}

// transfer migrates the resident buffers of the moved kernels to their
// instances in p2 and moves back to d the kernels whose buffers failed.
func (dr *drain) transfer(ctx context.Context, p2 *Plan) {
	p, g, d := dr.p, dr.p.graph, dr.d
	if c := p.memc.Load(); c != nil {
		dr.mems, dr.status, dr.mbud, dr.sbud = c.take(dr.e.devs)
	}
	dr.restored = map[[2]int]gpu.Memory{}
	done := map[[2]int]error{} // by (graph buffer, target): the migration's outcome
	kept := dr.keptOn(p, d)
	var moved []dag.KernelID
	for _, k := range dr.moved {
		to := dr.pl.Device[k]
		var failed error
		for _, b := range touched(g, k) {
			src, ok := kept[b]
			if !ok || !p2.mem[to] || p2.instanceOn(b, to) < 0 {
				continue // nothing resident, or no device memory for it on the target
			}
			key := [2]int{int(b), to}
			err, ok := done[key]
			if !ok {
				err = dr.migrateBuffer(ctx, g.Buffer(b).Name, src, to, key)
				done[key] = err
			}
			if err != nil {
				failed = err
				break // the kernel stays: its other buffers need not move
			}
		}
		mig := Migration{Kernel: g.KernelName(k), From: p.devices[d], To: p.devices[to]}
		if failed != nil {
			dr.pl.Device[k] = d
			dr.fail(mig, fmt.Errorf("exec: kernel %q stays on %s: %w", mig.Kernel, mig.From, failed))
			continue
		}
		moved = append(moved, k)
		dr.rep.Migrations = append(dr.rep.Migrations, mig)
	}
	dr.moved = moved
	slices.SortFunc(dr.rep.Failed, func(a, b MigrationFailure) int {
		ka, _ := g.KernelByName(a.Kernel)
		kb, _ := g.KernelByName(b.Kernel)
		return cmp.Compare(ka, kb)
	})
}

// keptOn returns, by graph buffer, the memory p kept for its instance on
// device d.
func (dr *drain) keptOn(p *Plan, d int) map[dag.BufferID]gpu.Memory {
	kept := map[dag.BufferID]gpu.Memory{}
	for i, m := range dr.mems {
		if m != nil && i < len(p.bufs) && p.bufs[i].Device == d {
			kept[p.bufs[i].Of] = m
		}
	}
	return kept
}

// touched returns the graph buffers kernel k reads or writes, each once,
// reads first, in declaration order.
func touched(g *dag.Graph, k dag.KernelID) []dag.BufferID {
	var bs []dag.BufferID
	for _, set := range [2][]buffers.Binding{g.KernelReads(k), g.KernelWrites(k)} {
		for _, b := range set {
			if id := dag.BufferID(b.Buffer); !slices.Contains(bs, id) {
				bs = append(bs, id)
			}
		}
	}
	return bs
}

// instanceOn returns p's instance (plan buffer) of graph buffer b on
// device d, -1 when it has none.
func (p *Plan) instanceOn(b dag.BufferID, d int) int {
	return slices.IndexFunc(p.bufs, func(pb PlannedBuffer) bool { return pb.Of == b && pb.Device == d })
}

// migrateBuffer copies src (resident memory of buffer name on the drained
// device) to new memory on device to, in its three phases, records the
// BufferMigration, and keeps the target memory in dr.restored[key]. It
// returns the migration's error.
func (dr *drain) migrateBuffer(ctx context.Context, name string, src gpu.Memory, to int, key [2]int) error {
	from := dr.p.devices[dr.d]
	bm := BufferMigration{Buffer: name, From: from, To: dr.p.devices[to], Bytes: src.Bytes()}
	var dst gpu.Memory
	var bud *buffers.Budget
	fail := func(ph MigrationPhase, err error) error {
		if dst != nil {
			dst.Release()
			bud.Release(bm.Bytes)
		}
		bm.Phase = ph
		bm.Err = fmt.Errorf("exec: migrate %q %s→%s: %s: %w", name, bm.From, bm.To, ph, err)
		dr.rep.Buffers = append(dr.rep.Buffers, bm)
		return bm.Err
	}
	// Checkpoint: the source memory to the host.
	start := time.Now()
	ckpt := make([]byte, bm.Bytes)
	err := copyOut(ctx, dr.e.devs[dr.d], ckpt, src)
	bm.Checkpoint = time.Since(start)
	if err != nil {
		return fail(PhaseCheckpoint, err)
	}
	// Transfer: memory on the target, within its budget, then the bytes.
	start = time.Now()
	err = func() error {
		cd, ok := dr.e.devs[to].(gpu.CodeDevice)
		if !ok {
			return fmt.Errorf("%s is not a code device", bm.To)
		}
		b := dr.e.pools[to].Budget()
		if !b.TryAcquire(bm.Bytes) {
			return fmt.Errorf("%d bytes are not free in the budget of %d: %w", bm.Bytes, b.TotalBytes(), buffers.ErrOverBudget)
		}
		m, err := cd.Alloc(bm.Bytes)
		if err != nil {
			b.Release(bm.Bytes)
			return err
		}
		dst, bud = m, b
		s := cd.Stream(0).(gpu.CodeStream)
		if _, err := s.CopyIn(dst, 0, ckpt); err != nil {
			return err
		}
		return s.Record().Wait(ctx)
	}()
	bm.Transfer = time.Since(start)
	if err != nil {
		return fail(PhaseTransfer, err)
	}
	// Restore: read back and compare, then keep for the new plan.
	start = time.Now()
	back := make([]byte, bm.Bytes)
	err = copyOut(ctx, dr.e.devs[to], back, dst)
	if err == nil && !bytes.Equal(back, ckpt) {
		err = errors.New("the target's bytes differ from the checkpoint")
	}
	bm.Restore = time.Since(start)
	if err != nil {
		return fail(PhaseRestore, err)
	}
	dr.restored[key] = dst
	dr.rep.Buffers = append(dr.rep.Buffers, bm)
	return nil
}

// copyOut copies all of m, memory of code device dev, into dst, through
// dev's stream 0, and waits for it.
func copyOut(ctx context.Context, dev gpu.Device, dst []byte, m gpu.Memory) error {
	s, ok := dev.Stream(0).(gpu.CodeStream)
	if !ok {
		return fmt.Errorf("%s is not a code device", dev.ID())
	}
	if _, err := s.CopyOut(dst, m, 0); err != nil {
		return err
	}
	return s.Record().Wait(ctx)
}

// handOver gives p2 the memory it has instances for: the restored target
// memory and p's other kept memory, by (graph buffer, device) and size;
// the status words of devices p2 still runs code streams on. The rest is
// released with its budget bytes.
func (dr *drain) handOver(p2 *Plan) {
	p := dr.p
	var mems []gpu.Memory
	var mbud []*buffers.Budget
	give := func(b dag.BufferID, d int, m gpu.Memory, bud *buffers.Budget) {
		if j := p2.instanceOn(b, d); j >= 0 && p2.mem[d] && p2.bufs[j].SizeBytes == m.Bytes() {
			if mems == nil {
				mems, mbud = make([]gpu.Memory, len(p2.bufs)), make([]*buffers.Budget, len(p2.bufs))
			}
			if mems[j] == nil {
				mems[j], mbud[j] = m, bud
				return
			}
		}
		bud.Release(m.Bytes())
		m.Release()
	}
	for key, m := range dr.restored {
		give(dag.BufferID(key[0]), key[1], m, dr.e.pools[key[1]].Budget())
	}
	for i, m := range dr.mems {
		if m == nil {
			continue
		}
		if i < len(p.bufs) {
			give(p.bufs[i].Of, p.bufs[i].Device, m, dr.mbud[i])
			continue
		}
		dr.mbud[i].Release(m.Bytes())
		m.Release()
	}
	uses := make([]bool, len(p2.devices))
	for _, l := range p2.launches {
		uses[l.Device] = true
	}
	for gs, m := range dr.status {
		if m != nil && (gs >= len(p2.sdev) || !uses[p2.sdev[gs]]) {
			dr.sbud[gs].Release(m.Bytes())
			m.Release()
			dr.status[gs] = nil
		}
	}
	if mems != nil || slices.ContainsFunc(dr.status, func(m gpu.Memory) bool { return m != nil }) {
		p2.memCache().put(dr.e.devs, mems, dr.status, mbud, dr.sbud)
	}
}

// report fills in the report's stats.
func (dr *drain) report() {
	r := dr.rep
	s := &r.Stats
	s.Migrated, s.Failed = len(r.Migrations), len(r.Failed)
	for _, b := range r.Buffers {
		if b.Err != nil {
			s.FailedCheckpoints++
		} else {
			s.Checkpoints++
			s.BytesMoved += b.Bytes
		}
		s.Checkpoint += b.Checkpoint
		s.Transfer += b.Transfer
		s.Restore += b.Restore
	}
}

// isDrained reports whether device d was drained off p (Executor.Drain).
func (p *Plan) isDrained(d int) bool { return p.drained != nil && p.drained[d] }
