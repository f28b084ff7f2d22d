package exec_test

import (
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/exec"
)

// CopyRecord counts every buffer it copies: for a dictionary column, the
// dictionary's values as well as the indices.
func TestCopyRecordCountsDictionaryValues(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	b := array.NewDictionaryBuilder(mem, dt).(*array.BinaryDictionaryBuilder)
	for _, s := range []string{"ORD", "DFW", "ORD", "ATL"} {
		require.NoError(t, b.AppendString(s))
	}
	col := b.NewArray()
	b.Release()
	defer col.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: "origin", Type: dt}}, nil)
	rec := array.NewRecordBatch(schema, []arrow.Array{col}, int64(col.Len()))
	defer rec.Release()

	out, n, err := exec.CopyRecord(rec, mem)
	require.NoError(t, err)
	defer out.Release()
	// The copy's bytes: its indices' buffers and its dictionary's.
	var want int64
	data := out.Column(0).Data()
	for _, d := range []arrow.ArrayData{data, data.Dictionary()} {
		for _, buf := range d.Buffers() {
			if buf != nil {
				want += int64(buf.Len())
			}
		}
	}
	require.Positive(t, data.Dictionary().Buffers()[2].Len(), "the values' bytes")
	assert.Equal(t, want, n)
	assert.Equal(t, "ORD", out.Column(0).(*array.Dictionary).ValueStr(2))
}
