package kvio

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
)

// ipcSource reads the record batches of an Arrow IPC file.
//
// ipc.FileReader is not safe for concurrent use and allocates from the
// allocator it was made with, so each ReadPart opens its own reader over the
// File (re-reading the footer, the schema and any dictionaries: small next
// to a batch) and closes it before returning.
type ipcSource struct {
	parts
	cols   []int  // indices of the projected columns in the file; nil for all
	mapped []byte // the file mapped by WithMmap, or nil
	dicts  bool   // the schema has dictionary-encoded fields
}

var _ Source = (*ipcSource)(nil)

// OpenIPC opens f as an Arrow IPC file (the random-access "file" format that
// starts with "ARROW1", not the stream format). It reads the footer, the
// schema and the metadata of each record batch, not their bodies; each
// ReadPart then reads one record batch through f and decodes it with
// arrow-go's ipc package. The parts are the record batches. WithColumns
// selects top-level columns; the others are still read, then dropped. Record
// batch bodies are not size-limited beyond the file size; their metadata is
// limited to ipc's default of 64 MiB.
//
// WithBudget and WithMmap apply.
//
// It returns an error naming the file for an empty, truncated or corrupt
// file, an unknown or ambiguous column, a failed read, or a failed mmap. ReadPart also
// fails for a record batch whose projected columns fail arrow-go's
// array.ValidateFull (offsets, UTF-8, null counts);
// a changed value is not found (see the package documentation, "Damaged
// files").
func OpenIPC(ctx context.Context, f *File, opts ...LoadOption) (Source, error) {
	cfg, err := newLoadConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &ipcSource{parts: parts{file: f, budget: cfg.budget}}
	var full *arrow.Schema
	err = safely(func() error {
		// Check the footer before arrow-go parses it.
		var err error
		if s.rows, err = ipcFooter(ctx, f); err != nil {
			return err
		}
		if cfg.mmap {
			if s.mapped, err = mapFile(f); err != nil {
				return err
			}
		}
		r, err := s.open(ctx, memory.DefaultAllocator)
		if err != nil {
			return err
		}
		defer r.Close()
		full = r.Schema()
		if len(s.rows) != r.NumRecords() {
			return fmt.Errorf("%w: %d record batches, arrow-go found %d", errCorruptIPC, len(s.rows), r.NumRecords())
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kvio: open %s: %w", f.Name(), err), s.unmap())
	}
	if s.cols, err = project("open", f.Name(), full, cfg.columns); err != nil {
		return nil, errors.Join(err, s.unmap())
	}
	s.onClose = s.unmap
	for _, fd := range full.Fields() {
		s.dicts = s.dicts || hasDictionary(fd.Type)
	}
	s.schema = full
	if s.cols != nil {
		fields := make([]arrow.Field, len(s.cols))
		for j, c := range s.cols {
			fields[j] = full.Field(c)
		}
		md := full.Metadata()
		s.schema = arrow.NewSchema(fields, &md)
	}
	return s, nil
}

// selectColumns returns Select's view of the columns idx of s, with the
// given schema.
func (s *ipcSource) selectColumns(schema *arrow.Schema, idx []int) *ipcSource {
	v := &ipcSource{parts: s.view(schema), cols: make([]int, len(idx)), mapped: s.mapped, dicts: s.dicts}
	for j, c := range idx {
		v.cols[j] = c
		if s.cols != nil {
			v.cols[j] = s.cols[c]
		}
	}
	return v
}

// open returns a new ipc.FileReader over the file, or over its mapping,
// that allocates from mem.
func (s *ipcSource) open(ctx context.Context, mem memory.Allocator) (*ipc.FileReader, error) {
	if s.mapped != nil {
		return ipc.NewFileReader(bytes.NewReader(s.mapped), ipc.WithAllocator(mem), ipc.WithBodySizeLimit(0))
	}
	return ipc.NewFileReader(s.reader(ctx), ipc.WithAllocator(mem), ipc.WithBodySizeLimit(0))
}

// unmap removes the mapping, if any.
func (s *ipcSource) unmap() error {
	if s.mapped == nil {
		return nil
	}
	m := s.mapped
	s.mapped = nil
	return unmapFile(s.Name(), m)
}

// ReadPart reads record batch i; see Source.
func (s *ipcSource) ReadPart(ctx context.Context, i int, mem memory.Allocator) (arrow.RecordBatch, error) {
	return s.readPart(ctx, i, mem, func(mem memory.Allocator) (arrow.RecordBatch, error) {
		var (
			r   *ipc.FileReader
			err error
		)
		zeroCopy := s.mapped != nil && !s.dicts
		if zeroCopy {
			// The batch's buffers point into the mapping; copyBatch
			// moves the projected columns into mem.
			r, err = ipc.NewMappedFileReader(s.mapped, ipc.WithAllocator(mem), ipc.WithBodySizeLimit(0))
		} else {
			r, err = s.open(ctx, mem)
		}
		if err != nil {
			return nil, err
		}
		defer r.Close()
		all, err := r.RecordBatchAt(i)
		if err != nil {
			return nil, err
		}
		defer all.Release()
		cols := make([]arrow.Array, len(s.cols))
		for j, c := range s.cols {
			cols[j] = all.Column(c)
		}
		if s.cols == nil {
			cols = all.Columns()
		}
		// arrow-go takes the body's buffers as they are; check them before
		// anyone indexes through a corrupt offset.
		for j, c := range cols {
			if err := array.ValidateFull(c); err != nil {
				return nil, fmt.Errorf("corrupt data: column %q: %w", s.schema.Field(j).Name, err)
			}
		}
		if s.cols == nil && !zeroCopy {
			all.Retain()
			return all, nil
		}
		if zeroCopy {
			return copyBatch(s.schema, cols, all.NumRows(), mem), nil
		}
		return array.NewRecordBatch(s.schema, cols, all.NumRows()), nil
	})
}

// hasDictionary reports whether t is, or nests, a dictionary type.
func hasDictionary(t arrow.DataType) bool {
	switch t := t.(type) {
	case *arrow.DictionaryType:
		return true
	case arrow.NestedType:
		for _, f := range t.Fields() {
			if hasDictionary(f.Type) {
				return true
			}
		}
	}
	return false
}

// copyBatch returns a record batch of schema whose columns are deep copies
// of cols, every buffer allocated from mem.
func copyBatch(schema *arrow.Schema, cols []arrow.Array, rows int64, mem memory.Allocator) arrow.RecordBatch {
	out := make([]arrow.Array, len(cols))
	for j, c := range cols {
		d := copyData(c.Data(), mem)
		out[j] = array.MakeFromData(d)
		d.Release()
	}
	rec := array.NewRecordBatch(schema, out, rows)
	for _, c := range out {
		c.Release()
	}
	return rec
}

// copyData deep-copies d (buffers, children and dictionary) into mem.
func copyData(d arrow.ArrayData, mem memory.Allocator) arrow.ArrayData {
	bufs := make([]*memory.Buffer, len(d.Buffers()))
	for k, b := range d.Buffers() {
		if b == nil {
			continue
		}
		nb := memory.NewResizableBuffer(mem)
		nb.Resize(b.Len())
		copy(nb.Bytes(), b.Bytes())
		bufs[k] = nb
	}
	children := make([]arrow.ArrayData, len(d.Children()))
	for k, c := range d.Children() {
		children[k] = copyData(c, mem)
	}
	out := array.NewData(d.DataType(), d.Len(), bufs, children, d.NullN(), d.Offset())
	for _, b := range bufs {
		if b != nil {
			b.Release()
		}
	}
	for _, c := range children {
		c.Release()
	}
	if dict, ok := d.Dictionary().(*array.Data); ok && dict != nil { // a typed nil when absent
		dc := copyData(dict, mem)
		out.SetDictionary(dc)
		dc.Release()
	}
	return out
}
