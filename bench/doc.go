// Package bench holds streamdag's end-to-end benchmarks. Every benchmark
// runs beside a baseline in the same run, so results read as ratios:
//
//   - BenchmarkFlights: the flights pipeline end to end on the 3M-row
//     Parquet file (rows/s), beside a plain sequential Go loop over the
//     same columns already decoded.
//   - BenchmarkShapes: executor overhead with empty kernels on a chain of
//     10k, a fan-out/fan-in of 10k, a binary tree of depth 14 and a 100×100
//     wavefront (ns per launch), beside a sequential walk of the same graph
//     in topological order, the floor.
//
// Run: go test -run '^$' -bench . -benchmem ./bench/
// Compare runs with benchstat over -count=10.
package bench
