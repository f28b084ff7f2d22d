package dag

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/encoding"
	"gonum.org/v1/gonum/graph/simple"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/topology"
)

// KernelID identifies a kernel within its Graph; ids are dense from 0 in
// the order kernels were added.
type KernelID int64

// BufferID identifies a buffer within its Graph; ids are dense from 0 in
// the order buffers were added.
type BufferID = buffers.ID

// KernelFunc is a kernel's host code. It runs once per launch on the
// stream the executor chose. It returns nil on success; an error (or a
// panic, which the executor recovers) fails the launch, and every byte of
// its write set then reads as failed. A kernel must honour ctx only for
// long loops; the executor does not interrupt it.
type KernelFunc func(ctx context.Context, l Launch) error

// Launch is what a running kernel sees of its launch. It is valid only
// during the KernelFunc call and only on that goroutine.
type Launch interface {
	// Kernel returns the kernel's name.
	Kernel() string
	// Device and Stream say where the launch runs.
	Device() topology.DeviceID
	Stream() int
	// In returns the buffer of the kernel's i-th declared read, in
	// declaration order. It panics when i is out of range (programmer
	// error).
	In(i int) *buffers.Buffer
	// NumIn and NumOut are the numbers of declared reads and writes.
	NumIn() int
	NumOut() int
	// Out returns the buffer of the kernel's i-th declared write, in
	// declaration order. It panics when i is out of range.
	Out(i int) *buffers.Buffer
	// Allocator is the memory allocator of the launch's device, for Arrow
	// data the kernel builds.
	Allocator() memory.Allocator
	// Missing returns nil when read i holds bytes written by work that
	// succeeded, else the error graph's read error naming the failure and
	// its chain. Only an optional read (ReadsOptional) can be missing when
	// the kernel runs: a tainted required read skips the launch.
	Missing(i int) error
}

// Kernel is a declared unit of work. Kernels live in their graph's arena
// (see Graph): a *Kernel stays valid, at the same address, for the life of
// the graph.
type Kernel struct {
	ID   KernelID
	Name string
	Fn   KernelFunc
	// Reads and Writes are the declared reads and writes, in declaration
	// order; nil when there are none. They are windows of the graph's
	// binding arena with capacity equal to length, so an append copies
	// rather than overwriting another kernel's bindings.
	Reads  []buffers.Binding
	Writes []buffers.Binding
	// Optional marks the reads (by index into Reads) declared with
	// ReadsOptional: a failure upstream of them does not skip the launch;
	// the kernel asks Launch.Missing and works with what it has. nil when
	// every read is required.
	Optional []bool
	// Stream pins the kernel to a stream index of its device (modulo the
	// device's stream count); -1 (the default) lets the executor choose.
	Stream int
	// Placement hints (see OnDevice, PreferDevice, Estimate).
	Device   *topology.DeviceID // pinned device, or nil
	Prefer   *topology.DeviceID // preferred device, or nil
	Estimate time.Duration      // estimated compute time of one launch; 0: unknown
}

// Buffer is a declared region of memory. A value buffer (SizeBytes 0,
// Value true) holds one Go value, such as an Arrow record batch, instead
// of raw bytes; for ordering and taint it counts as a single byte. Buffers
// live in their graph's arena, like kernels.
type Buffer struct {
	ID        BufferID
	Name      string
	SizeBytes int64
	Value     bool // holds a Go value rather than SizeBytes raw bytes
	Input     bool // supplied from outside the graph: may be read without a writer
	// SizeHint is the expected size in bytes of a value buffer's value
	// (for placement's transfer costs); 0 when unknown. See SizeHint.
	SizeHint int64
}

// extent is the number of bytes bindings of b can address: SizeBytes, or
// 1 for a value buffer.
func (b *Buffer) extent() int64 {
	if b.Value {
		return 1
	}
	return b.SizeBytes
}

// Whole returns the binding of every byte of b ([0, SizeBytes), or [0, 1)
// for a value buffer).
func (b *Buffer) Whole() buffers.Binding {
	return buffers.Binding{Buffer: b.ID, Length: b.extent()}
}

