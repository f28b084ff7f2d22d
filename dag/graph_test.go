package dag_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/graph"
	"gonum.org/v1/gonum/graph/topo"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
)

// orderNames returns the names of g.Order().
func orderNames(g *dag.Graph) []string {
	order := g.Order()
	if order == nil {
		return nil
	}
	names := make([]string, len(order))
	for i, id := range order {
		names[i] = g.Kernel(id).Name
	}
	return names
}

// diamond builds src → (left, right) → join, adding right before left so
// that right has the lower id.
func diamond() *dag.Graph {
	g := dag.New()
	in := g.AddBuffer("in", 64, dag.Input())
	s := g.AddBuffer("s", 64)
	l := g.AddBuffer("l", 32)
	r := g.AddBuffer("r", 32)
	out := dag.AddValue[any](g, "out").ID()
	g.AddKernel("src", nop, dag.Reads(in), dag.Writes(s))
	g.AddKernel("right", nop, dag.ReadsRange(s, 32, 32), dag.Writes(r))
	g.AddKernel("left", nop, dag.ReadsRange(s, 0, 32), dag.Writes(l))
	g.AddKernel("join", nop, dag.Reads(l, r), dag.Writes(out))
	return g
}

func TestOrder(t *testing.T) {
	tests := []struct {
		name  string
		build func() *dag.Graph
		want  []dag.KernelID
	}{
		{
			name:  "diamond",
			build: diamond,
			want:  []dag.KernelID{0, 1, 2, 3},
		},
		{
			name: "diamond added sink first",
			build: func() *dag.Graph {
				g := dag.New()
				s := g.AddBuffer("s", 8)
				l := g.AddBuffer("l", 8)
				r := g.AddBuffer("r", 8)
				g.AddKernel("join", nop, dag.Reads(l, r))
				g.AddKernel("right", nop, dag.Reads(s), dag.Writes(r))
				g.AddKernel("left", nop, dag.Reads(s), dag.Writes(l))
				g.AddKernel("src", nop, dag.Writes(s))
				return g
			},
			want: []dag.KernelID{3, 1, 2, 0},
		},
		{
			// Two independent chains, 0 → 3 and 1 → 2: once 0 and 1 have
			// run, both 2 and 3 are ready and the lower id goes first.
			name: "ready kernels by id across chains",
			build: func() *dag.Graph {
				g := dag.New()
				a := g.AddBuffer("a", 8)
				b := g.AddBuffer("b", 8)
				g.AddKernel("a0", nop, dag.Writes(a))
				g.AddKernel("b0", nop, dag.Writes(b))
				g.AddKernel("b1", nop, dag.Reads(b))
				g.AddKernel("a1", nop, dag.Reads(a))
				return g
			},
			want: []dag.KernelID{0, 1, 2, 3},
		},
		{
			name: "long chain and a late independent kernel",
			build: func() *dag.Graph {
				g := dag.New()
				x := g.AddBuffer("x", 8)
				y := g.AddBuffer("y", 8)
				g.AddKernel("c2", nop, dag.Reads(y))
				g.AddKernel("c1", nop, dag.Reads(x), dag.Writes(y))
				g.AddKernel("c0", nop, dag.Writes(x))
				g.AddKernel("alone", nop)
				return g
			},
			want: []dag.KernelID{2, 1, 0, 3},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := tt.build()
			require.NoError(t, g.Validate())
			assert.Equal(t, tt.want, g.Order())
		})
	}
}

func TestOrderResetByChanges(t *testing.T) {
	g := diamond()
	assert.Nil(t, g.Order(), "before Validate")

	require.NoError(t, g.Validate())
	assert.Equal(t, []string{"src", "right", "left", "join"}, orderNames(g))

	g.AddKernel("sink", nop, dag.Reads(3)) // buffer 3 is "r": sink is ready before join, but join has the lower id
	assert.Nil(t, g.Order(), "after AddKernel")
	require.NoError(t, g.Validate())
	assert.Equal(t, []string{"src", "right", "left", "join", "sink"}, orderNames(g))

	g.AddBuffer("spare", 8)
	assert.Nil(t, g.Order(), "after AddBuffer")
	require.NoError(t, g.Validate())
	assert.Len(t, g.Order(), 5)

	g.AddKernel("broken", nil)
	require.Error(t, g.Validate())
	assert.Nil(t, g.Order(), "after a failed Validate")
}

