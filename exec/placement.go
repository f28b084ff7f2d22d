package exec

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/topology"
)

// Placement is how a multi-device executor chooses each kernel's device.
type Placement uint8

const (
	// PlaceHEFT is list scheduling by upward rank with earliest finish
	// time (HEFT: Topcuoglu, Hariri and Wu, "Performance-effective and
	// low-complexity task scheduling for heterogeneous computing", IEEE
	// TPDS 13(3), 2002; the non-insertion variant), over the cost model
	// below. The default.
	//
	// HEFT is greedy: with transfers that dwarf compute it spreads work
	// that later pays to come back. So its result is then improved by
	// local search over the same model, from HEFT's placement and a few
	// others (every single-device one, round-robin, least-loaded): move
	// one kernel at a time while the makespan drops, and two at a time on
	// graphs of up to 16 kernels. Graphs of more than LocalSearchLimit
	// kernels keep plain HEFT.
	PlaceHEFT Placement = iota
	// PlaceRoundRobin deals kernels to devices in turn (a baseline).
	PlaceRoundRobin
	// PlaceLeastLoaded gives each kernel the device with the least
	// estimated compute so far, ignoring transfers (a baseline).
	PlaceLeastLoaded
)

// String returns "heft", "round-robin" or "least-loaded".
func (p Placement) String() string {
	switch p {
	case PlaceHEFT:
		return "heft"
	case PlaceRoundRobin:
		return "round-robin"
	case PlaceLeastLoaded:
		return "least-loaded"
	}
	return fmt.Sprintf("placement(%d)", p)
}

// DefaultEstimate is the compute estimate of a kernel that gives none
// (dag.Estimate).
const DefaultEstimate = 10 * time.Microsecond

// PlacementResult is a placement and what the cost model says of it.
type PlacementResult struct {
	Strategy Placement
	Device   []int // device index per kernel id
	// Makespan is the modeled finish time of the last kernel: compute
	// estimates on Streams lanes per device, plus transfers between
	// devices at the topology's cost (TransferCost), each buffer copied
	// once per device that reads it.
	Makespan time.Duration
	// Transfer is the modeled time of all copies, summed; BytesMoved their
	// bytes (raw sizes and value size hints).
	Transfer   time.Duration
	BytesMoved int64
}

// Place chooses a device for every kernel of the validated graph g among
// devs (lanes streams each) with strategy, by the cost model: estimated
// compute time (dag.Estimate, DefaultEstimate when absent) + bytes moved
// (raw sizes, dag.SizeHint for values) × the topology's transfer cost +
// load (the lanes' availability). topo may be nil: transfers then cost
// nothing. The model keeps a buffer on the device of its first writer:
// a read elsewhere costs a copy of the buffer, a write elsewhere a copy of
// the bytes it wrote back home (the plan makes exactly those copies, by
// byte range). Pins (dag.OnDevice) are obeyed; a preference
// (dag.PreferDevice) wins when it finishes within one estimate of the
// best. Every device is taken to run every kernel (Executor.Plan also
// keeps each kernel to the devices that run code it has). Errors: an
// unvalidated graph, a pin to a device not in devs.
func Place(g *dag.Graph, devs []topology.DeviceID, lanes int, topo *topology.Topology, strategy Placement) (PlacementResult, error) {
	return place(g, devs, nil, nil, nil, sameLanes(len(devs), lanes), topo, strategy)
}

// sameLanes returns n devices' lane counts, lanes each.
func sameLanes(n, lanes int) []int {
	ls := make([]int, n)
	for i := range ls {
		ls[i] = lanes
	}
	return ls
}

// place is Place where device d has lanes[d] lanes and runs kernel code
// of kind code[d] only: a kernel goes only to a device that runs code it
// has (code nil: every device runs every kernel), and a kernel that reads
// or writes a value buffer not to a code device (mem[d]; mem nil: none),
// nor one whose OpenCL variant binds a buffer at an offset that is not a
// multiple of a code device's argument alignment (align[d]; align nil:
// none). Errors as Place, and a kernel no device has code for or pinned
// to a device without code for it.
func place(g *dag.Graph, devs []topology.DeviceID, code []dag.CodeKind, mem []bool, align []int64, lanes []int, topo *topology.Topology, strategy Placement) (PlacementResult, error) {
	m, err := newModel(g, devs, code, mem, align, lanes, topo)
	if err != nil {
		return PlacementResult{}, err
	}
	return m.place(strategy), nil
}

