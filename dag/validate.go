package dag

import (
	"cmp"
	"errors"
	"fmt"
	"hash/maphash"
	"math"
	"slices"
	"strings"

	"gonum.org/v1/gonum/graph/topo"

	"github.com/streamdag/streamdag/buffers"
)

// DuplicateError reports two kernels or buffers with one name.
type DuplicateError struct {
	Name  string
	Kinds [2]string // "kernel" or "buffer": the first holder, then the newcomer
}

// Error names the duplicate and both holders.
func (e *DuplicateError) Error() string {
	return fmt.Sprintf("dag: duplicate name %q (a %s and a %s)", e.Name, e.Kinds[0], e.Kinds[1])
}

// CycleError reports a cycle. Path names the kernels and buffers along
// one cycle of the component, starting and ending at the same kernel, as
// "kernel NAME" and "buffer NAME". Kernels are ordered through whole
// buffers, whatever byte ranges they read and write: a kernel that reads
// and writes one buffer, even disjoint ranges of it, is a cycle of its
// own (Path "kernel K", "buffer B", "kernel K").
type CycleError struct {
	Path []string
}

// Error lists the cycle and states the rule that makes it one, e.g.
// "dag: cycle: kernel k → buffer x → kernel k (kernels are ordered
// through whole buffers, whatever byte ranges they read and write)".
func (e *CycleError) Error() string {
	return "dag: cycle: " + strings.Join(e.Path, " → ") +
		" (kernels are ordered through whole buffers, whatever byte ranges they read and write)"
}

// NoWriterError reports a read of bytes that no kernel writes, of a
// buffer that is not an Input.
type NoWriterError struct {
	Kernel, Buffer string
	Offset, End    int64 // the first unwritten byte range of the read
}

// Error names the kernel, the buffer and the unwritten range.
func (e *NoWriterError) Error() string {
	return fmt.Sprintf("dag: kernel %q reads bytes [%d:%d) of buffer %q, which no kernel writes and which is not an input",
		e.Kernel, e.Offset, e.End, e.Buffer)
}

// WriteConflictError reports two kernels that write overlapping bytes of
// one buffer with no path between them, so their order is undefined.
type WriteConflictError struct {
	Buffer      string
	Kernels     [2]string
	Offset, End int64 // the overlap
}

// Error names both kernels, the buffer and the overlap.
func (e *WriteConflictError) Error() string {
	return fmt.Sprintf("dag: kernels %q and %q both write bytes [%d:%d) of buffer %q and neither is ordered before the other",
		e.Kernels[0], e.Kernels[1], e.Offset, e.End, e.Buffer)
}

// maxReported bounds the errors Validate joins.
const maxReported = 10

// Validate checks the graph and returns nil, or every problem found joined
// with errors.Join (at most 10, then a count of the rest): builder mistakes
// (duplicate names as *DuplicateError; empty names, negative sizes and
// streams, unknown buffers, ranges outside their buffer, kernels with no
// code (a nil function and no device variant) and a device variant's
// mistakes (see OpenCL) as plain errors that name the kernel), cycles (*CycleError, one per
// strongly connected component), reads of bytes no kernel writes of a
// non-input buffer (*NoWriterError), and overlapping writes by unordered
// kernels (*WriteConflictError). Use errors.As to get the typed errors.
//
// On success it fixes the topological order returned by Order; on failure
// Order returns nil. It is O(V + E) when every kernel reads only buffers
// whose writers were added before it (the usual way of building), else
// O((V + E) log V); plus, for buffers with several writers, a
// reachability search per overlapping pair, and O(W log W) to sort the
// W writes of such buffers once. It works in a few flat arrays (no slice
// per kernel or buffer and no map): about a dozen allocations whatever
// the graph's size.
func (g *Graph) Validate() error {
	errs := append(slices.Clone(g.errs), g.noCode()...)
	errs = append(errs, g.duplicates()...)
	x := g.newIndex()
	unwritten, forward := x.checkReads()
	order := x.kernelOrder(forward)
	if len(order) < len(g.krecs) {
		errs = append(errs, g.cycles()...)
	} else {
		g.order = order
	}
	errs = append(errs, unwritten...)
	if len(order) == len(g.krecs) {
		errs = append(errs, x.conflicts()...)
	}
	if len(errs) > maxReported {
		n := len(errs) - maxReported
		errs = append(errs[:maxReported], fmt.Errorf("dag: and %d more problems", n))
	}
	if err := errors.Join(errs...); err != nil {
		g.order = nil
		return err
	}
	return nil
}

