package kvio

import (
	"context"
	"encoding/base64"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// parquetSource reads the row groups of a Parquet file.
//
// Only the parsed footer is shared between ReadPart calls, read-only; each
// call builds its own file.Reader and pqarrow.FileReader over it, because a
// pqarrow.FileReader allocates from the allocator it was made with and reads
// through a reader fixed at construction (so one per call also lets the call
// carry its ctx down to the reads).
type parquetSource struct {
	parts
	meta   *metadata.FileMetaData
	leaves []int // Parquet leaf columns to read, in output column order
}

var _ Source = (*parquetSource)(nil)

// OpenParquet opens f as a Parquet file: it reads and parses the footer, and
// each ReadPart then reads one row group through f (a large column chunk is
// one read, split in parallel by f) and decodes it with arrow-go's pqarrow.
// The parts are the row groups; WithColumns selects top-level columns, and
// the others are not read. WithBudget applies; WithMmap is ignored.
//
// It returns an error naming the file for an empty, truncated or corrupt
// file, an unknown column, or a failed read. The footer, and buffers used
// while decoding, live on the Go heap, not in the allocator of ReadPart.
func OpenParquet(ctx context.Context, f *File, opts ...LoadOption) (Source, error) {
	cfg := newLoadConfig(opts)
	s := &parquetSource{parts: parts{file: f, budget: cfg.budget}}
	var (
		fr   *pqarrow.FileReader
		full *arrow.Schema
	)
	err := safely(func() error {
		pf, err := file.NewParquetReader(s.reader(ctx))
		if err != nil {
			return err
		}
		s.meta = pf.MetaData()
		// The footer computes its writer version lazily; do it now, before
		// concurrent ReadPart calls would race to.
		s.meta.WriterVersion()
		if err := checkChunks(s.meta, f.Size()); err != nil {
			return err
		}
		if err := checkArrowSchema(s.meta); err != nil {
			return err
		}
		if fr, err = pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator); err != nil {
			return err
		}
		full, err = fr.Schema()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kvio: open %s: %w", f.Name(), err)
	}
	cols, err := project(f.Name(), full, cfg.columns)
	if err != nil {
		return nil, err
	}
	if cols == nil {
		cols = make([]int, full.NumFields())
		for i := range cols {
			cols[i] = i
		}
	}
	fields := make([]arrow.Field, len(cols))
	for j, c := range cols {
		fields[j] = *fr.Manifest.Fields[c].Field
		s.leaves = appendLeaves(s.leaves, &fr.Manifest.Fields[c])
	}
	s.schema = arrow.NewSchema(fields, fr.Manifest.SchemaMeta)
	s.rows = make([]int64, s.meta.NumRowGroups())
	for i := range s.rows {
		s.rows[i] = s.meta.RowGroup(i).NumRows()
	}
	return s, nil
}

// checkChunks returns an error for a column chunk that the footer places
// outside the file: arrow-go would allocate the claimed length before
// finding out.
func checkChunks(meta *metadata.FileMetaData, size int64) error {
	for rg := range meta.NumRowGroups() {
		rgm := meta.RowGroup(rg)
		for c := range rgm.NumColumns() {
			col, err := rgm.ColumnChunk(c)
			if err != nil {
				return err
			}
			start, n := col.DataPageOffset(), col.TotalCompressedSize()
			if d := col.DictionaryPageOffset(); col.HasDictionaryPage() && d > 0 && d < start {
				start = d
			}
			if start < 0 || n < 0 || start > size-n {
				return fmt.Errorf("row group %d column %d: chunk of %d bytes at %d lies outside the file of %d bytes", rg, c, n, start, size)
			}
		}
	}
	return nil
}

// checkArrowSchema returns an error when the Arrow schema that the footer
// stores (key "ARROW:schema": a base64 IPC stream whose first message is the
// schema) claims more bytes than it holds. pqarrow decodes it with
// ipc.NewReader, which in arrow-go v18.8.0 applies no size limit and
// allocates the declared body and vector lengths first: a corrupt length can
// exhaust memory, a fatal error that recover cannot catch. A value that is
// not base64 is left for pqarrow to report.
func checkArrowSchema(meta *metadata.FileMetaData) error {
	v := meta.KeyValueMetadata().FindValue("ARROW:schema")
	if v == nil {
		return nil
	}
	b, err := base64.StdEncoding.DecodeString(*v)
	if err != nil {
		if b, err = base64.RawStdEncoding.DecodeString(*v); err != nil {
			return nil
		}
	}
	if err := ipcCheckSchemaMessage(b); err != nil {
		return fmt.Errorf("ARROW:schema: %w", err)
	}
	return nil
}

// appendLeaves appends the Parquet leaf column indices under field.
func appendLeaves(leaves []int, field *pqarrow.SchemaField) []int {
	if field.IsLeaf() {
		return append(leaves, field.ColIndex)
	}
	for i := range field.Children {
		leaves = appendLeaves(leaves, &field.Children[i])
	}
	return leaves
}

// ReadPart reads row group i; see Source.
func (s *parquetSource) ReadPart(ctx context.Context, i int, mem memory.Allocator) (arrow.RecordBatch, error) {
	return s.readPart(ctx, i, mem, func(mem memory.Allocator) (arrow.RecordBatch, error) {
		pf, err := file.NewParquetReader(s.reader(ctx), file.WithMetadata(s.meta))
		if err != nil {
			return nil, err
		}
		fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, mem)
		if err != nil {
			return nil, err
		}
		tbl, err := fr.ReadRowGroups(ctx, s.leaves, []int{i})
		if err != nil {
			return nil, err
		}
		defer tbl.Release()
		return tableBatch(tbl, mem)
	})
}

// tableBatch returns tbl as one record batch, concatenating a column's chunks
// into mem when it has several.
func tableBatch(tbl arrow.Table, mem memory.Allocator) (arrow.RecordBatch, error) {
	cols := make([]arrow.Array, tbl.NumCols())
	defer func() {
		for _, c := range cols {
			if c != nil {
				c.Release()
			}
		}
	}()
	for j := range cols {
		col := tbl.Column(j)
		switch chunks := col.Data().Chunks(); len(chunks) {
		case 0:
			cols[j] = array.MakeArrayOfNull(mem, col.DataType(), 0)
		case 1:
			chunks[0].Retain()
			cols[j] = chunks[0]
		default:
			c, err := array.Concatenate(chunks, mem)
			if err != nil {
				return nil, err
			}
			cols[j] = c
		}
	}
	return array.NewRecordBatch(tbl.Schema(), cols, tbl.NumRows()), nil
}