// place runs strategy on the model.
func (m *model) place(strategy Placement) PlacementResult {
	devs := m.devs
	st := m.newState()
	load := make([]time.Duration, len(devs))
	for i, k := range m.prio {
		cands := m.candidates(k)
		best := cands[0]
		switch strategy {
		case PlaceRoundRobin:
			best = cands[i%len(cands)]
			if slices.Contains(cands, i%len(devs)) {
				best = i % len(devs)
			}
		case PlaceLeastLoaded:
			for _, d := range cands {
				if load[d] < load[best] {
					best = d
				}
			}
		default:
			bestFin := time.Duration(-1)
			for _, d := range cands {
				if fin := st.finish(k, d); bestFin < 0 || fin < bestFin {
					best, bestFin = d, fin
				}
			}
			if pref := m.prefer[k]; pref >= 0 && pref != best && slices.Contains(cands, pref) &&
				st.finish(k, pref) <= bestFin+m.w[k] {
				best = pref
			}
		}
		load[best] += m.w[k]
		st.commit(k, best)
	}
	res := st.result(strategy)
	if strategy == PlaceHEFT && len(m.prio) <= LocalSearchLimit && len(devs) > 1 {
		res = m.improve(res)
	}
	return res
}

// LocalSearchLimit is the largest graph (in kernels) whose HEFT placement
// is improved by local search.
const LocalSearchLimit = 2000

// evaluate schedules the assignment dev (per kernel id) with the model;
// ok is false when it breaks a pin or puts a kernel on a device without
// code for it.
func (m *model) evaluate(dev []int) (*state, bool) {
	st := m.newState()
	for _, k := range m.prio {
		if pin := m.pin[k]; pin >= 0 && dev[k] != pin {
			return nil, false
		}
		if c := m.cands[k]; c != nil && !slices.Contains(c, dev[k]) {
			return nil, false
		}
		st.commit(k, dev[k])
	}
	return st, true
}

// better orders schedules by makespan, then total transfer.
func better(a, b *state) bool {
	return a.makespan < b.makespan || a.makespan == b.makespan && a.transfer < b.transfer
}

// improve runs local search from several starting placements and returns
// the best schedule found. Small graphs (up to pairMoveLimit kernels)
// start from start, every single-device placement, and the round-robin
// and least-loaded ones (which spread work single moves could not split);
// larger ones from start and the best single-device placement.
func (m *model) improve(start PlacementResult) PlacementResult {
	starts := [][]int{start.Device}
	var bestOne *state // the best single-device placement
	for d := range m.devs {
		one := make([]int, len(m.w))
		for i := range one {
			one[i] = d
		}
		if len(m.prio) <= pairMoveLimit {
			starts = append(starts, one)
		} else if st, ok := m.evaluate(one); ok && (bestOne == nil || better(st, bestOne)) {
			bestOne = st
		}
	}
	if bestOne != nil {
		starts = append(starts, bestOne.dev)
	}
	if len(m.prio) <= pairMoveLimit {
		for _, s := range []Placement{PlaceRoundRobin, PlaceLeastLoaded} {
			starts = append(starts, m.place(s).Device)
		}
	}
	var best *state
	for _, s := range starts {
		st, ok := m.evaluate(s)
		if !ok {
			continue
		}
		st = m.localSearch(st)
		if best == nil || better(st, best) {
			best = st
		}
	}
	if best == nil {
		return start
	}
	return best.result(PlaceHEFT)
}

