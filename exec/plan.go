package exec

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// Wait is one event wait in a plan: before its launch runs, stream Stream
// (a global stream index: the streams of every device, device by device;
// see Plan.GlobalStream) must have completed Seq launches.
type Wait struct {
	Stream int
	Seq    int
	Launch int // plan index of the launch that brings Stream to Seq
}

// Copy describes a copy launch: bytes of buffer Buffer (the launch's one
// read and one write give the range: the same bytes in both), whose
// current version is on device From, copied into its instance on device
// To, because a launch there reads them or, at the end of a plan, because
// To is the buffer's home. A copy follows the last write of the bytes it
// moves, and each byte it writes carries the taint of the byte it copied.
// It runs on a stream of To, or of From when From is a code device (a
// code device's stream copies its memory out: CopyOut; into it: CopyIn);
// between two code devices the bytes go through the buffer's home.
type Copy struct {
	Buffer   dag.BufferID
	From, To int   // device indices
	Bytes    int64 // estimated bytes (the range's length, or a value's size hint); the run measures the real count
}

// PlannedLaunch is one launch of a plan: a kernel of the graph, or a copy
// of a buffer to another device.
type PlannedLaunch struct {
	Kernel dag.KernelID // -1 for a copy
	Name   string       // the kernel's name, or "copy BUF gpuA→gpuB" ("copy BUF[off:end) gpuA→gpuB" for part of it)
	Device int          // index into the executor's devices
	Stream int          // stream index on its device
	Seq    int          // the stream's completed-launch count once this launch has run (1-based position)
	Waits  []Wait       // event waits queued before the launch (at most one per other stream)
	Deps   []int        // plan indices of the launches it has a hazard with, on any stream
	// Reads and Writes are the kernel's bindings, with accesses of buffers
	// that live on another device redirected to their replica on this one.
	Reads, Writes []buffers.Binding
	Copy          *Copy // non-nil for a copy launch
	fn            dag.KernelFunc
	variant       *dag.Variant // the device code a kernel launch on a code device runs
	optional      []bool       // the kernel's Optional
	pin           int          // the kernel's Stream: -1 unpinned
}

// PlannedBuffer is a buffer of a plan: one of the graph's (same id), on
// its home device, or a replica of one on another device (ids after the
// graph's). A graph buffer lives where its first writer runs (its first
// reader, for an input nobody writes), or, when that is a code device, on
// the plan's first device that is not one (a code device's instances are
// device memory, which a Result does not read); it ends every run with
// the final bytes, copied home where a launch elsewhere wrote them, or,
// for bytes last written on a code device that no launch elsewhere reads,
// fetched from that device when a Result first reads the buffer.
type PlannedBuffer struct {
	Name      string
	SizeBytes int64
	Value     bool
	Device    int          // index into the executor's devices
	Of        dag.BufferID // the graph's buffer it is (or replicates)
	final     bool         // it ends the plan holding every byte's final version (the graph's buffers always do)
}

// Plan is an executable schedule of a graph on the executor's devices. It
// is opaque: a plan cannot be edited into a state that contradicts its
// graph (a wait that never fires, a launch on a device it has no buffer
// on). Its accessors return copies, safe to call from any goroutine,
// also while the plan runs; a plan can be executed many times, one run
// at a time or concurrently.
type Plan struct {
	graph     *dag.Graph
	devices   []topology.DeviceID // the executor's devices, by index
	streams   []int               // streams by device
	sbase     []int               // by device: the global index of its stream 0
	sdev      []int               // by global stream: its device
	mem       []bool              // by device: a code device, whose buffer instances are device memory (gpu.Memory)
	launches  []PlannedLaunch     // in submission order (a topological order)
	bufs      []PlannedBuffer     // the graph's buffers, then replicas
	waits     int                 // event waits inserted
	hazards   int                 // cross-stream hazards found (waits <= hazards)
	copies    int                 // copy launches inserted
	placement PlacementResult     // the device of each kernel (by kernel id), and the cost model's figures
	record    []bool              // record[i]: an event must be recorded after launch i
	fetch     [][]fetch           // by graph buffer: its final bytes a Result fetches from a code device; nil: none anywhere
	fetchOnly []bool              // by graph buffer: only fetches touch it (its host bytes are made by the first); nil with fetch

	compileOnce sync.Once
	comp        *compiled // the stream lists, built on the first run
	codeOnce    sync.Once
	cops        []codeOp // what code streams enqueue, by plan index (codeOps)
	slotsMu     sync.Mutex
	slots       [][]atomic.Pointer[buffers.Buffer] // buffer slots of closed runs, all nil, for reuse
}

