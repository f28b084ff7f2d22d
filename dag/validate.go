package dag

import (
	"cmp"
	"container/heap"
	"errors"
	"fmt"
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
// "kernel NAME" and "buffer NAME".
type CycleError struct {
	Path []string
}

// Error lists the cycle.
func (e *CycleError) Error() string {
	return "dag: cycle: " + strings.Join(e.Path, " → ")
}

// UnwrittenError reports a read of bytes that no kernel writes, of a
// buffer that is not an Input.
type UnwrittenError struct {
	Kernel, Buffer string
	Offset, End    int64 // the first unwritten byte range of the read
}

// Error names the kernel, the buffer and the unwritten range.
func (e *UnwrittenError) Error() string {
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
// streams, unknown buffers, ranges outside their buffer and nil functions
// as plain errors), cycles (*CycleError, one per
// strongly connected component), reads of bytes no kernel writes of a
// non-input buffer (*UnwrittenError), and overlapping writes by unordered
// kernels (*WriteConflictError). Use errors.As to get the typed errors.
//
// On success it fixes the topological order returned by Order; on failure
// Order returns nil. It is O((V + E) log V) plus, for buffers with several
// writers, a reachability search per overlapping pair.
func (g *Graph) Validate() error {
	errs := append(slices.Clone(g.errs), g.duplicates()...)
	succ, order := g.kernelOrder()
	if len(order) < len(g.kernels) {
		errs = append(errs, g.cycles()...)
	} else {
		g.order = order
	}
	errs = append(errs, g.unwritten()...)
	if len(order) == len(g.kernels) {
		errs = append(errs, g.conflicts(succ)...)
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
// it reads (in id order, without duplicates). O(V + E).
func (g *Graph) Predecessors() [][]KernelID {
	writers := g.writersByBuffer()
	preds := make([][]KernelID, len(g.kernels))
	seen := make([]KernelID, len(g.kernels)) // seen[w] == k+1: w already a predecessor of k
	for _, k := range g.kernels {
		for _, r := range k.Reads {
			for _, w := range writers[r.Buffer] {
				if seen[w] != k.ID+1 {
					seen[w] = k.ID + 1
					preds[k.ID] = append(preds[k.ID], w)
				}
			}
		}
		slices.Sort(preds[k.ID])
	}
	return preds
}

func (g *Graph) writersByBuffer() [][]KernelID {
	w := make([][]KernelID, len(g.buffers))
	for _, k := range g.kernels {
		for _, b := range k.Writes {
			if n := len(w[b.Buffer]); n == 0 || w[b.Buffer][n-1] != k.ID {
				w[b.Buffer] = append(w[b.Buffer], k.ID)
			}
		}
	}
	return w
}

// kernelOrder runs Kahn's algorithm over the kernel graph (writer → reader
// through a buffer), taking the ready kernel with the lowest id first, and
// returns the successor lists and the order; the order is short when there
// is a cycle. O((V + E) log V).
func (g *Graph) kernelOrder() (succ [][]KernelID, order []KernelID) {
	preds := g.Predecessors()
	succ = make([][]KernelID, len(g.kernels))
	indeg := make([]int, len(g.kernels))
	for k, ps := range preds {
		indeg[k] = len(ps)
		for _, p := range ps {
			succ[p] = append(succ[p], KernelID(k))
		}
	}
	ready := &idHeap{}
	for k, d := range indeg {
		if d == 0 {
			*ready = append(*ready, KernelID(k)) // ascending: already a heap
		}
	}
	order = make([]KernelID, 0, len(g.kernels))
	for ready.Len() > 0 {
		k := heap.Pop(ready).(KernelID)
		order = append(order, k)
		for _, s := range succ[k] {
			if indeg[s]--; indeg[s] == 0 {
				heap.Push(ready, s)
			}
		}
	}
	return succ, order
}

// idHeap is a min-heap of kernel ids (container/heap).
type idHeap []KernelID

func (h idHeap) Len() int           { return len(h) }
func (h idHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h idHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *idHeap) Push(x any)        { *h = append(*h, x.(KernelID)) }
func (h *idHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
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
			if _, ok := g.NodeOf(n.ID()).(*Kernel); ok && (start < 0 || n.ID() < start) {
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
	switch v := g.NodeOf(node).(type) {
	case *Kernel:
		return "kernel " + v.Name
	case *Buffer:
		return "buffer " + v.Name
	}
	return fmt.Sprintf("node %d", node)
}

// unwritten returns an UnwrittenError for each read of a non-input buffer
// whose range is not covered by the union of that buffer's writes.
func (g *Graph) unwritten() []error {
	writes := make([][]buffers.Binding, len(g.buffers))
	for _, k := range g.kernels {
		for _, w := range k.Writes {
			writes[w.Buffer] = append(writes[w.Buffer], w)
		}
	}
	var errs []error
	for _, k := range g.kernels {
		for _, r := range k.Reads {
			b := g.buffers[r.Buffer]
			if b.Input {
				continue
			}
			if off, end, ok := firstGap(r, writes[r.Buffer]); ok {
				errs = append(errs, &UnwrittenError{Kernel: k.Name, Buffer: b.Name, Offset: off, End: end})
			}
		}
	}
	return errs
}

// firstGap returns the first byte range of r not covered by ws.
func firstGap(r buffers.Binding, ws []buffers.Binding) (off, end int64, ok bool) {
	ws = slices.Clone(ws)
	slices.SortFunc(ws, func(a, b buffers.Binding) int { return cmp.Compare(a.Offset, b.Offset) })
	pos := r.Offset
	for _, w := range ws {
		if pos >= r.End() {
			break
		}
		if w.Length == 0 || w.End() <= pos {
			continue
		}
		if w.Offset > pos {
			return pos, min(w.Offset, r.End()), true
		}
		pos = w.End()
	}
	if pos < r.End() {
		return pos, r.End(), true
	}
	return 0, 0, false
}

// conflicts returns a WriteConflictError for every pair of kernels writing
// overlapping bytes of one buffer with no path between them.
func (g *Graph) conflicts(succ [][]KernelID) []error {
	type write struct {
		k  KernelID
		bd buffers.Binding
	}
	byBuf := make([][]write, len(g.buffers))
	for _, k := range g.kernels {
		for _, w := range k.Writes {
			byBuf[w.Buffer] = append(byBuf[w.Buffer], write{k.ID, w})
		}
	}
	var errs []error
	for b, ws := range byBuf {
		for i := 0; i < len(ws); i++ {
			for j := i + 1; j < len(ws); j++ {
				x, y := ws[i], ws[j]
				if x.k == y.k || !x.bd.Overlaps(y.bd) || reaches(succ, x.k, y.k) || reaches(succ, y.k, x.k) {
					continue
				}
				errs = append(errs, &WriteConflictError{
					Buffer:  g.buffers[b].Name,
					Kernels: [2]string{g.kernels[x.k].Name, g.kernels[y.k].Name},
					Offset:  max(x.bd.Offset, y.bd.Offset),
					End:     min(x.bd.End(), y.bd.End()),
				})
			}
		}
	}
	return errs
}

// reaches reports whether there is a path from a to b in the kernel graph.
func reaches(succ [][]KernelID, a, b KernelID) bool {
	seen := map[KernelID]bool{a: true}
	stack := []KernelID{a}
	for len(stack) > 0 {
		u := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, v := range succ[u] {
			if v == b {
				return true
			}
			if !seen[v] {
				seen[v] = true
				stack = append(stack, v)
			}
		}
	}
	return false
}
