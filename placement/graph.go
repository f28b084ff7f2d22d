package placement

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/topology"
)

// DefaultEstimate is the compute estimate of a kernel that gives none
// (dag.Estimate).
const DefaultEstimate = 10 * time.Microsecond

// Problem is what Place weighs: one validated graph on a set of candidate
// devices.
type Problem struct {
	// Graph is the graph whose kernels are placed; it must be validated
	// (Graph.Order not nil). Place reads it and does not change it.
	Graph *dag.Graph
	// Devices are the candidate devices; an Assignment names them by index.
	Devices []topology.DeviceID
	// Lanes is each device's number of streams, in Devices order (each at
	// least 1); nil means one each.
	Lanes []int
	// Topology gives the transfer costs; nil means transfers cost nothing.
	Topology *topology.Topology
	// Runs, when not nil, holds by kernel id the indices (into Devices,
	// increasing) of the devices that can run the kernel's code; a nil
	// entry means every device. A kernel never goes to a device outside
	// its entry.
	Runs [][]int
}

// Assignment is a placement (the device of each kernel) and what the cost
// model says of it.
type Assignment struct {
	Strategy Strategy // the strategy that made it
	Device   []int    // device index (into Problem.Devices) per kernel id
	// Makespan is the modeled finish time of the last kernel: compute
	// estimates on Lanes lanes per device, plus transfers between
	// devices at the topology's cost (TransferCost), each buffer copied
	// once per device that reads it.
	Makespan time.Duration
	// Transfer is the modeled time of all copies, summed; BytesMoved their
	// bytes (raw sizes and value size hints).
	Transfer   time.Duration
	BytesMoved int64 // bytes
}

// Place chooses a device for every kernel of p.Graph among p.Devices with
// strategy (HEFT, RoundRobin or LeastLoaded), by the cost model:
// estimated compute time (dag.Estimate, DefaultEstimate when absent) +
// bytes moved (raw sizes, dag.SizeHint for values) × the topology's
// transfer cost + load (the lanes' availability). The model keeps a
// buffer on the device of its first writer: a read elsewhere costs a copy
// of the buffer, a write elsewhere a copy of the bytes it wrote back home
// (a plan makes exactly those copies, by byte range). Pins (dag.OnDevice)
// are obeyed; a preference (dag.PreferDevice) wins, under HEFT, when it
// finishes within one estimate of the best. Errors: an unvalidated graph;
// no device, or a lane count below 1; a Runs entry that is empty or names
// a device out of range; a pin to a device not in p.Devices or outside
// the kernel's Runs entry; a strategy other than the three. Time:
// O(V·D) finish estimates for the greedy pass, plus HEFT's local search
// on graphs up to LocalSearchLimit kernels. Place is safe for concurrent
// use on one graph.
func Place(p Problem, strategy Strategy) (Assignment, error) {
	switch strategy {
	case HEFT, RoundRobin, LeastLoaded:
	default:
		return Assignment{}, fmt.Errorf("placement: strategy %s does not place graphs (heft, round-robin or least-loaded)", strategy)
	}
	m, err := newModel(p)
	if err != nil {
		return Assignment{}, err
	}
	return m.place(strategy), nil
}