// Graph returns the graph the plan schedules.
func (p *Plan) Graph() *dag.Graph { return p.graph }

// Devices returns the executor's devices, by device index (the Device of
// a PlannedLaunch or PlannedBuffer indexes it).
func (p *Plan) Devices() []topology.DeviceID { return slices.Clone(p.devices) }

// Streams returns the number of streams of each device, by device index:
// each device has its own count (the device's NumStreams when planned).
func (p *Plan) Streams() []int { return slices.Clone(p.streams) }

// NumStreams returns the number of streams of device d (an index into
// Devices). It panics when d is out of range.
func (p *Plan) NumStreams(d int) int { return p.streams[d] }

// NumGlobalStreams returns the number of streams of all devices together:
// global stream indices (GlobalStream, Wait.Stream) run from 0 below it.
func (p *Plan) NumGlobalStreams() int { return len(p.sdev) }

// StreamOf returns the device index and the stream index on that device
// of global stream gs. It panics when gs is out of range.
func (p *Plan) StreamOf(gs int) (device, stream int) {
	d := p.sdev[gs]
	return d, gs - p.sbase[d]
}

// NumLaunches returns the number of launches, copies included.
func (p *Plan) NumLaunches() int { return len(p.launches) }

// Launch returns launch i (0 <= i < NumLaunches, in submission order), a
// copy whose slices the caller may keep and change. It panics when i is
// out of range.
func (p *Plan) Launch(i int) PlannedLaunch {
	l := p.launches[i]
	l.Waits, l.Deps = slices.Clone(l.Waits), slices.Clone(l.Deps)
	l.Reads, l.Writes = slices.Clone(l.Reads), slices.Clone(l.Writes)
	if l.Copy != nil {
		c := *l.Copy
		l.Copy = &c
	}
	return l
}

// Launches returns every launch in submission order (a topological
// order), as Launch gives them: O(launches + their bindings) per call.
func (p *Plan) Launches() []PlannedLaunch {
	out := make([]PlannedLaunch, len(p.launches))
	for i := range out {
		out[i] = p.Launch(i)
	}
	return out
}

// Buffers returns the plan's buffers: the graph's (same ids), then
// replicas on other devices (ids after the graph's).
func (p *Plan) Buffers() []PlannedBuffer { return slices.Clone(p.bufs) }

// Waits returns the number of event waits the plan inserts.
func (p *Plan) Waits() int { return p.waits }

// Hazards returns the number of cross-stream hazards found (read after
// write, write after read, write after write); Waits() <= Hazards():
// a wait can cover several.
func (p *Plan) Hazards() int { return p.hazards }

// Copies returns the number of copy launches.
func (p *Plan) Copies() int { return p.copies }

// Placement returns the device index chosen for each kernel (by kernel
// id) and the cost model's figures for that placement.
func (p *Plan) Placement() PlacementResult {
	r := p.placement
	r.Device = slices.Clone(r.Device)
	return r
}