// localSearch improves st by single and (on small graphs) pair moves:
// at most 20 passes on small graphs, 3 on larger ones.
func (m *model) localSearch(best *state) *state {
	dev := slices.Clone(best.dev)
	passes := 20
	if len(m.prio) > pairMoveLimit {
		passes = 3
	}
	for range passes {
		moved := false
		for _, k := range m.prio {
			orig := dev[k]
			for d := range m.devs {
				if d == orig {
					continue
				}
				dev[k] = d
				if st, ok := m.evaluate(dev); ok && better(st, best) {
					best, orig, moved = st, d, true
				}
			}
			dev[k] = orig
		}
		// Moving one kernel of a branch alone only adds transfers; on small
		// graphs also try moving two kernels together.
		if !moved && len(m.prio) <= pairMoveLimit {
			moved = m.pairMove(dev, &best)
		}
		if !moved {
			break
		}
	}
	return best
}

// pairMoveLimit is the largest graph (in kernels) on which local search
// also tries moving two kernels at once (O(V²·D) schedules a pass).
const pairMoveLimit = 16

// pairMove applies the first move of two kernels to one device that
// shortens the schedule; it reports whether it found one.
func (m *model) pairMove(dev []int, best **state) bool {
	for i, a := range m.prio {
		for _, b := range m.prio[i+1:] {
			oa, ob := dev[a], dev[b]
			for d := range m.devs {
				if d == oa && d == ob {
					continue
				}
				dev[a], dev[b] = d, d
				if st, ok := m.evaluate(dev); ok && better(st, *best) {
					*best = st
					return true
				}
			}
			dev[a], dev[b] = oa, ob
		}
	}
	return false
}

// OptimalPlacement returns the placement with the least modeled makespan
// over every assignment of kernels to devices (kernels scheduled in the
// same upward-rank order as HEFT), by branch and bound. It is exponential
// in the kernel count: meant for small graphs (up to about 8 kernels), to
// measure how far a heuristic is from the optimum. Errors as Place, and
// more than 12 kernels.
func OptimalPlacement(g *dag.Graph, devs []topology.DeviceID, lanes int, topo *topology.Topology) (PlacementResult, error) {
	if g.NumKernels() > 12 {
		return PlacementResult{}, fmt.Errorf("exec: optimal placement of %d kernels: at most 12", g.NumKernels())
	}
	m, err := newModel(g, devs, nil, nil, nil, sameLanes(len(devs), lanes), topo)
	if err != nil {
		return PlacementResult{}, err
	}
	var best *state
	var dfs func(i int, st *state)
	dfs = func(i int, st *state) {
		if best != nil && st.makespan >= best.makespan {
			return
		}
		if i == len(m.prio) {
			best = st
			return
		}
		k := m.prio[i]
		for _, d := range m.candidates(k) {
			next := st.clone()
			next.commit(k, d)
			dfs(i+1, next)
		}
	}
	dfs(0, m.newState())
	return best.result(PlaceHEFT), nil
}

// model is the cost model of one graph on one set of devices.
type model struct {
	g      *dag.Graph
	devs   []topology.DeviceID
	lanes  []int // per device
	topo   *topology.Topology
	w      []time.Duration // compute estimate per kernel
	prio   []dag.KernelID  // upward-rank order
	pin    []int           // pinned device per kernel, or -1
	all    []int           // every device index, in order
	cands  [][]int         // per kernel, the devices with code for it; nil: every device
	prefer []int
	cost   map[[3]int64]time.Duration // (bytes, src, dst) → transfer cost
	avg    map[int64]time.Duration    // bytes → mean transfer cost over device pairs
}

