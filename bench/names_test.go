package bench

import (
	"testing"

	"github.com/streamdag/streamdag/dag"
)

// nameSink keeps the formatted names' lengths so the compiler cannot drop
// the formatting.
var nameSink int

// BenchmarkBuildNames measures formatting the names of two shapes on its
// own (a buffer's and a kernel's per kernel, as the shapes' builders do),
// so BenchmarkBuild's figures can be split into the names the caller
// formats and the graph's own cost.
func BenchmarkBuildNames(b *testing.B) {
	b.Run("chain-10k", func(b *testing.B) {
		const n = 10_000
		for b.Loop() {
			for i := range n {
				nameSink += len(name("b", i)) + len(name("k", i))
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/kernel")
	})
	b.Run("wavefront-100x100", func(b *testing.B) {
		const n = 100
		for b.Loop() {
			for i := range n {
				for j := range n {
					nameSink += len(name2("c", i, j)) + len(name2("cell", i, j))
				}
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/(n*n), "ns/kernel")
	})
}

// floorKernel and floorBuffer are records the size of dag's own (28 and
// 16 bytes, no pointers).
type (
	floorKernel struct{ name, fn, chunk, off, nr, nw, extra uint32 }
	floorBuffer struct {
		name, flags uint32
		size        int64
	}
)

// floorBinding is the size of a buffers.Binding (24 bytes).
type floorBinding struct{ buffer, offset, length int64 }

// BenchmarkBuildFloor is the floor of BenchmarkBuild's chain-10k: per
// kernel, the same two names formatted and copied, and the same records,
// node ids and two bindings appended to presized slices (the one function
// stored once), with no checks and no options: what any graph store
// holding the same data costs on this machine, to set dag's build cost
// against.
func BenchmarkBuildFloor(b *testing.B) {
	const n = 10_000
	var sink int
	for b.Loop() {
		var (
			ks    = make([]floorKernel, 0, n)
			fns   = []dag.KernelFunc{Empty}
			bs    = make([]floorBuffer, 0, n)
			nodes = make([]int32, 0, 2*n)
			kn    = make([]byte, 0, 8*n)
			bn    = make([]byte, 0, 8*n)
			binds []floorBinding
		)
		for i := range n {
			if len(binds)+2 > cap(binds) {
				binds = make([]floorBinding, 0, 4096)
			}
			nb := uint32(len(bn))
			bn = append(bn, name("b", i)...)
			bs = append(bs, floorBuffer{name: nb, flags: 1})
			nodes = append(nodes, int32(^i))
			nk := uint32(len(kn))
			kn = append(kn, name("k", i)...)
			off := uint32(len(binds))
			binds = append(binds, floorBinding{buffer: int64(i), length: 1})
			nr := uint32(0)
			if i > 0 {
				binds = append(binds, floorBinding{buffer: int64(i - 1), length: 1})
				nr = 1
			}
			ks = append(ks, floorKernel{name: nk, off: off, nr: nr, nw: 1})
			nodes = append(nodes, int32(i))
		}
		sink += len(ks) + len(fns) + len(bs) + len(nodes) + len(kn) + len(bn)
	}
	nameSink += sink
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/kernel")
}
