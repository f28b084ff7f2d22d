package bench_test

import (
	"context"
	"math"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/kvio"
)

// BenchmarkFlights runs the flights pipeline end to end on the 3M-row
// Parquet file (open, decode in parallel row groups, filter, group, merge,
// sort, top-k) and, beside it, a plain sequential Go loop over the same
// columns already decoded (no I/O, no decode): the ratio is what decoding
// and scheduling cost on top of the arithmetic.
func BenchmarkFlights(b *testing.B) {
	path := testdata.File(b, "flights-3m.parquet")
	b.Run("streamdag", func(b *testing.B) { benchFlightsRun(b, path) })

	b.Run("sequential-loop", func(b *testing.B) { benchSequentialLoop(b, path) })
}

type agg struct{ count, sum, max int64 }

// sequential is the baseline: one loop over decoded columns, grouping by
// origin, then the same sort as the pipeline.
func sequential(recs []arrow.RecordBatch, minDelay int64) []flights.Row {
	m := map[string]*agg{}
	for _, rec := range recs {
		delay := rec.Column(rec.Schema().FieldIndices("delay")[0]).(*array.Int64)
		var origin func(int) string
		switch a := rec.Column(rec.Schema().FieldIndices("origin")[0]).(type) {
		case *array.String:
			origin = a.Value
		case *array.LargeString:
			origin = a.Value
		}
		for i := range delay.Len() {
			d := delay.Value(i)
			if d <= minDelay {
				continue
			}
			k := origin(i)
			a := m[k]
			if a == nil {
				a = &agg{max: math.MinInt64}
				m[k] = a
			}
			a.count++
			a.sum += d
			a.max = max(a.max, d)
		}
	}
	rows := make([]flights.Row, 0, len(m))
	for k, a := range m {
		rows = append(rows, flights.Row{Key: k, Count: a.count, DelaySum: a.sum, DelayMax: a.max,
			DelayMean: float64(a.sum) / float64(a.count)})
	}
	flights.SortRows(rows, flights.KeyOrigin)
	return rows
}

// benchSequentialLoop is the baseline of the flights benchmarks: the file
// at path decoded once, outside the timer, then one plain loop over its
// columns per iteration.
func benchSequentialLoop(b *testing.B, path string) {
	ctx := context.Background()
	f, err := kvio.Open(path)
	require.NoError(b, err)
	defer f.Close()
	src, err := kvio.OpenAuto(ctx, f)
	require.NoError(b, err)
	defer src.Close()
	recs, err := kvio.ReadAll(ctx, src, memory.DefaultAllocator)
	require.NoError(b, err)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	var rows int64
	for _, r := range recs {
		rows += r.NumRows()
	}
	b.ReportAllocs()
	for b.Loop() {
		if len(sequential(recs, 0)) == 0 {
			b.Fatal("no groups")
		}
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}

// benchFlightsRun runs the flights pipeline end to end on the CPU device
// (open path, load, filter, group, merge, sort, top-k) once per iteration
// and reports rows/s.
func benchFlightsRun(b *testing.B, path string, opts ...kvio.LoadOption) {
	ctx := context.Background()
	dev, err := cpu.New()
	require.NoError(b, err)
	defer dev.Close()
	e, err := exec.New(dev)
	require.NoError(b, err)
	var rows int64
	b.ReportAllocs()
	for b.Loop() {
		f, err := kvio.Open(path)
		require.NoError(b, err)
		src, err := kvio.OpenAuto(ctx, f, opts...)
		require.NoError(b, err)
		rows = 0
		for i := range src.NumParts() {
			rows += src.PartRows(i)
		}
		out, err := flights.Run(ctx, e, src)
		require.NoError(b, err)
		require.NotEmpty(b, out.Table.Rows)
		require.NoError(b, src.Close())
		require.NoError(b, f.Close())
	}
	b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
}
