package kvio_test

import (
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/kvio"
)

// BenchmarkReadParquet reads flights-3m.parquet whole: "parallel" opens it
// with kvio and reads it with ReadAll, one batch per row group, its column
// chunks shared among GOMAXPROCS goroutines; "sequential", the baseline, is
// pqarrow's plain ReadTable on an os.File.
func BenchmarkReadParquet(b *testing.B) {
	path := testdata.File(b, "flights-3m.parquet")
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	const rows = 3_000_000
	mem := memory.DefaultAllocator

	report := func(b *testing.B) {
		b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	}

	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(st.Size())
		for b.Loop() {
			f, err := kvio.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			s, err := kvio.OpenParquet(b.Context(), f)
			if err != nil {
				b.Fatal(err)
			}
			batches, err := kvio.ReadAll(b.Context(), s, mem)
			if err != nil {
				b.Fatal(err)
			}
			n := int64(0)
			for _, r := range batches {
				n += r.NumRows()
				r.Release()
			}
			if n != rows {
				b.Fatalf("read %d rows, want %d", n, rows)
			}
			s.Close()
			f.Close()
		}
		report(b)
	})

	b.Run("sequential", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(st.Size())
		for b.Loop() {
			f, err := os.Open(path)
			if err != nil {
				b.Fatal(err)
			}
			tbl, err := pqarrow.ReadTable(b.Context(), f, parquet.NewReaderProperties(mem), pqarrow.ArrowReadProperties{}, mem)
			if err != nil {
				b.Fatal(err)
			}
			if tbl.NumRows() != rows {
				b.Fatalf("read %d rows, want %d", tbl.NumRows(), rows)
			}
			tbl.Release()
			f.Close()
		}
		report(b)
	})
}