// Graph is a pipeline: kernels and buffers, with gonum's
// simple.DirectedGraph underneath (see Directed). The zero value is not
// usable; call New.
//
// The graph's own store is compact: kernels, buffers and the bindings of
// every declared read and write live in arenas of chunks owned by the
// graph, so adding a kernel or a buffer allocates nothing of its own
// (amortised: one chunk per up to 1024 kernels or buffers, or per 4096
// bindings, or none after Grow); a *Kernel or *Buffer kept after the graph
// is dropped keeps its chunk alive. Gonum node ids are numbered in the
// order kernels and buffers were added. The gonum graph is built from the
// store on first use (Directed, MarshalDOT, a cycle report) and brought up
// to date incrementally after later additions, so building a large
// pipeline costs no map insertion per edge or per name (duplicate names
// are found by Validate). A Graph is not safe for concurrent mutation;
// concurrent calls of Directed and the read-only accessors are safe.
type Graph struct {
	mu      sync.Mutex            // guards dg, synced and bufNode
	dg      *simple.DirectedGraph // nil until first needed
	synced  int                   // nodes[:synced] are in dg with their edges
	bufNode []int64               // gonum node id of each buffer in dg
	kernels []*Kernel
	buffers []*Buffer
	nodes   []nodeRef  // gonum node id → kernel or buffer
	errs    []error    // builder mistakes, reported by Validate
	order   []KernelID // topological order, set by a successful Validate

	// Arenas: the current chunk of each; a full chunk is left to the
	// items and slices that point into it and a new one is started.
	kernelChunk  []Kernel
	bufferChunk  []Buffer
	bindingChunk []buffers.Binding
}

// nodeRef is what a gonum node id stands for: a kernel id (>= 0) or the
// bitwise complement of a buffer id (< 0).
type nodeRef int64

// Arena chunk sizes, in items: a graph's first kernel or buffer chunk
// holds chunkMin items and each later one as many as the graph already
// has, up to chunkMax; binding chunks double from chunkMin up to
// bindingChunkMax. So a small graph stays small and a large one allocates
// once per chunkMax items.
const (
	chunkMin        = 8
	chunkMax        = 1024
	bindingChunkMax = 4096
)

// chunkLen is the length of the next arena chunk for a graph holding n
// items, at least need.
func chunkLen(n, need, most int) int {
	return max(min(max(n, chunkMin), most), need)
}

// push appends v to s, doubling the capacity when s is full: append grows
// a large slice by only a quarter, which copies each element about four
// times over while a graph grows.
func push[S ~[]E, E any](s S, v E) S {
	if len(s) == cap(s) {
		s = slices.Grow(s, max(len(s), chunkMin))
	}
	return append(s, v)
}

// New returns an empty graph.
func New() *Graph {
	return &Graph{}
}

// Grow makes room for kernels more kernels and buffers more buffers, so
// that adding them costs no reallocation of the graph's own arrays: like
// slices.Grow, it is a hint for building a graph whose size is known
// ahead, and building without it gives the same graph. The declared reads
// and writes still take arena chunks as they come. Grow allocates
// O(kernels + buffers) bytes at once; it panics if kernels or buffers is
// negative.
func (g *Graph) Grow(kernels, buffers int) {
	if kernels < 0 || buffers < 0 {
		panic(fmt.Sprintf("dag: Graph.Grow(%d, %d): negative count", kernels, buffers))
	}
	g.kernels = slices.Grow(g.kernels, kernels)
	g.buffers = slices.Grow(g.buffers, buffers)
	g.nodes = slices.Grow(g.nodes, kernels+buffers)
	if free := cap(g.kernelChunk) - len(g.kernelChunk); free < kernels {
		g.kernelChunk = make([]Kernel, 0, kernels)
	}
	if free := cap(g.bufferChunk) - len(g.bufferChunk); free < buffers {
		g.bufferChunk = make([]Buffer, 0, buffers)
	}
}

// newKernel returns a zeroed kernel from the arena.
func (g *Graph) newKernel() *Kernel {
	if len(g.kernelChunk) == cap(g.kernelChunk) {
		g.kernelChunk = make([]Kernel, 0, chunkLen(len(g.kernels), 1, chunkMax))
	}
	g.kernelChunk = g.kernelChunk[:len(g.kernelChunk)+1]
	return &g.kernelChunk[len(g.kernelChunk)-1]
}

// newBuffer returns a zeroed buffer from the arena.
func (g *Graph) newBuffer() *Buffer {
	if len(g.bufferChunk) == cap(g.bufferChunk) {
		g.bufferChunk = make([]Buffer, 0, chunkLen(len(g.buffers), 1, chunkMax))
	}
	g.bufferChunk = g.bufferChunk[:len(g.bufferChunk)+1]
	return &g.bufferChunk[len(g.bufferChunk)-1]
}

