package exec

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/placement"
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
	// optional is the kernel's Optional, non-nil only when it has some:
	// the rest of it (Plan.variant, Plan.optional) is by plan index.
	optional bool
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
	final     bool         // it ends the plan holding every byte's final version (the graph's buffers always do)
	Device    int          // index into the executor's devices
	Of        dag.BufferID // the graph's buffer it is (or replicates)
}

// Plan is an executable schedule of a graph on the executor's devices. It
// is opaque: a plan cannot be edited into a state that contradicts its
// graph (a wait that never fires, a launch on a device it has no buffer
// on). Its accessors return copies, safe to call from any goroutine,
// also while the plan runs; a plan can be executed many times, one run
// at a time or concurrently.
type Plan struct {
	graph     *dag.Graph
	nkernels  int                    // the graph's kernels when it was planned
	nbuffers  int                    // the graph's buffers when it was planned
	devices   []topology.DeviceID    // the executor's devices, by index
	streams   []int                  // streams by device
	sbase     []int                  // by device: the global index of its stream 0
	sdev      []int                  // by global stream: its device
	mem       []bool                 // by device: a code device, whose buffer instances are device memory (gpu.Memory)
	code      []dag.CodeKind         // by device: the kind of kernel code it runs (codeOf)
	launches  []PlannedLaunch        // in submission order (a topological order)
	bufs      []PlannedBuffer        // the graph's buffers, then replicas
	waits     int                    // event waits inserted
	hazards   int                    // cross-stream hazards found (waits <= hazards)
	copies    int                    // copy launches inserted
	placement placement.Assignment   // the device of each kernel (by kernel id), and the cost model's figures
	record    []bool                 // record[i]: an event must be recorded after launch i
	fetch     [][]fetch              // by graph buffer: its final bytes a Result fetches from a code device; nil: none anywhere
	fetchOnly []bool                 // by graph buffer: only fetches touch it (its host bytes are made by the first); nil with fetch
	variants  map[int32]*dag.Variant // by plan index: the device code a kernel launch on a code device runs
	optionals map[int32][]bool       // by plan index: the Optional of a kernel launch that has one

	compileOnce sync.Once
	comp        *compiled // the stream lists, built on the first run
	codeOnce    sync.Once
	cops        []codeOp // what code streams enqueue, by plan index (codeOps)
	slotsMu     sync.Mutex
	slots       [][]atomic.Pointer[buffers.Buffer] // buffer slots of closed runs, all nil, for reuse
	memc        atomic.Pointer[memCache]           // device memory kept between runs (ReleaseDeviceMemory); nil until a run makes it
	drained     []bool                             // by device: taken off the plan by Executor.Drain; nil: none

	// pace, by global stream: the enqueue window a code stream's last
	// run ended with (0: none yet; see codeAhead); made with cops.
	pace []atomic.Int64
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
func (p *Plan) Placement() placement.Assignment {
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
// goes only to a device that runs code it has: a device that is no
// gpu.CodeDevice runs Go functions, a gpu.CodeDevice the variants of the
// kind its Code names. So a kernel with a Go function and an OpenCL
// variant runs its Go function on the CPU device or a simulated GPU and
// its OpenCL C on an OpenCL device (with no OpenCL device in the
// executor, the Go function runs: the same answer); a kernel that reads or writes a value buffer never goes to a
// code device. Errors: a nil g; g.Validate's; a kernel no device of the executor
// has code for (an OpenCL-only kernel on an executor without an OpenCL
// device), naming the kernel; a kernel that touches a value buffer and
// would run on a code device (pinned there, or with code for nothing
// else), naming the kernel and the buffer; an executor of code devices
// only (a plan keeps its buffers' host copies on another device); a
// pinned device the executor does not have, that has no code for the
// kernel, or that contradicts where the buffers it writes live; more than
// 64 devices.
// Planning is O(V + E + H) plus placement (O(V·D) estimates for HEFT),
// where H counts buffer accesses scanned for hazards; the validation is
// skipped for a graph validated since its last change (g.Order is not
// nil). Plan reads g and does not change it when g is already validated,
// so such a graph may be planned from several goroutines at once.
func (e *Executor) Plan(g *dag.Graph) (*Plan, error) {
	if g == nil {
		return nil, errors.New("exec: nil graph")
	}
	// A graph that passed Validate and has not changed since keeps its
	// order (g.Order is nil otherwise): it would pass again, so planning
	// it again does not re-validate it.
	if g.Order() == nil {
		if err := g.Validate(); err != nil {
			return nil, err
		}
	}
	ids := make([]topology.DeviceID, len(e.devs))
	for i, d := range e.devs {
		ids[i] = d.ID()
	}
	if len(ids) > maxDevices {
		return nil, fmt.Errorf("exec: a plan spans at most %d devices, the executor has %d", maxDevices, len(ids))
	}
	code, mem, align := e.caps()
	if err := checkCodeDevices(g, ids, code, mem, align); err != nil {
		return nil, err
	}
	if len(e.devs) == 1 {
		pl := placement.Assignment{Strategy: placement.HEFT, Device: make([]int, g.NumKernels())}
		if p := planWith(g, ids, e.numStreams(), code, mem, pl, nil, code[0], false); p != nil {
			return p, nil
		}
		// Some kernel cannot run on the device: name the first, by id.
		for id := range dag.KernelID(g.NumKernels()) {
			if k := g.Kernel(id); !k.HasCode(code[0]) {
				return nil, noCodeError(k, ids, code)
			} else if k.Device != nil && *k.Device != ids[0] {
				return nil, fmt.Errorf("exec: kernel %q is pinned to %s, the executor has only %s", k.Name, *k.Device, ids[0])
			}
		}
		return nil, errors.New("exec: internal error: a kernel failed the one-device checks of planning and passes them now")
	}
	pl, err := place(g, ids, code, mem, align, e.numStreams(), e.topo, e.placement)
	if err != nil {
		return nil, err
	}
	return planOn(g, ids, e.numStreams(), code, mem, pl, nil), nil
}

// codeOf returns the kind of kernel code dev runs, read from its
// capabilities: a gpu.CodeDevice runs the device code its Code names;
// any other device, whose memory is host-addressable, runs kernels' Go
// functions (dag.HostCode).
func codeOf(dev gpu.Device) dag.CodeKind {
	if cd, ok := dev.(gpu.CodeDevice); ok {
		return dag.CodeKind(cd.Code())
	}
	return dag.HostCode
}

// caps returns, by device, the kind of kernel code e's device runs
// (codeOf), whether it is a code device, and the argument alignment of
// each code device (gpu.CodeDevice's ArgAlignBytes; 0 for the others).
func (e *Executor) caps() (code []dag.CodeKind, mem []bool, align []int64) {
	code, mem, align = make([]dag.CodeKind, len(e.devs)), make([]bool, len(e.devs)), make([]int64, len(e.devs))
	for i, d := range e.devs {
		code[i] = codeOf(d)
		if cd, ok := d.(gpu.CodeDevice); ok {
			mem[i], align[i] = true, cd.ArgAlignBytes()
		}
	}
	return code, mem, align
}

// misaligned returns an error naming kernel k, the buffer (of g), the
// offset and align when k's variant of kind binds a buffer at an offset
// that is not a multiple of align (> 1); nil otherwise.
func misaligned(g *dag.Graph, k dag.Kernel, kind dag.CodeKind, align int64) error {
	if align <= 1 {
		return nil
	}
	v := variantOf(k, kind)
	if v == nil {
		return nil
	}
	for _, a := range v.Args {
		if b, ok := a.Buffer(); ok && b.Offset%align != 0 {
			return fmt.Errorf("exec: kernel %q binds buffer %q at offset %d, which is not a multiple of the %d-byte argument alignment", k.Name, g.Buffer(b.Buffer).Name, b.Offset, align)
		}
	}
	return nil
}

// checkCodeDevices returns an error when g cannot be planned because of
// the code devices among devs (mem[d]): every buffer's host copy lives on
// a device that is not one, so a plan with one needs another device; and
// a code device holds only raw bytes, so a kernel that reads or writes a
// value buffer cannot run there (pinned there, or with code for no other
// device of the plan); nor can a kernel whose variant of the code
// device's kind (code[d]) binds a buffer at an offset the code device
// cannot bind (not a multiple of align[d]), pinned there or with code for
// no other device.
func checkCodeDevices(g *dag.Graph, devs []topology.DeviceID, code []dag.CodeKind, mem []bool, align []int64) error {
	host := slices.Index(mem, false)
	if host < 0 {
		return fmt.Errorf("exec: the executor's devices (%s, …) are all code devices: a plan keeps its buffers' host copies on a device that is not one (add the CPU device)", devs[0])
	}
	if !slices.Contains(mem, true) {
		return nil
	}
	for _, k := range g.Kernels() {
		if err := alignedSomewhere(g, k, devs, code, align); err != nil {
			return err
		}
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
			if k.HasCode(code[d]) {
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

// alignedSomewhere returns an error when kernel k would run on a code
// device that cannot bind the buffer offsets of its variant of the
// device's kind (misaligned): pinned there, or with code for no other
// device of devs.
func alignedSomewhere(g *dag.Graph, k dag.Kernel, devs []topology.DeviceID, code []dag.CodeKind, align []int64) error {
	if align == nil {
		return nil
	}
	if k.Device != nil {
		if d := slices.Index(devs, *k.Device); d >= 0 {
			if err := misaligned(g, k, code[d], align[d]); err != nil {
				return fmt.Errorf("%w on %s, which the kernel is pinned to", err, devs[d])
			}
		}
		return nil
	}
	var first error
	for d := range devs {
		if !k.HasCode(code[d]) {
			continue
		}
		err := misaligned(g, k, code[d], align[d])
		if err == nil {
			return nil
		}
		if first == nil {
			first = fmt.Errorf("%w on %s, and the kernel has code for no other device", err, devs[d])
		}
	}
	return first
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
		if k.HasCode(c) {
			n++
		}
	}
	if n == len(code) || n == 0 {
		return nil, n == len(code)
	}
	ds = make([]int, 0, n)
	for d, c := range code {
		if k.HasCode(c) {
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
		ds = append(ds, fmt.Sprintf("%s runs %s code", devs[d], code[d]))
	}
	if len(devs) > few {
		ds = append(ds, fmt.Sprintf("… (%d devices)", len(devs)))
	}
	return fmt.Errorf("exec: kernel %q: no device of the plan has code for it (the kernel has %s code; %s)",
		k.Name, k.Codes(), strings.Join(ds, ", "))
}

// subset restricts planOn to some kernels (a recovery plan): only run[k]
// kernels get launches (run nil: all); buffer b lives on home[b] when it
// is >= 0 (where its bytes are carried from the first phase: they are
// there and nowhere else; home nil: none is carried) and on fallback when
// no included kernel touches it. drained, by device, marks the devices a
// drain took off the plan (Executor.Drain; nil: none): no buffer's host
// copy lives there.
type subset struct {
	run      []bool
	home     []int
	fallback int
	drained  []bool
}

// numStreams returns the stream count of each of e's devices.
func (e *Executor) numStreams() []int {
	ns := make([]int, len(e.devs))
	for i, d := range e.devs {
		ns[i] = d.NumStreams()
	}
	return ns
}

// planOn plans g's kernels (those of sub, when not nil) on devs, device d
// with nstreams[d] streams, running code of kind code[d], and a code
// device when mem[d] (mem nil: none is), kernel k on device pl.Device[k]:
// launch order, copies, hazards, streams and event waits. A kernel on a
// code device runs its variant of the device's kind.
func planOn(g *dag.Graph, devs []topology.DeviceID, nstreams []int, code []dag.CodeKind, mem []bool, pl placement.Assignment, sub *subset) *Plan {
	return planWith(g, devs, nstreams, code, mem, pl, sub, "", true)
}

// planWith is planOn. With check not "" (a plan of all of g on one
// device, which runs code of kind check), it checks each kernel as it
// copies it into its launch, and returns nil when one has no code of kind
// check or is pinned to another device. With lookup false it plans as if
// no kernel had an Estimate, which spares launchOrder looking for them,
// and plans again, looking, when the copying finds one (check not "").
func planWith(g *dag.Graph, devs []topology.DeviceID, nstreams []int, code []dag.CodeKind, mem []bool, pl placement.Assignment, sub *subset, check dag.CodeKind, lookup bool) *Plan {
	order := g.Order()
	if sub != nil && sub.run != nil {
		order = slices.DeleteFunc(slices.Clone(order), func(k dag.KernelID) bool { return !sub.run[k] })
	}
	haz := newHazards(numAccesses(g, order))
	defer haz.release() // the launches' Deps hold haz.deps, which it lets go
	order, from, found := launchOrder(g, order, haz, lookup)
	p := newPlan(g, devs, nstreams, code, mem, pl)
	if sub != nil {
		p.drained = sub.drained
	}
	only := homeBuffers(p, order, sub)
	var pins streamPins
	if len(devs) == 1 {
		switch p.launchOnOne(order, &pins, check, lookup) {
		case checkFailed:
			return nil
		case checkReplan:
			return planWith(g, devs, nstreams, code, mem, pl, sub, check, true)
		}
	} else {
		p.launchOnMany(order, &pins, only)
	}
	n := len(p.launches)
	p.record = make([]bool, n)
	// The planner's per-launch integers, in one allocation: each launch's
	// global stream and its row in after (1-based; 0: not kept).
	haz.ints = resize(haz.ints, 2*n)
	gstream, keep := haz.ints[:n:n], haz.ints[n:]
	p.findDeps(haz, found && len(devs) == 1 && from != nil, !found || len(devs) > 1, from)
	p.assignStreams(haz, pins, gstream)
	kept := p.countHazards(gstream, keep)
	if p.hazards == 0 {
		return p
	}
	p.alignStreams(haz, gstream, keep, kept)
	return p
}

// numAccesses returns the number of bindings (reads and writes) of the
// kernels order of g.
func numAccesses(g *dag.Graph, order []dag.KernelID) int {
	nacc := 0
	for _, kid := range order {
		nacc += len(g.KernelReads(kid)) + len(g.KernelWrites(kid))
	}
	return nacc
}

// newPlan returns a plan of g with no launches nor buffers yet: devs,
// device d with nstreams[d] streams (its global streams numbered device
// by device), running code of kind code[d], a code device when mem[d]
// (mem nil: none is), kernels placed by pl. It keeps copies of the
// slices.
func newPlan(g *dag.Graph, devs []topology.DeviceID, nstreams []int, code []dag.CodeKind, mem []bool, pl placement.Assignment) *Plan {
	if mem == nil {
		mem = make([]bool, len(devs))
	}
	p := &Plan{graph: g, nkernels: g.NumKernels(), nbuffers: g.NumBuffers(), devices: devs, streams: slices.Clone(nstreams), mem: slices.Clone(mem), code: slices.Clone(code), placement: pl}
	p.sbase = make([]int, len(devs))
	for d, n := range nstreams {
		p.sbase[d] = len(p.sdev)
		for range n {
			p.sdev = append(p.sdev, d)
		}
	}
	return p
}

// streamPins holds, by plan index, each launch's stream pin (its kernel's
// Stream) plus one; 0, or past the end: not pinned. Most plans pin
// nothing and so allocate nothing for it.
type streamPins []int32

// set pins launch i to stream s (s >= 0) of its device.
func (ps *streamPins) set(i, s int) {
	if len(*ps) <= i {
		*ps = append(*ps, make([]int32, i+1-len(*ps))...)
	}
	(*ps)[i] = int32(s + 1)
}

// oneCheck is what launchOnOne found of the kernels it checked.
type oneCheck int

const (
	checkPassed oneCheck = iota // every kernel passed (or none was checked)
	checkFailed                 // a kernel has no code of the kind checked, or is pinned elsewhere
	checkReplan                 // a kernel has an Estimate, which a launch order without lookup ignored
)

// launchOnOne sets p's launches, on its one device, to order's kernels
// with their own bindings, and their stream pins into pins. With check
// not "" it checks each kernel as planWith says, and stops at the first
// that fails (checkFailed) or has an Estimate when lookup is false
// (checkReplan), leaving p part made.
func (p *Plan) launchOnOne(order []dag.KernelID, pins *streamPins, check dag.CodeKind, lookup bool) oneCheck {
	g := p.graph
	p.launches = make([]PlannedLaunch, len(order))
	for i, kid := range order {
		k := g.Kernel(kid)
		if check != "" {
			switch {
			case !k.HasCode(check) || k.Device != nil && *k.Device != p.devices[0]:
				return checkFailed
			case k.Estimate > 0 && !lookup: // the launch order ranks by estimates
				return checkReplan
			}
		}
		// Field by field into the zeroed launch: a whole-struct store
		// would copy it through the write barrier's bulk path while
		// the collector marks.
		l := &p.launches[i]
		l.Kernel, l.Name, l.Reads, l.Writes = kid, k.Name, k.Reads, k.Writes
		l.fn = k.Fn
		if k.Optional != nil {
			p.setOptional(i, k.Optional)
		}
		if k.Stream >= 0 {
			pins.set(i, k.Stream)
		}
	}
	return checkPassed
}

// launchOnMany sets p's launches to order's kernels, each on its device
// of p's placement, with its bindings redirected to the buffer instances
// there, and the copies that brings (only: by buffer, whether its bytes
// start out on its home device alone; see homeBuffers); their stream pins
// go into pins. A kernel on a code device runs its variant of the
// device's kind.
func (p *Plan) launchOnMany(order []dag.KernelID, pins *streamPins, only []bool) {
	g := p.graph
	p.launches = make([]PlannedLaunch, 0, len(order))
	cp := newPlacer(p, only)
	var arena []buffers.Binding // the redirected bindings, launch after launch
	for _, kid := range order {
		k := g.Kernel(kid)
		d := p.placement.Device[kid]
		start := len(arena)
		for _, r := range k.Reads {
			arena = append(arena, cp.read(r, d))
		}
		mid := len(arena)
		for _, w := range k.Writes {
			arena = append(arena, cp.write(w, d))
		}
		reads, writes := window(arena, start, mid, k.Reads == nil), window(arena, mid, len(arena), k.Writes == nil)
		l := PlannedLaunch{Kernel: kid, Name: k.Name, Device: d, Reads: reads,
			Writes: writes, fn: k.Fn}
		if k.Optional != nil {
			l.optional = true
			p.setOptional(len(p.launches), k.Optional)
		}
		if p.mem[d] {
			l.fn = nil
			p.setVariant(len(p.launches), variantOf(k, p.code[d]))
		}
		if k.Stream >= 0 {
			pins.set(len(p.launches), k.Stream)
		}
		p.launches = append(p.launches, l)
	}
	cp.finish()
}

// setVariant records v, when not nil, as the device code launch i runs.
func (p *Plan) setVariant(i int, v *dag.Variant) {
	if v == nil {
		return
	}
	if p.variants == nil {
		p.variants = map[int32]*dag.Variant{}
	}
	p.variants[int32(i)] = v
}

// findDeps sets the Deps of p's launches from their hazards, in plan
// order: with reorder, those launchOrder found in haz, renumbered by from
// (on one device the launches keep the kernels' bindings; see
// hazards.reorder); with again, found again from the launches' bindings
// (with copies, or when launchOrder found none); with neither, those haz
// holds.
func (p *Plan) findDeps(haz *hazards, reorder, again bool, from []int32) {
	switch {
	case reorder:
		haz.reorder(from)
	case again:
		haz.reset(len(p.bufs), len(p.launches))
		for i := range p.launches {
			haz.access(i, p.launches[i].Reads, p.launches[i].Writes)
		}
	}
	for i := range p.launches {
		if ds := haz.launchDeps(i); len(ds) > 0 {
			p.launches[i].Deps = ds
		}
	}
}

// assignStreams sets the Stream and Seq of each of p's launches, whose
// Deps are set, and its global stream into gstream (one per launch):
// a pinned launch (pins) goes to its pin modulo its device's streams;
// otherwise chains stay on one stream. It uses haz.continued as scratch.
func (p *Plan) assignStreams(haz *hazards, pins streamPins, gstream []int32) {
	n := len(p.launches)
	load := make([]int, len(p.sdev))
	haz.continued = resize(haz.continued, n)
	continued := haz.continued // continued[i]: a successor took launch i's stream
	// Launches with no dependency go to the stream that took the last such
	// launch while its load is within rootBlock of the least loaded one, so
	// independent work comes in blocks per stream and what descends from a
	// block stays on its stream: a reduction tree then waits only where
	// blocks meet, not at every node. rootBlock grows with the plan and is
	// 1 (plain alternation) below 128 launches per stream.
	rootBlock := min(max(1, n/(len(p.sdev)*64)), 64)
	lastRoot := make([]int, len(p.devices)) // per device: global stream of the last root, -1: none
	for d := range lastRoot {
		lastRoot[d] = -1
	}
	for i := range p.launches {
		l := &p.launches[i]
		base, nds := p.sbase[l.Device], p.streams[l.Device]
		s := -1
		if i < len(pins) && pins[i] > 0 {
			s = base + int(pins[i]-1)%nds
		} else if s = p.chainStream(l, continued, load, gstream); s < 0 {
			s = base + argmin(load[base:base+nds])
			if len(l.Deps) == 0 {
				if r := lastRoot[l.Device]; r >= 0 && load[r] < load[s]+rootBlock {
					s = r
				}
				lastRoot[l.Device] = s
			}
		}
		gstream[i] = int32(s)
		load[s]++
		l.Stream = s - base
		l.Seq = load[s]
	}
}

// chainStream returns the global stream of the dependency of l, on l's
// device, whose chain l continues, and marks it continued; -1 when none
// is left. Of those no successor continued yet it picks the one whose
// stream has the fewest launches (load, by global stream), so chains that
// merge do not pile up on one stream.
func (p *Plan) chainStream(l *PlannedLaunch, continued []bool, load []int, gstream []int32) int {
	pick := -1
	for _, d := range l.Deps {
		if !continued[d] && p.launches[d].Device == l.Device && (pick < 0 || load[gstream[d]] < load[gstream[pick]]) {
			pick = d
		}
	}
	if pick < 0 {
		return -1
	}
	continued[pick] = true
	return int(gstream[pick])
}

// countHazards counts p's cross-stream hazards (a dependency on a launch
// of another global stream, gstream) into p.hazards, and numbers in keep
// (1-based, 0: not kept, all 0 on entry) each launch another stream
// depends on; it returns how many it numbered.
func (p *Plan) countHazards(gstream, keep []int32) int {
	kept := 0
	for i := range p.launches {
		for _, d := range p.launches[i].Deps {
			if gstream[d] != gstream[i] {
				p.hazards++
				if keep[d] == 0 {
					kept++
					keep[d] = int32(kept)
				}
			}
		}
	}
	return kept
}

// alignStreams sets the Waits of p's launches, the events to record
// (p.record) and p.waits, given each launch's global stream (gstream) and
// the kept numbering of countHazards (keep, kept rows), with vector
// clocks over global streams: clock[s*ns+t] is the number of launches of
// stream t that stream s is known to have waited for. Only a launch that
// a launch on another stream depends on keeps its stream's clock as it
// was right after it (a row of haz.after); every cross-stream hazard is
// one such dependency. A wait for the newest dependency of a stream
// covers older ones, so each launch waits at most once per stream.
func (p *Plan) alignStreams(haz *hazards, gstream, keep []int32, kept int) {
	ns := len(p.sdev)
	clock := make([]int, ns*ns)
	haz.after = resize(haz.after, kept*ns)
	after := haz.after
	waits := make([]Wait, 0, p.hazards) // every launch's waits, one after another: at most one per hazard
	var newest []int                    // a launch's dependencies, sorted
	for i := range p.launches {
		l := &p.launches[i]
		s := int(gstream[i])
		row := clock[s*ns : (s+1)*ns]
		if crosses(l.Deps, gstream, s) {
			newest = append(newest[:0], l.Deps...)
			slices.Sort(newest)
			w0 := len(waits)
			for j := len(newest) - 1; j >= 0; j-- { // newest first: its wait covers older ones
				d := newest[j]
				t, seq := int(gstream[d]), p.launches[d].Seq
				if t == s || row[t] >= seq {
					continue
				}
				waits = append(waits, Wait{Stream: t, Seq: seq, Launch: d})
				p.record[d] = true
				for u, c := range after[int(keep[d]-1)*ns : int(keep[d])*ns] {
					row[u] = max(row[u], c)
				}
			}
			if len(waits) > w0 {
				l.Waits = waits[w0:len(waits):len(waits)]
			}
		}
		row[s] = l.Seq
		if k := int(keep[i]); k > 0 {
			copy(after[(k-1)*ns:k*ns], row)
		}
	}
	p.waits = len(waits)
}

// window returns as[lo:hi] with no room to grow, or nil when wasNil (the
// bindings it redirects were nil).
func window(as []buffers.Binding, lo, hi int, wasNil bool) []buffers.Binding {
	if wasNil {
		return nil
	}
	return as[lo:hi:hi]
}

// crosses reports whether a launch on global stream s with dependencies
// deps waits for another stream's launches.
func crosses(deps []int, gstream []int32, s int) bool {
	for _, d := range deps {
		if int(gstream[d]) != s {
			return true
		}
	}
	return false
}

// homeBuffers sets where each of p's graph buffers lives: on the device
// of its first writer in order, else of its first reader (for either, when
// it is a code device, the first device that is neither a code device nor
// drained), else on device 0 (sub.fallback in a recovery or drained plan),
// unless sub carries it on a device of its own. It returns, by buffer, whether its bytes start out on that
// device alone (an input, or carried) rather than being unwritten
// everywhere; nil for a full plan on one device, which places no copies
// and so never asks.
func homeBuffers(p *Plan, order []dag.KernelID, sub *subset) []bool {
	g := p.graph
	p.bufs = make([]PlannedBuffer, 0, g.NumBuffers())
	if len(p.devices) == 1 && sub == nil {
		p.bufs = p.bufs[:g.NumBuffers()]
		for id := range p.bufs {
			b, pb := g.Buffer(dag.BufferID(id)), &p.bufs[id] // field by field, as the launches
			pb.Name, pb.SizeBytes, pb.Value, pb.Of, pb.final = b.Name, b.SizeBytes, b.Value, b.ID, true
		}
		return nil
	}
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
	host := p.hostOff() // neither a code device nor a drained one holds a buffer's host copy
	for _, b := range g.Buffers() {
		d := home[b.ID]
		if d >= 0 && p.mem[d] {
			d = host
		}
		only[b.ID] = b.Input
		if sub != nil && sub.home != nil && sub.home[b.ID] >= 0 {
			d, only[b.ID] = sub.home[b.ID], true
		}
		if d < 0 {
			d = fallback
		}
		p.bufs = append(p.bufs, PlannedBuffer{Name: b.Name, SizeBytes: b.SizeBytes, Value: b.Value, Device: d, Of: b.ID, final: true})
	}
	return only
}

// setOptional records opt as the Optional of launch i, a kernel's.
func (p *Plan) setOptional(i int, opt []bool) {
	if i < len(p.launches) {
		p.launches[i].optional = true
	}
	if p.optionals == nil {
		p.optionals = map[int32][]bool{}
	}
	p.optionals[int32(i)] = opt
}

// optional returns launch i's kernel's Optional, nil when it has none.
func (p *Plan) optional(i int) []bool {
	switch l := &p.launches[i]; {
	case !l.optional:
		return nil
	case l.Copy != nil:
		return copyOptional
	}
	return p.optionals[int32(i)]
}

// variant returns the device code kernel launch i runs on a code device,
// nil for any other launch.
func (p *Plan) variant(i int) *dag.Variant { return p.variants[int32(i)] }

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
// It panics when i is out of range (0 <= i < NumLaunches).
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
// streams. haz tracks the hazards (it is reset first, and left for the
// caller to reuse); with estimates false it ranks every kernel at the
// default cost, as if none had an Estimate.
//
// A kernel's rank is its cost plus the largest rank of the kernels that
// depend on it, so it is at least theirs, and they come after it in
// order: each kernel that becomes ready comes after the one just taken in
// the order (rank descending, then position), so the list schedule takes
// the kernels in exactly that order. launchOrder therefore sorts them by
// it: a counting sort when no kernel has an Estimate (every rank is then
// a whole number of default costs, at most the number of kernels), a
// comparison sort otherwise. O(V + E + H), plus O(V log V) with
// estimates.
//
// found reports that haz holds the hazards of order (it has none to
// find below 3 kernels). from is nil when order already is in launch
// order (out is order itself); else from[j] is out[j]'s position in order,
// and out and from are haz's scratch, valid until haz plans again or is
// released.
func launchOrder(g *dag.Graph, order []dag.KernelID, haz *hazards, estimates bool) (out []dag.KernelID, from []int32, found bool) {
	n := len(order)
	if n < 3 {
		return order, nil, false
	}
	haz.reset(g.NumBuffers(), n)
	for i, kid := range order {
		haz.access(i, g.KernelReads(kid), g.KernelWrites(kid))
	}
	// Ranks, from the end: rank[i] holds the largest rank of i's
	// dependents until i is reached, then i's own.
	haz.rank = resize(haz.rank, n)
	rank := haz.rank
	lookup := estimates
	estimates = false // whether some kernel has one
	sorted := true    // whether order is already by rank, highest first
	for i := n - 1; i >= 0; i-- {
		c := defaultLaunchCost
		if lookup {
			if e := g.Kernel(order[i]).Estimate; e > 0 {
				c, estimates = float64(e)/float64(time.Microsecond), true
			}
		}
		rank[i] += c
		if i+1 < n && rank[i+1] > rank[i] {
			sorted = false
		}
		for _, d := range haz.launchDeps(i) {
			rank[d] = max(rank[d], rank[i])
		}
	}
	if sorted {
		return order, nil, true
	}
	haz.order, haz.from = resize(haz.order, n), resize(haz.from, n)
	out, from = haz.order, haz.from
	if estimates {
		for i := range from {
			from[i] = int32(i)
		}
		slices.SortFunc(from, func(a, b int32) int {
			if rank[a] != rank[b] {
				if rank[a] > rank[b] {
					return -1
				}
				return 1
			}
			return cmp.Compare(a, b)
		})
		for k, i := range from {
			out[k] = order[i]
		}
		return out, from, true
	}
	// Whole ranks 1..n: count each, then place the kernels by rank
	// (highest first), each rank's in position order.
	haz.at = resize(haz.at, n+2)
	at := haz.at // by rank: where its kernels go next
	for _, r := range rank {
		at[int(r)]++
	}
	next := int32(0)
	for r := n + 1; r >= 0; r-- {
		at[r], next = next, next+at[r]
	}
	for i, r := range rank {
		out[at[int(r)]], from[at[int(r)]] = order[i], int32(i)
		at[int(r)]++
	}
	return out, from, true
}

// hazards tracks, per buffer, the accesses that a later access may
// conflict with: the writes not yet covered by a later write, and the reads
// since. Each buffer's two lists are chains of nodes in one array, in the
// order the accesses came, so that tracking takes a few allocations per
// plan, not one per buffer.
type hazards struct {
	nodes []hazardNode // nodes[0] is unused: index 0 ends a chain
	lists []hazardLists
	mark  []int32 // mark[d] == i+1: d is already a dependency of launch i
	deps  []int   // every launch's dependencies, launch after launch
	ends  []int32 // by launch: the end of its dependencies in deps
	// runs holds (start, end) in deps of each run of two or more
	// dependencies one chain scan found; runEnds, by launch, the end of
	// its runs in runs.
	runs, runEnds []int32
	// Scratch of a plan, kept for the next: launchOrder's ranks, order,
	// positions and rank counts; reorder's renumbering; planWith's
	// per-launch integers, continued flags and clock rows.
	rank      []float64
	order     []dag.KernelID
	from, at  []int32
	to, ints  []int32
	continued []bool
	after     []int
	// spare and spareEnds are the dependency arrays reorder left behind
	// (the plan took the renumbered ones): the next plan's deps and
	// reorder's ends.
	spare     []int
	spareEnds []int32
}

// hazardNode is one access: the byte range [off, off+n) of the chain's
// buffer, the launch, and the next access in its chain.
type hazardNode struct {
	off, n int64
	launch int32
	next   int32
}

// hazardLists are one buffer's chains of writes and reads.
type hazardLists struct{ writes, reads hazardChain }

// hazardChain is a chain of hazardNodes: the first and last index, 0 when
// empty.
type hazardChain struct{ head, tail int32 }

// hazardPool holds trackers between plans, for their arrays (a plan
// keeps only the dependencies, which it takes with it): planning again,
// or planning graph after graph, then writes into memory already mapped
// and makes no garbage of them. A tracker holds, for the largest graph
// it planned, 24 bytes per binding, 16 per buffer and about 50 per launch
// (with its scratch), plus 8 per clock row kept; like any sync.Pool, the
// pool lets it go after two collections without use. A plan keeps none
// of the scratch: launchOrder's order and positions are read only while
// planning.
var hazardPool sync.Pool

// hazardKept is one tracker kept across collections, so that planning
// graph after graph while the collector runs often (each plan's garbage
// starts a cycle when little else is live) finds its arrays: only one
// whose graph had at most keepAccesses bindings (and launches, buffers
// and clock entries), so it holds at most a few MiB (about 50 bytes per
// launch, 24 per binding), for the life of the process. Larger trackers go to hazardPool alone.
var hazardKept atomic.Pointer[hazards]

// keepAccesses bounds the trackers hazardKept keeps: 65,536 bindings,
// and as many launches, buffers and clock entries.
const keepAccesses = 1 << 16

// small reports whether h is small enough for hazardKept.
func (h *hazards) small() bool {
	return cap(h.nodes) <= keepAccesses+1 && cap(h.spare) <= keepAccesses && cap(h.lists) <= keepAccesses &&
		cap(h.order) <= keepAccesses && cap(h.after) <= keepAccesses
}

// newHazards returns a tracker with room for nacc accesses (a hint); it
// tracks nothing until reset.
func newHazards(nacc int) *hazards {
	h := hazardKept.Swap(nil)
	if h == nil {
		h, _ = hazardPool.Get().(*hazards)
	}
	if h == nil {
		h = &hazards{}
	}
	if cap(h.nodes) < nacc+1 {
		h.nodes = make([]hazardNode, 1, nacc+1)
	}
	h.nodes = h.nodes[:1]
	if h.spare != nil && cap(h.spare) >= nacc {
		h.deps, h.spare = h.spare[:0], nil
	} else {
		h.deps = make([]int, 0, nacc)
	}
	return h
}

// release hands h's arrays back for a later plan, all but its
// dependencies; h must not be used after.
func (h *hazards) release() {
	h.deps = nil
	if h.small() && hazardKept.CompareAndSwap(nil, h) {
		return
	}
	hazardPool.Put(h)
}

// launchDeps returns the dependencies of launch i, found by access, with
// no room to grow.
func (h *hazards) launchDeps(i int) []int {
	start := int32(0)
	if i > 0 {
		start = h.ends[i-1]
	}
	return h.deps[start:h.ends[i]:h.ends[i]]
}

// reset forgets every access and dependency and tracks the accesses of
// nlaunch launches to nbuf buffers, reusing the arrays.
func (h *hazards) reset(nbuf, nlaunch int) {
	h.nodes, h.deps = h.nodes[:1], h.deps[:0]
	h.lists = resize(h.lists, nbuf)
	if cap(h.ends) < nlaunch {
		h.ends = make([]int32, 0, nlaunch)
	}
	if cap(h.runEnds) < nlaunch {
		h.runEnds = make([]int32, 0, nlaunch)
	}
	h.ends, h.runs, h.runEnds = h.ends[:0], h.runs[:0], h.runEnds[:0]
	h.mark = resize(h.mark, nlaunch)
}

// resize returns s with length n, zeroed, reusing its array when it is
// large enough.
func resize[E any](s []E, n int) []E {
	if cap(s) < n {
		return make([]E, n)
	}
	s = s[:n]
	clear(s)
	return s
}

// access records launch i's reads and writes and appends to h.deps the
// plan indices of earlier launches it has a hazard with: read-after-write
// with the writes of overlapping bytes, write-after-write and
// write-after-read with overlapping writes and reads; each once, in the
// order found. Launches are recorded in order: i is the number recorded
// before.
func (h *hazards) access(i int, reads, writes []buffers.Binding) {
	for _, r := range reads {
		h.conflicts(i, h.lists[r.Buffer].writes, r)
	}
	for _, w := range writes {
		h.conflicts(i, h.lists[w.Buffer].writes, w)
		h.conflicts(i, h.lists[w.Buffer].reads, w)
	}
	for _, r := range reads {
		h.push(&h.lists[r.Buffer].reads, r, i)
	}
	for _, w := range writes {
		// Accesses fully covered by this write are ordered before it; later
		// accesses need only depend on the write.
		l := &h.lists[w.Buffer]
		h.dropCovered(&l.writes, w, i)
		h.dropCovered(&l.reads, w, i)
		h.push(&l.writes, w, i)
	}
	h.ends = append(h.ends, int32(len(h.deps)))
	h.runEnds = append(h.runEnds, int32(len(h.runs)))
}

// conflicts adds to launch i's dependencies the launches of c's accesses
// that overlap b (a binding of c's buffer; see buffers.Binding.Overlaps).
func (h *hazards) conflicts(i int, c hazardChain, b buffers.Binding) {
	start := len(h.deps)
	for x := c.head; x != 0; x = h.nodes[x].next {
		nd := &h.nodes[x]
		if d := int(nd.launch); d != i && h.mark[d] != int32(i+1) && nd.n > 0 && b.Length > 0 && nd.off < b.End() && b.Offset < nd.off+nd.n {
			h.mark[d] = int32(i + 1)
			h.deps = append(h.deps, d)
		}
	}
	if len(h.deps)-start >= 2 {
		h.runs = append(h.runs, int32(start), int32(len(h.deps)))
	}
}

// reorder renumbers the hazards found over a sequence of launches for
// the same launches in another order, one that keeps every pair with a
// hazard in order: launch j of the new order is launch from[j] of the
// old. The dependencies become those access would find over the new
// order. It would find the same dependencies in each chain scan: the
// accesses that overlap the scanned binding all have a hazard with it,
// so they precede it in both orders, as do the covering writes that
// dropped any of them (a write that covers an access overlapping the
// binding overlaps it too, and the access it covers). Only their order
// within one scan differs, a chain being in launch order: reorder sorts
// each scan's run in the new numbering. O(V + E), plus the sorting of
// the runs of two or more.
func (h *hazards) reorder(from []int32) {
	h.to = resize(h.to, len(from))
	to := h.to // old launch → new
	for j, i := range from {
		to[i] = int32(j)
	}
	deps, ends := make([]int, 0, len(h.deps)), resize(h.spareEnds, len(from))
	for j, i := range from {
		start, runStart := int32(0), int32(0)
		if i > 0 {
			start, runStart = h.ends[i-1], h.runEnds[i-1]
		}
		base := len(deps)
		for _, d := range h.deps[start:h.ends[i]] {
			deps = append(deps, int(to[d]))
		}
		for r := runStart; r < h.runEnds[i]; r += 2 {
			slices.Sort(deps[base+int(h.runs[r]-start) : base+int(h.runs[r+1]-start)])
		}
		ends[j] = int32(len(deps))
	}
	// The old arrays are the tracker's again: nothing of the plan holds
	// them.
	h.spare, h.spareEnds = h.deps[:0], h.ends[:0]
	h.deps, h.ends, h.runs, h.runEnds = deps, ends, h.runs[:0], h.runEnds[:0]
}

// push appends launch i's access b to chain c.
func (h *hazards) push(c *hazardChain, b buffers.Binding, i int) {
	x := int32(len(h.nodes))
	h.nodes = append(h.nodes, hazardNode{off: b.Offset, n: b.Length, launch: int32(i)})
	if c.tail != 0 {
		h.nodes[c.tail].next = x
	} else {
		c.head = x
	}
	c.tail = x
}

// dropCovered unlinks from c the accesses of launches other than self
// whose bytes w covers.
func (h *hazards) dropCovered(c *hazardChain, w buffers.Binding, self int) {
	prev := int32(0)
	for x := c.head; x != 0; {
		nd := &h.nodes[x]
		next := nd.next
		if int(nd.launch) != self && nd.off >= w.Offset && nd.off+nd.n <= w.End() {
			if prev == 0 {
				c.head = next
			} else {
				h.nodes[prev].next = next
			}
			if c.tail == x {
				c.tail = prev
			}
		} else {
			prev = x
		}
		x = next
	}
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
