package kvio

import (
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/parquet"
)

// Dictionary returns a view of s with every column of s, in which each
// named string column that the file stores dictionary-encoded in every
// part is read as an Arrow dictionary array (type dictionary<values=utf8,
// indices=int32>, for a utf8 or a large_utf8 column alike: indices into
// the part's distinct strings; a null row has a null index), and the
// names of the columns so read, in the order given. A pipeline that groups by such a column can then key on the
// index and decode each distinct string once per part.
//
// Only a Source of OpenParquet (or OpenAuto's Parquet), or a Select view
// of one, reads dictionaries: a column is read so when it is a top-level
// utf8 or large_utf8 column of a Parquet BYTE_ARRAY whose chunks all
// list a dictionary encoding (a chunk whose later pages fall back to
// plain encoding still decodes into the part's dictionary). On any other
// Source, and for the other columns, the view reads as s does, and the
// names it returns leave those columns out.
//
// It fails, naming the Source's file and the column, when a name is not
// a column of s.Schema() or is given twice. The view holds nothing of its
// own; Close, budget and concurrency are as for Select's views. Beware
// that arrow-go's (*array.Dictionary).Dictionary builds its values
// array lazily without synchronisation: readers of one batch on several
// goroutines should use array.MakeFromData(a.Data().Dictionary()).
func Dictionary(s Source, names ...string) (Source, []string, error) {
	idx, err := project("dictionary", s.Name(), s.Schema(), names)
	if err != nil {
		return nil, nil, err
	}
	all := make([]int, s.Schema().NumFields())
	for i := range all {
		all[i] = i
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
		if ps.dictLeaf(j) {
			cols[j].dict = &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}
			fields[j].Type = cols[j].dict
			cols[j].pages = pageKindOf(ps.meta, cols[j], cols[j].dict)
			read = append(read, fields[j].Name)
		}
	}
	md := ps.schema.Metadata()
	v := ps.selectColumns(arrow.NewSchema(fields, &md), all)
	v.fields = cols
	return v, read, nil
}

// dictLeaf reports whether output column j can be read as a dictionary: a top-level string column stored as BYTE_ARRAY
// with a dictionary encoding listed in every chunk.
func (s *parquetSource) dictLeaf(j int) bool {
	if id := s.schema.Field(j).Type.ID(); id != arrow.STRING && id != arrow.LARGE_STRING {
		return false
	}
	if len(s.fields[j].leaves) != 1 {
		return false
	}
	var leaf int
	for l := range s.fields[j].leaves {
		leaf = l
	}
	descr := s.meta.Schema.Column(leaf)
	if descr.PhysicalType() != parquet.Types.ByteArray || descr.MaxRepetitionLevel() != 0 || descr.MaxDefinitionLevel() > 1 {
		return false
	}
	for rg := range s.meta.NumRowGroups() {
		col, err := s.meta.RowGroup(rg).ColumnChunk(leaf)
		if err != nil {
			return false
		}
		if !slices.ContainsFunc(col.Encodings(), func(e parquet.Encoding) bool {
			return e == parquet.Encodings.RLEDict || e == parquet.Encodings.PlainDict
		}) {
			return false
		}
	}
	return true
}
