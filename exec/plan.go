package exec

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/topology"
)

// Wait is one event wait in a plan: before its launch runs, stream Stream
// (a global stream index, Device×StreamsPerDevice + stream) must have
// completed Seq launches.
type Wait struct {
	Stream int
	Seq    int
	Launch int // plan index of the launch that brings Stream to Seq
}

// Copy describes a copy launch: buffer Buffer, written on device From,
// copied whole into its replica on device To for the launches there that
// read it.
type Copy struct {
	Buffer   dag.BufferID
	From, To int   // device indices
	Bytes    int64 // estimated bytes (raw size or size hint); the run measures the real count
}

// PlannedLaunch is one launch of a plan: a kernel of the graph, or a copy
// of a buffer to another device.
type PlannedLaunch struct {
	Kernel dag.KernelID // -1 for a copy
	Name   string       // the kernel's name, or "copy BUF gpuA→gpuB"
	Device int          // index into the executor's devices
	Stream int          // stream index on its device
	Seq    int          // the stream's completed-launch count once this launch has run (1-based position)
	Waits  []Wait       // event waits queued before the launch (at most one per other stream)
	Deps   []int        // plan indices of the launches it has a hazard with, on any stream
	// Reads and Writes are the kernel's bindings, with reads of buffers
	// that live on another device redirected to their replica on this one.
	Reads, Writes []buffers.Binding
	Copy          *Copy // non-nil for a copy launch
	fn            dag.KernelFunc
	optional      []bool // the kernel's Optional
	pin           int    // the kernel's Stream: -1 unpinned
}

// PlannedBuffer is a buffer of a plan: one of the graph's (same id), or a
// replica of one on another device (ids after the graph's).
type PlannedBuffer struct {
	Name      string
	SizeBytes int64
	Value     bool
	Device    int          // index into the executor's devices
	Of        dag.BufferID // the graph's buffer it is (or replicates)
}

// Plan is an executable schedule of a graph on the executor's devices.
type Plan struct {
	Graph    *dag.Graph
	Devices  []topology.DeviceID // the executor's devices, by index
	Streams  int                 // streams per device
	Launches []PlannedLaunch     // in submission order (a topological order)
	Buffers  []PlannedBuffer     // the graph's buffers, then replicas
	Waits    int                 // event waits inserted
	Hazards  int                 // cross-stream hazards found (Waits <= Hazards)
	Copies   int                 // copy launches inserted
	// Placement is the device chosen for each kernel (by kernel id) and
	// the cost model's figures for it.
	Placement PlacementResult
	record    []bool // record[i]: an event must be recorded after launch i

	compileOnce sync.Once
	comp        *compiled // the stream lists, built on the first run
	slotsMu     sync.Mutex
	slots       [][]atomic.Pointer[buffers.Buffer] // buffer slots of closed runs, all nil, for reuse
}

// Plan validates g and returns a plan on the executor's devices: kernels
// placed by the executor's placement strategy (all on the only device of
// a single-device executor), copy launches for reads across devices,
// streams assigned per device, and event waits only where a hazard
// crosses streams. Errors: g.Validate's, and a pinned device the executor
// does not have or that contradicts where the buffers it writes live.
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
	var pl PlacementResult
	if len(e.devs) == 1 {
		pl = PlacementResult{Device: make([]int, g.NumKernels())}
		for _, k := range g.Kernels() {
			if k.Device != nil && *k.Device != ids[0] {
				return nil, fmt.Errorf("exec: kernel %q is pinned to %s, the executor has only %s", k.Name, *k.Device, ids[0])
			}
		}
	} else {
		var err error
		pl, err = Place(g, ids, e.devs[0].NumStreams(), e.topo, e.placement)
		if err != nil {
			return nil, err
		}
	}
	return planOn(g, ids, e.devs[0].NumStreams(), pl, nil), nil
}

// subset restricts planOn to some kernels (a recovery plan): only run[k]
// kernels get launches, and buffers no included kernel writes live on
// home[b] (where a surviving copy is), -1 when unknown.
type subset struct {
	run  []bool
	home []int
}

