package bench

import (
	"context"
	"math/rand/v2"
	"strconv"

	"github.com/streamdag/streamdag/dag"
)

// GraphShape builds a benchmark graph whose kernels all run fn.
type GraphShape struct {
	Name  string
	Build func(fn dag.KernelFunc) *dag.Graph
}

// Shapes are the executor benchmark graphs: chain of 10k, fan-out/fan-in
// of 10k, binary tree of depth 14 (2^14-1 kernels, reduction towards the
// root), 100×100 wavefront (each cell reads its left and upper neighbour).
var Shapes = []GraphShape{
	{"chain-10k", func(fn dag.KernelFunc) *dag.Graph { return Chain(10_000, fn) }},
	{"fanout-10k", func(fn dag.KernelFunc) *dag.Graph { return FanOutIn(10_000, fn) }},
	{"tree-d14", func(fn dag.KernelFunc) *dag.Graph { return Tree(14, fn) }},
	{"wavefront-100x100", func(fn dag.KernelFunc) *dag.Graph { return Wavefront(100, fn) }},
}

// RandomDAG is the large shape: a seeded random DAG of 1,000,000 kernels
// (see Random); it is measured on its own, not in the four-shape average.
var RandomDAG = GraphShape{"random-1m", func(fn dag.KernelFunc) *dag.Graph { return Random(1_000_000, RandomSeed, fn) }}

// RandomSeed is the seed of RandomDAG.
const RandomSeed = 20240601

// name returns prefix followed by i in decimal. It is inlined, and the
// graph copies the names it is given, so passed straight to AddValue or
// AddKernel the string stays on the caller's stack: no allocation.
func name(prefix string, i int) string {
	var buf [32]byte
	return string(strconv.AppendInt(append(buf[:0], prefix...), int64(i), 10))
}

// name2 returns prefix, i, "_", j; like name, it is inlined so the string
// need not leave the caller's stack.
func name2(prefix string, i, j int) string {
	var buf [32]byte
	return string(appendPair(append(buf[:0], prefix...), i, j))
}

// appendPair appends i, "_", j to b.
func appendPair(b []byte, i, j int) []byte {
	b = strconv.AppendInt(b, int64(i), 10)
	return strconv.AppendInt(append(b, '_'), int64(j), 10)
}

// Empty is a kernel that does nothing.
func Empty(context.Context, dag.Launch) error { return nil }

// Chain returns n kernels, each reading its predecessor's output.
func Chain(n int, fn dag.KernelFunc) *dag.Graph {
	g := dag.New()
	g.Grow(n, n)
	prev := dag.BufferID(-1)
	for i := range n {
		out := dag.AddValue[any](g, name("b", i)).ID()
		if prev >= 0 {
			g.AddKernel(name("k", i), fn, dag.Writes(out), dag.Reads(prev))
		} else {
			g.AddKernel(name("k", i), fn, dag.Writes(out))
		}
		prev = out
	}
	return g
}

// FanOutIn returns one source, n workers reading it, and one sink reading
// all workers: n+2 kernels.
func FanOutIn(n int, fn dag.KernelFunc) *dag.Graph {
	g := dag.New()
	g.Grow(n+2, n+1)
	src := dag.AddValue[any](g, "src").ID()
	g.AddKernel("source", fn, dag.Writes(src))
	outs := make([]dag.BufferID, n)
	for i := range n {
		outs[i] = dag.AddValue[any](g, name("w", i)).ID()
		g.AddKernel(name("worker", i), fn, dag.Reads(src), dag.Writes(outs[i]))
	}
	g.AddKernel("sink", fn, dag.Reads(outs...))
	return g
}

// Tree returns a complete binary reduction tree of the given depth:
// 2^depth-1 kernels; leaves write, each inner kernel reads its two
// children.
func Tree(depth int, fn dag.KernelFunc) *dag.Graph {
	g := dag.New()
	n := 1<<depth - 1
	g.Grow(n, n)
	bufs := make([]dag.BufferID, n)
	// Node i has children 2i+1 and 2i+2; build leaves first.
	for i := n - 1; i >= 0; i-- {
		bufs[i] = dag.AddValue[any](g, name("t", i)).ID()
		if l := 2*i + 1; l < n {
			g.AddKernel(name("node", i), fn, dag.Writes(bufs[i]), dag.Reads(bufs[l], bufs[l+1]))
		} else {
			g.AddKernel(name("node", i), fn, dag.Writes(bufs[i]))
		}
	}
	return g
}

// Wavefront returns an n×n grid; cell (i, j) reads (i-1, j) and (i, j-1).
func Wavefront(n int, fn dag.KernelFunc) *dag.Graph {
	g := dag.New()
	g.Grow(n*n, n*n)
	bufs := make([]dag.BufferID, n*n)
	for i := range n {
		for j := range n {
			bufs[i*n+j] = dag.AddValue[any](g, name2("c", i, j)).ID()
			// The reads in a fixed array: no allocation.
			var reads [2]dag.BufferID
			nr := 0
			if i > 0 {
				reads[nr], nr = bufs[(i-1)*n+j], nr+1
			}
			if j > 0 {
				reads[nr], nr = bufs[i*n+j-1], nr+1
			}
			g.AddKernel(name2("cell", i, j), fn, dag.Writes(bufs[i*n+j]), dag.Reads(reads[:nr]...))
		}
	}
	return g
}

// RandomWindow is how far back a kernel of Random may read: its inputs
// are outputs of the previous RandomWindow kernels.
const RandomWindow = 1000

// Random returns a seeded random DAG of n kernels: kernel i writes value
// buffer i and reads 0, 1 or 2 (uniformly) distinct outputs chosen
// uniformly among the RandomWindow kernels before it, so the graph is wide
// (on average about a third of a window of kernels are ready at once) and
// every edge is local, like a pipeline unrolled over many batches. The same
// (n, seed) gives the same graph.
func Random(n int, seed uint64, fn dag.KernelFunc) *dag.Graph {
	g := dag.New()
	g.Grow(n, n)
	rng := rand.New(rand.NewPCG(seed, seed))
	var reads [2]dag.BufferID
	for i := range n {
		out := dag.AddValue[any](g, name("r", i)).ID()
		nr := 0
		if i > 0 {
			want := rng.IntN(3)
			lo := max(0, i-RandomWindow)
			for range want {
				b := dag.BufferID(lo + rng.IntN(i-lo))
				if nr == 1 && reads[0] == b {
					continue
				}
				reads[nr] = b
				nr++
			}
		}
		if nr == 0 {
			g.AddKernel(name("rk", i), fn, dag.Writes(out))
		} else {
			g.AddKernel(name("rk", i), fn, dag.Reads(reads[:nr]...), dag.Writes(out))
		}
	}
	return g
}
