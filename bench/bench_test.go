package bench_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/bench"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
)

// benchRunners measures every runner on g (built with w's kernels): one
// sub-benchmark per runner, reporting ns/launch and launches/s.
func benchRunners(b *testing.B, g *dag.Graph) {
	require.NoError(b, g.Validate())
	n := float64(g.NumKernels())
	for _, r := range bench.Runners {
		b.Run(r.Name, func(b *testing.B) {
			run, done, err := r.Prepare(g)
			require.NoError(b, err)
			defer done()
			b.ReportAllocs()
			for b.Loop() {
				if err := run(); err != nil {
					b.Fatal(err)
				}
			}
			ns := float64(b.Elapsed().Nanoseconds()) / float64(b.N) / n
			b.ReportMetric(ns, "ns/launch")
			b.ReportMetric(1e9/ns, "launches/s")
		})
	}
}

// BenchmarkShapes runs every shape with empty and ~0.5 µs kernels under
// every runner (sequential floor, streamdag, goroutine per task, errgroup,
// go-taskflow): go test -run '^$' -bench Shapes ./bench/
func BenchmarkShapes(b *testing.B) {
	for _, w := range []bench.Work{bench.EmptyWork, bench.SpinWork()} {
		for _, s := range bench.Shapes {
			b.Run(s.Name+"/"+w.Name, func(b *testing.B) { benchRunners(b, s.Build(w.Kernel)) })
		}
	}
}

// BenchmarkRandom1M runs the random DAG of 1,000,000 empty kernels under
// every runner (a few seconds per runner; the graph takes about as long
// to build).
func BenchmarkRandom1M(b *testing.B) {
	benchRunners(b, bench.RandomDAG.Build(bench.Empty))
}

// BenchmarkBuild measures building each shape's graph (AddValue and
// AddKernel per kernel, names included), and validating it, per kernel.
func BenchmarkBuild(b *testing.B) {
	for _, s := range append(bench.Shapes[:len(bench.Shapes):len(bench.Shapes)], bench.RandomDAG) {
		b.Run(s.Name+"/build", func(b *testing.B) {
			var g *dag.Graph
			b.ReportAllocs()
			for b.Loop() {
				g = s.Build(bench.Empty)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(g.NumKernels()), "ns/kernel")
		})
		b.Run(s.Name+"/validate", func(b *testing.B) {
			g := s.Build(bench.Empty)
			n := float64(g.NumKernels())
			b.ReportAllocs()
			for b.Loop() {
				if err := g.Validate(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/kernel")
		})
	}
}

// BenchmarkWaits reports the cost of one cross-stream event wait (see
// bench.WaitCost): a 10k chain pinned to one stream against the same
// chain alternating between two streams.
func BenchmarkWaits(b *testing.B) {
	for b.Loop() {
		waits, ns, _, _, err := bench.WaitCost(10_000, 200*1e6)
		require.NoError(b, err)
		b.ReportMetric(float64(waits), "waits")
		b.ReportMetric(ns, "ns/wait")
	}
}

// BenchmarkOneShot measures, per kernel, on each shape with empty
// kernels, what running a graph once costs beside running a reused plan:
// build (the graph alone), plan (Executor.Plan of a built and validated
// graph, which Plan does not validate again), oneshot (build,
// Executor.Run and Result.Close on a fresh graph each time:
// bench.PrepareOneShot) and reused (Execute of one plan: the streamdag
// runner, the baseline). ratio alternates a
// one-shot run and a reused one in each iteration and reports
// oneshot÷reused, a ratio measured in the same run:
//
//	go test -run '^$' -bench OneShot -benchtime 200ms -count 3 ./bench/
func BenchmarkOneShot(b *testing.B) {
	perKernel := func(b *testing.B, n int) {
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/kernel")
	}
	for _, s := range bench.Shapes {
		g := s.Build(bench.Empty)
		require.NoError(b, g.Validate())
		n := g.NumKernels()
		b.Run(s.Name+"/build", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				s.Build(bench.Empty)
			}
			perKernel(b, n)
		})
		b.Run(s.Name+"/plan", func(b *testing.B) {
			dev, err := cpu.New()
			require.NoError(b, err)
			defer dev.Close()
			e, err := exec.New(dev)
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := e.Plan(g); err != nil {
					b.Fatal(err)
				}
			}
			perKernel(b, n)
		})
		oneShot, doneOne, err := bench.PrepareOneShot(s, bench.Empty)
		require.NoError(b, err)
		reused, doneReused, err := bench.Runners[1].Prepare(g)
		require.NoError(b, err)
		require.Equal(b, "streamdag", bench.Runners[1].Name)
		b.Run(s.Name+"/oneshot", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := oneShot(); err != nil {
					b.Fatal(err)
				}
			}
			perKernel(b, n)
		})
		b.Run(s.Name+"/reused", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := reused(); err != nil {
					b.Fatal(err)
				}
			}
			perKernel(b, n)
		})
		b.Run(s.Name+"/ratio", func(b *testing.B) {
			var one, re time.Duration
			for b.Loop() {
				t := time.Now()
				if err := oneShot(); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				if err := reused(); err != nil {
					b.Fatal(err)
				}
				one, re = one+t2.Sub(t), re+time.Since(t2)
			}
			b.ReportMetric(float64(one.Nanoseconds())/float64(b.N)/float64(n), "oneshot-ns/kernel")
			b.ReportMetric(float64(re.Nanoseconds())/float64(b.N)/float64(n), "reused-ns/kernel")
			b.ReportMetric(float64(one)/float64(re), "oneshot/reused")
		})
		doneOne()
		doneReused()
	}
}