func planOn(g *dag.Graph, devs []topology.DeviceID, nstreams int, pl PlacementResult, sub *subset) *Plan {
	order := g.Order()
	if sub != nil {
		order = slices.DeleteFunc(slices.Clone(order), func(k dag.KernelID) bool { return !sub.run[k] })
	}
	order = launchOrder(g, order, g.NumBuffers())
	p := &Plan{Graph: g, Devices: devs, Streams: nstreams, Placement: pl}
	for _, b := range g.Buffers() {
		p.Buffers = append(p.Buffers, PlannedBuffer{Name: b.Name, SizeBytes: b.SizeBytes, Value: b.Value, Of: b.ID})
		if sub != nil && sub.home[b.ID] >= 0 {
			p.Buffers[b.ID].Device = sub.home[b.ID]
		}
	}
	// A buffer lives where its first writer runs (placement keeps every
	// writer of a buffer on one device); inputs live on device 0.
	written := make([]bool, len(p.Buffers))
	for _, kid := range order {
		for _, w := range g.KernelWrites(kid) {
			if !written[w.Buffer] {
				written[w.Buffer] = true
				p.Buffers[w.Buffer].Device = pl.Device[kid]
			}
		}
	}
	replica := map[[2]int]buffers.ID{} // (buffer, device) → replica id
	for _, kid := range order {
		k := g.Kernel(kid)
		d := pl.Device[kid]
		reads, cloned := k.Reads, false
		for i, r := range k.Reads {
			home := p.Buffers[r.Buffer].Device
			if home == d {
				continue
			}
			key := [2]int{int(r.Buffer), d}
			rep, ok := replica[key]
			if !ok {
				src := p.Buffers[r.Buffer]
				rep = buffers.ID(len(p.Buffers))
				replica[key] = rep
				p.Buffers = append(p.Buffers, PlannedBuffer{Name: src.Name + "@" + devs[d].String(),
					SizeBytes: src.SizeBytes, Value: src.Value, Device: d, Of: r.Buffer})
				whole := g.Buffer(r.Buffer).Whole()
				c := &Copy{Buffer: r.Buffer, From: home, To: d, Bytes: g.Buffer(r.Buffer).TransferBytes()}
				p.Launches = append(p.Launches, PlannedLaunch{Kernel: -1, Device: d, Copy: c,
					Name:  fmt.Sprintf("copy %s %s→%s", src.Name, devs[home], devs[d]),
					Reads: []buffers.Binding{whole}, Writes: []buffers.Binding{{Buffer: rep, Length: whole.Length}}})
				p.Copies++
			}
			if !cloned {
				reads, cloned = slices.Clone(k.Reads), true
			}
			reads[i].Buffer = rep
		}
		p.Launches = append(p.Launches, PlannedLaunch{Kernel: kid, Name: k.Name, Device: d, Reads: reads,
			Writes: k.Writes, fn: k.Fn, optional: k.Optional, pin: k.Stream})
	}
	n := len(p.Launches)
	p.record = make([]bool, n)

	// Hazards, in plan order.
	haz := newHazards(len(p.Buffers), n)
	for i := range p.Launches {
		p.Launches[i].Deps = haz.access(i, p.Launches[i].Reads, p.Launches[i].Writes)
	}

	// Stream assignment per device: chains stay on one stream.
	load := make([]int, len(devs)*nstreams)
	continued := make([]bool, n) // continued[i]: a successor took launch i's stream
	gstream := make([]int, n)    // global stream index
	// Launches with no dependency go to the stream that took the last such
	// launch while its load is within rootBlock of the least loaded one, so
	// independent work comes in blocks per stream and what descends from a
	// block stays on its stream: a reduction tree then waits only where
	// blocks meet, not at every node. rootBlock grows with the plan and is
	// 1 (plain alternation) below 128 launches per stream.
	rootBlock := min(max(1, n/(nstreams*len(devs)*64)), 64)
	lastRoot := make([]int, len(devs)) // per device: global stream of the last root, -1: none
	for d := range lastRoot {
		lastRoot[d] = -1
	}
	for i := range p.Launches {
		l := &p.Launches[i]
		base := l.Device * nstreams
		s := -1
		if l.Kernel >= 0 && l.pin >= 0 {
			s = base + l.pin%nstreams
		} else {
			// Continue a dependency's chain: the one whose stream has the
			// fewest launches, so chains that merge do not pile up on one
			// stream.
			pick := -1
			for _, d := range l.Deps {
				if !continued[d] && p.Launches[d].Device == l.Device && (pick < 0 || load[gstream[d]] < load[gstream[pick]]) {
					pick = d
				}
			}
			if pick >= 0 {
				continued[pick] = true
				s = gstream[pick]
			}
			if s < 0 {
				s = base + argmin(load[base:base+nstreams])
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
	ns := len(devs) * nstreams
	clock := make([][]int, ns)
	for s := range clock {
		clock[s] = make([]int, ns)
	}
	after := make([]int, n*ns) // clock of launch i's stream right after it
	for i := range p.Launches {
		l := &p.Launches[i]
		s := gstream[i]
		deps := slices.Clone(l.Deps)
		slices.SortFunc(deps, func(a, b int) int { return cmp.Compare(b, a) }) // newest first: its wait covers older ones
		for _, d := range deps {
			t, seq := gstream[d], p.Launches[d].Seq
			if t == s {
				continue
			}
			p.Hazards++
			if clock[s][t] >= seq {
				continue
			}
			l.Waits = append(l.Waits, Wait{Stream: t, Seq: seq, Launch: d})
			p.record[d] = true
			p.Waits++
			for u, c := range after[d*ns : (d+1)*ns] {
				clock[s][u] = max(clock[s][u], c)
			}
		}
		clock[s][s] = l.Seq
		copy(after[i*ns:], clock[s])
	}
	return p
}

// GlobalStream returns launch i's stream as a global index:
// Device×Streams + Stream.
func (p *Plan) GlobalStream(i int) int { return p.Launches[i].Device*p.Streams + p.Launches[i].Stream }

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
	if len(p.Devices) == 1 {
		return fmt.Sprintf("plan: %d launches on %d streams, %d event waits for %d cross-stream hazards",
			len(p.Launches), p.Streams, p.Waits, p.Hazards)
	}
	return fmt.Sprintf("plan: %d launches on %d devices × %d streams, %d event waits for %d cross-stream hazards, %d copies",
		len(p.Launches), len(p.Devices), p.Streams, p.Waits, p.Hazards, p.Copies)
}
