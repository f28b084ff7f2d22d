package flights_test

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
)

// pushdownRowGroups are the delay ranges of the row groups of
// TestBuildSkipsRowGroups' file, rowsPerGroup rows each; lo > hi makes a
// row group whose delays are all null.
var pushdownRowGroups = [][2]int64{{-20, 0}, {-20, 60}, {1, 1}, {-5, 10}, {1, -1}, {11, 50}}

const rowsPerGroup = 500

// TestBuildSkipsRowGroups: row groups whose delay statistics show that
// no row passes delay > MinDelay are not read at all (every byte of
// theirs is fenced off), and the result equals the reference computed
// from every row.
func TestBuildSkipsRowGroups(t *testing.T) {
	const seed = 1515
	rng := rand.New(rand.NewPCG(seed, seed))
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "origin", Type: arrow.BinaryTypes.String},
		{Name: "delay", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
	}, nil)
	codes := []string{"ATL", "ORD", "DFW", "LAX", "SEA"}
	b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
	defer b.Release()
	type row struct {
		origin string
		delay  int64
		valid  bool
	}
	var rows []row
	for _, r := range pushdownRowGroups {
		for k := range rowsPerGroup {
			o := codes[rng.IntN(len(codes))]
			b.Field(0).(*array.StringBuilder).Append(o)
			if r[0] > r[1] {
				b.Field(1).AppendNull()
				rows = append(rows, row{origin: o})
				continue
			}
			d := r[0] + rng.Int64N(r[1]-r[0]+1)
			switch k { // each row group reaches both ends of its range
			case 0:
				d = r[0]
			case 1:
				d = r[1]
			}
			b.Field(1).(*array.Int64Builder).Append(d)
			rows = append(rows, row{origin: o, delay: d, valid: true})
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var buf bytes.Buffer
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, rowsPerGroup, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
	data := buf.Bytes()
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	require.NoError(t, err)
	meta := pf.MetaData()
	require.NoError(t, pf.Close())
	require.Equal(t, len(pushdownRowGroups), meta.NumRowGroups())

	tests := []struct {
		name     string
		minDelay int64
		skipped  []int
	}{
		{"none", -1000, []int{4}},
		{"min=-20", -20, []int{4}},
		{"min=0", 0, []int{0, 4}},
		{"min=1", 1, []int{0, 2, 4}},
		{"min=10", 10, []int{0, 2, 3, 4}},
		{"min=50", 50, []int{0, 2, 3, 4, 5}},
		{"all", 2000, []int{0, 1, 2, 3, 4, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := &fenced{data: data}
			for _, rg := range tc.skipped {
				for c := range meta.RowGroup(rg).NumColumns() {
					col, err := meta.RowGroup(rg).ColumnChunk(c)
					require.NoError(t, err)
					start := col.DataPageOffset()
					if col.HasDictionaryPage() && col.DictionaryPageOffset() > 0 {
						start = min(start, col.DictionaryPageOffset())
					}
					r.fence = append(r.fence, [2]int64{start, start + col.TotalCompressedSize()})
				}
			}
			src := openParquet(t, "pushdown.parquet", io.ReaderAt(r), int64(len(data)))

			out := runOnCPU(t, src, 3, flights.WithMinDelay(tc.minDelay), flights.WithPartitions(4))
			assert.Equal(t, tc.skipped, out.Pipeline.Skipped, "seed %d", seed)
			require.NoError(t, out.Report.Err(), "seed %d", seed)
			require.NotNil(t, out.Table)
			require.Empty(t, out.Table.Lost)

			want := map[string]flights.Row{}
			for _, rw := range rows {
				if !rw.valid || rw.delay <= tc.minDelay {
					continue
				}
				w := want[rw.origin]
				if w.Count == 0 || rw.delay > w.DelayMax {
					w.DelayMax = rw.delay
				}
				w.Key, w.Count, w.DelaySum = rw.origin, w.Count+1, w.DelaySum+rw.delay
				want[rw.origin] = w
			}
			require.Len(t, out.Table.Rows, len(want), "seed %d", seed)
			for _, got := range out.Table.Rows {
				w := want[got.Key]
				assert.Equal(t, w.Count, got.Count, "seed %d key %s", seed, got.Key)
				assert.Equal(t, w.DelaySum, got.DelaySum, "seed %d key %s", seed, got.Key)
				assert.Equal(t, w.DelayMax, got.DelayMax, "seed %d key %s", seed, got.Key)
			}
		})
	}
}

// TestSkippedRowsCountAsLost: when a row group that is read fails, the
// partitions of its source are lost with all their rows, skipped row
// groups' rows included, as before any skipping.
func TestSkippedRowsCountAsLost(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "origin", Type: arrow.BinaryTypes.String},
		{Name: "delay", Type: arrow.PrimitiveTypes.Int64},
	}, nil)
	b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
	defer b.Release()
	for rg := range 3 {
		for k := range rowsPerGroup {
			b.Field(0).(*array.StringBuilder).Append("ATL")
			b.Field(1).(*array.Int64Builder).Append(int64(rg*100 + k%7)) // row group 0: at most 6
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var buf bytes.Buffer
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, rowsPerGroup, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties()))
	data := buf.Bytes()
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	require.NoError(t, err)
	meta := pf.MetaData()
	require.NoError(t, pf.Close())
	col, err := meta.RowGroup(2).ColumnChunk(1) // delay of the last row group
	require.NoError(t, err)
	r := &fenced{data: data, fence: [][2]int64{{col.DataPageOffset(), col.DataPageOffset() + 1}}}

	src := openParquet(t, "lost.parquet", io.ReaderAt(r), int64(len(data)))
	out := runOnCPU(t, src, 2, flights.WithMinDelay(10), flights.WithPartitions(2))
	assert.Equal(t, []int{0}, out.Pipeline.Skipped)
	require.Error(t, out.Report.Err())
	require.NotNil(t, out.Table)
	assert.Empty(t, out.Table.Rows)
	var lost int64
	for _, l := range out.Table.Lost {
		lost += l.Rows
	}
	assert.Equal(t, int64(3*rowsPerGroup), lost, "every row of the failed source, skipped ones included")
}
