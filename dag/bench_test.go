package dag_test

import (
	"testing"

	"github.com/streamdag/streamdag/dag"
)

// chain builds a chain of n kernels from prebuilt names: kernel i reads
// buffer i-1 and writes buffer i.
func chain(g *dag.Graph, bufNames, kernelNames []string) *dag.Graph {
	prev := dag.BufferID(-1)
	for i := range bufNames {
		out := dag.AddValue[any](g, bufNames[i]).ID()
		if prev >= 0 {
			g.AddKernel(kernelNames[i], nop, dag.Reads(prev), dag.Writes(out))
		} else {
			g.AddKernel(kernelNames[i], nop, dag.Writes(out))
		}
		prev = out
	}
	return g
}

// BenchmarkBuild measures AddValue plus AddKernel per kernel of a 10k
// chain (names built outside the timer), without and with Grow, beside a
// baseline that only appends each kernel's names and buffer ids to plain
// slices: a floor for any store that keeps them.
func BenchmarkBuild(b *testing.B) {
	const n = 10_000
	bufNames, kernelNames := make([]string, n), make([]string, n)
	for i := range n {
		bufNames[i], kernelNames[i] = name("b", i), name("k", i)
	}
	perKernel := func(b *testing.B) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/kernel")
	}
	b.Run("baseline=slices", func(b *testing.B) {
		type rec struct {
			name         string
			reads, write int64
		}
		b.ReportAllocs()
		for b.Loop() {
			var names []string
			var recs []rec
			for i := range n {
				names = append(names, bufNames[i])
				recs = append(recs, rec{kernelNames[i], int64(i - 1), int64(i)})
			}
			_, _ = names, recs
		}
		perKernel(b)
	})
	b.Run("grow=false", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			chain(dag.New(), bufNames, kernelNames)
		}
		perKernel(b)
	})
	b.Run("grow=true", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			g := dag.New()
			g.Grow(n, n)
			chain(g, bufNames, kernelNames)
		}
		perKernel(b)
	})
}

// BenchmarkValidate measures Validate per kernel of a 10k chain added in
// dependency order (the linear path) and in reverse (the heap path).
func BenchmarkValidate(b *testing.B) {
	const n = 10_000
	bufNames, kernelNames := make([]string, n), make([]string, n)
	for i := range n {
		bufNames[i], kernelNames[i] = name("b", i), name("k", i)
	}
	forward := chain(dag.New(), bufNames, kernelNames)
	backward := dag.New()
	for i := range n {
		dag.AddValue[any](backward, bufNames[i]).ID()
	}
	for i := n - 1; i >= 0; i-- {
		if i > 0 {
			backward.AddKernel(kernelNames[i], nop, dag.Reads(dag.BufferID(i-1)), dag.Writes(dag.BufferID(i)))
		} else {
			backward.AddKernel(kernelNames[i], nop, dag.Writes(0))
		}
	}
	for _, c := range []struct {
		name string
		g    *dag.Graph
	}{{"order=forward", forward}, {"order=backward", backward}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.g.Validate(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/kernel")
		})
	}
}