// Order returns the kernels in a topological order, fixed by the last
// successful Validate: among the kernels whose predecessors have all come
// before, the one with the lowest id comes next. It is nil if the graph
// changed since, was never validated, or failed its last Validate. The slice
// is the graph's own: do not modify it.
func (g *Graph) Order() []KernelID { return g.order }

// Predecessors returns, for every kernel, the kernels that write a buffer
// it reads (in id order, without duplicates; nil for none). The lists are
// windows of one array: the result takes three allocations whatever the
// graph's size. O(V + E) plus the sorting of each list that is not already
// in order.
func (g *Graph) Predecessors() [][]KernelID {
	x := g.newIndex()
	x.buildPreds()
	flat := make([]KernelID, len(x.pAt))
	for i, p := range x.pAt {
		flat[i] = KernelID(p)
	}
	preds := make([][]KernelID, len(g.krecs))
	for k := range preds {
		if lo, hi := x.pOff[k], x.pOff[k+1]; lo < hi {
			preds[k] = flat[lo:hi:hi]
		}
	}
	return preds
}

// duplicates returns a DuplicateError for every kernel or buffer whose
// non-empty name an earlier-added one already holds, in the order they
// were added. O(V): the names are hashed in one pass and partitioned by
// their hash's high bits, and each partition (a few thousand names) is
// checked with a small open-addressing table of node ids that stays in
// cache, where one table (or map) for every name would take a cache miss
// per name on a large graph.
func (g *Graph) duplicates() []error {
	const partLen = 4096 // names per partition, on average
	n := len(g.nodes)
	bits := 0
	for n>>bits > partLen {
		bits++
	}
	shift := uint(64 - bits) // partition = hash >> shift (0 when bits == 0)
	// Hash every name; 0 marks an empty name (a real hash is odd).
	seed := maphash.MakeSeed()
	hashes := make([]uint64, n)
	counts := make([]int32, 1<<bits+1)
	for id, ref := range g.nodes {
		if _, name := g.nodeKindName(ref); name != "" {
			h := maphash.String(seed, name) | 1
			hashes[id] = h
			counts[h>>shift+1]++
		}
	}
	for p := range 1 << bits {
		counts[p+1] += counts[p]
	}
	// Node ids by partition, ascending within each.
	ids := make([]int32, counts[1<<bits])
	fill := slices.Clone(counts[:1<<bits])
	for id, h := range hashes {
		if h != 0 {
			p := h >> shift
			ids[fill[p]] = int32(id)
			fill[p]++
		}
	}
	type dup struct{ id, prev int32 }
	var dups []dup
	var table []int32 // node id+1 per slot; 0: empty
	for p := range 1 << bits {
		part := ids[counts[p]:counts[p+1]]
		size := 16
		for size < 2*len(part) {
			size *= 2
		}
		if cap(table) < size {
			table = make([]int32, size)
		}
		table = table[:size]
		clear(table)
		mask := uint64(size - 1)
		for _, id := range part {
			h := hashes[id]
			for i := (h >> 1) & mask; ; i = (i + 1) & mask { // bit 0 is always set
				prev := table[i] - 1
				if prev < 0 {
					table[i] = id + 1
					break
				}
				if hashes[prev] != h {
					continue
				}
				_, pname := g.nodeKindName(g.nodes[prev])
				if _, name := g.nodeKindName(g.nodes[id]); pname == name {
					dups = append(dups, dup{id, prev})
					break
				}
			}
		}
	}
	slices.SortFunc(dups, func(a, b dup) int { return cmp.Compare(a.id, b.id) })
	var errs []error
	for _, d := range dups {
		kind, name := g.nodeKindName(g.nodes[d.id])
		pk, _ := g.nodeKindName(g.nodes[d.prev])
		errs = append(errs, &DuplicateError{Name: name, Kinds: [2]string{pk, kind}})
	}
	return errs
}

