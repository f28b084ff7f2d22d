package dag

import (
	"context"
	"fmt"
	"iter"
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
// its write set then reads as failed, except the ranges it stated written
// with Launch.Wrote before it failed. A kernel must honour ctx only for
// long loops; the executor does not interrupt it.
type KernelFunc func(ctx context.Context, l Launch) error

// Launch is what a running kernel sees of its launch. It is valid only
// during the KernelFunc call and only on that goroutine. A kernel reaches
// the buffers it declared by id, through the handles that declared them:
// Get and Put for a value buffer (AddValue), Bytes for a raw one
// (AddBuffer); asking for a buffer the kernel did not declare with that
// access is an *AccessError, not a panic.
type Launch interface {
	// Kernel returns the kernel's name.
	Kernel() string
	// Device and Stream say where the launch runs.
	Device() topology.DeviceID
	Stream() int
	// Allocator is the memory allocator of the launch's device, for Arrow
	// data the kernel builds.
	Allocator() memory.Allocator
	// Buffer returns the run's instance of graph buffer id (on the
	// launch's device: a replica where the buffer lives elsewhere), which
	// the kernel declared with access acc (a read, a write, or either). It
	// returns an *AccessError when it declared no such access, and the
	// read's error (see Missing) when the buffer has no memory in this run
	// (its reservation failed). Get, Put and Bytes are the typed ways in;
	// Buffer is for what they do not cover (Take, the buffer's name).
	// O(declared bindings); no allocation on success.
	Buffer(id BufferID, acc Access) (*buffers.Buffer, error)
	// Missing returns nil when the kernel's read of buffer id holds bytes
	// written by work that succeeded, else the error graph's read error
	// (*failgraph.UnwrittenError, several joined) naming the failure and
	// its chain; an *AccessError when id is not among its reads. Only an
	// optional read (ReadsOptional) can be missing when the kernel runs: a
	// tainted required read skips the launch. O(declared bindings); no
	// allocation when nothing failed.
	Missing(id BufferID) error
	// Wrote states that the kernel has finished writing bytes [offset,
	// offset+length) of buffer id (a value buffer counts as the one byte
	// [0, 1)): should the launch later fail (return an error or panic),
	// those bytes read as written and only the rest of its write set is
	// tainted with the failure, so a reader of the stated range runs and
	// a reader of the rest is skipped. A launch that succeeds has written
	// its whole write set, and its statements change nothing. Statements
	// add up; stating a range twice is harmless, and a statement cannot
	// be withdrawn. It returns an *AccessError when the kernel did not
	// declare a write of id, and a *RangeError, leaving the earlier
	// statements as they were, when the range lies outside the buffer or
	// outside the kernel's declared writes of it (the union of its
	// Writes and WritesRange of id). A length of 0 states nothing.
	// O(declared bindings); it allocates only to grow the launch's list
	// of statements. Only host code (a KernelFunc) can state a partial
	// write: device-code launches have no Launch.
	Wrote(id BufferID, offset, length int64) error
}

// Kernel is a declared unit of work, as Graph.Kernel and Graph.Kernels
// return it: a read-only view, made on each call without allocating, of
// what the graph stores. Its Name and slices point into the graph's own
// arenas and stay valid (and unchanged) for the life of the graph; do not
// modify them.
type Kernel struct {
	ID   KernelID
	Name string
	// Fn is the kernel's host code (its HostCode variant); nil for a
	// kernel with device code only.
	Fn KernelFunc
	// Variants are the kernel's device code, one per CodeKind (see
	// DeviceCode), in declaration order; nil when it has none.
	Variants []Variant
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

// BufferDecl is a declared region of memory (the memory itself, at run
// time, is a buffers.Buffer), as Graph.Buffer and Graph.Buffers return
// it: a read-only view made on each call without allocating. A
// value buffer (SizeBytes 0, Value true) holds one Go value, such as an
// Arrow record batch, instead of raw bytes; for ordering and taint it
// counts as a single byte.
type BufferDecl struct {
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
func (b BufferDecl) extent() int64 {
	if b.Value {
		return 1
	}
	return b.SizeBytes
}

// Whole returns the binding of every byte of b ([0, SizeBytes), or [0, 1)
// for a value buffer).
func (b BufferDecl) Whole() buffers.Binding {
	return buffers.Binding{Buffer: b.ID, Length: b.extent()}
}

// Graph is a pipeline: kernels and buffers, with gonum's
// simple.DirectedGraph underneath (see Directed). The zero value is not
// usable; call New.
//
// The graph's own store is compact: kernels and buffers are records in
// two arrays (32 bytes: a few integers and the kernel's function; 16
// bytes, no pointer); names are copied into one string arena per kind,
// and the bindings of every declared read and write into chunks of a
// binding arena (24 bytes each). So adding a kernel or a buffer allocates
// nothing of its own (amortised: the arrays and name arenas double, a
// binding chunk holds up to 4096 bindings; Grow presizes the arrays).
// Kernel and BufferDecl are views made from the records on demand. Gonum
// node ids are numbered in the order kernels and buffers were added. The gonum graph is built from
// the store on first use (Directed, MarshalDOT, a cycle report) and
// brought up to date incrementally after later additions, so building a
// large pipeline costs no map insertion per edge or per name (duplicate
// names are found by Validate). A graph holds fewer than 2^31 kernels and
// buffers together.
//
// A Graph is not safe for concurrent mutation; concurrent calls of
// Directed and the read-only accessors are safe.
type Graph struct {
	mu      sync.Mutex            // guards dg, synced and bufNode
	dg      *simple.DirectedGraph // nil until first needed
	synced  int                   // nodes[:synced] are in dg with their edges
	bufNode []int64               // gonum node id of each buffer in dg

	krecs  []kernelRec
	extras []kernelExtra
	brecs  []bufferRec
	nodes  []nodeRef  // gonum node id → kernel or buffer
	hints  []int64    // SizeHint of the buffers that have one
	errs   []error    // builder mistakes, reported by Validate
	kspec  kernelSpec // AddKernel's scratch: the declarations of its options
	bspec  bufferSpec // AddBuffer's scratch: the declarations of its options
	order  []KernelID // topological order, set by a successful Validate

	// Names: the kernels' and the buffers' names, each kind's one after
	// the other (name i ends where name i+1 starts). A strings.Builder
	// only appends, and its String shares the bytes written so far, so a
	// name is a substring of it, handed out without a copy; an arena that
	// grows is copied, and strings already handed out keep the old copy.
	knames, bnames strings.Builder

	// Binding arena: every chunk, each at its full length, so a kernel's
	// chunk index finds it; the last is the one being filled, up to
	// bindUsed.
	bindChunks [][]buffers.Binding
	bindCur    []buffers.Binding // the last chunk
	bindUsed   int
}

// kernelRec is the stored form of a kernel: 32 bytes.
type kernelRec struct {
	fn    KernelFunc // the host code; nil for device code only
	bind  bindRef
	name  uint32 // start of the name in knames
	extra uint32 // 1 + index into Graph.extras; 0: none
}

// kernelExtra holds a kernel's rarely given declarations: optional reads,
// a stream pin, placement hints and device variants.
type kernelExtra struct {
	optional       []bool
	variants       []Variant
	stream         int // 1 + the pinned stream; 0: the executor chooses
	device, prefer *topology.DeviceID
	estimate       time.Duration
}

// bufferRec is the stored form of a buffer: 16 bytes, no pointer.
type bufferRec struct {
	name  uint32 // start of the name in bnames
	flags uint32 // bufValue, bufInput, and from bit bufHintShift 1 + index into Graph.hints
	size  int64  // SizeBytes
}

const (
	bufValue = 1 << iota
	bufInput

	bufHintShift = 2
)

// extent is as BufferDecl.extent.
func (r *bufferRec) extent() int64 {
	if r.flags&bufValue != 0 {
		return 1
	}
	return r.size
}

// bindRef locates a kernel's bindings in the binding arena: nr reads from
// off, then nw writes, in chunk.
type bindRef struct{ chunk, off, nr, nw uint32 }

// nodeRef is what a gonum node id stands for: a kernel id (>= 0) or the
// bitwise complement of a buffer id (< 0).
type nodeRef int32

// Arena chunk sizes: a graph's first chunk is small and each later one
// twice the last, up to the maximum; an item larger than that gets a
// chunk of its own size. So a small graph stays small and a large one
// allocates once per maximum-size chunk.
const (
	chunkMin        = 8
	bindingChunkMax = 4096
)

// maxNames is the most bytes of names of one kind a graph holds: name
// offsets are 32-bit.
const maxNames = 1<<32 - 1

// chunkLen is the length of the next arena chunk after one of last items,
// at least need.
func chunkLen(last, need, least, most int) int {
	return max(min(max(2*last, least), most), need)
}

// push appends v to *s, doubling the capacity when *s is full: append
// grows a large slice by only a quarter, which copies each element about
// four times over while a graph grows. When there is room it stores only
// the new length: storing the whole slice header back into the graph
// would be a pointer write, which costs a write barrier whenever the
// garbage collector is marking (and it often is while a large graph is
// built).
func push[E any](s *[]E, v E) {
	n := len(*s)
	if n == cap(*s) {
		*s = slices.Grow(*s, max(n, chunkMin))
	}
	*s = (*s)[:n+1]
	(*s)[n] = v
}

// invalidate drops the order of the last Validate after a change. It
// writes only when there is an order to drop (a pointer write costs a
// write barrier while the collector runs; see push).
func (g *Graph) invalidate() {
	if g.order != nil {
		g.order = nil
	}
}

// New returns an empty graph.
func New() *Graph {
	return &Graph{}
}

// Grow makes room for kernels more kernels and buffers more buffers, so
// that adding them costs no reallocation of the graph's own arrays: like
// slices.Grow, it is a hint for building a graph whose size is known
// ahead, and building without it gives the same graph. Names and the
// declared reads and writes still take arena chunks as they come. Grow
// allocates about 44 bytes per kernel and 28 per buffer at once (records
// and 8 bytes of name each); it panics if kernels or buffers is negative.
func (g *Graph) Grow(kernels, buffers int) {
	if kernels < 0 || buffers < 0 {
		panic(fmt.Sprintf("dag: Graph.Grow(%d, %d): negative count", kernels, buffers))
	}
	g.krecs = slices.Grow(g.krecs, kernels)
	g.brecs = slices.Grow(g.brecs, buffers)
	g.nodes = slices.Grow(g.nodes, kernels+buffers)
	g.knames.Grow(8 * kernels)
	g.bnames.Grow(8 * buffers)
}

// putName appends s to the name arena a and returns s's start in it. It
// does not keep s, so a name formatted into a stack buffer by the caller
// stays there. The arena doubles when full (strings.Builder.Grow), where
// append would grow a large one by only a quarter. Names past maxNames
// bytes are recorded as a mistake and dropped (the name reads as empty).
func (g *Graph) putName(a *strings.Builder, s string) uint32 {
	n := a.Len()
	if n+len(s) > maxNames {
		g.errs = append(g.errs, fmt.Errorf("dag: names past %d bytes: %q dropped", maxNames, strings.Clone(s)))
		return uint32(n)
	}
	if a.Cap()-n < len(s) {
		a.Grow(max(len(s), 256)) // to 2 × capacity + that
	}
	a.WriteString(s)
	return uint32(n)
}

// kernelName returns the name of kernel k.
func (g *Graph) kernelName(k int) string {
	names := g.knames.String()
	end := uint32(len(names))
	if k+1 < len(g.krecs) {
		end = g.krecs[k+1].name
	}
	return names[g.krecs[k].name:end]
}

// bufferName returns the name of buffer b.
func (g *Graph) bufferName(b int) string {
	names := g.bnames.String()
	end := uint32(len(names))
	if b+1 < len(g.brecs) {
		end = g.brecs[b+1].name
	}
	return names[g.brecs[b].name:end]
}

// newBindings returns n contiguous bindings from the arena and their
// place: chunk and offset.
func (g *Graph) newBindings(n int) (bd []buffers.Binding, chunk, off uint32) {
	i := g.bindUsed
	if len(g.bindCur)-i < n {
		g.newBindingChunk(n)
		i = 0
	}
	g.bindUsed = i + n
	return g.bindCur[i : i+n : i+n], uint32(len(g.bindChunks) - 1), uint32(i)
}

// newBindingChunk starts a binding chunk with room for at least n.
func (g *Graph) newBindingChunk(n int) {
	g.bindCur = make([]buffers.Binding, chunkLen(len(g.bindCur), n, chunkMin, bindingChunkMax))
	g.bindChunks = append(g.bindChunks, g.bindCur)
	g.bindUsed = 0
}

// reads and writes return the bindings of kernel record r, with capacity
// equal to length; nil for none.
func (g *Graph) reads(r *kernelRec) []buffers.Binding {
	if r.bind.nr == 0 {
		return nil
	}
	lo, hi := r.bind.off, r.bind.off+r.bind.nr
	return g.bindChunks[r.bind.chunk][lo:hi:hi]
}

func (g *Graph) writes(r *kernelRec) []buffers.Binding {
	if r.bind.nw == 0 {
		return nil
	}
	lo := r.bind.off + r.bind.nr
	hi := lo + r.bind.nw
	return g.bindChunks[r.bind.chunk][lo:hi:hi]
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
		r := &g.krecs[ref]
		// A kernel's buffers were added before it: their nodes are in dg.
		for _, b := range g.reads(r) {
			g.dg.SetEdge(simple.Edge{F: dotNode{g, g.bufNode[b.Buffer]}, T: n})
		}
		for _, b := range g.writes(r) {
			g.dg.SetEdge(simple.Edge{F: n, T: dotNode{g, g.bufNode[b.Buffer]}})
		}
	}
	return g.dg
}

// BufferOption configures a buffer in AddBuffer or AddValue: Input or
// SizeHint, applied in order. As with KernelOption, an option's error is
// recorded and reported by Validate, naming the buffer; a nil option is
// skipped. An option is a function value that may be reused for any
// number of buffers.
type BufferOption func(*bufferSpec) error

// bufferSpec gathers what a buffer's options declare, in order.
type bufferSpec struct {
	decls []bufferDecl
}

// bufferDecl is one declaration of a buffer option.
type bufferDecl struct {
	kind uint8 // bufOptInput, bufOptSizeHint
	n    int64
}

// declareBuffer returns the option that declares d.
func declareBuffer(d bufferDecl) BufferOption {
	return func(s *bufferSpec) error {
		s.decls = append(s.decls, d)
		return nil
	}
}

const (
	bufOptNone = iota
	bufOptInput
	bufOptSizeHint
)

// Input marks a buffer as supplied from outside the graph: it may be read
// without any kernel writing it. Its contents come with the run
// (exec.WithInput); without them a value input holds nil and a raw input
// zero bytes.
func Input() BufferOption { return declareBuffer(bufferDecl{kind: bufOptInput}) }

// AddBuffer declares a raw buffer of sizeBytes (>= 0) bytes and returns its
// id. A duplicate or empty name or a negative size is recorded and reported
// by Validate; the id is still valid for building. The name is copied into
// the graph. O(1) amortised; apart from recording a mistake it allocates
// nothing of its own (see Graph).
func (g *Graph) AddBuffer(name string, sizeBytes int64, opts ...BufferOption) BufferID {
	if sizeBytes < 0 {
		g.errs = append(g.errs, fmt.Errorf("dag: buffer %q: negative size %d", strings.Clone(name), sizeBytes))
		sizeBytes = 0
	}
	return g.addBuffer(bufferRec{name: g.putName(&g.bnames, name), size: sizeBytes}, opts)
}

func (g *Graph) addBuffer(r bufferRec, opts []BufferOption) BufferID {
	spec := &g.bspec
	spec.decls = spec.decls[:0]
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(spec); err != nil {
			g.errs = append(g.errs, fmt.Errorf("dag: buffer %q: %w", g.bnames.String()[r.name:], err))
		}
	}
	for _, o := range spec.decls {
		switch o.kind {
		case bufOptInput:
			r.flags |= bufInput
		case bufOptSizeHint:
			if r.flags>>bufHintShift == 0 {
				g.hints = append(g.hints, 0)
				r.flags |= uint32(len(g.hints)) << bufHintShift
			}
			g.hints[r.flags>>bufHintShift-1] = o.n
		}
	}
	id := BufferID(len(g.brecs))
	if r.name == uint32(g.bnames.Len()) {
		g.checkName("buffer", "", int64(id))
	}
	push(&g.nodes, ^nodeRef(id))
	push(&g.brecs, r)
	g.invalidate()
	return id
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
		return "kernel", g.kernelName(int(ref))
	}
	return "buffer", g.bufferName(int(^ref))
}

