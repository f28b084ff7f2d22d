package exec

import (
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/buffers"
)

// Copier is implemented by values of value buffers that can cross
// devices: CopyTo returns a deep copy whose memory comes from mem (the
// destination device's allocator) and the number of bytes it copied.
// Arrow arrays and record batches are copied without it.
type Copier interface {
	CopyTo(mem memory.Allocator) (v any, bytes int64, err error)
}

// copyBuffer copies src into dst, a replica on another device: raw bytes
// byte for byte, a value through Copier (or Arrow's own layout). It
// returns the bytes copied. A value that cannot be copied is an error
// naming its type: a real copy or none, never a shared pointer.
func copyBuffer(dst, src *buffers.Buffer, mem memory.Allocator) (int64, error) {
	if b := src.Bytes(); b != nil {
		return int64(copy(dst.Bytes(), b)), nil
	}
	v := src.Value()
	var (
		out any
		n   int64
		err error
	)
	switch x := v.(type) {
	case nil:
		return 0, dst.Store(nil)
	case Copier:
		out, n, err = x.CopyTo(mem)
	case arrow.RecordBatch:
		out, n, err = CopyRecord(x, mem)
	case arrow.Array:
		var a arrow.Array
		a, n, err = copyArray(x, mem)
		out = a
	default:
		return 0, fmt.Errorf("exec: cannot copy %s (a %T) across devices: its type does not implement exec.Copier", src.Name(), v)
	}
	if err != nil {
		return 0, fmt.Errorf("exec: copy %s: %w", src.Name(), err)
	}
	return n, dst.Store(out)
}

// CopyRecord deep-copies rec into memory from mem and returns the copy
// and the bytes of its buffers.
func CopyRecord(rec arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, int64, error) {
	cols := make([]arrow.Array, rec.NumCols())
	var n int64
	for i, c := range rec.Columns() {
		a, m, err := copyArray(c, mem)
		if err != nil {
			for _, done := range cols[:i] {
				done.Release()
			}
			return nil, 0, err
		}
		cols[i], n = a, n+m
	}
	out := array.NewRecordBatch(rec.Schema(), cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return out, n, nil
}

// copyArray copies a through arrow's Concatenate of one array, which
// writes fresh buffers from mem.
func copyArray(a arrow.Array, mem memory.Allocator) (arrow.Array, int64, error) {
	out, err := array.Concatenate([]arrow.Array{a}, mem)
	if err != nil {
		return nil, 0, err
	}
	var n int64
	var walk func(d arrow.ArrayData)
	walk = func(d arrow.ArrayData) {
		for _, b := range d.Buffers() {
			if b != nil {
				n += int64(b.Len())
			}
		}
		for _, c := range d.Children() {
			walk(c)
		}
	}
	walk(out.Data())
	return out, n, nil
}
