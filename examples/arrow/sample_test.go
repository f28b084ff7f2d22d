package arrow_test

import (
	"flag"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/kvio"
)

var update = flag.Bool("update", false, "rewrite testdata/flights.parquet from the embedded flights sample")

// The example's input, and its shape: the first sampleRows rows of the
// embedded flights sample, in row groups of groupRows rows.
const (
	sampleFile = "testdata/flights.parquet"
	sampleRows = 2000
	groupRows  = 1000
)

// TestSampleParquet: testdata/flights.parquet holds the first 2000 rows of
// the embedded flights sample (every column, types kept), in two row
// groups of 1000 rows, which kvio opens as two parts. With -update it is
// written anew from the sample first.
func TestSampleParquet(t *testing.T) {
	ctx := t.Context()
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	f, err := flights.Sample()
	require.NoError(t, err)
	defer f.Close()
	src, err := kvio.OpenIPC(ctx, f)
	require.NoError(t, err)
	defer src.Close()
	rec, err := src.ReadPart(ctx, 0, mem)
	require.NoError(t, err)
	defer rec.Release()
	head := rec.NewSlice(0, sampleRows)
	defer head.Release()

	if *update {
		tbl := array.NewTableFromRecords(head.Schema(), []arrow.RecordBatch{head})
		defer tbl.Release()
		out, err := os.Create(sampleFile)
		require.NoError(t, err)
		props := parquet.NewWriterProperties(parquet.WithAllocator(mem))
		// WriteTable closes out.
		require.NoError(t, pqarrow.WriteTable(tbl, out, groupRows, props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
	}

	pf, err := kvio.Open(sampleFile)
	require.NoError(t, err)
	defer pf.Close()
	pq, err := kvio.OpenParquet(ctx, pf)
	require.NoError(t, err)
	defer pq.Close()
	require.Equal(t, sampleRows/groupRows, pq.NumParts())
	require.Equal(t, head.Schema().NumFields(), pq.Schema().NumFields())
	for j, fd := range head.Schema().Fields() {
		got := pq.Schema().Field(j)
		assert.Equal(t, fd.Name, got.Name, "column %d", j)
		assert.True(t, arrow.TypeEqual(fd.Type, got.Type), "column %s is %v, want %v", fd.Name, got.Type, fd.Type)
	}
	for i := range pq.NumParts() {
		require.Equal(t, int64(groupRows), pq.PartRows(i))
		part, err := pq.ReadPart(ctx, i, mem)
		require.NoError(t, err)
		want := head.NewSlice(int64(i*groupRows), int64((i+1)*groupRows))
		for j := range want.Schema().Fields() {
			assert.True(t, array.Equal(want.Column(j), part.Column(j)), "row group %d, column %d differs from the sample's rows", i, j)
		}
		want.Release()
		part.Release()
	}
}