// Required returns the reads that are not optional: k.Reads itself when
// none is.
func (k Kernel) Required() []buffers.Binding {
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

// bufferFor returns the record of buffer id, or records that kernel k
// reads or writes (verb) an unknown id and returns nil.
func (g *Graph) bufferFor(k KernelID, id BufferID, verb string) *bufferRec {
	if id < 0 || int(id) >= len(g.brecs) {
		g.errs = append(g.errs, fmt.Errorf("dag: kernel %q %s unknown buffer id %d", g.KernelName(k), verb, id))
		return nil
	}
	return &g.brecs[id]
}

// rangeFor returns bd when it is a range of a buffer of the graph, or
// records that kernel k reads or writes (verb) an unknown buffer or a
// range outside its buffer and returns false.
func (g *Graph) rangeFor(k KernelID, bd buffers.Binding, verb string) (buffers.Binding, bool) {
	b := g.bufferFor(k, bd.Buffer, verb)
	if b == nil {
		return buffers.Binding{}, false
	}
	if off, n := bd.Offset, bd.Length; off < 0 || n < 0 || off > b.extent()-n {
		g.errs = append(g.errs, fmt.Errorf("dag: kernel %q %s %s of buffer %q, which has %d bytes",
			g.KernelName(k), verb, rangeText(off, n), g.bufferName(int(bd.Buffer)), b.extent()))
		return buffers.Binding{}, false
	}
	return bd, true
}

// AddKernel declares a kernel named name running fn (its host code), with
// its reads, writes, hints and device variants (OpenCL) given as options
// (applied in order), and returns its id. fn may be nil for a kernel that
// has a device variant: it then runs only on a device of that variant's
// kind. Mistakes (a duplicate or empty name, no code at all (a nil fn and
// no variant), an unknown buffer, a range outside its buffer, a negative
// stream or estimate, a variant's mistakes) are recorded and reported by
// Validate; the id is still valid. The kernel runs after every writer of
// a buffer it reads, by whole buffer (see ReadsRange): one that reads and
// writes the same buffer, at any ranges, is a cycle that Validate reports.
//
// The name and the kernel's reads and writes are copied into the graph's
// arenas: name, opts and the id slices in them may be reused once
// AddKernel returns (and a name formatted into a stack buffer need not
// leave it). It takes time linear in the number of options and declared
// bindings; apart from recording a mistake it allocates nothing of its
// own (amortised, see Graph) unless the kernel has optional reads, a
// device hint, an estimate or a device variant.
func (g *Graph) AddKernel(name string, fn KernelFunc, opts ...KernelOption) KernelID {
	k := KernelID(len(g.krecs))
	push(&g.krecs, kernelRec{name: g.putName(&g.knames, name), fn: fn})
	if name == "" {
		g.checkName("kernel", "", int64(k))
	}
	spec := &g.kspec
	spec.decls = spec.decls[:0]
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(spec); err != nil {
			g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: %w", g.KernelName(k), err))
		}
	}
	decls := spec.decls
	defer clear(decls) // keep no caller's ids or variants alive
	// Count the bindings so reads and writes each take one contiguous
	// run of the arena.
	nr, nw, optional := countBindings(decls)
	var kb kernelBindings
	var bd []buffers.Binding
	var chunk, off uint32
	if nr+nw > 0 {
		bd, chunk, off = g.newBindings(nr + nw)
		kb.reads, kb.writes = bd[:0:nr], bd[nr:nr]
	}
	if optional {
		kb.opt = make([]bool, 0, nr)
	}
	var ex kernelExtra
	variants := false
	for i := range decls {
		switch o := &decls[i]; o.kind {
		case optReads, optReadsOptional, optReadsRange, optWrites, optWritesRange:
			g.bindOption(k, o, &kb)
		case optVariant:
			variants = true
		default:
			g.hintOption(k, o, &ex)
		}
	}
	if len(kb.reads) < nr && len(kb.writes) > 0 { // unknown reads: close the gap
		copy(bd[len(kb.reads):], kb.writes)
	}
	g.krecs[k].bind = bindRef{chunk: chunk, off: off, nr: uint32(len(kb.reads)), nw: uint32(len(kb.writes))}
	if kb.anyOptional {
		ex.optional = kb.opt
	}
	if variants {
		ex.variants = g.bindVariants(k, decls, kb.reads, kb.writes)
	}
	if !ex.isZero() {
		g.extras = append(g.extras, ex)
		g.krecs[k].extra = uint32(len(g.extras))
	}
	push(&g.nodes, nodeRef(k))
	g.invalidate()
	return k
}