// Plan validates g and returns a plan on the executor's devices: kernels
// placed by the executor's placement strategy (all on the only device of
// a single-device executor), copy launches of the byte ranges that reads
// across devices need (see Copy),
// streams assigned per device, and event waits only where a hazard
// crosses streams. Each device keeps its own stream count. Each kernel
// goes only to a device that runs code it has (see DeviceCode): a kernel
// with a Go function and an OpenCL variant runs its Go function on the
// CPU device or a simulated GPU and its OpenCL C on an OpenCL device
// (with no OpenCL device in the executor, the Go function runs: the same
// answer); a kernel that reads or writes a value buffer never goes to a
// code device. Errors: g.Validate's; a kernel no device of the executor
// has code for (an OpenCL-only kernel on an executor without an OpenCL
// device), naming the kernel; a kernel that touches a value buffer and
// would run on a code device (pinned there, or with code for nothing
// else), naming the kernel and the buffer; an executor of code devices
// only (a plan keeps its buffers' host copies on another device); a
// pinned device the executor does not have, that has no code for the
// kernel, or that contradicts where the buffers it writes live; more than
// 64 devices.
// Planning is O(V + E + H) plus placement (O(V·D) estimates for HEFT),
// where H counts buffer accesses scanned for hazards.
func (e *Executor) Plan(g *dag.Graph) (*Plan, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	ids := make([]topology.DeviceID, len(e.devs))
	for i, d := range e.devs {
		ids[i] = d.ID()
	}
	if len(ids) > maxDevices {
		return nil, fmt.Errorf("exec: a plan spans at most %d devices, the executor has %d", maxDevices, len(ids))
	}
	code := make([]dag.CodeKind, len(e.devs))
	mem := e.codeMem()
	for i, d := range e.devs {
		code[i] = DeviceCode(d)
	}
	if err := checkCodeDevices(g, ids, code, mem); err != nil {
		return nil, err
	}
	var pl PlacementResult
	if len(e.devs) == 1 {
		pl = PlacementResult{Device: make([]int, g.NumKernels())}
		for _, k := range g.Kernels() {
			if !k.HasCode(code[0]) {
				return nil, noCodeError(k, ids, code)
			}
			if k.Device != nil && *k.Device != ids[0] {
				return nil, fmt.Errorf("exec: kernel %q is pinned to %s, the executor has only %s", k.Name, *k.Device, ids[0])
			}
		}
	} else {
		var err error
		pl, err = place(g, ids, code, mem, e.numStreams(), e.topo, e.placement)
		if err != nil {
			return nil, err
		}
	}
	return planOn(g, ids, e.numStreams(), mem, pl, nil), nil
}

// DeviceCode returns the kind of kernel code dev runs: dag.HostCode for
// the CPU device (kind "cpu") and for simulated GPUs ("sim", whose
// launches run on CPU streams); dag.OpenCLCode for a gpu.CodeDevice whose
// Code is "opencl" (it runs kernels' OpenCL variants, on memory of its
// own); 0, no code, for anything else, which Plan then places nothing on.
func DeviceCode(dev gpu.Device) dag.CodeKind {
	if cd, ok := dev.(gpu.CodeDevice); ok && cd.Code() == "opencl" {
		return dag.OpenCLCode
	}
	switch dev.Kind() {
	case "cpu", "sim":
		return dag.HostCode
	}
	return 0
}

// codeMem returns, by device, whether e's device is a code device.
func (e *Executor) codeMem() []bool {
	mem := make([]bool, len(e.devs))
	for i, d := range e.devs {
		_, mem[i] = codeDevice(d)
	}
	return mem
}

// codeDevice returns dev as a code device the executor launches device
// code on (DeviceCode gives dag.OpenCLCode), or false.
func codeDevice(dev gpu.Device) (gpu.CodeDevice, bool) {
	cd, ok := dev.(gpu.CodeDevice)
	return cd, ok && DeviceCode(dev) == dag.OpenCLCode
}

// checkCodeDevices returns an error when g cannot be planned because of
// the code devices among devs (mem[d]): every buffer's host copy lives on
// a device that is not one, so a plan with one needs another device; and
// a code device holds only raw bytes, so a kernel that reads or writes a
// value buffer cannot run there (pinned there, or with code for no other
// device of the plan).
func checkCodeDevices(g *dag.Graph, devs []topology.DeviceID, code []dag.CodeKind, mem []bool) error {
	host := slices.Index(mem, false)
	if host < 0 {
		return fmt.Errorf("exec: the executor's devices (%s, …) are all code devices: a plan keeps its buffers' host copies on a device that is not one (add the CPU device)", devs[0])
	}
	if !slices.Contains(mem, true) {
		return nil
	}
	for _, k := range g.Kernels() {
		vb, ok := valueAccess(g, k)
		if !ok {
			continue
		}
		if k.Device != nil {
			if d := slices.Index(devs, *k.Device); d >= 0 && mem[d] {
				return valueOnCodeError(g, k, vb, devs[d])
			}
			continue
		}
		elsewhere, on := false, -1
		for d := range devs {
			if code[d] != 0 && k.HasCode(code[d]) {
				if mem[d] {
					on = d
				} else {
					elsewhere = true
				}
			}
		}
		if !elsewhere && on >= 0 {
			return valueOnCodeError(g, k, vb, devs[on])
		}
	}
	return nil
}

