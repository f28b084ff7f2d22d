package bench

import "testing"

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

// BenchmarkBuildFloor measures ChainFloor on 10,000 kernels, the floor of
// BenchmarkBuild's chain-10k.
func BenchmarkBuildFloor(b *testing.B) {
	const n = 10_000
	for b.Loop() {
		nameSink += ChainFloor(n)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/kernel")
}
