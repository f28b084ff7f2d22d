package dag_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/topology"
)

func TestKernelOptionNilDoesNothing(t *testing.T) {
	g := dag.New()
	x := g.AddBuffer("x", 8, nil)
	k := g.Kernel(g.AddKernel("k", nop, nil, dag.Writes(x), nil))
	assert.Equal(t, []buffers.Binding{{Buffer: x, Length: 8}}, k.Writes)
	assert.Nil(t, k.Reads)
	assert.Nil(t, k.Optional)
	assert.Equal(t, -1, k.Stream)
	require.NoError(t, g.Validate())
}

func TestKernelOptionsApplyInOrder(t *testing.T) {
	g := dag.New()
	a := g.AddBuffer("a", 8, dag.Input())
	b := g.AddBuffer("b", 8, dag.Input())
	c := dag.AddValue[any](g, "c", dag.Input()).ID()
	out := g.AddBuffer("out", 8)
	k := g.Kernel(g.AddKernel("k", nop,
		dag.Reads(b), dag.WritesRange(out, 0, 4), dag.ReadsRange(a, 2, 2), dag.OnStream(1),
		dag.Writes(c), dag.Reads(a, c), dag.OnStream(2), dag.WritesRange(out, 4, 4)))
	assert.Equal(t, []buffers.Binding{
		{Buffer: b, Length: 8}, {Buffer: a, Offset: 2, Length: 2}, {Buffer: a, Length: 8}, {Buffer: c, Length: 1},
	}, k.Reads, "reads in declaration order across options")
	assert.Equal(t, []buffers.Binding{
		{Buffer: out, Length: 4}, {Buffer: c, Length: 1}, {Buffer: out, Offset: 4, Length: 4},
	}, k.Writes, "writes in declaration order across options")
	assert.Equal(t, 2, k.Stream, "the later hint wins")
}

func TestKernelOptionIsReusable(t *testing.T) {
	ids := []dag.BufferID{0, 1}
	reads := dag.Reads(ids...)
	writes := dag.Writes(2)

	g := dag.New()
	g.AddBuffer("a", 4, dag.Input())
	g.AddBuffer("b", 4, dag.Input())
	g.AddBuffer("c", 4)
	first := g.Kernel(g.AddKernel("first", nop, reads, writes))
	ids[0] = 1 // the kernel holds its own copy of the ids
	want := []buffers.Binding{{Buffer: 0, Length: 4}, {Buffer: 1, Length: 4}}
	assert.Equal(t, want, first.Reads)

	// The same option values build a second graph; the changed ids slice
	// is read when the option is applied.
	h := dag.New()
	h.AddBuffer("a", 4, dag.Input())
	h.AddBuffer("b", 2, dag.Input())
	h.AddBuffer("c", 4)
	second := h.Kernel(h.AddKernel("second", nop, reads, writes))
	assert.Equal(t, []buffers.Binding{{Buffer: 1, Length: 2}, {Buffer: 1, Length: 2}}, second.Reads)
	assert.Equal(t, []buffers.Binding{{Buffer: 2, Length: 4}}, second.Writes)
	assert.Equal(t, want, first.Reads, "a later kernel leaves the first one's bindings alone")
}

func TestBindingsAreCappedWindows(t *testing.T) {
	g := dag.New()
	a := g.AddBuffer("a", 8, dag.Input())
	b := g.AddBuffer("b", 8)
	c := g.AddBuffer("c", 8)
	k := g.Kernel(g.AddKernel("k", nop, dag.Reads(a), dag.Writes(b)))
	next := g.Kernel(g.AddKernel("next", nop, dag.Reads(b), dag.Writes(c)))
	assert.Equal(t, len(k.Reads), cap(k.Reads))
	assert.Equal(t, len(k.Writes), cap(k.Writes))

	// Appending to one kernel's bindings must not write into its
	// neighbours' (they share the graph's arena).
	grown := append(k.Reads, buffers.Binding{Buffer: c, Length: 8})
	grown = append(grown, buffers.Binding{Buffer: c, Length: 8})
	assert.Len(t, grown, 3)
	assert.Equal(t, []buffers.Binding{{Buffer: b, Length: 8}}, k.Writes)
	assert.Equal(t, []buffers.Binding{{Buffer: b, Length: 8}}, next.Reads)
	assert.Equal(t, []buffers.Binding{{Buffer: c, Length: 8}}, next.Writes)
}

func TestReadsOptional(t *testing.T) {
	tests := []struct {
		name     string
		opts     func(in, x, y dag.BufferID) []dag.KernelOption
		reads    []dag.BufferID
		optional []bool
		required []dag.BufferID
	}{
		{
			name:     "no optional read",
			opts:     func(in, x, y dag.BufferID) []dag.KernelOption { return []dag.KernelOption{dag.Reads(in, x)} },
			reads:    []dag.BufferID{0, 1},
			required: []dag.BufferID{0, 1},
		},
		{
			name: "optional between required",
			opts: func(in, x, y dag.BufferID) []dag.KernelOption {
				return []dag.KernelOption{dag.Reads(in), dag.ReadsOptional(x), dag.ReadsRange(y, 0, 4)}
			},
			reads:    []dag.BufferID{0, 1, 2},
			optional: []bool{false, true, false},
			required: []dag.BufferID{0, 2},
		},
		{
			name: "only optional reads",
			opts: func(in, x, y dag.BufferID) []dag.KernelOption {
				return []dag.KernelOption{dag.ReadsOptional(x, y)}
			},
			reads:    []dag.BufferID{1, 2},
			optional: []bool{true, true},
			required: []dag.BufferID{},
		},
		{
			name: "an optional read of an unknown buffer leaves none optional",
			opts: func(in, x, y dag.BufferID) []dag.KernelOption {
				return []dag.KernelOption{dag.Reads(in), dag.ReadsOptional(9)}
			},
			reads:    []dag.BufferID{0},
			required: []dag.BufferID{0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := dag.New()
			in := g.AddBuffer("in", 8, dag.Input())
			x := g.AddBuffer("x", 8, dag.Input())
			y := g.AddBuffer("y", 8, dag.Input())
			k := g.Kernel(g.AddKernel("k", nop, tt.opts(in, x, y)...))
			var reads []dag.BufferID
			for _, r := range k.Reads {
				reads = append(reads, r.Buffer)
			}
			assert.Equal(t, tt.reads, reads)
			assert.Equal(t, tt.optional, k.Optional)
			required := []dag.BufferID{}
			for _, r := range k.Required() {
				required = append(required, r.Buffer)
			}
			assert.Equal(t, tt.required, required)
		})
	}
}