// valueAccess returns the first value buffer kernel k reads or writes.
func valueAccess(g *dag.Graph, k dag.Kernel) (dag.BufferID, bool) {
	for _, bs := range [2][]buffers.Binding{k.Reads, k.Writes} {
		for _, b := range bs {
			if g.Buffer(b.Buffer).Value {
				return b.Buffer, true
			}
		}
	}
	return 0, false
}

// valueOnCodeError says that kernel k, which touches value buffer vb,
// would run on code device dev.
func valueOnCodeError(g *dag.Graph, k dag.Kernel, vb dag.BufferID, dev topology.DeviceID) error {
	return fmt.Errorf("exec: kernel %q would run on %s, a code device, but reads or writes value buffer %q: a code device holds only raw bytes",
		k.Name, dev, g.Buffer(vb).Name)
}

// codeDevices returns the devices (by index into code, the kind of code
// each runs) that run code k has, in order, nil for none; or all true and
// nil when every device does (the usual case, which allocates nothing).
func codeDevices(k dag.Kernel, code []dag.CodeKind) (ds []int, all bool) {
	n := 0
	for _, c := range code {
		if c != 0 && k.HasCode(c) {
			n++
		}
	}
	if n == len(code) || n == 0 {
		return nil, n == len(code)
	}
	ds = make([]int, 0, n)
	for d, c := range code {
		if c != 0 && k.HasCode(c) {
			ds = append(ds, d)
		}
	}
	return ds, false
}

// noCodeError says that no device of devs (running code[d]) has code for
// kernel k; it lists the first few devices.
func noCodeError(k dag.Kernel, devs []topology.DeviceID, code []dag.CodeKind) error {
	const few = 4
	var ds []string
	for d := range min(len(devs), few) {
		ds = append(ds, fmt.Sprintf("%s runs %s", devs[d], codeName(code[d])))
	}
	if len(devs) > few {
		ds = append(ds, fmt.Sprintf("… (%d devices)", len(devs)))
	}
	return fmt.Errorf("exec: kernel %q: no device of the plan has code for it (the kernel has %s code; %s)",
		k.Name, k.Codes(), strings.Join(ds, ", "))
}

// codeName names the code a device runs, for messages: "cpu code", or
// "no kernel code".
func codeName(c dag.CodeKind) string {
	if c == 0 {
		return "no kernel code"
	}
	return c.String() + " code"
}

// subset restricts planOn to some kernels (a recovery plan): only run[k]
// kernels get launches; buffer b lives on home[b] when it is >= 0 (where
// its bytes are carried from the first phase: they are there and nowhere
// else) and on fallback when no included kernel touches it.
type subset struct {
	run      []bool
	home     []int
	fallback int
}

// numStreams returns the stream count of each of e's devices.
func (e *Executor) numStreams() []int {
	ns := make([]int, len(e.devs))
	for i, d := range e.devs {
		ns[i] = d.NumStreams()
	}
	return ns
}

