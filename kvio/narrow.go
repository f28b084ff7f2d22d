package kvio

import (
	"fmt"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// Narrow returns a view of s with every column of s, in which each named
// signed integer column whose values the file's statistics bound, in every
// part, within a narrower signed integer type is read as the narrowest
// such type (int8, int16 or int32), and the names of the columns so read,
// in the order given. The values, and nulls, are those s reads; only their
// width changes, so a pipeline that widens what it reads to int64 gets the
// same result from a half to an eighth of the bytes.
//
// Only a Source of OpenParquet (or OpenAuto's Parquet), or a Select or
// Dictionary view of one, narrows: a column is narrowed when it is a
// top-level Parquet INT32 or INT64 column that repeats nothing, read as
// int32 or int64, and every row group states its bounds (see IntRanger:
// statistics present and reliable). On any other Source, and for the
// other columns, the view reads as s does, and the names it returns leave
// those columns out. A value outside the stated bounds (statistics that do
// not match the data: a damaged file) fails ReadPart with an error naming
// the column and the value; it is never read as another value.
//
// It fails, naming the Source's file and the column, when a name is not a
// column of s.Schema() or is given twice. The view holds nothing of its
// own; Close, budget and concurrency are as for Select's views.
func Narrow(s Source, names ...string) (Source, []string, error) {
	idx, err := project("narrow", s.Name(), s.Schema(), names)
	if err != nil {
		return nil, nil, err
	}
	ps, ok := s.(*parquetSource)
	if !ok {
		v, err := Select(s)
		return v, nil, err
	}
	fields := slices.Clone(ps.schema.Fields())
	cols := slices.Clone(ps.fields)
	var read []string
	for _, j := range idx {
		if t := ps.narrowType(j); t != nil {
			fields[j].Type = t
			read = append(read, fields[j].Name)
		}
	}
	all := make([]int, len(fields))
	for i := range all {
		all[i] = i
	}
	md := ps.schema.Metadata()
	v := ps.selectColumns(arrow.NewSchema(fields, &md), all)
	v.fields = cols
	return v, read, nil
}

// narrowType returns the narrowest signed integer type narrower than
// output column j's that holds the bounds the statistics of every row
// group state for it, or nil.
func (s *parquetSource) narrowType(j int) arrow.DataType {
	k := s.fields[j].pages
	if k != pageInt32 && k != pageInt64 {
		return nil
	}
	name := s.schema.Field(j).Name
	lo, hi := int64(0), int64(0)
	for rg := range s.rows {
		r, ok := s.IntRange(rg, name)
		if !ok {
			return nil
		}
		if !r.AllNull {
			lo, hi = min(lo, r.Min), max(hi, r.Max)
		}
	}
	width := s.schema.Field(j).Type.(arrow.FixedWidthDataType).BitWidth()
	for _, t := range []arrow.DataType{arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32} {
		tlo, thi := intBounds(t.ID())
		if t.(arrow.FixedWidthDataType).BitWidth() < width && lo >= tlo && hi <= thi {
			return t
		}
	}
	return nil
}

// narrowArray returns a, an int32 or int64 array, as an array of the
// narrower signed integer type t from mem, with the same nulls, and
// releases a; or an error, naming the column name and the value, when a
// value does not fit in t.
func narrowArray(a arrow.Array, t arrow.DataType, name string, mem memory.Allocator) (arrow.Array, error) {
	defer a.Release()
	lo, hi := intBounds(t.ID())
	value := func(i int) int64 { return 0 }
	switch a := a.(type) {
	case *array.Int64:
		value = a.Value
	case *array.Int32:
		value = func(i int) int64 { return int64(a.Value(i)) }
	default:
		return nil, fmt.Errorf("column %q: read as %s, cannot narrow to %s", name, a.DataType(), t)
	}
	b := array.NewBuilder(mem, t)
	defer b.Release()
	b.Reserve(a.Len())
	for i := range a.Len() {
		if a.IsNull(i) {
			b.AppendNull()
			continue
		}
		v := value(i)
		if v < lo || v > hi {
			return nil, fmt.Errorf("column %q: value %d outside [%d, %d], the bounds its statistics state", name, v, lo, hi)
		}
		switch b := b.(type) {
		case *array.Int8Builder:
			b.Append(int8(v))
		case *array.Int16Builder:
			b.Append(int16(v))
		case *array.Int32Builder:
			b.Append(int32(v))
		}
	}
	return b.NewArray(), nil
}
