// Package bench holds streamdag's end-to-end benchmarks and the pieces
// the report (bench/cmd/report) is made of. Every benchmark has a
// baseline measured in the same run, to read its figures against (go test
// prints each as a benchmark of its own; the report computes the ratios):
//
//   - BenchmarkFlights: the flights pipeline end to end on the 3M-row
//     Parquet file (rows/s), beside a plain sequential Go loop over the
//     same columns already decoded.
//   - BenchmarkShapes: executor overhead with empty and ~0.5 µs kernels on
//     Shapes (a chain of 10k, a fan-out/fan-in of 10k, a binary tree of
//     depth 14 and a 100×100 wavefront; ns per launch) under every Runner:
//     a sequential walk of the same graph in topological order (the
//     floor), streamdag with launch timing off and on, a goroutine per
//     task, errgroup and go-taskflow. BenchmarkRandom1M does the same on
//     RandomDAG, 1,000,000 kernels.
//   - BenchmarkOneShot: per kernel on each shape, what running a graph
//     once costs (build, plan, and a one-shot run: PrepareOneShot)
//     beside a reused plan's Execute, and the one-shot ÷ reused ratio of
//     runs alternated in one loop.
//   - BenchmarkWaits: what one cross-stream event wait costs (WaitCost).
//   - BenchmarkBuild: building and validating each shape's graph and the
//     random DAG's, per kernel, beside BenchmarkBuildFloor (ChainFloor: what chain-10k's
//     build stores, appended with no checks) and BenchmarkBuildNames (the
//     names alone).
//   - BenchmarkWarmRead, BenchmarkDecodeParquet, BenchmarkFlightsFrom:
//     kvio against one goroutine's ReadAt and pqarrow's plain read.
//
// ProfileCPU splits a CPU profile of repeated work into categories
// (BuildCategories, ExecCategories): the report uses it to say where the
// worst build and the costliest executor shape spend their time.
//
// To run them all:
//
//	go test -run '^$' -bench . -benchmem ./bench/
//
// Compare two versions with benchstat over -count=10 each.
package bench