// planOn builds the plan of g on devs, device d with nstreams[d] streams
// and a code device when mem[d] (mem nil: none is), with placement pl
// (restricted to sub, when not nil).
func planOn(g *dag.Graph, devs []topology.DeviceID, nstreams []int, mem []bool, pl PlacementResult, sub *subset) *Plan {
	order := g.Order()
	if sub != nil {
		order = slices.DeleteFunc(slices.Clone(order), func(k dag.KernelID) bool { return !sub.run[k] })
	}
	order = launchOrder(g, order, g.NumBuffers())
	if mem == nil {
		mem = make([]bool, len(devs))
	}
	p := &Plan{graph: g, devices: devs, streams: slices.Clone(nstreams), mem: slices.Clone(mem), placement: pl}
	p.sbase = make([]int, len(devs))
	for d, n := range nstreams {
		p.sbase[d] = len(p.sdev)
		for range n {
			p.sdev = append(p.sdev, d)
		}
	}
	only := homeBuffers(p, order, sub)
	if len(devs) == 1 {
		for _, kid := range order {
			k := g.Kernel(kid)
			p.launches = append(p.launches, PlannedLaunch{Kernel: kid, Name: k.Name, Reads: k.Reads,
				Writes: k.Writes, fn: k.Fn, optional: k.Optional, pin: k.Stream})
		}
	} else {
		cp := newPlacer(p, only)
		for _, kid := range order {
			k := g.Kernel(kid)
			d := pl.Device[kid]
			reads, writes := slices.Clone(k.Reads), slices.Clone(k.Writes)
			for i, r := range reads {
				reads[i] = cp.read(r, d)
			}
			for i, w := range writes {
				writes[i] = cp.write(w, d)
			}
			l := PlannedLaunch{Kernel: kid, Name: k.Name, Device: d, Reads: reads,
				Writes: writes, fn: k.Fn, optional: k.Optional, pin: k.Stream}
			if p.mem[d] {
				l.fn, l.variant = nil, variantOf(k, dag.OpenCLCode)
			}
			p.launches = append(p.launches, l)
		}
		cp.finish()
	}
	n := len(p.launches)
	p.record = make([]bool, n)

	// Hazards, in plan order.
	haz := newHazards(len(p.bufs), n)
	for i := range p.launches {
		p.launches[i].Deps = haz.access(i, p.launches[i].Reads, p.launches[i].Writes)
	}

	// Stream assignment per device: chains stay on one stream.
	load := make([]int, len(p.sdev))
	continued := make([]bool, n) // continued[i]: a successor took launch i's stream
	gstream := make([]int, n)    // global stream index
	// Launches with no dependency go to the stream that took the last such
	// launch while its load is within rootBlock of the least loaded one, so
	// independent work comes in blocks per stream and what descends from a
	// block stays on its stream: a reduction tree then waits only where
	// blocks meet, not at every node. rootBlock grows with the plan and is
	// 1 (plain alternation) below 128 launches per stream.
	rootBlock := min(max(1, n/(len(p.sdev)*64)), 64)
	lastRoot := make([]int, len(devs)) // per device: global stream of the last root, -1: none
	for d := range lastRoot {
		lastRoot[d] = -1
	}
	for i := range p.launches {
		l := &p.launches[i]
		base, nds := p.sbase[l.Device], nstreams[l.Device]
		s := -1
		if l.Kernel >= 0 && l.pin >= 0 {
			s = base + l.pin%nds
		} else {
			// Continue a dependency's chain: the one whose stream has the
			// fewest launches, so chains that merge do not pile up on one
			// stream.
			pick := -1
			for _, d := range l.Deps {
				if !continued[d] && p.launches[d].Device == l.Device && (pick < 0 || load[gstream[d]] < load[gstream[pick]]) {
					pick = d
				}
			}
			if pick >= 0 {
				continued[pick] = true
				s = gstream[pick]
			}
			if s < 0 {
				s = base + argmin(load[base:base+nds])
				if len(l.Deps) == 0 {
					if r := lastRoot[l.Device]; r >= 0 && load[r] < load[s]+rootBlock {
						s = r
					}
					lastRoot[l.Device] = s
				}
			}
		}
		gstream[i] = s
		load[s]++
		l.Stream = s - base
		l.Seq = load[s]
	}

	// Alignment with vector clocks over global streams: clock[s][t] is the
	// number of launches of stream t that stream s is known to have
	// waited for.
	ns := len(p.sdev)
	clock := make([][]int, ns)
	for s := range clock {
		clock[s] = make([]int, ns)
	}
	after := make([]int, n*ns) // clock of launch i's stream right after it
	for i := range p.launches {
		l := &p.launches[i]
		s := gstream[i]
		deps := slices.Clone(l.Deps)
		slices.SortFunc(deps, func(a, b int) int { return cmp.Compare(b, a) }) // newest first: its wait covers older ones
		for _, d := range deps {
			t, seq := gstream[d], p.launches[d].Seq
			if t == s {
				continue
			}
			p.hazards++
			if clock[s][t] >= seq {
				continue
			}
			l.Waits = append(l.Waits, Wait{Stream: t, Seq: seq, Launch: d})
			p.record[d] = true
			p.waits++
			for u, c := range after[d*ns : (d+1)*ns] {
				clock[s][u] = max(clock[s][u], c)
			}
		}
		clock[s][s] = l.Seq
		copy(after[i*ns:], clock[s])
	}
	return p
}

