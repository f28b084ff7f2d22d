package kvio_test

import (
	"bytes"
	"fmt"
	"slices"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/kvio"
)

// TestDictionary: Dictionary reads a string column the file stores
// dictionary-encoded as dictionary arrays holding the same strings (and
// nulls) as the plain read, also where later pages fell back to plain
// encoding; a column stored plain, a non-string column and an Arrow IPC
// Source read as before.
func TestDictionary(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "n", Type: arrow.PrimitiveTypes.Int64},
		{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
	defer b.Release()
	for i := range 3000 {
		b.Field(0).(*array.Int64Builder).Append(int64(i))
		if i%17 == 0 {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("v%d", (i*7)%(40+i/20)))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer tbl.Release()

	tests := []struct {
		name     string
		props    *parquet.WriterProperties
		dict     []string
		fallback bool
	}{
		{"dictionary", parquet.NewWriterProperties(), []string{"s"}, false},
		{"fallback", parquet.NewWriterProperties(parquet.WithDictionaryPageSizeLimit(64), parquet.WithDataPageSize(256), parquet.WithBatchSize(64)), []string{"s"}, true},
		{"plain", parquet.NewWriterProperties(parquet.WithDictionaryDefault(false)), nil, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			require.NoError(t, pqarrow.WriteTable(tbl, &buf, 1000, tc.props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
			data := buf.Bytes()
			if tc.fallback {
				pf, err := file.NewParquetReader(bytes.NewReader(data))
				require.NoError(t, err)
				col, err := pf.MetaData().RowGroup(2).ColumnChunk(1)
				require.NoError(t, err)
				assert.True(t, slices.ContainsFunc(col.EncodingStats(), func(e metadata.PageEncodingStats) bool {
					return e.Encoding == parquet.Encodings.Plain && e.PageType == 0 // a plain data page
				}), "the writer fell back to plain pages: %v", col.EncodingStats())
				require.NoError(t, pf.Close())
			}
			f, err := kvio.NewFile("dict.parquet", bytes.NewReader(data), int64(len(data)))
			require.NoError(t, err)
			defer func() { assert.NoError(t, f.Close()) }()
			src, err := kvio.OpenParquet(t.Context(), f)
			require.NoError(t, err)
			defer func() { assert.NoError(t, src.Close()) }()
			v, names, err := kvio.Dictionary(src, "s", "n")
			require.NoError(t, err)
			assert.Equal(t, tc.dict, names)
			assert.Equal(t, arrow.INT64, v.Schema().Field(0).Type.ID())
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			for i := range v.NumParts() {
				got, err := v.ReadPart(t.Context(), i, mem)
				require.NoError(t, err)
				plain, err := src.ReadPart(t.Context(), i, mem)
				require.NoError(t, err)
				assert.True(t, array.Equal(plain.Column(0), got.Column(0)))
				want := plain.Column(1).(*array.String)
				if tc.dict == nil {
					assert.True(t, array.Equal(want, got.Column(1)))
				} else {
					d, ok := got.Column(1).(*array.Dictionary)
					require.True(t, ok, "part %d: %T", i, got.Column(1))
					values := d.Dictionary().(*array.String)
					require.Equal(t, want.Len(), d.Len())
					for r := range want.Len() {
						require.Equal(t, want.IsValid(r), d.IsValid(r), "part %d row %d", i, r)
						if want.IsValid(r) {
							require.Equal(t, want.Value(r), values.Value(d.GetValueIndex(r)), "part %d row %d", i, r)
						}
					}
				}
				got.Release()
				plain.Release()
			}
		})
	}

	t.Run("errors", func(t *testing.T) {
		src := parquetSource(t, "dict.parquet", tbl, 1000)
		_, _, err := kvio.Dictionary(src, "nope")
		assert.ErrorContains(t, err, `kvio: dictionary dict.parquet: unknown column "nope"`)
		_, _, err = kvio.Dictionary(src, "s", "s")
		assert.ErrorContains(t, err, `column "s" selected twice`)
	})

	t.Run("ipc", func(t *testing.T) {
		src := ipcSource(t, "dict.arrow", sc, rec)
		v, names, err := kvio.Dictionary(src, "s")
		require.NoError(t, err)
		assert.Nil(t, names)
		assert.True(t, v.Schema().Equal(src.Schema()))
	})
}