// noCode returns an error for every kernel with no code at all (a nil
// function and no device variant), in id order.
func (g *Graph) noCode() []error {
	var errs []error
	for k := range g.krecs {
		if g.krecs[k].fn == nil && g.KernelVariants(KernelID(k)) == nil {
			errs = append(errs, fmt.Errorf("dag: kernel %q has no code: a nil function and no device variant", g.KernelName(KernelID(k))))
		}
	}
	return errs
}

// index is the kernel-level structure Validate and Predecessors work on,
// in flat arrays of compressed rows (row i of off/at is at[off[i]:off[i+1]])
// and int32 kernel ids and offsets, so a check allocates a few arrays
// whatever the graph's size. It assumes fewer than 2^31 kernels, buffers
// and declared writes, which would take well over 50 GB to declare.
type index struct {
	g     *Graph
	reads int     // declared reads of all kernels
	wOff  []int32 // per buffer, into wAt
	wAt   []write // writes of each buffer, by kernel id, then declaration order
	sure  []span  // per buffer, a range every read inside of which is written (or an input); set by checkReads
	pOff  []int32 // per kernel, into pAt; nil until buildPreds
	pAt   []int32 // predecessors of each kernel, ascending
	sOff  []int32 // per kernel, into sAt; nil until buildSuccs
	sAt   []int32 // successors of each kernel, ascending
	pos   []int32 // position of each kernel in the order; nil: the identity
	mark  []int32 // scratch per kernel for ordered
	stamp int32   // current mark of ordered
	covLo []int32 // per buffer, into cov; nil until buildCoverage
	covHi []int32
	cov   []span  // union of each buffer's non-empty writes
	stack []int32 // scratch for ordered
}

// write is one declared write: the kernel and its binding.
type write struct {
	k  int32
	bd buffers.Binding
}

// span is a byte range [off, end).
type span struct{ off, end int64 }

// newIndex indexes the writes of g by buffer. O(V + E).
func (g *Graph) newIndex() *index {
	x := &index{g: g, wOff: make([]int32, len(g.brecs)+1)}
	nw := 0
	for k := range g.krecs {
		r := &g.krecs[k]
		x.reads += int(r.bind.nr)
		nw += int(r.bind.nw)
		for _, w := range g.writes(r) {
			x.wOff[w.Buffer+1]++
		}
	}
	for b := range g.brecs {
		x.wOff[b+1] += x.wOff[b]
	}
	// Fill each row from its start, leaving wOff[b] at the row's end,
	// then shift the offsets back into place.
	x.wAt = make([]write, nw)
	for k := range g.krecs {
		for _, w := range g.writes(&g.krecs[k]) {
			x.wAt[x.wOff[w.Buffer]] = write{int32(k), w}
			x.wOff[w.Buffer]++
		}
	}
	copy(x.wOff[1:], x.wOff[:len(g.brecs)])
	x.wOff[0] = 0
	return x
}

// writes returns the writes of buffer b.
func (x *index) writes(b BufferID) []write { return x.wAt[x.wOff[b]:x.wOff[b+1]] }

// buildPreds fills the predecessor rows: for each kernel, the distinct
// writers of the buffers it reads, ascending.
func (x *index) buildPreds() {
	if x.pOff != nil {
		return
	}
	n := len(x.g.krecs)
	x.pOff = make([]int32, n+1)
	at := make([]int32, 0, x.reads)
	seen := make([]int32, n) // seen[w] == k+1: w is already a predecessor of k
	for k := range x.g.krecs {
		start := len(at)
		for _, r := range x.g.reads(&x.g.krecs[k]) {
			for _, w := range x.writes(r.Buffer) {
				if seen[w.k] != int32(k)+1 {
					seen[w.k] = int32(k) + 1
					at = append(at, w.k)
				}
			}
		}
		if row := at[start:]; len(row) > 1 && !slices.IsSorted(row) {
			slices.Sort(row)
		}
		x.pOff[k+1] = int32(len(at))
	}
	x.pAt = at
}