// newModel builds the cost model of g on devs; code[d], when code is not
// nil, is the kind of kernel code device d runs; lanes[d] its lanes;
// mem[d] (mem may be nil) whether it is a code device, which a kernel
// that touches a value buffer does not go to; align[d] (align may be
// nil) the argument alignment of code device d, which a kernel whose
// OpenCL variant binds a buffer at an offset not a multiple of it does
// not go to.
func newModel(g *dag.Graph, devs []topology.DeviceID, code []dag.CodeKind, mem []bool, align []int64, lanes []int, topo *topology.Topology) (*model, error) {
	order := g.Order()
	if order == nil && g.NumKernels() > 0 {
		return nil, errors.New("exec: placement needs a validated graph")
	}
	if len(devs) == 0 || len(lanes) != len(devs) || slices.Min(lanes) < 1 {
		return nil, fmt.Errorf("exec: placement on %d devices with lanes %v", len(devs), lanes)
	}
	nk := g.NumKernels()
	m := &model{g: g, devs: devs, lanes: lanes, topo: topo, w: make([]time.Duration, nk),
		pin: make([]int, nk), prefer: make([]int, nk), all: make([]int, len(devs)), cands: make([][]int, nk),
		cost: map[[3]int64]time.Duration{}, avg: map[int64]time.Duration{}}
	for d := range m.all {
		m.all[d] = d
	}
	index := func(id topology.DeviceID) int { return slices.Index(devs, id) }
	for _, k := range g.Kernels() {
		m.w[k.ID] = k.Estimate
		if m.w[k.ID] == 0 {
			m.w[k.ID] = DefaultEstimate
		}
		m.pin[k.ID], m.prefer[k.ID] = -1, -1
		if code != nil {
			var all bool
			if m.cands[k.ID], all = codeDevices(k, code); !all && m.cands[k.ID] == nil {
				return nil, noCodeError(k, devs, code)
			}
		}
		if slices.Contains(mem, true) {
			if _, ok := valueAccess(g, k); ok {
				cs := m.cands[k.ID]
				if cs == nil {
					cs = m.all
				}
				m.cands[k.ID] = slices.DeleteFunc(slices.Clone(cs), func(d int) bool { return mem[d] })
				if len(m.cands[k.ID]) == 0 {
					return nil, fmt.Errorf("exec: kernel %q reads or writes a value buffer and has code only for code devices", k.Name)
				}
			}
		}
		if align != nil {
			cs := m.cands[k.ID]
			if cs == nil {
				cs = m.all
			}
			bad := func(d int) bool { return misaligned(g, k, align[d]) != nil }
			if slices.ContainsFunc(cs, bad) {
				m.cands[k.ID] = slices.DeleteFunc(slices.Clone(cs), bad)
				if len(m.cands[k.ID]) == 0 {
					return nil, fmt.Errorf("exec: kernel %q binds buffers at offsets no device of its code can bind", k.Name)
				}
			}
		}
		if k.Device != nil {
			if m.pin[k.ID] = index(*k.Device); m.pin[k.ID] < 0 {
				return nil, fmt.Errorf("exec: kernel %q is pinned to %s, which is not among the executor's devices %v", k.Name, *k.Device, devs)
			}
			if c := m.cands[k.ID]; c != nil && !slices.Contains(c, m.pin[k.ID]) {
				return nil, fmt.Errorf("exec: kernel %q is pinned to %s, which runs %s, and the kernel has %s code", k.Name, *k.Device,
					codeName(code[m.pin[k.ID]]), k.Codes())
			}
		}
		if k.Prefer != nil {
			m.prefer[k.ID] = index(*k.Prefer)
		}
	}
	// Upward rank: w + max over successors (average transfer of what the
	// successor reads of the kernel's writes + its rank), found from the
	// end: when a kernel's rank is known, each of its predecessors takes
	// it into its best (all of a kernel's successors come after it).
	preds := g.Predecessors()
	wOff, wAt := writersOf(g)
	eb := make([]int64, nk)           // by predecessor: bytes the kernel at hand reads of its writes
	best := make([]time.Duration, nk) // by kernel: the largest transfer + rank among its successors so far
	rank := make([]time.Duration, nk)
	for i := len(order) - 1; i >= 0; i-- {
		k := order[i]
		rank[k] = m.w[k] + best[k]
		if len(preds[k]) == 0 {
			continue
		}
		// edge bytes (p, k): for each read of k, the buffer's transfer
		// bytes when p writes it.
		reads := g.KernelReads(k)
		for _, r := range reads {
			n := g.Buffer(r.Buffer).TransferBytes()
			for _, p := range wAt[wOff[r.Buffer]:wOff[r.Buffer+1]] {
				eb[p] += n
			}
		}
		for _, p := range preds[k] {
			best[p] = max(best[p], m.avgTransfer(eb[p])+rank[k])
		}
		for _, r := range reads {
			for _, p := range wAt[wOff[r.Buffer]:wOff[r.Buffer+1]] {
				eb[p] = 0
			}
		}
	}
	pos := make([]int, nk)
	for i, k := range order {
		pos[k] = i
	}
	m.prio = slices.Clone(order)
	slices.SortStableFunc(m.prio, func(a, b dag.KernelID) int {
		if c := cmp.Compare(rank[b], rank[a]); c != 0 {
			return c
		}
		return cmp.Compare(pos[a], pos[b])
	})
	// A higher rank always precedes its successors (w > 0), so prio is a
	// topological order.
	return m, nil
}

