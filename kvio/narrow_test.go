package kvio_test

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/kvio"
)

// intValue returns row i of a signed integer array as an int64.
func intValue(t *testing.T, a arrow.Array, i int) int64 {
	t.Helper()
	switch a := a.(type) {
	case *array.Int8:
		return int64(a.Value(i))
	case *array.Int16:
		return int64(a.Value(i))
	case *array.Int32:
		return int64(a.Value(i))
	case *array.Int64:
		return a.Value(i)
	}
	t.Fatalf("%s is not a signed integer array", a.DataType())
	return 0
}

// TestNarrow: Narrow reads each named integer column as the narrowest
// type its statistics allow, with the values and nulls of the wide read,
// through ReadPart and ReadAll, with the page decoder and through pqarrow
// (delta encoding); columns without statistics, too wide, or not
// integers keep their type.
func TestNarrow(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "tiny", Type: arrow.PrimitiveTypes.Int64, Nullable: true},   // [-100, 100]: int8
		{Name: "small", Type: arrow.PrimitiveTypes.Int64},                  // [-30000, 30000]: int16
		{Name: "mid", Type: arrow.PrimitiveTypes.Int32, Nullable: true},    // [-1000, 1000], a row group of nulls: int16
		{Name: "big", Type: arrow.PrimitiveTypes.Int64},                    // ±2^40: stays
		{Name: "word", Type: arrow.PrimitiveTypes.Int32},                   // ±2^30: stays (nothing narrower)
		{Name: "real", Type: arrow.PrimitiveTypes.Float64, Nullable: true}, // not an integer
	}, nil)
	const seed, rows, groupRows = 9, 4000, 1000
	rng := rand.New(rand.NewPCG(seed, seed))
	b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
	defer b.Release()
	for r := range rows {
		if r%5 == 0 {
			b.Field(0).AppendNull()
		} else {
			b.Field(0).(*array.Int64Builder).Append(rng.Int64N(201) - 100)
		}
		b.Field(1).(*array.Int64Builder).Append(rng.Int64N(60001) - 30000)
		if r/groupRows == 2 {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Int32Builder).Append(rng.Int32N(2001) - 1000)
		}
		b.Field(3).(*array.Int64Builder).Append(rng.Int64N(1<<41) - 1<<40)
		b.Field(4).(*array.Int32Builder).Append(rng.Int32N(1<<31-1) - 1<<30)
		b.Field(5).(*array.Float64Builder).Append(rng.Float64())
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer tbl.Release()
	all := []string{"tiny", "small", "mid", "big", "word", "real"}
	tests := []struct {
		name   string
		props  *parquet.WriterProperties
		narrow []string
		types  []arrow.Type
		// pqarrowLeaks: pqarrow's DELTA_BINARY_PACKED decoder (arrow-go
		// v18.8.0) leaves 64 bytes of each block allocated, so the
		// allocator is not checked.
		pqarrowLeaks bool
	}{
		{"dictionary", parquet.NewWriterProperties(), []string{"tiny", "small", "mid"},
			[]arrow.Type{arrow.INT8, arrow.INT16, arrow.INT16, arrow.INT64, arrow.INT32, arrow.FLOAT64}, false},
		{"delta encoding", parquet.NewWriterProperties(parquet.WithDictionaryDefault(false),
			parquet.WithEncodingFor("tiny", parquet.Encodings.DeltaBinaryPacked), parquet.WithEncodingFor("small", parquet.Encodings.DeltaBinaryPacked),
			parquet.WithEncodingFor("mid", parquet.Encodings.DeltaBinaryPacked)),
			[]string{"tiny", "small", "mid"}, []arrow.Type{arrow.INT8, arrow.INT16, arrow.INT16, arrow.INT64, arrow.INT32, arrow.FLOAT64}, true},
		{"no statistics", parquet.NewWriterProperties(parquet.WithStats(false)), nil,
			[]arrow.Type{arrow.INT64, arrow.INT64, arrow.INT32, arrow.INT64, arrow.INT32, arrow.FLOAT64}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, pqarrow.WriteTable(tbl, &buf, groupRows, tc.props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
			f, err := kvio.NewFile("narrow.parquet", bytes.NewReader(buf.Bytes()), int64(buf.Len()))
			require.NoError(t, err)
			defer func() { assert.NoError(t, f.Close()) }()
			src, err := kvio.OpenParquet(t.Context(), f)
			require.NoError(t, err)
			defer func() { assert.NoError(t, src.Close()) }()
			v, names, err := kvio.Narrow(src, all...)
			require.NoError(t, err)
			assert.Equal(t, tc.narrow, names)
			for j, id := range tc.types {
				assert.Equal(t, id, v.Schema().Field(j).Type.ID(), "column %s", all[j])
			}
			// A Select view of the narrowed view keeps the narrowed types.
			sel, err := kvio.Select(v, "small", "tiny")
			require.NoError(t, err)
			assert.Equal(t, tc.types[1], sel.Schema().Field(0).Type.ID())

			var mem memory.Allocator = memory.NewGoAllocator()
			if !tc.pqarrowLeaks {
				checked := memory.NewCheckedAllocator(memory.NewGoAllocator())
				defer checked.AssertSize(t, 0)
				mem = checked
			}
			got, err := kvio.ReadAll(t.Context(), v, mem)
			require.NoError(t, err)
			defer release(got)
			require.Len(t, got, rows/groupRows)
			for i := range v.NumParts() {
				one, err := v.ReadPart(t.Context(), i, mem)
				require.NoError(t, err)
				want, err := src.ReadPart(t.Context(), i, mem)
				require.NoError(t, err)
				for j := range all {
					w, g, o := want.Column(j), got[i].Column(j), one.Column(j)
					require.True(t, array.Equal(g, o), "part %d column %s: ReadPart and ReadAll differ", i, all[j])
					require.Equal(t, w.NullN(), g.NullN(), "part %d column %s", i, all[j])
					if all[j] == "real" {
						assert.True(t, array.Equal(w, g))
						continue
					}
					for r := range w.Len() {
						require.Equal(t, w.IsNull(r), g.IsNull(r), "part %d column %s row %d", i, all[j], r)
						if w.IsValid(r) {
							require.Equal(t, intValue(t, w, r), intValue(t, g, r), "part %d column %s row %d", i, all[j], r)
						}
					}
				}
				one.Release()
				want.Release()
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		src := parquetSource(t, "narrow.parquet", tbl, groupRows)
		_, _, err := kvio.Narrow(src, "nope")
		assert.ErrorContains(t, err, `kvio: narrow narrow.parquet: unknown column "nope"`)
		_, _, err = kvio.Narrow(src, "tiny", "tiny")
		assert.ErrorContains(t, err, `column "tiny" selected twice`)
	})

	t.Run("ipc", func(t *testing.T) {
		src := ipcSource(t, "narrow.arrow", sc, rec)
		v, names, err := kvio.Narrow(src, "tiny")
		require.NoError(t, err)
		assert.Nil(t, names)
		assert.True(t, v.Schema().Equal(src.Schema()))
	})
}