// buildSuccs fills the successor rows from the predecessor rows; each row
// is ascending because kernels are visited in id order.
func (x *index) buildSuccs() {
	if x.sOff != nil {
		return
	}
	x.buildPreds()
	n := len(x.g.krecs)
	x.sOff = make([]int32, n+1)
	for _, p := range x.pAt {
		x.sOff[p+1]++
	}
	for k := range n {
		x.sOff[k+1] += x.sOff[k]
	}
	x.sAt = make([]int32, len(x.pAt))
	for k := range n {
		for _, p := range x.pAt[x.pOff[k]:x.pOff[k+1]] {
			x.sAt[x.sOff[p]] = int32(k)
			x.sOff[p]++
		}
	}
	copy(x.sOff[1:], x.sOff[:n])
	x.sOff[0] = 0
}

// succs returns the successors of kernel k.
func (x *index) succs(k int32) []int32 { return x.sAt[x.sOff[k]:x.sOff[k+1]] }

// kernelOrder returns the topological order of the kernel graph (writer
// before reader through a buffer) that takes the ready kernel with the
// lowest id first; it is short when there is a cycle. forward says that
// every kernel reads only buffers whose writers all have lower ids (see
// checkReads): then that order is the identity (the lowest kernel not yet
// ordered has all its predecessors before it, so it is ready and the
// lowest ready) and there is no cycle, O(V). Otherwise it runs Kahn's
// algorithm with a binary heap, O((V + E) log V).
func (x *index) kernelOrder(forward bool) []KernelID {
	n := len(x.g.krecs)
	order := make([]KernelID, 0, n)
	if forward {
		for k := range n {
			order = append(order, KernelID(k))
		}
		return order
	}
	x.buildSuccs()
	indeg := make([]int32, n)
	var ready minHeap
	for k := range n {
		if indeg[k] = x.pOff[k+1] - x.pOff[k]; indeg[k] == 0 {
			ready = append(ready, int32(k)) // ascending: already a heap
		}
	}
	x.pos = make([]int32, n)
	for len(ready) > 0 {
		k := ready.pop()
		x.pos[k] = int32(len(order))
		order = append(order, KernelID(k))
		for _, s := range x.succs(k) {
			if indeg[s]--; indeg[s] == 0 {
				ready.push(s)
			}
		}
	}
	return order
}

// minHeap is a binary min-heap of kernel ids.
type minHeap []int32

func (h *minHeap) push(v int32) {
	s := append(*h, v)
	i := len(s) - 1
	for i > 0 {
		p := (i - 1) / 2
		if s[p] <= v {
			break
		}
		s[i] = s[p]
		i = p
	}
	s[i] = v
	*h = s
}

func (h *minHeap) pop() int32 {
	s := *h
	top, n := s[0], len(s)-1
	v := s[n]
	s = s[:n]
	i := 0
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if c+1 < n && s[c+1] < s[c] {
			c++
		}
		if v <= s[c] {
			break
		}
		s[i] = s[c]
		i = c
	}
	if n > 0 {
		s[i] = v
	}
	*h = s
	return top
}

// cycles returns one CycleError per non-trivial strongly connected
// component of the kernel–buffer graph (Tarjan, via gonum).
func (g *Graph) cycles() []error {
	var errs []error
	for _, comp := range topo.TarjanSCC(g.directed()) {
		if len(comp) < 2 {
			continue
		}
		// Start at the component's lowest kernel (kernels and buffers
		// alternate on every cycle, so there is one); node ids grow with
		// kernel ids.
		in := make(map[int64]bool, len(comp))
		start := int64(-1)
		for _, n := range comp {
			in[n.ID()] = true
			if g.nodes[n.ID()] >= 0 && (start < 0 || n.ID() < start) {
				start = n.ID()
			}
		}
		errs = append(errs, &CycleError{Path: g.cyclePath(start, in)})
	}
	return errs
}

