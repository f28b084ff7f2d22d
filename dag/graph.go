package dag

import (
	"context"
	"fmt"
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

// Kernel is a declared unit of work.
type Kernel struct {
	ID     KernelID
	Name   string
	Fn     KernelFunc
	Reads  []buffers.Binding // declared reads, in declaration order
	Writes []buffers.Binding // declared writes, in declaration order
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
	node     int64
}

// Buffer is a declared region of memory. A value buffer (SizeBytes 0,
// Value true) holds one Go value, such as an Arrow record batch, instead
// of raw bytes; for ordering and taint it counts as a single byte.
type Buffer struct {
	ID        BufferID
	Name      string
	SizeBytes int64
	Value     bool // holds a Go value rather than SizeBytes raw bytes
	Input     bool // supplied from outside the graph: may be read without a writer
	// SizeHint is the expected size in bytes of a value buffer's value
	// (for placement's transfer costs); 0 when unknown. See SizeHint.
	SizeHint int64
	node     int64
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
// The graph's own store is compact slices (kernels, buffers, and the
// gonum node id of each: nodes are numbered in the order they were added);
// the gonum graph is built from them on first use (Directed, MarshalDOT,
// a cycle report) and brought up to date incrementally after later
// additions, so building a large pipeline costs no map insertion per edge.
// A Graph is not safe for concurrent mutation; concurrent calls of
// Directed and the read-only accessors are safe.
type Graph struct {
	mu      sync.Mutex            // guards dg and synced
	dg      *simple.DirectedGraph // nil until first needed
	synced  int                   // nodes[:synced] are in dg with their edges
	kernels []*Kernel
	buffers []*Buffer
	nodes   []any      // gonum node id → *Kernel or *Buffer
	errs    []error    // builder mistakes, reported by Validate
	order   []KernelID // topological order, set by a successful Validate
}

// New returns an empty graph.
func New() *Graph {
	return &Graph{}
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
		k, ok := g.nodes[id].(*Kernel)
		if !ok {
			continue
		}
		// A kernel's buffers were added before it: their nodes are in dg.
		for _, r := range k.Reads {
			g.dg.SetEdge(simple.Edge{F: dotNode{g, g.buffers[r.Buffer].node}, T: n})
		}
		for _, w := range k.Writes {
			g.dg.SetEdge(simple.Edge{F: n, T: dotNode{g, g.buffers[w.Buffer].node}})
		}
	}
	return g.dg
}

// BufferOption configures a buffer.
type BufferOption func(*Buffer)

// Input marks a buffer as supplied from outside the graph: it may be read
// without any kernel writing it.
func Input() BufferOption { return func(b *Buffer) { b.Input = true } }

// AddBuffer declares a raw buffer of sizeBytes (>= 0) bytes and returns its
// id. A duplicate or empty name or a negative size is recorded and reported
// by Validate; the id is still valid for building.
func (g *Graph) AddBuffer(name string, sizeBytes int64, opts ...BufferOption) BufferID {
	if sizeBytes < 0 {
		g.errs = append(g.errs, fmt.Errorf("dag: buffer %q: negative size %d", name, sizeBytes))
		sizeBytes = 0
	}
	return g.addBuffer(&Buffer{Name: name, SizeBytes: sizeBytes}, opts)
}

// AddValue declares a buffer that holds one Go value (typically an Arrow
// record batch) and returns its id. Errors as AddBuffer.
func (g *Graph) AddValue(name string, opts ...BufferOption) BufferID {
	return g.addBuffer(&Buffer{Name: name, Value: true}, opts)
}

func (g *Graph) addBuffer(b *Buffer, opts []BufferOption) BufferID {
	for _, o := range opts {
		o(b)
	}
	b.ID = BufferID(len(g.buffers))
	g.checkName("buffer", b.Name, int64(b.ID))
	b.node = int64(len(g.nodes))
	g.nodes = append(g.nodes, b)
	g.buffers = append(g.buffers, b)
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

// duplicates returns a DuplicateError for every kernel or buffer whose
// non-empty name an earlier-added one already holds, in the order they
// were added. O(V) with one presized map.
func (g *Graph) duplicates() []error {
	seen := make(map[string]int, len(g.nodes)) // name → node id of its first holder
	var errs []error
	for id, n := range g.nodes {
		kind, name := nodeKindName(n)
		if name == "" {
			continue
		}
		if prev, dup := seen[name]; dup {
			pk, _ := nodeKindName(g.nodes[prev])
			errs = append(errs, &DuplicateError{Name: name, Kinds: [2]string{pk, kind}})
			continue
		}
		seen[name] = id
	}
	return errs
}

// nodeKindName returns "kernel" or "buffer" and the name of n.
func nodeKindName(n any) (kind, name string) {
	switch v := n.(type) {
	case *Kernel:
		return "kernel", v.Name
	case *Buffer:
		return "buffer", v.Name
	}
	return "", ""
}

// KernelOption configures a kernel: its reads, writes and placement hints.
type KernelOption func(*Graph, *Kernel)

// Reads declares whole-buffer reads of ids, in order.
func Reads(ids ...BufferID) KernelOption {
	return func(g *Graph, k *Kernel) {
		for _, id := range ids {
			if b := g.bufferFor(k, id, "reads"); b != nil {
				k.Reads = append(k.Reads, buffers.Binding{Buffer: id, Length: b.extent()})
				if k.Optional != nil {
					k.Optional = append(k.Optional, false)
				}
			}
		}
	}
}

// Writes declares whole-buffer writes of ids, in order.
func Writes(ids ...BufferID) KernelOption {
	return func(g *Graph, k *Kernel) {
		for _, id := range ids {
			if b := g.bufferFor(k, id, "writes"); b != nil {
				k.Writes = append(k.Writes, buffers.Binding{Buffer: id, Length: b.extent()})
			}
		}
	}
}

// ReadsOptional declares whole-buffer reads of ids, in order, that the
// kernel can do without: when one was left unwritten by failed or skipped
// work the launch still runs, Launch.Missing(i) says what is missing and
// why, and the kernel's output is its own responsibility (a merge that
// reports the partitions it lost, say). Ordering is as for Reads.
func ReadsOptional(ids ...BufferID) KernelOption {
	return func(g *Graph, k *Kernel) {
		for _, id := range ids {
			if b := g.bufferFor(k, id, "reads"); b != nil {
				if k.Optional == nil {
					k.Optional = make([]bool, len(k.Reads))
				}
				k.Reads = append(k.Reads, buffers.Binding{Buffer: id, Length: b.extent()})
				k.Optional = append(k.Optional, true)
			}
		}
	}
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

// ReadsRange declares a read of bytes [offset, offset+length) of buffer id.
// A range outside the buffer is recorded and reported by Validate.
func ReadsRange(id BufferID, offset, length int64) KernelOption {
	return func(g *Graph, k *Kernel) {
		if bd, ok := g.rangeFor(k, id, offset, length, "reads"); ok {
			k.Reads = append(k.Reads, bd)
			if k.Optional != nil {
				k.Optional = append(k.Optional, false)
			}
		}
	}
}

// WritesRange declares a write of bytes [offset, offset+length) of buffer
// id. A range outside the buffer is recorded and reported by Validate.
func WritesRange(id BufferID, offset, length int64) KernelOption {
	return func(g *Graph, k *Kernel) {
		if bd, ok := g.rangeFor(k, id, offset, length, "writes"); ok {
			k.Writes = append(k.Writes, bd)
		}
	}
}

// OnStream pins the kernel to stream i of its device (taken modulo the
// device's stream count; i >= 0).
func OnStream(i int) KernelOption {
	return func(g *Graph, k *Kernel) {
		if i < 0 {
			g.errs = append(g.errs, fmt.Errorf("dag: kernel %q: negative stream %d", k.Name, i))
			return
		}
		k.Stream = i
	}
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
// writes and hints given as options, and returns its id. Mistakes (a
// duplicate or empty name, a nil fn, an unknown buffer) are recorded and
// reported by Validate.
func (g *Graph) AddKernel(name string, fn KernelFunc, opts ...KernelOption) KernelID {
	k := &Kernel{ID: KernelID(len(g.kernels)), Name: name, Fn: fn, Stream: -1}
	g.checkName("kernel", name, int64(k.ID))
	if fn == nil {
		g.errs = append(g.errs, fmt.Errorf("dag: kernel %q has a nil function", name))
	}
	for _, o := range opts {
		o(g, k)
	}
	k.node = int64(len(g.nodes))
	g.nodes = append(g.nodes, k)
	g.kernels = append(g.kernels, k)
	g.order = nil
	return k.ID
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
	return g.nodes[id]
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
