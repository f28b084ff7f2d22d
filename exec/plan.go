package exec

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
)

// Wait is one event wait in a plan: before its launch runs, stream Stream
// must have completed Seq launches.
type Wait struct {
	Stream int
	Seq    int
	Launch int // plan index of the launch that brings Stream to Seq
}

// PlannedLaunch is one launch of a plan.
type PlannedLaunch struct {
	Kernel dag.KernelID
	Stream int    // stream index on the device
	Seq    int    // the stream's completed-launch count once this launch has run (1-based position)
	Waits  []Wait // event waits queued before the launch (at most one per other stream)
	Deps   []int  // plan indices of the launches it has a hazard with, on any stream
}

// Plan is an executable schedule of a graph on one device.
type Plan struct {
	Graph    *dag.Graph
	Streams  int             // number of streams used (the device's stream count)
	Launches []PlannedLaunch // in submission order (a topological order)
	Waits    int             // event waits inserted
	Hazards  int             // cross-stream hazards found (Waits <= Hazards)
	record   []bool          // record[i]: an event must be recorded after launch i
}

// Plan validates g and returns a plan on the executor's device. Errors are
// those of g.Validate. Planning is O(V + E + H), where H counts buffer
// accesses scanned for hazards, and allocates per-launch vector clocks of
// the stream count.
func (e *Executor) Plan(g *dag.Graph) (*Plan, error) {
	if err := g.Validate(); err != nil {
		return nil, err
	}
	return planOn(g, e.dev.NumStreams()), nil
}

func planOn(g *dag.Graph, nstreams int) *Plan {
	order := g.Order()
	kernels := g.Kernels()
	p := &Plan{Graph: g, Streams: nstreams, Launches: make([]PlannedLaunch, len(order)), record: make([]bool, len(order))}
	pos := make([]int, len(kernels)) // kernel id → plan index
	for i, k := range order {
		pos[k] = i
	}

	// Hazards, in plan order.
	haz := newHazards(len(g.Buffers()), len(order))
	for i, kid := range order {
		k := kernels[kid]
		p.Launches[i] = PlannedLaunch{Kernel: kid, Deps: haz.access(i, k.Reads, k.Writes)}
	}

	// Stream assignment: chains stay on one stream.
	load := make([]int, nstreams)
	continued := make([]bool, len(order)) // continued[i]: a successor took launch i's stream
	stream := make([]int, len(order))
	for i, kid := range order {
		s := -1
		if k := kernels[kid]; k.Stream >= 0 {
			s = k.Stream % nstreams
		} else {
			for _, d := range p.Launches[i].Deps {
				if !continued[d] {
					continued[d] = true
					s = stream[d]
					break
				}
			}
			if s < 0 {
				s = argmin(load)
			}
		}
		stream[i] = s
		load[s]++
		p.Launches[i].Stream = s
		p.Launches[i].Seq = load[s]
	}

	// Alignment with vector clocks: clock[s][t] is the number of launches
	// of stream t that stream s is known to have waited for.
	clock := make([][]int, nstreams)
	for s := range clock {
		clock[s] = make([]int, nstreams)
	}
	after := make([]int, len(order)*nstreams) // clock of launch i's stream right after it
	for i := range p.Launches {
		l := &p.Launches[i]
		s := l.Stream
		deps := slices.Clone(l.Deps)
		slices.SortFunc(deps, func(a, b int) int { return cmp.Compare(b, a) }) // newest first: its wait covers older ones
		for _, d := range deps {
			t, seq := p.Launches[d].Stream, p.Launches[d].Seq
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
			for u, c := range after[d*nstreams : (d+1)*nstreams] {
				clock[s][u] = max(clock[s][u], c)
			}
		}
		clock[s][s] = l.Seq
		copy(after[i*nstreams:], clock[s])
	}
	return p
}

func argmin(xs []int) int {
	best := 0
	for i, x := range xs {
		if x < xs[best] {
			best = i
		}
	}
	return best
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
	return fmt.Sprintf("plan: %d launches on %d streams, %d event waits for %d cross-stream hazards",
		len(p.Launches), p.Streams, p.Waits, p.Hazards)
}