func TestPredecessors(t *testing.T) {
	g := diamond()
	assert.Equal(t, [][]dag.KernelID{nil, {0}, {0}, {1, 2}}, g.Predecessors())

	// One writer of several read buffers counts once; a reader of an
	// input buffer has no predecessor for it.
	g = dag.New()
	in := g.AddBuffer("in", 8, dag.Input())
	x := g.AddBuffer("x", 8)
	y := g.AddBuffer("y", 8)
	g.AddKernel("r", nop, dag.Reads(y, in, x))
	g.AddKernel("w", nop, dag.Writes(x, y))
	g.AddKernel("r2", nop, dag.ReadsRange(x, 0, 4), dag.ReadsRange(x, 4, 4))
	assert.Equal(t, [][]dag.KernelID{{1}, nil, {1}}, g.Predecessors())
}

func TestBuilder(t *testing.T) {
	g := dag.New()
	in := g.AddBuffer("in", 16, dag.Input())
	v := dag.AddValue[any](g, "batch").ID()
	out := g.AddBuffer("out", 8)
	k := g.AddKernel("k", nop, dag.Reads(in), dag.ReadsRange(in, 4, 8), dag.Writes(v, out))
	p := g.AddKernel("p", nop, dag.Reads(v), dag.WritesRange(out, 2, 4), dag.OnStream(3))
	require.NoError(t, g.Validate(), "k and p are ordered through batch")

	assert.Equal(t, dag.BufferID(0), in)
	assert.Equal(t, dag.BufferID(2), out)
	assert.Equal(t, dag.KernelID(1), p)

	assert.Equal(t, dag.BufferDecl{ID: in, Name: "in", SizeBytes: 16, Input: true}, g.Buffer(in))
	assert.Equal(t, dag.BufferDecl{ID: v, Name: "batch", Value: true}, g.Buffer(v))
	assert.Equal(t, []dag.BufferDecl{g.Buffer(0), g.Buffer(1), g.Buffer(2)}, buffersOf(g))
	assert.Equal(t, 3, g.NumBuffers())
	assert.Equal(t, buffers.Binding{Buffer: in, Length: 16}, g.Buffer(in).Whole())
	assert.Equal(t, buffers.Binding{Buffer: v, Length: 1}, g.Buffer(v).Whole(), "a value buffer counts as one byte")

	kk := g.Kernel(k)
	assert.Equal(t, "k", kk.Name)
	assert.Equal(t, k, kk.ID)
	assert.Equal(t, -1, kk.Stream, "default stream")
	assert.Equal(t, []buffers.Binding{{Buffer: in, Length: 16}, {Buffer: in, Offset: 4, Length: 8}}, kk.Reads)
	assert.Equal(t, []buffers.Binding{{Buffer: v, Length: 1}, {Buffer: out, Length: 8}}, kk.Writes)
	assert.NotNil(t, kk.Fn)

	pk := g.Kernel(p)
	assert.Equal(t, 3, pk.Stream)
	assert.Equal(t, []buffers.Binding{{Buffer: v, Length: 1}}, pk.Reads)
	assert.Equal(t, []buffers.Binding{{Buffer: out, Offset: 2, Length: 4}}, pk.Writes)
	assert.Equal(t, 2, g.NumKernels())
	var ids []dag.KernelID
	var names []string
	for id, k := range g.Kernels() {
		ids, names = append(ids, id), append(names, k.Name)
	}
	assert.Equal(t, []dag.KernelID{k, p}, ids)
	assert.Equal(t, []string{"k", "p"}, names)
	assert.Equal(t, "p", g.KernelName(p))
	assert.Equal(t, pk.Reads, g.KernelReads(p))
	assert.Equal(t, pk.Writes, g.KernelWrites(p))
}