// newBindings returns n contiguous bindings from the arena, with length and
// capacity n, so that an append by a user copies instead of overwriting a
// neighbour.
func (g *Graph) newBindings(n int) []buffers.Binding {
	if cap(g.bindingChunk)-len(g.bindingChunk) < n {
		g.bindingChunk = make([]buffers.Binding, 0, chunkLen(len(g.bindingChunk)*2, n, bindingChunkMax))
	}
	i := len(g.bindingChunk)
	g.bindingChunk = g.bindingChunk[:i+n]
	return g.bindingChunk[i : i+n : i+n]
}

// directed returns the gonum graph with every node and edge added so far.
func (g *Graph) directed() *simple.DirectedGraph {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.dg == nil {
		g.dg = simple.NewDirectedGraph()
	}
	for ; g.synced < len(g.nodes); g.synced++ {
		id := int64(g.synced)
		n := dotNode{g, id}
		g.dg.AddNode(n)
		ref := g.nodes[id]
		if ref < 0 {
			g.bufNode = append(g.bufNode, id)
			continue
		}
		k := g.kernels[ref]
		// A kernel's buffers were added before it: their nodes are in dg.
		for _, r := range k.Reads {
			g.dg.SetEdge(simple.Edge{F: dotNode{g, g.bufNode[r.Buffer]}, T: n})
		}
		for _, w := range k.Writes {
			g.dg.SetEdge(simple.Edge{F: n, T: dotNode{g, g.bufNode[w.Buffer]}})
		}
	}
	return g.dg
}

// BufferOption configures a buffer.
type BufferOption func(*Buffer)

// Input marks a buffer as supplied from outside the graph: it may be read
// without any kernel writing it.
func Input() BufferOption { return markInput }

func markInput(b *Buffer) { b.Input = true }

// AddBuffer declares a raw buffer of sizeBytes (>= 0) bytes and returns its
// id. A duplicate or empty name or a negative size is recorded and reported
// by Validate; the id is still valid for building. O(1) amortised; apart
// from recording a mistake it allocates nothing of its own (see Graph).
func (g *Graph) AddBuffer(name string, sizeBytes int64, opts ...BufferOption) BufferID {
	if sizeBytes < 0 {
		g.errs = append(g.errs, fmt.Errorf("dag: buffer %q: negative size %d", name, sizeBytes))
		sizeBytes = 0
	}
	b := g.newBuffer()
	b.Name, b.SizeBytes = name, sizeBytes
	return g.addBuffer(b, opts)
}

// AddValue declares a buffer that holds one Go value (typically an Arrow
// record batch) and returns its id. Mistakes and cost as AddBuffer.
func (g *Graph) AddValue(name string, opts ...BufferOption) BufferID {
	b := g.newBuffer()
	b.Name, b.Value = name, true
	return g.addBuffer(b, opts)
}

func (g *Graph) addBuffer(b *Buffer, opts []BufferOption) BufferID {
	for _, o := range opts {
		o(b)
	}
	b.ID = BufferID(len(g.buffers))
	if b.Name == "" {
		g.checkName("buffer", b.Name, int64(b.ID))
	}
	g.nodes = push(g.nodes, ^nodeRef(b.ID))
	g.buffers = push(g.buffers, b)
	g.order = nil
	return b.ID
}

// checkName records an empty name of the kind's id. Duplicate names are
// found by Validate (see duplicates), which keeps building free of a map
// insertion per name.
func (g *Graph) checkName(kind, name string, id int64) {
	if name == "" {
		g.errs = append(g.errs, fmt.Errorf("dag: %s %d has an empty name", kind, id))
	}
}

// nodeKindName returns "kernel" or "buffer" and the name of the node ref.
func (g *Graph) nodeKindName(ref nodeRef) (kind, name string) {
	if ref >= 0 {
		return "kernel", g.kernels[ref].Name
	}
	return "buffer", g.buffers[^ref].Name
}

// Required returns the reads that are not optional: k.Reads itself when
// none is.
func (k *Kernel) Required() []buffers.Binding {
	if k.Optional == nil {
		return k.Reads
	}
	var req []buffers.Binding
	for i, r := range k.Reads {
		if i >= len(k.Optional) || !k.Optional[i] {
			req = append(req, r)
		}
	}
	return req
}

func (g *Graph) bufferFor(k *Kernel, id BufferID, verb string) *Buffer {
	if id < 0 || int(id) >= len(g.buffers) {
		g.errs = append(g.errs, fmt.Errorf("dag: kernel %q %s unknown buffer id %d", k.Name, verb, id))
		return nil
	}
	return g.buffers[id]
}

