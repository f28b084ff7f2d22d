package bench_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/bench"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
)

// TestShapes checks that every benchmark shape is a valid graph with the
// documented kernel count and runs cleanly.
func TestShapes(t *testing.T) {
	want := map[string]int{"chain-10k": 10_000, "fanout-10k": 10_002, "tree-d14": 1<<14 - 1, "wavefront-100x100": 10_000}
	dev, err := gpu.NewCPU(gpu.WithStreams(2))
	require.NoError(t, err)
	defer dev.Close()
	e := exec.New(dev)
	for _, s := range bench.Shapes {
		g := s.Build(bench.Empty)
		require.NoError(t, g.Validate(), s.Name)
		require.Len(t, g.Kernels(), want[s.Name], s.Name)
		res, err := e.Run(t.Context(), g)
		require.NoError(t, err)
		require.NoError(t, res.Err())
		require.Equal(t, want[s.Name], res.Report.Count(exec.StatusOK))
		res.Close()
	}
}

// seqLaunch is the minimal dag.Launch the sequential walk hands kernels.
type seqLaunch struct {
	dag.Launch
	k *dag.Kernel
}

func (l *seqLaunch) Kernel() string { return l.k.Name }

// BenchmarkShapes measures executor overhead per launch with empty
// kernels: "streamdag" executes a prepared plan (buffers allocated, launches
// queued on 2 streams, waits, error-graph settling, report), "plan+run"
// adds planning, and "sequential" walks the same graph in topological
// order on one goroutine — the floor.
func BenchmarkShapes(b *testing.B) {
	dev, err := gpu.NewCPU()
	require.NoError(b, err)
	defer dev.Close()
	e := exec.New(dev)
	ctx := context.Background()
	for _, s := range bench.Shapes {
		g := s.Build(bench.Empty)
		require.NoError(b, g.Validate())
		n := float64(len(g.Kernels()))
		b.Run(s.Name+"/sequential", func(b *testing.B) {
			order := g.Order()
			var l seqLaunch
			b.ReportAllocs()
			for b.Loop() {
				for _, id := range order {
					l.k = g.Kernel(id)
					if err := l.k.Fn(ctx, &l); err != nil {
						b.Fatal(err)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/launch")
		})
		b.Run(s.Name+"/streamdag", func(b *testing.B) {
			p, err := e.Plan(g)
			require.NoError(b, err)
			b.ReportAllocs()
			for b.Loop() {
				res, err := e.Execute(ctx, p)
				if err != nil {
					b.Fatal(err)
				}
				res.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/launch")
			b.ReportMetric(float64(p.Waits), "waits")
		})
		b.Run(s.Name+"/plan+run", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				res, err := e.Run(ctx, g)
				if err != nil {
					b.Fatal(err)
				}
				res.Close()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/launch")
		})
	}
}
