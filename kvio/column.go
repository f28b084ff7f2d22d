package kvio

import (
	"fmt"
	"reflect"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
)

// Column returns the column of rec named name as the array type T (such as
// *array.Int16 or *array.String), so a kernel reaches a column by name
// and type rather than by position and assertion. The array is rec's own:
// it stays valid while rec does, and a caller that keeps it longer
// Retains it. Column returns an error naming the column when rec has no
// column of that name (listing up to eight that it has) or more than
// one, and one naming both types when the column is of another type.
// O(columns); no allocation on success.
func Column[T arrow.Array](rec arrow.RecordBatch, name string) (T, error) {
	var zero T
	idx := rec.Schema().FieldIndices(name)
	switch len(idx) {
	case 0:
		fields := rec.Schema().Fields()
		names := make([]string, 0, min(len(fields), 8))
		for _, f := range fields[:cap(names)] {
			names = append(names, f.Name)
		}
		more := ""
		if len(fields) > len(names) {
			more = fmt.Sprintf(", … (%d columns)", len(fields))
		}
		return zero, fmt.Errorf("kvio: no column %q (columns: %s%s)", name, strings.Join(names, ", "), more)
	case 1:
	default:
		return zero, fmt.Errorf("kvio: %d columns named %q", len(idx), name)
	}
	col := rec.Column(idx[0])
	if t, ok := col.(T); ok {
		return t, nil
	}
	return zero, fmt.Errorf("kvio: column %q is %s (%T), not %v", name, col.DataType(), col, reflect.TypeFor[T]())
}