func (g *Graph) rangeFor(k *Kernel, id BufferID, off, n int64, verb string) (buffers.Binding, bool) {
	b := g.bufferFor(k, id, verb)
	if b == nil {
		return buffers.Binding{}, false
	}
	if off < 0 || n < 0 || off > b.extent()-n {
		g.errs = append(g.errs, fmt.Errorf("dag: kernel %q %s [%d:%d) of buffer %q, which has %d bytes",
			k.Name, verb, off, off+n, b.Name, b.extent()))
		return buffers.Binding{}, false
	}
	return buffers.Binding{Buffer: id, Offset: off, Length: n}, true
}

// AddKernel declares a kernel named name running fn, with its reads,
// writes and hints given as options (applied in order), and returns its
// id. Mistakes (a duplicate or empty name, a nil fn, an unknown buffer, a
// range outside its buffer, a negative stream or estimate) are recorded and
// reported by Validate; the id is still valid.
//
// The kernel's Reads and Writes are copied into the graph's arena: opts
// and the id slices in them may be reused once AddKernel returns. It takes
// time linear in the number of options and declared bindings; apart from
// recording a mistake it allocates nothing of its own (amortised, see
// Graph) unless the kernel has optional reads or a device hint.
func (g *Graph) AddKernel(name string, fn KernelFunc, opts ...KernelOption) KernelID {
	k := g.newKernel()
	k.ID, k.Name, k.Fn, k.Stream = KernelID(len(g.kernels)), name, fn, -1
	if name == "" || fn == nil {
		g.kernelMistakes(k)
	}
	// The common case, whole-buffer reads and writes only, is done here;
	// any other option takes the general path.
	nr, nw := 0, 0
	for i := range opts {
		switch o := &opts[i]; o.kind {
		case optReads:
			nr += len(o.ids)
		case optWrites:
			nw += len(o.ids)
		case optNone:
		default:
			nr = -1
		}
		if nr < 0 {
			break
		}
	}
	if nr < 0 {
		g.applyOptions(k, opts)
	} else if nr+nw > 0 {
		// Reads fill bd from the front, writes from nr on.
		bd := g.newBindings(nr + nw)
		r, w := 0, nr
		for i := range opts {
			o := &opts[i]
			for _, id := range o.ids {
				if uint64(id) >= uint64(len(g.buffers)) {
					g.unknownBuffer(k, id, o.kind)
					continue
				}
				b := buffers.Binding{Buffer: id, Length: g.buffers[id].extent()}
				if o.kind == optReads {
					bd[r], r = b, r+1
				} else {
					bd[w], w = b, w+1
				}
			}
		}
		if r > 0 {
			k.Reads = bd[:r:r]
		}
		if w > nr {
			k.Writes = bd[nr:w:w]
		}
	}
	g.nodes = push(g.nodes, nodeRef(k.ID))
	g.kernels = push(g.kernels, k)
	g.order = nil
	return k.ID
}

// kernelMistakes records an empty name or a nil function of k.
func (g *Graph) kernelMistakes(k *Kernel) {
	g.checkName("kernel", k.Name, int64(k.ID))
	if k.Fn == nil {
		g.errs = append(g.errs, fmt.Errorf("dag: kernel %q has a nil function", k.Name))
	}
}

// unknownBuffer records that k reads or writes (by kind) an id that is not
// a buffer.
func (g *Graph) unknownBuffer(k *Kernel, id BufferID, kind optKind) {
	verb := "writes"
	if kind == optReads || kind == optReadsOptional || kind == optReadsRange {
		verb = "reads"
	}
	g.errs = append(g.errs, fmt.Errorf("dag: kernel %q %s unknown buffer id %d", k.Name, verb, id))
}