// countBindings returns how many reads (nr) and writes (nw) decls
// declare, unknown buffers included, and whether some read is optional.
// It reads decls only; O(len(decls)), no allocation.
func countBindings(decls []kernelDecl) (nr, nw int, optional bool) {
	for i := range decls {
		switch o := &decls[i]; o.kind {
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
	return nr, nw, optional
}

// kernelBindings gathers a kernel's reads and writes while AddKernel
// applies its options. reads and writes are runs of the binding arena
// with room for every declared binding (see countBindings), so appending
// to them never reallocates; opt is nil unless some read option is
// optional, and then holds one flag per kept read.
type kernelBindings struct {
	reads, writes []buffers.Binding
	opt           []bool
	anyOptional   bool // some kept read is optional
}

// read appends bd to the reads, with its optional flag isOpt when the
// kernel tracks them.
func (kb *kernelBindings) read(bd buffers.Binding, isOpt bool) {
	kb.reads = append(kb.reads, bd)
	if kb.opt != nil {
		kb.opt = append(kb.opt, isOpt)
		kb.anyOptional = kb.anyOptional || isOpt
	}
}

// bindOption applies a read or write option o of kernel k to kb: a whole
// buffer binds its extent, a range binds as given. An unknown buffer or
// a range outside its buffer is recorded in g's errors and left out.
// Other kinds of option are ignored. It keeps neither o nor kb.
func (g *Graph) bindOption(k KernelID, o *kernelDecl, kb *kernelBindings) {
	switch o.kind {
	case optReads, optReadsOptional:
		isOpt := o.kind == optReadsOptional
		for _, id := range o.ids {
			if b := g.bufferFor(k, id, "reads"); b != nil {
				kb.read(buffers.Binding{Buffer: id, Length: b.extent()}, isOpt)
			}
		}
	case optReadsRange:
		if bd, ok := g.rangeFor(k, o.rng, "reads"); ok {
			kb.read(bd, false)
		}
	case optWrites:
		for _, id := range o.ids {
			if b := g.bufferFor(k, id, "writes"); b != nil {
				kb.writes = append(kb.writes, buffers.Binding{Buffer: id, Length: b.extent()})
			}
		}
	case optWritesRange:
		if bd, ok := g.rangeFor(k, o.rng, "writes"); ok {
			kb.writes = append(kb.writes, bd)
		}
	}
}

// hintOption applies a placement hint o of kernel k (a stream, a device,
// a preferred device or an estimate) to ex. A negative stream or
// estimate is recorded in g's errors and leaves ex as it was. Other
// kinds of option are ignored. It keeps no pointer into o: a device is
// copied, so the caller's options stay off the heap.
func (g *Graph) hintOption(k KernelID, o *kernelDecl, ex *kernelExtra) {
	switch o.kind {
	case optStream:
		if o.stream < 0 {
			g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: negative stream %d", g.KernelName(k), o.stream))
			return
		}
		ex.stream = o.stream + 1
	case optDevice, optPrefer:
		d := new(topology.DeviceID) // a copy: keeping o's own would move every option to the heap
		*d = o.device
		if o.kind == optDevice {
			ex.device = d
		} else {
			ex.prefer = d
		}
	case optEstimate:
		if o.estimate < 0 {
			g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: negative estimate %v", g.KernelName(k), o.estimate))
			return
		}
		ex.estimate = o.estimate
	}
}

// isZero reports whether ex holds nothing, so its kernel needs no entry
// in Graph.extras.
func (ex *kernelExtra) isZero() bool {
	return ex.optional == nil && ex.stream == 0 && ex.device == nil && ex.prefer == nil && ex.estimate == 0 && ex.variants == nil
}

// NumKernels returns the number of kernels.
func (g *Graph) NumKernels() int { return len(g.krecs) }

// NumBuffers returns the number of buffers.
func (g *Graph) NumBuffers() int { return len(g.brecs) }

// Kernel returns the view of kernel id; it panics when id is out of range.
// O(1), no allocation.
func (g *Graph) Kernel(id KernelID) Kernel {
	r := &g.krecs[id]
	k := Kernel{ID: id, Name: g.kernelName(int(id)), Fn: r.fn, Reads: g.reads(r), Writes: g.writes(r), Stream: -1}
	if r.extra != 0 {
		ex := &g.extras[r.extra-1]
		k.Optional, k.Stream, k.Device, k.Prefer, k.Estimate = ex.optional, ex.stream-1, ex.device, ex.prefer, ex.estimate
		k.Variants = ex.variants
	}
	return k
}

// KernelName returns the name of kernel id without making its whole view;
// it panics when id is out of range.
func (g *Graph) KernelName(id KernelID) string {
	_ = g.krecs[id] // panics out of range
	return g.kernelName(int(id))
}

// KernelReads and KernelWrites return the declared reads and writes of
// kernel id (as Kernel.Reads and Kernel.Writes) without making its whole
// view; they panic when id is out of range.
func (g *Graph) KernelReads(id KernelID) []buffers.Binding { return g.reads(&g.krecs[id]) }

// KernelWrites: see KernelReads.
func (g *Graph) KernelWrites(id KernelID) []buffers.Binding { return g.writes(&g.krecs[id]) }

// SetFunc replaces the function (the host code) of kernel id, as
// InjectFailure does; a nil fn removes it. It panics when id is out of
// range. A plan made before keeps the functions it was made with. Like
// any change it clears Order until the next Validate (which reports a
// kernel left with no code), and like the other mutations it must
// not run concurrently with anything else on g.
func (g *Graph) SetFunc(id KernelID, fn KernelFunc) {
	g.krecs[id].fn = fn
	g.invalidate()
}

// Kernels yields every kernel's id and view, in id order: the kernels
// the graph holds when the iteration starts (kernels added meanwhile are
// not visited).
func (g *Graph) Kernels() iter.Seq2[KernelID, Kernel] {
	return func(yield func(KernelID, Kernel) bool) {
		for id := range g.krecs {
			if !yield(KernelID(id), g.Kernel(KernelID(id))) {
				return
			}
		}
	}
}

// Buffer returns the view of buffer id; it panics when id is out of range.
// O(1), no allocation.
func (g *Graph) Buffer(id BufferID) BufferDecl {
	r := &g.brecs[id]
	b := BufferDecl{ID: id, Name: g.bufferName(int(id)), SizeBytes: r.size, Value: r.flags&bufValue != 0,
		Input: r.flags&bufInput != 0}
	if h := r.flags >> bufHintShift; h != 0 {
		b.SizeHint = g.hints[h-1]
	}
	return b
}

// Buffers yields every buffer's id and view, in id order: the buffers the
// graph holds when the iteration starts (buffers added meanwhile are not
// visited).
func (g *Graph) Buffers() iter.Seq2[BufferID, BufferDecl] {
	return func(yield func(BufferID, BufferDecl) bool) {
		for id := range g.brecs {
			if !yield(BufferID(id), g.Buffer(BufferID(id))) {
				return
			}
		}
	}
}

// Directed returns the underlying gonum graph. Its nodes are kernels and
// buffers (see NodeOf); edges are buffer→kernel for reads and
// kernel→buffer for writes. Do not modify it.
//
// The gonum graph is built on the first call, O(V + E), and extended on a
// later call with what was added since; calls are safe for concurrent use
// with each other (not with additions).
func (g *Graph) Directed() graph.Directed { return g.directed() }

// NodeOf returns the Kernel or BufferDecl view behind a gonum node id, or nil.
// The view is boxed in the interface: one allocation per call.
func (g *Graph) NodeOf(id int64) any {
	if id < 0 || id >= int64(len(g.nodes)) {
		return nil
	}
	if ref := g.nodes[id]; ref >= 0 {
		return g.Kernel(KernelID(ref))
	}
	return g.Buffer(BufferID(^g.nodes[id]))
}

// dotNode is a gonum node that names itself and carries DOT attributes.
type dotNode struct {
	g  *Graph
	id int64
}

func (d dotNode) ID() int64 { return d.id }

// DOTID returns the kernel's or buffer's name.
func (d dotNode) DOTID() string {
	_, name := d.g.nodeKindName(d.g.nodes[d.id])
	return name
}

// dotEscape escapes a name for the inside of a quoted DOT label. The result
// is also a valid Go quoted string, so gonum's encoder keeps it as it is.
var dotEscape = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// Attributes gives kernels a box shape and buffers an ellipse (inputs
// doubled), with a size label for raw buffers.
func (d dotNode) Attributes() []encoding.Attribute {
	switch v := d.g.NodeOf(d.id).(type) {
	case Kernel:
		return []encoding.Attribute{{Key: "shape", Value: "box"}}
	case BufferDecl:
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
