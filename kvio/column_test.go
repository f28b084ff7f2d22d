package kvio_test

import (
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/kvio"
)

func TestColumn(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.DefaultAllocator)
	defer mem.AssertSize(t, 0)
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "delay", Type: arrow.PrimitiveTypes.Int16},
		{Name: "origin", Type: arrow.BinaryTypes.String},
		{Name: "twice", Type: arrow.PrimitiveTypes.Int16},
		{Name: "twice", Type: arrow.PrimitiveTypes.Int16},
	}, nil)
	var cols []arrow.Array
	for i, js := range []string{`[5, -3]`, `["SFO", "JFK"]`, `[1, 2]`, `[3, 4]`} {
		col, _, err := array.FromJSON(mem, schema.Field(i).Type, strings.NewReader(js))
		require.NoError(t, err)
		defer col.Release()
		cols = append(cols, col)
	}
	rec := array.NewRecordBatch(schema, cols, 2)
	defer rec.Release()

	delay, err := kvio.Column[*array.Int16](rec, "delay")
	require.NoError(t, err)
	assert.Equal(t, []int16{5, -3}, delay.Int16Values())
	origin, err := kvio.Column[*array.String](rec, "origin")
	require.NoError(t, err)
	assert.Equal(t, "JFK", origin.Value(1))
	arr, err := kvio.Column[arrow.Array](rec, "origin")
	require.NoError(t, err)
	assert.Equal(t, 2, arr.Len())

	_, err = kvio.Column[*array.Int64](rec, "delay")
	assert.EqualError(t, err, `kvio: column "delay" is int16 (*array.Int16), not *array.Int64`)
	_, err = kvio.Column[*array.Int16](rec, "dest")
	assert.EqualError(t, err, `kvio: no column "dest" (columns: delay, origin, twice, twice)`)
	_, err = kvio.Column[*array.Int16](rec, "twice")
	assert.EqualError(t, err, `kvio: 2 columns named "twice"`)
}

// A batch of many columns lists the first eight it has.
func TestColumnListsFewNames(t *testing.T) {
	fields := make([]arrow.Field, 10)
	for i := range fields {
		fields[i] = arrow.Field{Name: string(rune('a' + i)), Type: arrow.PrimitiveTypes.Int8}
	}
	rec := array.NewRecordBuilder(memory.DefaultAllocator, arrow.NewSchema(fields, nil))
	defer rec.Release()
	b := rec.NewRecordBatch()
	defer b.Release()
	_, err := kvio.Column[*array.Int8](b, "z")
	assert.EqualError(t, err, `kvio: no column "z" (columns: a, b, c, d, e, f, g, h, … (10 columns))`)
}