// applyOptions applies any options to k, in order.
func (g *Graph) applyOptions(k *Kernel, opts []KernelOption) {
	// Count the bindings so reads and writes each take one contiguous
	// run of the arena.
	nr, nw, optional := 0, 0, false
	for i := range opts {
		switch o := &opts[i]; o.kind {
		case optReads:
			nr += len(o.ids)
		case optReadsOptional:
			nr += len(o.ids)
			optional = true
		case optReadsRange:
			nr++
		case optWrites:
			nw += len(o.ids)
		case optWritesRange:
			nw++
		}
	}
	var reads, writes []buffers.Binding
	if nr+nw > 0 {
		bd := g.newBindings(nr + nw)
		reads, writes = bd[:0:nr], bd[nr:nr]
	}
	var opt []bool // per read, when some read may be optional
	if optional {
		opt = make([]bool, 0, nr)
	}
	anyOptional := false
	for i := range opts {
		switch o := &opts[i]; o.kind {
		case optReads, optReadsOptional:
			isOpt := o.kind == optReadsOptional
			for _, id := range o.ids {
				if b := g.bufferFor(k, id, "reads"); b != nil {
					reads = append(reads, buffers.Binding{Buffer: id, Length: b.extent()})
					if optional {
						opt = append(opt, isOpt)
						anyOptional = anyOptional || isOpt
					}
				}
			}
		case optReadsRange:
			if bd, ok := g.rangeFor(k, BufferID(o.id), o.a, o.b, "reads"); ok {
				reads = append(reads, bd)
				if optional {
					opt = append(opt, false)
				}
			}
		case optWrites:
			for _, id := range o.ids {
				if b := g.bufferFor(k, id, "writes"); b != nil {
					writes = append(writes, buffers.Binding{Buffer: id, Length: b.extent()})
				}
			}
		case optWritesRange:
			if bd, ok := g.rangeFor(k, BufferID(o.id), o.a, o.b, "writes"); ok {
				writes = append(writes, bd)
			}
		case optStream:
			if o.a < 0 {
				g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: negative stream %d", k.Name, o.a))
				continue
			}
			k.Stream = int(o.a)
		case optDevice, optPrefer:
			d := &topology.DeviceID{Kind: topology.Kind(o.id), Index: int(o.a)}
			if o.kind == optDevice {
				k.Device = d
			} else {
				k.Prefer = d
			}
		case optEstimate:
			if d := time.Duration(o.a); d < 0 {
				g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: negative estimate %v", k.Name, d))
				continue
			}
			k.Estimate = time.Duration(o.a)
		}
	}
	if len(reads) > 0 {
		k.Reads = reads[:len(reads):len(reads)]
	}
	if len(writes) > 0 {
		k.Writes = writes[:len(writes):len(writes)]
	}
	if anyOptional {
		k.Optional = opt
	}
}

// Kernels returns the kernels in id order. The slice is the graph's own:
// do not modify it.
func (g *Graph) Kernels() []*Kernel { return g.kernels }

// Buffers returns the buffers in id order. The slice is the graph's own:
// do not modify it.
func (g *Graph) Buffers() []*Buffer { return g.buffers }

// Kernel returns kernel id; it panics when id is out of range.
func (g *Graph) Kernel(id KernelID) *Kernel { return g.kernels[id] }

// Buffer returns buffer id; it panics when id is out of range.
func (g *Graph) Buffer(id BufferID) *Buffer { return g.buffers[id] }

// Directed returns the underlying gonum graph. Its nodes are kernels and
// buffers (see NodeOf); edges are buffer→kernel for reads and
// kernel→buffer for writes. Do not modify it.
//
// The gonum graph is built on the first call, O(V + E), and extended on a
// later call with what was added since; calls are safe for concurrent use
// with each other (not with additions).
func (g *Graph) Directed() graph.Directed { return g.directed() }

// NodeOf returns the *Kernel or *Buffer behind a gonum node id, or nil.
func (g *Graph) NodeOf(id int64) any {
	if id < 0 || id >= int64(len(g.nodes)) {
		return nil
	}
	if ref := g.nodes[id]; ref >= 0 {
		return g.kernels[ref]
	}
	return g.buffers[^g.nodes[id]]
}

// dotNode is a gonum node that names itself and carries DOT attributes.
type dotNode struct {
	g  *Graph
	id int64
}

func (d dotNode) ID() int64 { return d.id }

// DOTID returns the kernel's or buffer's name.
func (d dotNode) DOTID() string {
	switch v := d.g.NodeOf(d.id).(type) {
	case *Kernel:
		return v.Name
	case *Buffer:
		return v.Name
	}
	return ""
}

// dotEscape escapes a name for the inside of a quoted DOT label. The result
// is also a valid Go quoted string, so gonum's encoder keeps it as it is.
var dotEscape = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// Attributes gives kernels a box shape and buffers an ellipse (inputs
// doubled), with a size label for raw buffers.
func (d dotNode) Attributes() []encoding.Attribute {
	switch v := d.g.NodeOf(d.id).(type) {
	case *Kernel:
		return []encoding.Attribute{{Key: "shape", Value: "box"}}
	case *Buffer:
		shape := "ellipse"
		if v.Input {
			shape = "doublecircle"
		}
		label := dotEscape.Replace(v.Name)
		if !v.Value {
			label = fmt.Sprintf("%s\\n%d B", label, v.SizeBytes)
		}
		return []encoding.Attribute{{Key: "shape", Value: shape}, {Key: "label", Value: `"` + label + `"`}}
	}
	return nil
}
