package exec

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// ErrDeviceLost is matched (errors.Is) by the errors of launches and
// buffers lost with a device.
var ErrDeviceLost = errors.New("device lost")

// LossSpec says which device a run loses and when: after the fraction
// After (0–1) of the run's launches have settled. It is for demos and
// tests of recovery (`streamdag run --lose-device gpu3@50%`).
type LossSpec struct {
	Device topology.DeviceID
	After  float64
}

// WithDeviceLoss makes a multi-device run lose a device part-way: from the
// moment the fraction after of its launches has settled, launches on that
// device (and copies out of it) do not run, and the device's memory counts
// as gone. The run then recovers (see Execute): kernels that had not run
// move by the coordinator's migration plan, buffers they need come from a
// surviving copy or are recomputed by re-running their producers, and the
// report lists every migration and re-run. A kernel pinned to the lost
// device cannot move: it fails with an error naming the device.
func WithDeviceLoss(dev topology.DeviceID, after float64) RunOption {
	return func(c *runConfig) { c.loss = &LossSpec{Device: dev, After: after} }
}

// ParseLossSpec parses "gpu3@50%" (or "gpu3@0.5").
func ParseLossSpec(s string) (LossSpec, error) {
	dev, at, ok := strings.Cut(s, "@")
	if !ok {
		return LossSpec{}, fmt.Errorf("exec: loss %q: want DEVICE@PERCENT, e.g. gpu3@50%%", s)
	}
	id, err := topology.ParseDeviceID(dev)
	if err != nil {
		return LossSpec{}, fmt.Errorf("exec: loss %q: %w", s, err)
	}
	var f float64
	if pct, isPct := strings.CutSuffix(at, "%"); isPct {
		_, err = fmt.Sscanf(pct, "%g", &f)
		f /= 100
	} else {
		_, err = fmt.Sscanf(at, "%g", &f)
	}
	if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
		return LossSpec{}, fmt.Errorf("exec: loss %q: the point must be 0–100%% of the launches", s)
	}
	return LossSpec{Device: id, After: f}, nil
}

// deviceLoss is the state of a loss during one run.
type deviceLoss struct {
	dev       int // device index
	id        topology.DeviceID
	threshold int64
	count     atomic.Int64
	lost      atomic.Bool
	err       error
}

func newDeviceLoss(p *Plan, spec LossSpec) (*deviceLoss, error) {
	i := slices.Index(p.Devices, spec.Device)
	if i < 0 {
		return nil, fmt.Errorf("exec: cannot lose %s: not a device of the run %v", spec.Device, p.Devices)
	}
	if len(p.Devices) < 2 {
		return nil, fmt.Errorf("exec: cannot lose %s: it is the run's only device", spec.Device)
	}
	d := &deviceLoss{dev: i, id: spec.Device, threshold: int64(math.Ceil(spec.After * float64(len(p.Launches)))),
		err: fmt.Errorf("exec: %w: %s", ErrDeviceLost, spec.Device)}
	if d.threshold == 0 {
		d.lost.Store(true)
	}
	return d, nil
}

// hits reports whether launch op is lost: the device is gone and op runs
// on it or copies out of it.
func (d *deviceLoss) hits(op *PlannedLaunch) bool {
	return d.lost.Load() && (op.Device == d.dev || op.Copy != nil && op.Copy.From == d.dev)
}

// settled counts a launch; the device is lost once enough have settled.
func (d *deviceLoss) settled() {
	if d.count.Add(1) == d.threshold {
		d.lost.Store(true)
	}
}

// Migration is a kernel moved off a lost device.
type Migration struct {
	Kernel   string
	From, To topology.DeviceID
}

