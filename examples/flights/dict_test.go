package flights_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
)

// TestGroupByDictionary: an origin column the file stores
// dictionary-encoded is read as a dictionary and grouped by its index,
// with the same rows as the reference; one stored plain is read as
// strings. Origins include nulls and, with a small dictionary page
// limit, chunks whose later pages fall back to plain encoding.
func TestGroupByDictionary(t *testing.T) {
	const seed = 1516
	tests := []struct {
		name  string
		props *parquet.WriterProperties
		large bool
		dict  []string
	}{
		{"dictionary", parquet.NewWriterProperties(), false, []string{"origin"}},
		{"large_utf8", parquet.NewWriterProperties(), true, []string{"origin"}},
		{"fallback", parquet.NewWriterProperties(parquet.WithDictionaryPageSizeLimit(64), parquet.WithDataPageSize(256), parquet.WithBatchSize(64)), false, []string{"origin"}},
		{"plain", parquet.NewWriterProperties(parquet.WithDictionaryDefault(false)), false, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			strType := arrow.DataType(arrow.BinaryTypes.String)
			if tc.large {
				strType = arrow.BinaryTypes.LargeString
			}
			sc := arrow.NewSchema([]arrow.Field{
				{Name: "delay", Type: arrow.PrimitiveTypes.Int64},
				{Name: "origin", Type: strType, Nullable: true},
			}, nil)
			b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
			defer b.Release()
			want := map[string]flights.Row{}
			for range 6000 {
				d := rng.Int64N(81) - 20
				b.Field(0).(*array.Int64Builder).Append(d)
				if rng.IntN(20) == 0 {
					b.Field(1).AppendNull()
					continue
				}
				o := fmt.Sprintf("A%02d", rng.IntN(60))
				switch fb := b.Field(1).(type) {
				case *array.StringBuilder:
					fb.Append(o)
				case *array.LargeStringBuilder:
					fb.Append(o)
				}
				if d > 0 {
					w := want[o]
					if w.Count == 0 || d > w.DelayMax {
						w.DelayMax = d
					}
					w.Key, w.Count, w.DelaySum = o, w.Count+1, w.DelaySum+d
					want[o] = w
				}
			}
			rec := b.NewRecordBatch()
			defer rec.Release()
			tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
			defer tbl.Release()
			var buf bytes.Buffer
			require.NoError(t, pqarrow.WriteTable(tbl, &buf, 2500, tc.props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
			data := buf.Bytes()

			src := openParquet(t, "dict.parquet", bytes.NewReader(data), int64(len(data)))
			out := runOnCPU(t, src, 2, flights.WithPartitions(4))
			assert.Equal(t, tc.dict, out.Pipeline.Dictionary)
			require.NoError(t, out.Report.Err(), "seed %d", seed)
			require.NotNil(t, out.Table)
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