// writersOf returns, by buffer, the kernels that write it, each once, in
// id order: buffer b's are at[off[b]:off[b+1]].
func writersOf(g *dag.Graph) (off []int32, at []dag.KernelID) {
	off = make([]int32, g.NumBuffers()+1)
	last := make([]dag.KernelID, g.NumBuffers()) // 1 + the last kernel counted for the buffer
	for k := range dag.KernelID(g.NumKernels()) {
		for _, w := range g.KernelWrites(k) {
			if last[w.Buffer] != k+1 {
				last[w.Buffer] = k + 1
				off[w.Buffer+1]++
			}
		}
	}
	for b := range g.NumBuffers() {
		off[b+1] += off[b]
	}
	at = make([]dag.KernelID, off[len(off)-1])
	next := slices.Clone(off[:len(off)-1])
	clear(last)
	for k := range dag.KernelID(g.NumKernels()) {
		for _, w := range g.KernelWrites(k) {
			if last[w.Buffer] != k+1 {
				last[w.Buffer] = k + 1
				at[next[w.Buffer]] = k
				next[w.Buffer]++
			}
		}
	}
	return off, at
}

func (m *model) transfer(bytes int64, a, b int) time.Duration {
	if a == b || m.topo == nil {
		return 0
	}
	key := [3]int64{bytes, int64(a), int64(b)}
	if c, ok := m.cost[key]; ok {
		return c
	}
	c, err := m.topo.TransferCost(bytes, m.devs[a], m.devs[b])
	if err != nil {
		c = 0 // a device the topology does not know: no modeled cost
	}
	m.cost[key] = c
	return c
}

// avgTransfer is the mean transfer cost of bytes over ordered device
// pairs, computed once per byte count.
func (m *model) avgTransfer(bytes int64) time.Duration {
	if len(m.devs) < 2 || m.topo == nil {
		return 0
	}
	if c, ok := m.avg[bytes]; ok {
		return c
	}
	var sum time.Duration
	for a := range m.devs {
		for b := range m.devs {
			if a != b {
				sum += m.transfer(bytes, a, b)
			}
		}
	}
	c := sum / time.Duration(len(m.devs)*(len(m.devs)-1))
	m.avg[bytes] = c
	return c
}

// state is a partial schedule.
type state struct {
	m        *model
	dev      []int           // device per kernel, -1 while unplaced
	fin      []time.Duration // finish per kernel
	lanes    [][]time.Duration
	arrive   map[[2]int]time.Duration // (buffer, device) → when its copy there is complete
	home     []int                    // device per buffer, -1 while unwritten
	bufFin   []time.Duration          // latest finish among the buffer's placed writers
	makespan time.Duration
	transfer time.Duration
	bytes    int64
}

func (m *model) newState() *state {
	st := &state{m: m, dev: make([]int, len(m.w)), fin: make([]time.Duration, len(m.w)),
		lanes: make([][]time.Duration, len(m.devs)), arrive: map[[2]int]time.Duration{},
		home: make([]int, m.g.NumBuffers()), bufFin: make([]time.Duration, m.g.NumBuffers())}
	for i := range st.dev {
		st.dev[i] = -1
	}
	for i := range st.home {
		st.home[i] = -1
	}
	for d := range st.lanes {
		st.lanes[d] = make([]time.Duration, m.lanes[d])
	}
	return st
}