// buffersOf returns the views of g's buffers, in id order.
func buffersOf(g *dag.Graph) []dag.BufferDecl {
	var bs []dag.BufferDecl
	for _, b := range g.Buffers() {
		bs = append(bs, b)
	}
	return bs
}

// nodeName names a node of g.Directed() "kernel NAME" or "buffer NAME".
func nodeName(t *testing.T, g *dag.Graph, n graph.Node) string {
	t.Helper()
	switch v := g.NodeOf(n.ID()).(type) {
	case dag.Kernel:
		return "kernel " + v.Name
	case dag.BufferDecl:
		return "buffer " + v.Name
	}
	t.Fatalf("node %d is neither a kernel nor a buffer", n.ID())
	return ""
}

func TestDirected(t *testing.T) {
	g := diamond()
	d := g.Directed()

	var nodes []string
	for _, n := range graph.NodesOf(d.Nodes()) {
		nodes = append(nodes, nodeName(t, g, n))
	}
	assert.ElementsMatch(t, []string{
		"buffer in", "buffer s", "buffer l", "buffer r", "buffer out",
		"kernel src", "kernel right", "kernel left", "kernel join",
	}, nodes)

	var edges []string
	for _, n := range graph.NodesOf(d.Nodes()) {
		for _, to := range graph.NodesOf(d.From(n.ID())) {
			edges = append(edges, nodeName(t, g, n)+" → "+nodeName(t, g, to))
		}
	}
	assert.ElementsMatch(t, []string{
		"buffer in → kernel src",
		"kernel src → buffer s",
		"buffer s → kernel right",
		"buffer s → kernel left",
		"kernel right → buffer r",
		"kernel left → buffer l",
		"buffer l → kernel join",
		"buffer r → kernel join",
		"kernel join → buffer out",
	}, edges)

	assert.Nil(t, g.NodeOf(-1))
	assert.Nil(t, g.NodeOf(1000))
}

func TestDirectedGonumTopoSort(t *testing.T) {
	g := diamond()
	sorted, err := topo.Sort(g.Directed())
	require.NoError(t, err)
	require.Len(t, sorted, 9)

	pos := map[int64]int{}
	for i, n := range sorted {
		pos[n.ID()] = i
	}
	edges, ok := g.Directed().(interface{ Edges() graph.Edges })
	require.True(t, ok, "simple.DirectedGraph lists its edges")
	n := 0
	for _, e := range graph.EdgesOf(edges.Edges()) {
		n++
		assert.Less(t, pos[e.From().ID()], pos[e.To().ID()], "%s before %s",
			nodeName(t, g, e.From()), nodeName(t, g, e.To()))
	}
	assert.Equal(t, 9, n)

	// Kernels in gonum's order agree with Validate's: src first, join last.
	var kernels []string
	for _, n := range sorted {
		if k, ok := g.NodeOf(n.ID()).(dag.Kernel); ok {
			kernels = append(kernels, k.Name)
		}
	}
	require.Len(t, kernels, 4)
	assert.Equal(t, "src", kernels[0])
	assert.Equal(t, "join", kernels[3])

	// On a cycle gonum reports the same component Validate does.
	c := dag.New()
	x := c.AddBuffer("x", 8)
	y := c.AddBuffer("y", 8)
	c.AddKernel("a", nop, dag.Reads(x), dag.Writes(y))
	c.AddKernel("b", nop, dag.Reads(y), dag.Writes(x))
	_, err = topo.Sort(c.Directed())
	var un topo.Unorderable
	require.ErrorAs(t, err, &un)
	require.Len(t, un, 1)
	var comp []string
	for _, n := range un[0] {
		comp = append(comp, nodeName(t, c, n))
	}
	assert.ElementsMatch(t, []string{"kernel a", "kernel b", "buffer x", "buffer y"}, comp)
}
