package bench

import (
	"context"
	"fmt"

	"github.com/streamdag/streamdag/dag"
)

// Shape builds a benchmark graph whose kernels all run fn.
type Shape struct {
	Name  string
	Build func(fn dag.KernelFunc) *dag.Graph
}

// Shapes are the executor benchmark graphs: chain of 10k, fan-out/fan-in
// of 10k, binary tree of depth 14 (2^14-1 kernels, reduction towards the
// root), 100×100 wavefront (each cell reads its left and upper neighbour).
var Shapes = []Shape{
	{"chain-10k", func(fn dag.KernelFunc) *dag.Graph { return Chain(10_000, fn) }},
	{"fanout-10k", func(fn dag.KernelFunc) *dag.Graph { return FanOutIn(10_000, fn) }},
	{"tree-d14", func(fn dag.KernelFunc) *dag.Graph { return Tree(14, fn) }},
	{"wavefront-100x100", func(fn dag.KernelFunc) *dag.Graph { return Wavefront(100, fn) }},
}

// Empty is a kernel that does nothing.
func Empty(context.Context, dag.Launch) error { return nil }

// Chain returns n kernels, each reading its predecessor's output.
func Chain(n int, fn dag.KernelFunc) *dag.Graph {
	g := dag.New()
	prev := dag.BufferID(-1)
	for i := range n {
		out := g.AddValue(fmt.Sprintf("b%d", i))
		opts := []dag.KernelOption{dag.Writes(out)}
		if prev >= 0 {
			opts = append(opts, dag.Reads(prev))
		}
		g.AddKernel(fmt.Sprintf("k%d", i), fn, opts...)
		prev = out
	}
	return g
}

// FanOutIn returns one source, n workers reading it, and one sink reading
// all workers: n+2 kernels.
func FanOutIn(n int, fn dag.KernelFunc) *dag.Graph {
	g := dag.New()
	src := g.AddValue("src")
	g.AddKernel("source", fn, dag.Writes(src))
	outs := make([]dag.BufferID, n)
	for i := range n {
		outs[i] = g.AddValue(fmt.Sprintf("w%d", i))
		g.AddKernel(fmt.Sprintf("worker%d", i), fn, dag.Reads(src), dag.Writes(outs[i]))
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
	bufs := make([]dag.BufferID, n)
	// Node i has children 2i+1 and 2i+2; build leaves first.
	for i := n - 1; i >= 0; i-- {
		bufs[i] = g.AddValue(fmt.Sprintf("t%d", i))
		opts := []dag.KernelOption{dag.Writes(bufs[i])}
		if l := 2*i + 1; l < n {
			opts = append(opts, dag.Reads(bufs[l], bufs[l+1]))
		}
		g.AddKernel(fmt.Sprintf("node%d", i), fn, opts...)
	}
	return g
}

// Wavefront returns an n×n grid; cell (i, j) reads (i-1, j) and (i, j-1).
func Wavefront(n int, fn dag.KernelFunc) *dag.Graph {
	g := dag.New()
	bufs := make([]dag.BufferID, n*n)
	for i := range n {
		for j := range n {
			bufs[i*n+j] = g.AddValue(fmt.Sprintf("c%d_%d", i, j))
			opts := []dag.KernelOption{dag.Writes(bufs[i*n+j])}
			if i > 0 {
				opts = append(opts, dag.Reads(bufs[(i-1)*n+j]))
			}
			if j > 0 {
				opts = append(opts, dag.Reads(bufs[i*n+j-1]))
			}
			g.AddKernel(fmt.Sprintf("cell%d_%d", i, j), fn, opts...)
		}
	}
	return g
}
