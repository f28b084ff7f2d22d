package kvio_test

import (
	"bytes"
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

// TestIntRange: a Parquet Source states each row group's bounds of a
// signed integer column from its statistics, also through Select, and
// says it does not know them for other columns and for files written
// without statistics.
func TestIntRange(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "d16", Type: arrow.PrimitiveTypes.Int16, Nullable: true},
		{Name: "d64", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "u32", Type: arrow.PrimitiveTypes.Uint32},
		{Name: "s", Type: arrow.BinaryTypes.String},
	}, nil)
	b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
	defer b.Release()
	// Row group 0: d16 in [-7, 9], d64 in [-1<<40, 3]; row group 1: d16
	// all null, d64 = 5.
	for i := range 10 {
		if i < 5 {
			b.Field(0).(*array.Int16Builder).Append(int16([]int{-7, 9, 0, 1, 2}[i]))
			b.Field(1).(*array.Int64Builder).Append([]int64{3, -1 << 40, 0, 1, 2}[i])
		} else {
			b.Field(0).AppendNull()
			b.Field(1).(*array.Int64Builder).Append(5)
		}
		b.Field(2).(*array.Uint32Builder).Append(uint32(i))
		b.Field(3).(*array.StringBuilder).Append("x")
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer tbl.Release()
	write := func(props *parquet.WriterProperties) []byte {
		var buf bytes.Buffer
		require.NoError(t, pqarrow.WriteTable(tbl, &buf, 5, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
		return buf.Bytes()
	}
	open := func(data []byte) kvio.Source {
		f, err := kvio.NewFile("stats.parquet", bytes.NewReader(data), int64(len(data)))
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, f.Close()) })
		src, err := kvio.OpenParquet(t.Context(), f)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, src.Close()) })
		return src
	}
	withStats := open(write(parquet.NewWriterProperties()))
	view, err := kvio.Select(withStats, "s", "d64")
	require.NoError(t, err)
	noStats := open(write(parquet.NewWriterProperties(parquet.WithStats(false))))

	tests := []struct {
		name   string
		src    kvio.Source
		part   int
		column string
		want   kvio.IntRange
		ok     bool
	}{
		{"int16", withStats, 0, "d16", kvio.IntRange{Min: -7, Max: 9}, true},
		{"int16 all null", withStats, 1, "d16", kvio.IntRange{AllNull: true}, true},
		{"int64", withStats, 0, "d64", kvio.IntRange{Min: -1 << 40, Max: 3}, true},
		{"int64 constant", withStats, 1, "d64", kvio.IntRange{Min: 5, Max: 5}, true},
		{"view", view, 0, "d64", kvio.IntRange{Min: -1 << 40, Max: 3}, true},
		{"not in view", view, 0, "d16", kvio.IntRange{}, false},
		{"unsigned", withStats, 0, "u32", kvio.IntRange{}, false},
		{"string", withStats, 0, "s", kvio.IntRange{}, false},
		{"no such column", withStats, 0, "nope", kvio.IntRange{}, false},
		{"no statistics", noStats, 0, "d64", kvio.IntRange{}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rs, ok := tc.src.(kvio.IntRanger)
			require.True(t, ok, "%T is not an IntRanger", tc.src)
			got, ok := rs.IntRange(tc.part, tc.column)
			assert.Equal(t, tc.ok, ok)
			assert.Equal(t, tc.want, got)
		})
	}
	assert.Panics(t, func() { withStats.(kvio.IntRanger).IntRange(2, "d64") })
}