// Optimal returns the placement with the least modeled makespan over
// every assignment of kernels to devices (kernels scheduled in the same
// upward-rank order as HEFT), by branch and bound; its Strategy is HEFT.
// It is exponential in the kernel count: meant for small graphs (up to
// about 8 kernels), to measure how far a heuristic is from the optimum.
// Errors as Place, and more than 12 kernels.
func Optimal(p Problem) (Assignment, error) {
	if p.Graph.NumKernels() > 12 {
		return Assignment{}, fmt.Errorf("placement: optimal placement of %d kernels: at most 12", p.Graph.NumKernels())
	}
	m, err := newModel(p)
	if err != nil {
		return Assignment{}, err
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
	return best.result(HEFT), nil
}

// place runs strategy on the model.
func (m *model) place(strategy Strategy) Assignment {
	devs := m.devs
	st := m.newState()
	load := make([]time.Duration, len(devs))
	for i, k := range m.prio {
		cands := m.candidates(k)
		best := cands[0]
		switch strategy {
		case RoundRobin:
			best = cands[i%len(cands)]
			if slices.Contains(cands, i%len(devs)) {
				best = i % len(devs)
			}
		case LeastLoaded:
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
	if strategy == HEFT && len(m.prio) <= LocalSearchLimit && len(devs) > 1 {
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
func (m *model) improve(start Assignment) Assignment {
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
		for _, s := range []Strategy{RoundRobin, LeastLoaded} {
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
	return best.result(HEFT)
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

func (st *state) result(s Strategy) Assignment {
	return Assignment{Strategy: s, Device: slices.Clone(st.dev), Makespan: st.makespan, Transfer: st.transfer, BytesMoved: st.bytes}
}

// newModel builds the cost model of p. Its errors are Place's, but for
// the strategy.
func newModel(p Problem) (*model, error) {
	lanes, err := checkProblem(p)
	if err != nil {
		return nil, err
	}
	g, devs, nk := p.Graph, p.Devices, p.Graph.NumKernels()
	m := &model{g: g, devs: devs, lanes: lanes, topo: p.Topology, w: make([]time.Duration, nk),
		pin: make([]int, nk), prefer: make([]int, nk), all: make([]int, len(devs)), cands: make([][]int, nk),
		cost: map[[3]int64]time.Duration{}, avg: map[int64]time.Duration{}}
	for d := range m.all {
		m.all[d] = d
	}
	for _, k := range g.Kernels() {
		if err := m.setKernel(k, p.Runs); err != nil {
			return nil, err
		}
	}
	m.setPrio(m.upwardRank())
	return m, nil
}

// checkProblem checks p's graph (validated), devices and lanes (at least
// one device, lanes per device each at least 1) and the length of its
// Runs, and returns its lanes, one each when p.Lanes is nil.
func checkProblem(p Problem) ([]int, error) {
	g, devs, lanes := p.Graph, p.Devices, p.Lanes
	if g.Order() == nil && g.NumKernels() > 0 {
		return nil, errors.New("placement: the graph is not validated")
	}
	if lanes == nil {
		lanes = slices.Repeat([]int{1}, len(devs))
	}
	if len(devs) == 0 || len(lanes) != len(devs) || slices.Min(lanes) < 1 {
		return nil, fmt.Errorf("placement: %d devices with lanes %v", len(devs), lanes)
	}
	if nk := g.NumKernels(); p.Runs != nil && len(p.Runs) != nk {
		return nil, fmt.Errorf("placement: runs for %d kernels, the graph has %d", len(p.Runs), nk)
	}
	return lanes, nil
}

// setKernel sets k's compute estimate (DefaultEstimate when it has none),
// candidate devices (runs[k.ID] when runs and it are not nil), pin and
// preference (device indices, -1: none; a preference for a device not
// among m's is none) in m. It returns an error, leaving k's entries part
// set, when its runs entry is empty or names a device out of range, or
// when its pin is not among m's devices or outside its runs entry.
func (m *model) setKernel(k dag.Kernel, runs [][]int) error {
	m.w[k.ID] = k.Estimate
	if m.w[k.ID] == 0 {
		m.w[k.ID] = DefaultEstimate
	}
	m.pin[k.ID], m.prefer[k.ID] = -1, -1
	if runs != nil && runs[k.ID] != nil {
		rs := runs[k.ID]
		if len(rs) == 0 || slices.ContainsFunc(rs, func(d int) bool { return d < 0 || d >= len(m.devs) }) {
			return fmt.Errorf("placement: kernel %q runs on devices %v of %d", k.Name, rs, len(m.devs))
		}
		m.cands[k.ID] = rs
	}
	if k.Device != nil {
		if m.pin[k.ID] = slices.Index(m.devs, *k.Device); m.pin[k.ID] < 0 {
			return fmt.Errorf("placement: kernel %q is pinned to %s, which is not among the devices %v", k.Name, *k.Device, m.devs)
		}
		if c := m.cands[k.ID]; c != nil && !slices.Contains(c, m.pin[k.ID]) {
			return fmt.Errorf("placement: kernel %q is pinned to %s, which cannot run it", k.Name, *k.Device)
		}
	}
	if k.Prefer != nil {
		m.prefer[k.ID] = slices.Index(m.devs, *k.Prefer)
	}
	return nil
}

// upwardRank returns, by kernel id, each kernel's upward rank in m: its
// compute estimate plus the largest, over its successors, of the average
// transfer of what the successor reads of the kernel's writes plus the
// successor's rank. It needs m.w set. Time: O(V + E + accesses · writers).
func (m *model) upwardRank() []time.Duration {
	// Found from the end of the order: when a kernel's rank is known, each
	// of its predecessors takes it into its best (all of a kernel's
	// successors come after it).
	g := m.g
	order := g.Order()
	nk := g.NumKernels()
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
	return rank
}

// setPrio sets m.prio to m's kernels by decreasing rank (by kernel id),
// ties in graph order. A higher rank always precedes its successors
// (w > 0), so prio is a topological order.
func (m *model) setPrio(rank []time.Duration) {
	order := m.g.Order()
	pos := make([]int, len(rank))
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
}