// cyclePath finds a cycle through start inside one strongly connected
// component by breadth-first search back to start, and names its nodes.
func (g *Graph) cyclePath(start int64, in map[int64]bool) []string {
	prev := map[int64]int64{}
	queue := []int64{start}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		it := g.directed().From(u)
		var next []int64
		for it.Next() {
			next = append(next, it.Node().ID())
		}
		slices.Sort(next)
		for _, v := range next {
			if !in[v] {
				continue
			}
			if v == start {
				path := []int64{start}
				for x := u; x != start; x = prev[x] {
					path = append(path, x)
				}
				path = append(path, start)
				slices.Reverse(path[1 : len(path)-1]) // the walk back is last node first
				names := make([]string, len(path))
				for i, id := range path {
					names[i] = g.describe(id)
				}
				return names
			}
			if _, seen := prev[v]; !seen {
				prev[v] = u
				queue = append(queue, v)
			}
		}
	}
	return []string{g.describe(start)} // unreachable for a real component
}

func (g *Graph) describe(node int64) string {
	if node < 0 || node >= int64(len(g.nodes)) {
		return fmt.Sprintf("node %d", node)
	}
	kind, name := g.nodeKindName(g.nodes[node])
	return kind + " " + name
}

// checkReads returns an NoWriterError for each read of a non-input
// buffer whose range is not covered by the union of that buffer's writes,
// in kernel id order, then read order; and whether the graph is forward:
// every read buffer's writers have lower ids than its reader. O(1) per
// read of a buffer with at most one write, O(log W) otherwise.
func (x *index) checkReads() (errs []error, forward bool) {
	// An input needs no writer; a buffer with one write has that write's
	// range written. Other reads take the full check.
	x.sure = make([]span, len(x.g.brecs))
	for b := range x.g.brecs {
		if x.g.brecs[b].flags&bufInput != 0 {
			x.sure[b] = span{math.MinInt64, math.MaxInt64}
		} else if lo, hi := x.wOff[b], x.wOff[b+1]; hi-lo == 1 && x.wAt[lo].bd.Length > 0 {
			x.sure[b] = span{x.wAt[lo].bd.Offset, x.wAt[lo].bd.End()}
		}
	}
	forward = true
	for k := range x.g.krecs {
		for _, r := range x.g.reads(&x.g.krecs[k]) {
			// A buffer's writes are by kernel id: the last is its
			// highest writer.
			if end := x.wOff[r.Buffer+1]; end > x.wOff[r.Buffer] && x.wAt[end-1].k >= int32(k) {
				forward = false
			}
			if s := x.sure[r.Buffer]; r.Offset >= s.off && r.End() <= s.end {
				continue
			}
			if err := x.unwritten(KernelID(k), r); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs, forward
}

// unwritten returns an NoWriterError when read r of kernel k is of a
// non-input buffer and not covered by the union of its writes, else nil.
func (x *index) unwritten(k KernelID, r buffers.Binding) error {
	b := &x.g.brecs[r.Buffer]
	if b.flags&bufInput != 0 {
		return nil
	}
	var off, end int64
	var gap bool
	switch ws := x.writes(r.Buffer); len(ws) {
	case 0:
		off, end, gap = firstGap(r, nil)
	case 1:
		var one [1]span
		cov := one[:0]
		if w := ws[0].bd; w.Length > 0 {
			cov = append(cov, span{w.Offset, w.End()})
		}
		off, end, gap = firstGap(r, cov)
	default:
		x.buildCoverage()
		off, end, gap = firstGap(r, x.cov[x.covLo[r.Buffer]:x.covHi[r.Buffer]])
	}
	if !gap {
		return nil
	}
	return &NoWriterError{Kernel: x.g.KernelName(k), Buffer: x.g.bufferName(int(r.Buffer)), Offset: off, End: end}
}

// buildCoverage fills, for every buffer, the union of its non-empty writes
// as ascending, disjoint, non-adjacent spans.
func (x *index) buildCoverage() {
	if x.covLo != nil {
		return
	}
	nb := len(x.g.brecs)
	x.covLo, x.covHi = make([]int32, nb), make([]int32, nb)
	x.cov = make([]span, 0, len(x.wAt))
	for b := range nb {
		start := len(x.cov)
		for _, w := range x.writes(BufferID(b)) {
			if w.bd.Length > 0 {
				x.cov = append(x.cov, span{w.bd.Offset, w.bd.End()})
			}
		}
		row := x.cov[start:]
		if len(row) > 1 {
			slices.SortFunc(row, func(a, b span) int { return cmp.Compare(a.off, b.off) })
			fused := row[:1]
			for _, s := range row[1:] {
				if last := &fused[len(fused)-1]; s.off <= last.end {
					last.end = max(last.end, s.end)
				} else {
					fused = append(fused, s)
				}
			}
			x.cov = x.cov[:start+len(fused)]
		}
		x.covLo[b], x.covHi[b] = int32(start), int32(len(x.cov))
	}
}

// firstGap returns the first byte range of r not covered by cov, whose
// spans are ascending, disjoint and non-adjacent. O(log len(cov)).
func firstGap(r buffers.Binding, cov []span) (off, end int64, ok bool) {
	pos, rend := r.Offset, r.End()
	if pos >= rend {
		return 0, 0, false
	}
	// The first span that ends after pos.
	i, _ := slices.BinarySearchFunc(cov, pos, func(s span, p int64) int {
		if s.end <= p {
			return -1
		}
		return 1
	})
	if i < len(cov) && cov[i].off <= pos {
		pos = cov[i].end // the next span starts after a gap
		i++
	}
	if pos >= rend {
		return 0, 0, false
	}
	if i < len(cov) {
		rend = min(rend, cov[i].off)
	}
	return pos, rend, true
}

// conflicts returns a WriteConflictError for every pair of kernels writing
// overlapping bytes of one buffer with no path between them, by buffer,
// then by the pair's writes in kernel id order. It needs the order from
// kernelOrder of an acyclic graph.
func (x *index) conflicts() []error {
	var errs []error
	for b := range x.g.brecs {
		ws := x.writes(BufferID(b))
		for i := 0; i < len(ws); i++ {
			for j := i + 1; j < len(ws); j++ {
				u, v := ws[i], ws[j]
				if u.k == v.k || !u.bd.Overlaps(v.bd) || x.ordered(u.k, v.k) {
					continue
				}
				errs = append(errs, &WriteConflictError{
					Buffer:  x.g.bufferName(b),
					Kernels: [2]string{x.g.KernelName(KernelID(u.k)), x.g.KernelName(KernelID(v.k))},
					Offset:  max(u.bd.Offset, v.bd.Offset),
					End:     min(u.bd.End(), v.bd.End()),
				})
			}
		}
	}
	return errs
}

// position returns the place of kernel k in the topological order.
func (x *index) position(k int32) int32 {
	if x.pos == nil {
		return k
	}
	return x.pos[k]
}

// ordered reports whether there is a path between kernels a and b in
// either direction. Only the kernel earlier in the topological order can
// reach the other, and only through kernels placed before the other, so
// one depth-first search, pruned by position, decides.
func (x *index) ordered(a, b int32) bool {
	if x.position(a) > x.position(b) {
		a, b = b, a
	}
	x.buildSuccs()
	if x.mark == nil || x.stamp == math.MaxInt32 {
		x.mark, x.stamp = make([]int32, len(x.g.krecs)), 0
	}
	x.stamp++
	limit := x.position(b)
	x.mark[a] = x.stamp
	stack := append(x.stack[:0], a)
	found := false
	for len(stack) > 0 && !found {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, v := range x.succs(u) {
			if v == b {
				found = true
				break
			}
			if x.mark[v] != x.stamp && x.position(v) < limit {
				x.mark[v] = x.stamp
				stack = append(stack, v)
			}
		}
	}
	x.stack = stack[:0]
	return found
}