// homeBuffers sets where each of p's graph buffers lives: on the device
// of its first writer in order, else of its first reader, else on device
// 0 (sub.fallback in a recovery plan), unless sub carries it on a device
// of its own. It returns, by buffer, whether its bytes start out on that
// device alone (an input, or carried) rather than being unwritten
// everywhere.
func homeBuffers(p *Plan, order []dag.KernelID, sub *subset) []bool {
	g := p.graph
	fallback := 0
	if sub != nil {
		fallback = sub.fallback
	}
	home := make([]int, g.NumBuffers())
	for b := range home {
		home[b] = -1
	}
	for _, kid := range order {
		for _, w := range g.KernelWrites(kid) {
			if home[w.Buffer] < 0 {
				home[w.Buffer] = p.placement.Device[kid]
			}
		}
	}
	for _, kid := range order {
		for _, r := range g.KernelReads(kid) {
			if home[r.Buffer] < 0 {
				home[r.Buffer] = p.placement.Device[kid]
			}
		}
	}
	only := make([]bool, len(home))
	host := slices.Index(p.mem, false) // a code device holds no buffer's host copy
	for _, b := range g.Buffers() {
		d := home[b.ID]
		if d >= 0 && p.mem[d] {
			d = host
		}
		only[b.ID] = b.Input
		if sub != nil && sub.home[b.ID] >= 0 {
			d, only[b.ID] = sub.home[b.ID], true
		}
		if d < 0 {
			d = fallback
		}
		p.bufs = append(p.bufs, PlannedBuffer{Name: b.Name, SizeBytes: b.SizeBytes, Value: b.Value, Device: d, Of: b.ID, final: true})
	}
	return only
}

// variantOf returns k's variant of kind, or nil.
func variantOf(k dag.Kernel, kind dag.CodeKind) *dag.Variant {
	for i := range k.Variants {
		if k.Variants[i].Kind == kind {
			return &k.Variants[i]
		}
	}
	return nil
}

// GlobalStream returns launch i's stream as a global index: the streams
// of devices before its device, plus its Stream (StreamOf inverts it).
func (p *Plan) GlobalStream(i int) int { return p.sbase[p.launches[i].Device] + p.launches[i].Stream }

func argmin(xs []int) int {
	best := 0
	for i, x := range xs {
		if x < xs[best] {
			best = i
		}
	}
	return best
}

// defaultLaunchCost is the cost, in µs, launchOrder gives a kernel
// without an Estimate when it ranks kernels by their longest path to the
// end of the graph.
const defaultLaunchCost = 1.0

// launchOrder returns order (a topological order of the kernels, as
// g.Order gives it) re-sequenced for submission: a list schedule that,
// among the kernels whose hazards are all satisfied, takes the one with
// the longest path to the end of the graph first (its upward rank, the
// priority of HEFT, Topcuoglu, Hariri and Wu 2002), ties by position in
// order. Every pair of kernels with a hazard (read-after-write,
// write-after-read, write-after-write on overlapping bytes) keeps its
// relative order, so every read sees the same writes as in order; only
// independent kernels move, which lets the plan interleave independent
// work (the cells of one anti-diagonal of a wavefront, say) across
// streams. nbuf is the graph's buffer count. O(V + E + H) plus a heap.
func launchOrder(g *dag.Graph, order []dag.KernelID, nbuf int) []dag.KernelID {
	n := len(order)
	if n < 3 {
		return order
	}
	haz := newHazards(nbuf, n)
	deps := make([][]int, n) // by position in order
	for i, kid := range order {
		deps[i] = haz.access(i, g.KernelReads(kid), g.KernelWrites(kid))
	}
	succs := make([][]int32, n)
	indeg := make([]int32, n)
	for i, ds := range deps {
		indeg[i] = int32(len(ds))
		for _, d := range ds {
			succs[d] = append(succs[d], int32(i))
		}
	}
	rank := make([]float64, n)
	for i := n - 1; i >= 0; i-- {
		r := 0.0
		for _, s := range succs[i] {
			r = max(r, rank[s])
		}
		c := defaultLaunchCost
		if e := g.Kernel(order[i]).Estimate; e > 0 {
			c = float64(e) / float64(time.Microsecond)
		}
		rank[i] = r + c
	}
	h := &rankHeap{rank: rank}
	for i := range n {
		if indeg[i] == 0 {
			h.push(int32(i))
		}
	}
	out := make([]dag.KernelID, 0, n)
	for h.len() > 0 {
		i := h.pop()
		out = append(out, order[i])
		for _, s := range succs[i] {
			if indeg[s]--; indeg[s] == 0 {
				h.push(s)
			}
		}
	}
	return out
}

// rankHeap is a max-heap of positions by rank, ties by smaller position.
type rankHeap struct {
	rank []float64
	xs   []int32
}

