package flights_test

import (
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
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
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/kvio"
)

// fenced is an io.ReaderAt over data that fails every read overlapping one
// of the byte ranges in fence, and counts the reads it served.
type fenced struct {
	data  []byte
	fence [][2]int64

	mu    sync.Mutex
	reads int
}

func (f *fenced) ReadAt(p []byte, off int64) (int, error) {
	for _, r := range f.fence {
		if off < r[1] && r[0] < off+int64(len(p)) {
			return 0, fmt.Errorf("read [%d, %d) of a column the pipeline does not use [%d, %d)", off, off+int64(len(p)), r[0], r[1])
		}
	}
	f.mu.Lock()
	f.reads++
	f.mu.Unlock()
	return bytes.NewReader(f.data).ReadAt(p, off)
}

// flightsBatch returns rows seeded random rows of sc: "delay" in
// [-20, 60], "origin" one of a few codes, "time" in [0, 24), and
// other columns filled with values the pipeline must never see.
func flightsBatch(sc *arrow.Schema, rows int, seed uint64) arrow.RecordBatch {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
	defer b.Release()
	codes := []string{"ATL", "ORD", "DFW", "LAX", "SEA"}
	for range rows {
		for j, f := range sc.Fields() {
			switch fb := b.Field(j).(type) {
			case *array.Int64Builder:
				fb.Append(rng.Int64N(81) - 20)
			case *array.Int16Builder:
				fb.Append(int16(rng.IntN(81) - 20))
			case *array.Float32Builder:
				fb.Append(rng.Float32() * 24)
			case *array.StringBuilder:
				if f.Name == "origin" {
					fb.Append(codes[rng.IntN(len(codes))])
				} else {
					fb.Append(fmt.Sprint("unused-", rng.Int()))
				}
			default:
				panic(fmt.Sprintf("flightsBatch: no values for %s", f.Type))
			}
		}
	}
	return b.NewRecordBatch()
}

// TestBuildReadsOnlyItsColumns: the source kernels read only the columns
// of Pipeline.Columns: the pipeline gets the reference's rows from a
// Parquet file whose other columns' chunks cannot be read at all.
func TestBuildReadsOnlyItsColumns(t *testing.T) {
	const seed = 15
	tests := []struct {
		name   string
		fields []arrow.Field
		want   []string
	}{
		{
			name: "origin",
			fields: []arrow.Field{
				{Name: "dest", Type: arrow.BinaryTypes.String},
				{Name: "origin", Type: arrow.BinaryTypes.String},
				{Name: "distance", Type: arrow.PrimitiveTypes.Int64},
				{Name: "delay", Type: arrow.PrimitiveTypes.Int64},
			},
			want: []string{"delay", "origin"},
		},
		{
			name: "hour",
			fields: []arrow.Field{
				{Name: "delay", Type: arrow.PrimitiveTypes.Int16},
				{Name: "dest", Type: arrow.BinaryTypes.String},
				{Name: "time", Type: arrow.PrimitiveTypes.Float32},
			},
			want: []string{"delay", "time"},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sc := arrow.NewSchema(tc.fields, nil)
			rec := flightsBatch(sc, 4000, seed)
			defer rec.Release()
			tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
			defer tbl.Release()
			var buf bytes.Buffer
			require.NoError(t, pqarrow.WriteTable(tbl, &buf, 1000, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
			data := buf.Bytes()

			pf, err := file.NewParquetReader(bytes.NewReader(data))
			require.NoError(t, err)
			meta := pf.MetaData()
			require.NoError(t, pf.Close())
			r := &fenced{data: data}
			for rg := range meta.NumRowGroups() {
				for c, f := range tc.fields {
					if f.Name == tc.want[0] || f.Name == tc.want[1] {
						continue
					}
					col, err := meta.RowGroup(rg).ColumnChunk(c)
					require.NoError(t, err)
					start := col.DataPageOffset()
					if col.HasDictionaryPage() && col.DictionaryPageOffset() > 0 {
						start = min(start, col.DictionaryPageOffset())
					}
					r.fence = append(r.fence, [2]int64{start, start + col.TotalCompressedSize()})
				}
			}
			require.NotEmpty(t, r.fence)

			src := openParquet(t, "fenced.parquet", io.ReaderAt(r), int64(len(data)))
			assert.Len(t, src.Schema().Fields(), len(tc.fields), "the source itself keeps every column")

			out := runOnCPU(t, src, 2)
			assert.Equal(t, tc.want, out.Pipeline.Columns)
			require.NoError(t, out.Report.Err(), "seed %d", seed)
			require.NotNil(t, out.Table)
			require.Empty(t, out.Table.Lost)
			want := reference(t, []arrow.RecordBatch{rec}, 0)
			require.Len(t, out.Table.Rows, len(want), "seed %d", seed)
			for _, row := range out.Table.Rows {
				w := want[row.Key]
				assert.Equal(t, w.Count, row.Count, "seed %d key %s", seed, row.Key)
				assert.Equal(t, w.DelaySum, row.DelaySum, "seed %d key %s", seed, row.Key)
				assert.Equal(t, w.DelayMax, row.DelayMax, "seed %d key %s", seed, row.Key)
			}
			r.mu.Lock()
			assert.Positive(t, r.reads)
			r.mu.Unlock()
		})
	}
}

// openParquet opens the Parquet bytes r (size bytes) as a source named
// name, closed when the test ends.
func openParquet(t *testing.T, name string, r io.ReaderAt, size int64) kvio.Source {
	t.Helper()
	f, err := kvio.NewFile(name, r, size)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	src, err := kvio.OpenParquet(t.Context(), f)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, src.Close()) })
	return src
}

// runOnCPU runs the flights pipeline over src on a CPU device of streams
// streams, with a leak-checked allocator.
func runOnCPU(t *testing.T, src kvio.Source, streams int, opts ...flights.Option) *flights.Output {
	t.Helper()
	dev, err := cpu.New(cpu.WithStreams(streams))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	e, err := exec.New(dev, exec.WithAllocator(leaktest.Allocator(t)))
	require.NoError(t, err)
	out, err := flights.Run(t.Context(), e, src, opts...)
	require.NoError(t, err)
	return out
}
