package kvio

import (
	"math"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/schema"
)

// IntRange is what a file's metadata says of one signed integer column in
// one part: every non-null value v of the column in the part has
// Min <= v <= Max, or, when AllNull, every value is null (Min and Max are
// then 0).
type IntRange struct {
	Min, Max int64 // bounds of the non-null values, inclusive
	AllNull  bool  // every value of the column in the part is null
}

// IntRanger is implemented by Sources that know, without reading a part,
// bounds on the values of a signed integer column in it: the Sources of
// OpenParquet (and OpenAuto's Parquet files) and their Select views, from
// the column statistics of each row group. A pipeline whose filter rejects
// every value in a part's range (and nulls) need not read the part.
type IntRanger interface {
	// IntRange returns the bounds of the named top-level column in part i,
	// and true; or false when they are not known: the column is not one of
	// the Source's Schema, is not a signed integer (int8 to int64), or is
	// nested; the part's chunk has no statistics, or statistics that
	// arrow-go deems unreliable for the writer's version, or that do not
	// decode; or the stated bounds lie outside the column's Arrow type
	// (statistics that cannot be the values read). It reads nothing, takes
	// microseconds, and is safe for concurrent use. It panics if i is not
	// in [0, NumParts()).
	IntRange(i int, column string) (IntRange, bool)
}

var _ IntRanger = (*parquetSource)(nil)

// IntRange returns the bounds of column in row group i from the footer's
// statistics; see IntRanger.
func (s *parquetSource) IntRange(i int, column string) (IntRange, bool) {
	_ = s.rows[i] // panics for i out of range, as documented
	idx := s.schema.FieldIndices(column)
	if len(idx) != 1 || len(s.fields[idx[0]].leaves) != 1 {
		return IntRange{}, false
	}
	if !isSignedInt(s.schema.Field(idx[0]).Type.ID()) {
		return IntRange{}, false
	}
	lo, hi := intBounds(s.schema.Field(idx[0]).Type.ID())
	var leaf int
	for l := range s.fields[idx[0]].leaves {
		leaf = l
	}
	var (
		r  IntRange
		ok bool
	)
	// Statistics decode their bounds from bytes of the footer; a corrupt
	// footer must not panic here.
	_ = safely(func() error {
		r, ok = chunkRange(s.meta, i, leaf)
		return nil
	})
	if !ok || (!r.AllNull && (r.Min < lo || r.Max > hi || r.Min > r.Max)) {
		return IntRange{}, false
	}
	return r, true
}

// isSignedInt reports whether id is int8, int16, int32 or int64.
func isSignedInt(id arrow.Type) bool {
	switch id {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64:
		return true
	}
	return false
}

// intBounds returns the least and greatest values of the signed integer
// type id (int8 to int64), and those of int64 for any other type.
func intBounds(id arrow.Type) (lo, hi int64) {
	switch id {
	case arrow.INT8:
		return math.MinInt8, math.MaxInt8
	case arrow.INT16:
		return math.MinInt16, math.MaxInt16
	case arrow.INT32:
		return math.MinInt32, math.MaxInt32
	}
	return math.MinInt64, math.MaxInt64
}

// chunkRange returns the statistics of leaf column c in row group rg as an
// IntRange, when the column is a signed INT32 or INT64 that repeats nothing
// and its statistics are set and reliable.
func chunkRange(meta *metadata.FileMetaData, rg, c int) (IntRange, bool) {
	descr := meta.Schema.Column(c)
	if descr.MaxRepetitionLevel() != 0 || descr.SortOrder() != schema.SortSIGNED {
		return IntRange{}, false
	}
	if t := descr.PhysicalType(); t != parquet.Types.Int32 && t != parquet.Types.Int64 {
		return IntRange{}, false
	}
	rgm := meta.RowGroup(rg)
	col, err := rgm.ColumnChunk(c)
	if err != nil {
		return IntRange{}, false
	}
	st, err := col.Statistics()
	if err != nil || st == nil {
		return IntRange{}, false
	}
	if st.HasNullCount() && st.NullCount() == rgm.NumRows() && col.NumValues() == rgm.NumRows() {
		return IntRange{AllNull: true}, true
	}
	if !st.HasMinMax() {
		return IntRange{}, false
	}
	switch st := st.(type) {
	case *metadata.Int32Statistics:
		return IntRange{Min: int64(st.Min()), Max: int64(st.Max())}, true
	case *metadata.Int64Statistics:
		return IntRange{Min: st.Min(), Max: st.Max()}, true
	}
	return IntRange{}, false
}