func TestPlacementOptions(t *testing.T) {
	g := dag.New()
	v := dag.AddValue[any](g, "batch", dag.SizeHint(4096)).ID()
	raw := g.AddBuffer("raw", 64, dag.SizeHint(7))
	neg := dag.AddValue[any](g, "neg", dag.SizeHint(-5)).ID()
	pinned := g.Kernel(g.AddKernel("pinned", nop, dag.Writes(v), dag.OnDevice(topology.GPU(2)), dag.Estimate(3*time.Millisecond)))
	preferring := g.Kernel(g.AddKernel("preferring", nop, dag.Reads(v), dag.Writes(raw, neg), dag.PreferDevice(topology.CPU)))
	plain := g.Kernel(g.AddKernel("plain", nop, dag.Reads(raw)))
	require.NoError(t, g.Validate())

	require.NotNil(t, pinned.Device)
	assert.Equal(t, topology.GPU(2), *pinned.Device)
	assert.Nil(t, pinned.Prefer)
	assert.Equal(t, 3*time.Millisecond, pinned.Estimate)
	require.NotNil(t, preferring.Prefer)
	assert.Equal(t, topology.CPU, *preferring.Prefer)
	assert.Nil(t, preferring.Device)
	assert.Nil(t, plain.Device)
	assert.Zero(t, plain.Estimate)
	assert.Equal(t, int64(4096), g.Buffer(v).TransferBytes())
	assert.Equal(t, int64(64), g.Buffer(raw).TransferBytes(), "a raw buffer moves its size, whatever the hint")
	assert.Equal(t, int64(0), g.Buffer(neg).TransferBytes(), "a negative hint counts as unknown")

	bad := dag.New()
	bad.AddKernel("k", nop, dag.Estimate(-time.Second))
	assert.EqualError(t, bad.Validate(), `dag: kernel "k": negative estimate -1s`)
}

func TestGrowBuildsTheSameGraph(t *testing.T) {
	build := func(g *dag.Graph) *dag.Graph {
		prev := dag.BufferID(-1)
		for i := range 3000 {
			out := dag.AddValue[any](g, name("b", i)).ID()
			if prev >= 0 {
				g.AddKernel(name("k", i), nop, dag.Reads(prev), dag.Writes(out))
			} else {
				g.AddKernel(name("k", i), nop, dag.Writes(out))
			}
			prev = out
		}
		return g
	}
	plain := build(dag.New())
	grown := dag.New()
	grown.Grow(3000, 3000)
	grown = build(grown)
	more := dag.New()
	more.Grow(10, 10) // too little: the rest grows as usual
	more = build(more)
	for _, g := range []*dag.Graph{grown, more} {
		require.Equal(t, plain.NumKernels(), g.NumKernels())
		require.Equal(t, plain.NumBuffers(), g.NumBuffers())
		for i, k := range plain.Kernels() {
			got := g.Kernel(i)
			assert.Equal(t, k.Name, got.Name)
			assert.Equal(t, k.Reads, got.Reads)
			assert.Equal(t, k.Writes, got.Writes)
		}
		for i, b := range plain.Buffers() {
			assert.Equal(t, b, g.Buffer(i))
		}
		require.NoError(t, g.Validate())
		assert.Equal(t, plain.Predecessors(), g.Predecessors())
	}
	assert.Panics(t, func() { dag.New().Grow(-1, 0) })
	assert.Panics(t, func() { dag.New().Grow(0, -1) })
}

// TestBuildAllocatesOnlyItsOptions: building allocates, per kernel, only
// its options (one function value each), amortised.
func TestBuildAllocatesOnlyItsOptions(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	const n = 4096
	bufNames, kernelNames := make([]string, n), make([]string, n)
	for i := range n {
		bufNames[i], kernelNames[i] = name("b", i), name("k", i)
	}
	for _, grow := range []bool{false, true} {
		var g *dag.Graph
		i := 0
		// Each run adds one buffer and one kernel reading the previous
		// buffer and writing the new one.
		allocs := testing.AllocsPerRun(n-1, func() {
			if g == nil || i == n {
				g, i = dag.New(), 0
				if grow {
					g.Grow(n, n)
				}
				g.AddKernel(kernelNames[0], nop, dag.Writes(dag.AddValue[any](g, bufNames[0]).ID()))
				i = 1
			}
			out := dag.AddValue[any](g, bufNames[i]).ID()
			g.AddKernel(kernelNames[i], nop, dag.Reads(out-1), dag.Writes(out))
			i++
		})
		assert.Equal(t, 2.0, allocs, "grow=%v: allocations per kernel, amortised: its two options", grow)
	}
}