func (st *state) clone() *state {
	c := *st
	c.dev, c.fin, c.home, c.bufFin = slices.Clone(st.dev), slices.Clone(st.fin), slices.Clone(st.home), slices.Clone(st.bufFin)
	c.lanes = make([][]time.Duration, len(st.lanes))
	for d := range st.lanes {
		c.lanes[d] = slices.Clone(st.lanes[d])
	}
	c.arrive = make(map[[2]int]time.Duration, len(st.arrive))
	for k, v := range st.arrive {
		c.arrive[k] = v
	}
	return &c
}

// candidates returns the devices k may go to: its pin, else those with
// code for it.
func (m *model) candidates(k dag.KernelID) []int {
	if pin := m.pin[k]; pin >= 0 {
		return []int{pin}
	}
	if c := m.cands[k]; c != nil {
		return c
	}
	return m.all
}

// ready returns when k's inputs are on d, and the transfers it starts.
func (st *state) ready(k dag.KernelID, d int) (ready, transfer time.Duration, bytes int64) {
	m := st.m
	for _, r := range m.g.KernelReads(k) {
		h := st.home[r.Buffer]
		if h < 0 {
			continue // an input: free
		}
		wfin := st.bufferReady(int(r.Buffer))
		if h == d {
			ready = max(ready, wfin)
			continue
		}
		if at, ok := st.arrive[[2]int{int(r.Buffer), d}]; ok {
			ready = max(ready, at)
			continue
		}
		n := m.g.Buffer(r.Buffer).TransferBytes()
		c := m.transfer(n, h, d)
		ready = max(ready, wfin+c)
		transfer += c
		bytes += n
	}
	return ready, transfer, bytes
}

// bufferReady is when every placed writer of b has finished.
func (st *state) bufferReady(b int) time.Duration { return st.bufFin[b] }

// finish is k's earliest finish time on d.
func (st *state) finish(k dag.KernelID, d int) time.Duration {
	ready, _, _ := st.ready(k, d)
	lane := slices.Min(st.lanes[d])
	return max(ready, lane) + st.m.w[k]
}

// commit places k on d.
func (st *state) commit(k dag.KernelID, d int) {
	m := st.m
	ready, transfer, bytes := st.ready(k, d)
	for _, r := range m.g.KernelReads(k) {
		if h := st.home[r.Buffer]; h >= 0 && h != d {
			key := [2]int{int(r.Buffer), d}
			if _, ok := st.arrive[key]; !ok {
				st.arrive[key] = st.bufferReady(int(r.Buffer)) + m.transfer(m.g.Buffer(r.Buffer).TransferBytes(), h, d)
			}
		}
	}
	li := slices.Index(st.lanes[d], slices.Min(st.lanes[d]))
	fin := max(ready, st.lanes[d][li]) + m.w[k]
	st.lanes[d][li] = fin
	st.dev[k], st.fin[k] = d, fin
	for _, w := range m.g.KernelWrites(k) {
		h := st.home[w.Buffer]
		if h < 0 {
			st.home[w.Buffer], h = d, d
		}
		done := fin
		if h != d {
			// Written away from the buffer's home: the plan copies those
			// bytes home after the write.
			n := w.Length
			if b := m.g.Buffer(w.Buffer); b.Value {
				n = b.TransferBytes()
			}
			c := m.transfer(n, d, h)
			done += c
			transfer += c
			bytes += n
		}
		st.bufFin[w.Buffer] = max(st.bufFin[w.Buffer], done)
	}
	st.makespan = max(st.makespan, fin)
	st.transfer += transfer
	st.bytes += bytes
}

func (st *state) result(s Placement) PlacementResult {
	return PlacementResult{Strategy: s, Device: slices.Clone(st.dev), Makespan: st.makespan, Transfer: st.transfer, BytesMoved: st.bytes}
}