// recover runs the second phase of a run that lost a device: it re-runs
// every kernel that did not finish, and the producers of buffers that are
// needed but were lost with the device, on the surviving devices.
func (e *Executor) recover(ctx context.Context, p1 *Plan, r1 *run, rep1 *Report) (*Result, error) {
	g := p1.Graph
	loss := r1.loss
	nb := g.NumBuffers()
	ks := make([]dag.Kernel, 0, g.NumKernels())
	for _, k := range g.Kernels() {
		ks = append(ks, k)
	}

	// Which buffers survive, and where: a clean copy off the lost device.
	carried := make([]*buffers.Buffer, nb)
	home := make([]int, nb)
	for b := range nb {
		home[b] = -1
		for i, pb := range p1.Buffers {
			if pb.Of != dag.BufferID(b) || pb.Device == loss.dev || r1.buffer(buffers.ID(i)) == nil {
				continue
			}
			whole := g.Buffer(dag.BufferID(b)).Whole()
			whole.Buffer = buffers.ID(i)
			if r1.store.EnsureWritten(whole) == nil {
				carried[b], home[b] = r1.buffer(buffers.ID(i)), pb.Device
				break
			}
		}
	}
	// Which kernels run again: those that did not succeed, and the
	// writers of needed buffers that did not survive, to a fixpoint.
	ok := make([]bool, len(ks))
	for i := range r1.out.status {
		st := r1.out.get(i)
		// A kernel that ran without some optional input (lost with the
		// device) produced a degraded result: it runs again too.
		if k := p1.Launches[i].Kernel; k >= 0 && st == StatusOK && !r1.out.detail(i).degraded {
			ok[k] = true
		}
	}
	readers := make([]int, nb)
	for _, k := range ks {
		for _, r := range k.Reads {
			readers[r.Buffer]++
		}
	}
	rerun := make([]bool, len(ks))
	for _, k := range ks {
		rerun[k.ID] = !ok[k.ID]
	}
	writers := make([][]dag.KernelID, nb)
	for _, k := range ks {
		for _, w := range k.Writes {
			writers[w.Buffer] = append(writers[w.Buffer], k.ID)
		}
	}
	for changed := true; changed; {
		changed = false
		for _, k := range ks {
			if rerun[k.ID] {
				continue
			}
			// Downstream of recomputed work: its inputs change.
			if slices.ContainsFunc(k.Reads, func(r buffers.Binding) bool {
				return slices.ContainsFunc(writers[r.Buffer], func(w dag.KernelID) bool { return rerun[w] })
			}) {
				rerun[k.ID], changed = true, true
				continue
			}
			for _, w := range k.Writes {
				needed := readers[w.Buffer] == 0 // a result
				for _, r := range ks {
					if rerun[r.ID] && slices.ContainsFunc(r.Reads, func(b buffers.Binding) bool { return b.Buffer == w.Buffer }) {
						needed = true
					}
				}
				if needed && carried[w.Buffer] == nil {
					rerun[k.ID], changed = true, true
					break
				}
			}
		}
	}
	// Where they run: their device, unless it was lost; then the
	// coordinator's migration plan for the lost device.
	coord := gpu.NewCoordinator(gpu.CoordinatorConfig{MaxKernelsPerDevice: math.MaxInt32, Topology: e.topo})
	for _, d := range e.devs {
		info := d.Info()
		coord.Register(gpu.DeviceInfo{ID: d.ID(), Name: info.Name, TotalMemoryBytes: info.MemoryBytes,
			FreeMemoryBytes: info.MemoryBytes, ComputeCapability: info.ComputeCapability})
	}
	for _, k := range ks {
		_ = coord.Assign(gpu.KernelID(k.Name), p1.Devices[p1.Placement.Device[k.ID]])
	}
	un, err := coord.Unregister(loss.id)
	if err != nil {
		return nil, err
	}
	pl := PlacementResult{Strategy: p1.Placement.Strategy, Device: slices.Clone(p1.Placement.Device)}
	var migrations []Migration
	var cannot []dag.Kernel
	for _, m := range un.Migrations {
		id, found := g.KernelByName(string(m.Kernel))
		if !found || !rerun[id] {
			continue
		}
		k := ks[id]
		if k.Device != nil && *k.Device == loss.id {
			cannot = append(cannot, k)
			rerun[k.ID] = false // it cannot run anywhere: it fails below
			continue
		}
		pl.Device[k.ID] = slices.Index(p1.Devices, m.Target)
		migrations = append(migrations, Migration{Kernel: k.Name, From: m.Source, To: m.Target})
	}
	// Every writer of one buffer stays on one device.
	for _, k := range ks {
		if !rerun[k.ID] {
			continue
		}
		for _, w := range k.Writes {
			for _, other := range ks {
				if other.ID < k.ID && rerun[other.ID] && slices.ContainsFunc(other.Writes, func(b buffers.Binding) bool { return b.Buffer == w.Buffer }) {
					pl.Device[k.ID] = pl.Device[other.ID]
				}
			}
		}
	}
	for i := range migrations { // where they went after the co-location rule
		id, _ := g.KernelByName(migrations[i].Kernel)
		migrations[i].To = p1.Devices[pl.Device[id]]
	}
	p2 := planOn(g, p1.Devices, p1.Streams, pl, &subset{run: rerun, home: home})

	// Memory of the first phase that is not carried over is released;
	// what was on the lost device is gone.
	for i := range r1.bufs {
		if b := r1.bufs[i].Load(); b != nil && !slices.Contains(carried, b) {
			b.Release()
		}
	}
	r2 := &run{ctx: ctx, plan: p2, devs: p2.Devices, pools: e.pools, alloc: r1.alloc,
		store: failgraph.New(func(id buffers.ID) string { return p2.Buffers[id].Name })}
	if err := r2.allocate(ctx, carried, nil); err != nil {
		return nil, err
	}
	// Buffers that neither survived nor get a writer again (inputs that
	// lived on the lost device) read as lost.
	written := make([]bool, nb)
	for _, k := range ks {
		for _, w := range k.Writes {
			written[w.Buffer] = written[w.Buffer] || rerun[k.ID]
		}
	}
	for b := range nb {
		if carried[b] == nil && !written[b] {
			r2.store.Cancel(loss.id.String(), loss.err, []buffers.Binding{g.Buffer(dag.BufferID(b)).Whole()})
		}
	}
	// Pinned kernels cannot follow the device: they fail naming it.
	for _, k := range cannot {
		r2.store.Fail(k.Name, fmt.Errorf("exec: kernel %q is pinned to %s, which was lost: %w", k.Name, loss.id, ErrDeviceLost), k.Writes)
	}
	submitErr := r2.execute(e.devs, e.timing)
	rep2 := newReport(p2, r2.out, r2.store, e.topo)

	// First-phase launches whose work the recovery redid, and copies that
	// did not finish, are marked lost: the second phase says how they
	// ended.
	rep := rep1
	for i := range r1.out.status {
		k := p1.Launches[i].Kernel
		if k >= 0 && rerun[k] || k < 0 && r1.out.get(i) != StatusOK {
			r1.out.set(i, StatusLost)
		}
	}
	rep.phases = append(rep.phases, rep2.phases...)
	rep.Copies = append(rep.Copies, rep2.Copies...)
	for k, n := range rep2.BytesByLink {
		rep.BytesByLink[k] += n
	}
	rep.Waits += rep2.Waits
	lost := loss.id
	rep.Lost = &lost
	rep.Migrations = migrations
	for _, k := range ks {
		if rerun[k.ID] && ok[k.ID] {
			rep.Reruns = append(rep.Reruns, k.Name)
		}
	}
	return &Result{graph: g, run: r2, store: r2.store, Report: rep}, submitErr
}
