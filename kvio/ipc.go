package kvio

import (
	"context"
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
	cols []int // indices of the projected columns in the file; nil for all
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
// It returns an error naming the file for an empty, truncated or corrupt
// file, an unknown column, or a failed read.
func OpenIPC(ctx context.Context, f *File, opts ...LoadOption) (Source, error) {
	cfg := newLoadConfig(opts)
	s := &ipcSource{parts: parts{file: f}}
	var full *arrow.Schema
	err := safely(func() error {
		// Check the footer before arrow-go parses it.
		var err error
		if s.rows, err = ipcFooter(ctx, f); err != nil {
			return err
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
		return nil, fmt.Errorf("kvio: open %s: %w", f.Name(), err)
	}
	if s.cols, err = project(f.Name(), full, cfg.columns); err != nil {
		return nil, err
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

// open returns a new ipc.FileReader over the file that allocates from mem.
func (s *ipcSource) open(ctx context.Context, mem memory.Allocator) (*ipc.FileReader, error) {
	return ipc.NewFileReader(s.reader(ctx), ipc.WithAllocator(mem), ipc.WithBodySizeLimit(0))
}

// ReadPart reads record batch i; see Source.
func (s *ipcSource) ReadPart(ctx context.Context, i int, mem memory.Allocator) (arrow.RecordBatch, error) {
	if err := s.check(ctx, i); err != nil {
		return nil, err
	}
	var rec arrow.RecordBatch
	err := safely(func() error {
		r, err := s.open(ctx, mem)
		if err != nil {
			return err
		}
		defer r.Close()
		all, err := r.RecordBatchAt(i)
		if err != nil {
			return err
		}
		if s.cols == nil {
			rec = all
			return nil
		}
		defer all.Release()
		cols := make([]arrow.Array, len(s.cols))
		for j, c := range s.cols {
			cols[j] = all.Column(c)
		}
		rec = array.NewRecordBatch(s.schema, cols, all.NumRows())
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kvio: read %s part %d: %w", s.Name(), i, err)
	}
	return rec, nil
}
