package flights

import (
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// codesBatch returns a batch of one column, "origin": a dictionary array
// of int32 indices codes (null where valid is false) into n strings.
func codesBatch(t *testing.T, mem memory.Allocator, n int, codes []int32, valid []bool) arrow.RecordBatch {
	t.Helper()
	sb := array.NewStringBuilder(mem)
	defer sb.Release()
	for i := range n {
		sb.Append(fmt.Sprint("k", i))
	}
	dict := sb.NewArray()
	defer dict.Release()
	ib := array.NewInt32Builder(mem)
	defer ib.Release()
	ib.AppendValues(codes, valid)
	idx := ib.NewArray()
	defer idx.Release()
	dt := &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
	col := array.NewDictionaryArray(dt, idx, dict)
	defer col.Release()
	schema := arrow.NewSchema([]arrow.Field{{Name: "origin", Type: dt, Nullable: true}}, nil)
	return array.NewRecordBatch(schema, []arrow.Array{col}, int64(len(codes)))
}

// narrowCodes gives a batch the narrowest indices that hold every index,
// null rows' included (uint8, else uint16), with the same strings and
// nulls, and leaves a batch whose indices need int32 as it is, so that
// groupByIndex still reports an index out of range.
func TestNarrowCodes(t *testing.T) {
	tests := []struct {
		name  string
		n     int
		codes []int32
		want  arrow.DataType // nil: the batch comes back as it was
	}{
		{"uint8", 256, []int32{0, 255, 7, 0, 3}, arrow.PrimitiveTypes.Uint8},
		{"uint16", 300, []int32{0, 299, 256, 0, 3}, arrow.PrimitiveTypes.Uint16},
		{"int32", 70000, []int32{0, 69999, 3, 0, 3}, nil},
		{"negative", 10, []int32{0, -1, 3, 0, 3}, nil},
		{"null row's index wide", 10, []int32{0, 1, 3, 1 << 20, 3}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			valid := []bool{true, true, true, false, true}
			rec := codesBatch(t, mem, tc.n, tc.codes, valid)
			got := narrowCodes(rec, "origin", mem)
			defer got.Release()
			d := got.Column(0).(*array.Dictionary)
			if tc.want == nil {
				assert.Same(t, rec, got)
				return
			}
			assert.True(t, arrow.TypeEqual(tc.want, d.Indices().DataType()), "indices %s", d.Indices().DataType())
			assert.True(t, arrow.TypeEqual(d.DataType(), got.Schema().Field(0).Type), "schema %s", got.Schema().Field(0).Type)
			require.Equal(t, len(tc.codes), d.Len())
			assert.Equal(t, 1, d.NullN())
			for i, c := range tc.codes {
				assert.Equal(t, valid[i], d.IsValid(i), "row %d", i)
				if valid[i] {
					assert.Equal(t, int(c), d.GetValueIndex(i), "row %d", i)
				}
			}
		})
	}
}

// groupByIndex reads uint8, uint16 and int32 indices alike, and reports
// an index out of the dictionary, naming the row.
func TestGroupByIndexWidths(t *testing.T) {
	for _, n := range []int{4, 300, 70000} {
		t.Run(fmt.Sprint("n=", n), func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			codes := []int32{0, 1, 3, 1, int32(n)}
			rec := narrowCodes(codesBatch(t, mem, n, codes, nil), "origin", mem)
			defer rec.Release()
			db := array.NewInt16Builder(mem)
			defer db.Release()
			db.AppendValues([]int16{10, 20, 30, 40, 50}, nil)
			delay := db.NewArray()
			defer delay.Release()
			d := rec.Column(0).(*array.Dictionary)
			sel := rowSet{words: []uint64{0b01111}} // rows 0–3
			var scratch []agg
			g := newGroups()
			require.NoError(t, groupByIndex(g, d, delay, sel, &scratch))
			assert.Equal(t, agg{count: 1, sum: 10, max: 10}, *g.byCode["k0"])
			assert.Equal(t, agg{count: 2, sum: 60, max: 40}, *g.byCode["k1"])
			assert.Equal(t, agg{count: 1, sum: 30, max: 30}, *g.byCode["k3"])
			err := groupByIndex(newGroups(), d, delay, rowSet{words: []uint64{0b10000}}, &scratch)
			require.Error(t, err)
			assert.Contains(t, err.Error(), fmt.Sprintf("origin row 4: dictionary index %d out of [0, %d)", n, n))
		})
	}
}
