package kvio

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"

	"github.com/streamdag/streamdag/internal/testdata"
)

// BenchmarkParquetDecoders decodes the columns the flights job reads from
// flights-3m.parquet (delay, int64; origin, strings as dictionary
// indices), every row group, with the decoders kvio could use:
// "pages", kvio's page decoder into Arrow arrays (ReadPart, a row group's
// columns in parallel); "pages-in-order", the same decoder with the
// columns of a row group one after the other; "pqarrow", arrow-go's
// pqarrow into the same arrays; "columnreader", the floor of arrow-go's
// lower-level typed column readers (parquet/file ReadBatch into reused
// []int64 and []parquet.ByteArray, which give values, not dictionary
// indices, and build no array).
func BenchmarkParquetDecoders(b *testing.B) {
	s, err := Select(openPages(b, testdata.File(b, "flights-3m.parquet")), "delay", "origin")
	if err != nil {
		b.Fatal(err)
	}
	ps := s.(*parquetSource)
	const rows = 3_000_000
	for _, tc := range []struct {
		name string
		src  *parquetSource
	}{{"pages", ps}, {"pqarrow", viaPqarrow(ps)}} {
		b.Run("decoder="+tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for i := range tc.src.NumParts() {
					rec, err := tc.src.ReadPart(b.Context(), i, memory.DefaultAllocator)
					if err != nil {
						b.Fatal(err)
					}
					rec.Release()
				}
			}
			b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
		})
	}
	b.Run("decoder=pages-in-order", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			for i := range ps.NumParts() {
				cols, _, err := readInOrder(b.Context(), ps, i, memory.DefaultAllocator)
				if err != nil {
					b.Fatal(err)
				}
				releaseAll(cols)
			}
		}
		b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("decoder=columnreader", func(b *testing.B) {
		b.ReportAllocs()
		var (
			delay  []int64
			origin []parquet.ByteArray
			defs   []int16
		)
		for b.Loop() {
			pf, err := file.NewParquetReader(ps.reader(b.Context()), file.WithMetadata(ps.meta))
			if err != nil {
				b.Fatal(err)
			}
			for rg := range ps.NumParts() {
				n := ps.rows[rg]
				delay, origin, defs = grow(delay, int(n)), grow(origin, int(n)), grow(defs, int(n))
				r := pf.RowGroup(rg)
				dc, err := r.Column(1)
				if err != nil {
					b.Fatal(err)
				}
				if total, _, err := dc.(*file.Int64ColumnChunkReader).ReadBatch(n, delay, defs, nil); err != nil || total != n {
					b.Fatal(total, err)
				}
				oc, err := r.Column(3)
				if err != nil {
					b.Fatal(err)
				}
				if total, _, err := oc.(*file.ByteArrayColumnChunkReader).ReadBatch(n, origin, defs, nil); err != nil || total != n {
					b.Fatal(total, err)
				}
			}
		}
		b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}
