package kvio_test

import (
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/kvio"
)

// sumInt64 adds the non-null values of the int64 chunks.
func sumInt64(t testing.TB, chunks ...arrow.Array) int64 {
	t.Helper()
	var sum int64
	for _, c := range chunks {
		a, ok := c.(*array.Int64)
		require.True(t, ok, "column of type %s", c.DataType())
		for i := range a.Len() {
			if a.IsValid(i) {
				sum += a.Value(i)
			}
		}
	}
	return sum
}

func TestRealParquet(t *testing.T) {
	path := testdata.File(t, "flights-3m.parquet")
	mem := leaktest.Allocator(t)
	s := openSource(t, path, kvio.OpenAuto)

	assert.Equal(t, []string{"date", "delay", "distance", "origin", "destination"}, fieldNames(s.Schema()))
	require.Equal(t, 11, s.NumParts())
	batches, err := kvio.ReadAll(t.Context(), s, mem)
	require.NoError(t, err)
	defer release(batches)

	var rows int64
	delays := make([]arrow.Array, len(batches))
	for i, b := range batches {
		assert.Equal(t, s.PartRows(i), b.NumRows(), "part %d", i)
		rows += b.NumRows()
		delays[i] = b.Column(1)
		assert.NotEmpty(t, str(t, b.Column(3), 0), "origin reads as utf8 or large_utf8")
		assert.NotEmpty(t, str(t, b.Column(4), int(b.NumRows())-1))
	}
	assert.Equal(t, int64(3_000_000), rows)

	// The baseline: pqarrow's plain sequential read of the whole file.
	osf, err := os.Open(path)
	require.NoError(t, err)
	defer osf.Close()
	tbl, err := pqarrow.ReadTable(t.Context(), osf, parquet.NewReaderProperties(memory.DefaultAllocator), pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	require.NoError(t, err)
	defer tbl.Release()
	require.Equal(t, int64(3_000_000), tbl.NumRows())
	want := sumInt64(t, tbl.Column(1).Data().Chunks()...)
	assert.Equal(t, want, sumInt64(t, delays...), "sum of delay")
	t.Logf("sum of delay over %d rows: %d; origin is %s", rows, want, s.Schema().Field(3).Type)
}

func TestRealParquetColumns(t *testing.T) {
	path := testdata.File(t, "flights-3m.parquet")
	mem := leaktest.Allocator(t)
	s := openSource(t, path, kvio.OpenParquet, kvio.WithColumns("origin", "delay"))
	assert.Equal(t, []string{"origin", "delay"}, fieldNames(s.Schema()))
	b, err := s.ReadPart(t.Context(), 10, mem)
	require.NoError(t, err)
	defer b.Release()
	assert.Equal(t, s.PartRows(10), b.NumRows())
	assert.Contains(t, []arrow.Type{arrow.STRING, arrow.LARGE_STRING}, b.Column(0).DataType().ID())
	assert.Equal(t, arrow.INT64, b.Column(1).DataType().ID())
}

func TestRealIPC(t *testing.T) {
	tests := []struct {
		file  string
		parts int
		rows  int64
	}{
		{"flights-231k-multibatch.arrow", 226, 231_083},
		{"flights-200k.arrow", 1, 200_000},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			mem := leaktest.Allocator(t)
			s := openSource(t, testdata.File(t, tc.file), kvio.OpenAuto)
			require.Equal(t, tc.parts, s.NumParts())
			assert.Equal(t, []string{"delay", "distance", "time"}, fieldNames(s.Schema()))
			batches, err := kvio.ReadAll(t.Context(), s, mem)
			require.NoError(t, err)
			defer release(batches)
			var rows int64
			for i, b := range batches {
				assert.Equal(t, s.PartRows(i), b.NumRows(), "part %d", i)
				rows += b.NumRows()
			}
			assert.Equal(t, tc.rows, rows)
		})
	}
}