func (h *rankHeap) len() int { return len(h.xs) }

func (h *rankHeap) less(a, b int32) bool {
	if h.rank[a] != h.rank[b] {
		return h.rank[a] > h.rank[b]
	}
	return a < b
}

func (h *rankHeap) push(x int32) {
	h.xs = append(h.xs, x)
	for i := len(h.xs) - 1; i > 0; {
		p := (i - 1) / 2
		if !h.less(h.xs[i], h.xs[p]) {
			break
		}
		h.xs[i], h.xs[p] = h.xs[p], h.xs[i]
		i = p
	}
}

func (h *rankHeap) pop() int32 {
	top := h.xs[0]
	last := len(h.xs) - 1
	h.xs[0] = h.xs[last]
	h.xs = h.xs[:last]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < len(h.xs) && h.less(h.xs[l], h.xs[m]) {
			m = l
		}
		if r < len(h.xs) && h.less(h.xs[r], h.xs[m]) {
			m = r
		}
		if m == i {
			break
		}
		h.xs[i], h.xs[m] = h.xs[m], h.xs[i]
		i = m
	}
	return top
}

// hazards tracks, per buffer, the accesses that a later access may
// conflict with: the writes not yet covered by a later write, and the reads
// since.
type hazards struct {
	writes [][]access
	reads  [][]access
	mark   []int // mark[d] == i+1: d is already a dependency of launch i
}

type access struct {
	b      buffers.Binding
	launch int
}

func newHazards(nbuf, nlaunch int) *hazards {
	return &hazards{writes: make([][]access, nbuf), reads: make([][]access, nbuf), mark: make([]int, nlaunch)}
}

// access records launch i's reads and writes and returns the plan indices
// of earlier launches it has a hazard with: read-after-write with the
// writes of overlapping bytes, write-after-write and write-after-read with
// overlapping writes and reads.
func (h *hazards) access(i int, reads, writes []buffers.Binding) []int {
	var deps []int
	add := func(d int) {
		if d != i && h.mark[d] != i+1 {
			h.mark[d] = i + 1
			deps = append(deps, d)
		}
	}
	for _, r := range reads {
		for _, w := range h.writes[r.Buffer] {
			if w.b.Overlaps(r) {
				add(w.launch)
			}
		}
	}
	for _, w := range writes {
		for _, x := range h.writes[w.Buffer] {
			if x.b.Overlaps(w) {
				add(x.launch)
			}
		}
		for _, x := range h.reads[w.Buffer] {
			if x.b.Overlaps(w) {
				add(x.launch)
			}
		}
	}
	for _, r := range reads {
		h.reads[r.Buffer] = append(h.reads[r.Buffer], access{r, i})
	}
	for _, w := range writes {
		// Accesses fully covered by this write are ordered before it; later
		// accesses need only depend on the write.
		h.writes[w.Buffer] = dropCovered(h.writes[w.Buffer], w, i)
		h.reads[w.Buffer] = dropCovered(h.reads[w.Buffer], w, i)
		h.writes[w.Buffer] = append(h.writes[w.Buffer], access{w, i})
	}
	return deps
}

func dropCovered(as []access, w buffers.Binding, self int) []access {
	return slices.DeleteFunc(as, func(a access) bool {
		return a.launch != self && a.b.Offset >= w.Offset && a.b.End() <= w.End()
	})
}

// String summarises the plan: launches, streams, waits.
func (p *Plan) String() string {
	if len(p.devices) == 1 {
		return fmt.Sprintf("plan: %d launches on %d streams, %d event waits for %d cross-stream hazards",
			len(p.launches), p.streams[0], p.waits, p.hazards)
	}
	if slices.Min(p.streams) == slices.Max(p.streams) {
		return fmt.Sprintf("plan: %d launches on %d devices × %d streams, %d event waits for %d cross-stream hazards, %d copies",
			len(p.launches), len(p.devices), p.streams[0], p.waits, p.hazards, p.copies)
	}
	ds := make([]string, len(p.devices))
	for d, id := range p.devices {
		ds[d] = fmt.Sprintf("%s × %d", id, p.streams[d])
	}
	return fmt.Sprintf("plan: %d launches on %d devices (%s streams), %d event waits for %d cross-stream hazards, %d copies",
		len(p.launches), len(p.devices), strings.Join(ds, ", "), p.waits, p.hazards, p.copies)
}
