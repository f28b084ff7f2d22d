package kvio

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"golang.org/x/sync/errgroup"

	"github.com/streamdag/streamdag/buffers"
)

// Source is a columnar file cut into parts that can be decoded independently:
// the row groups of a Parquet file or the record batches of an Arrow IPC file.
//
// Every method is safe for concurrent use; in particular ReadPart may run on
// several goroutines at once, for different or equal i.
type Source interface {
	// Name returns the name of the underlying File.
	Name() string
	// Schema returns the schema of every batch ReadPart returns, after any
	// column projection.
	Schema() *arrow.Schema
	// NumParts returns the number of parts.
	NumParts() int
	// PartRows returns the number of rows of part i, known without reading
	// it. It panics if i is not in [0, NumParts()).
	PartRows(i int) int64
	// ReadPart reads and decodes part i into one record batch whose buffers
	// come from mem. The caller owns the batch and must Release it; it stays
	// valid after Close. ReadPart returns an error naming the file and part
	// for i out of range, a read or decode failure (damaged data included, as
	// far as kvio finds it: see the package documentation, "Damaged files"),
	// ctx done, or a closed Source (wrapping ErrClosed); it then returns no
	// batch and holds no memory of mem.
	ReadPart(ctx context.Context, i int, mem memory.Allocator) (arrow.RecordBatch, error)
	// Close marks the Source closed, so later ReadPart calls fail with
	// ErrClosed, waits for the ReadPart calls in flight, and releases what
	// the Source holds (a WithMmap mapping). It does not close the File.
	// Close is idempotent; it returns nil, or the munmap error the first
	// time.
	Close() error
}

// LoadOption configures OpenParquet, OpenIPC and OpenAuto. An option
// given bad input returns an error, which the open call returns prefixed
// with "kvio: ", opening no Source.
type LoadOption func(*loadConfig) error

type loadConfig struct {
	columns []string        // top-level column names to keep, in order; nil keeps all
	budget  *buffers.Budget // charged for every byte ReadPart allocates; nil for none
	mmap    bool            // map Arrow IPC files instead of reading them
}

// WithBudget charges every byte that ReadPart allocates from its allocator
// to budget, from the allocation until the returned batch's buffers are
// released: batches held by the caller keep their bytes charged. An
// allocation that does not fit in the bytes free at that moment fails the
// ReadPart at once (it does not wait, so parts decoded in parallel cannot
// deadlock holding halves of the budget) with an error naming the file and
// part that wraps buffers.ErrOverBudget; whatever the part had allocated is
// then freed and returned to the budget. Scratch memory that arrow-go takes
// from the Go heap while decoding (decompression buffers, the Parquet
// footer) is not charged. Without the option nothing is charged. Errors:
// a nil budget.
func WithBudget(budget *buffers.Budget) LoadOption {
	return func(c *loadConfig) error {
		if budget == nil {
			return errors.New("WithBudget: nil budget (leave the option out to charge nothing)")
		}
		c.budget = budget
		return nil
	}
}

// WithMmap makes OpenIPC (and OpenAuto, for an Arrow IPC file) map the file
// into memory with mmap(2), read-only, instead of reading it through the
// File: ReadPart then decodes a record batch straight from the mapping (no
// read system call, and only the projected columns are touched) and copies
// its buffers into the caller's allocator, so batches keep the ownership and
// lifetime of the pread path. Files with dictionary-encoded columns are
// decoded from the mapping through arrow-go's copying reader (its mapped
// reader does not load dictionaries). The mapping is removed by Close, after
// the ReadPart calls in flight. OpenIPC fails when the File was not opened
// by Open or OpenFile, or mmap fails. OpenParquet ignores the option.
func WithMmap() LoadOption {
	return func(c *loadConfig) error { c.mmap = true; return nil }
}

// WithColumns keeps only the named top-level columns, in the order given.
// Opening fails when a name is not a column of the file, is the name of
// several, or is given twice.
// With no names every column is kept, as without the option. For Parquet,
// columns left out are not read; for Arrow IPC they are read and dropped.
func WithColumns(names ...string) LoadOption {
	return func(c *loadConfig) error { c.columns = slices.Clone(names); return nil }
}

// Select returns a Source that reads only the named top-level columns of s,
// in the order given: its Schema holds those fields of s.Schema(), and its
// ReadPart and ReadAll return batches of those columns alone. The parts
// and their rows are those of s. It is how a pipeline that knows which
// columns its kernels use reads no others from a Source opened with all of
// them, as WithColumns does at open.
//
// On a Source of OpenParquet or OpenAuto's Parquet, the columns left out
// are not read from the file nor decoded. On one of OpenIPC, the whole
// body of a record batch is read, and the columns left out are not
// validated or copied (with WithMmap, only the selected columns' bytes are
// touched). On any other Source, ReadPart reads s's whole part and drops
// the other columns.
//
// With no names it returns a view of every column. It fails, with an
// error naming the Source's file and the column, when a name is not a
// column of s.Schema(), is the name of several, or is given twice.
//
// The view holds nothing of its own: closing it makes its later ReadPart
// calls fail with ErrClosed and waits for its calls in flight, but does
// not close s; closing s does the same for the view (s's Close waits for
// the view's reads in flight too). WithBudget and WithMmap of s apply to
// the view. Safe for concurrent use, as s is.
func Select(s Source, names ...string) (Source, error) {
	idx, err := project("select", s.Name(), s.Schema(), names)
	if err != nil {
		return nil, err
	}
	if idx == nil {
		idx = make([]int, s.Schema().NumFields())
		for i := range idx {
			idx[i] = i
		}
	}
	sc := s.Schema()
	fields := make([]arrow.Field, len(idx))
	for j, c := range idx {
		fields[j] = sc.Field(c)
	}
	md := sc.Metadata()
	schema := arrow.NewSchema(fields, &md)
	switch s := s.(type) {
	case *parquetSource:
		return s.selectColumns(schema, idx), nil
	case *ipcSource:
		return s.selectColumns(schema, idx), nil
	}
	return &selected{Source: s, schema: schema, cols: idx}, nil
}

// selected is Select's view of a Source kvio did not open.
type selected struct {
	Source
	schema *arrow.Schema
	cols   []int // indices in the Source's schema

	mu       sync.Mutex // guards closed and the Add of inflight
	closed   bool
	inflight sync.WaitGroup
}

func (v *selected) Schema() *arrow.Schema { return v.schema }

func (v *selected) ReadPart(ctx context.Context, i int, mem memory.Allocator) (arrow.RecordBatch, error) {
	v.mu.Lock()
	if v.closed {
		v.mu.Unlock()
		return nil, fmt.Errorf("kvio: read %s part %d: %w", v.Name(), i, ErrClosed)
	}
	v.inflight.Add(1)
	v.mu.Unlock()
	defer v.inflight.Done()
	all, err := v.Source.ReadPart(ctx, i, mem)
	if err != nil {
		return nil, err
	}
	defer all.Release()
	cols := make([]arrow.Array, len(v.cols))
	for j, c := range v.cols {
		cols[j] = all.Column(c)
	}
	return array.NewRecordBatch(v.schema, cols, all.NumRows()), nil
}

func (v *selected) Close() error {
	v.mu.Lock()
	v.closed = true
	v.mu.Unlock()
	v.inflight.Wait()
	return nil
}

// OpenAuto opens f as a Parquet file when it starts with the magic bytes
// "PAR1" and as an Arrow IPC file when it starts with "ARROW1", with
// OpenParquet or OpenIPC. Otherwise it returns an error naming the file and
// quoting the first bytes found (or saying it is empty).
func OpenAuto(ctx context.Context, f *File, opts ...LoadOption) (Source, error) {
	head := make([]byte, min(f.Size(), 6))
	if _, err := f.ReadAtContext(ctx, head, 0); err != nil {
		return nil, err // names the file
	}
	switch {
	case bytes.HasPrefix(head, []byte("PAR1")):
		return OpenParquet(ctx, f, opts...)
	case bytes.HasPrefix(head, []byte("ARROW1")):
		return OpenIPC(ctx, f, opts...)
	case len(head) == 0:
		return nil, fmt.Errorf("kvio: open %s: empty file, want Parquet or Arrow IPC", f.Name())
	}
	return nil, fmt.Errorf("kvio: open %s: neither Parquet nor Arrow IPC: starts with %q", f.Name(), head)
}

// ReadAll reads every part of s, in parallel on at most runtime.GOMAXPROCS(0)
// goroutines, and returns the batches in part order, each as ReadPart would
// return it. The caller owns them. On the first error it starts no further
// work, waits for the running work, releases every batch read and returns
// that error, which names the part for a failed part.
//
// For a Source from OpenParquet (or OpenAuto on a Parquet file) the unit of
// work is a column chunk, not a whole row group: the goroutines share the
// file's column chunks, each reading runs of consecutive row groups of one
// column with one reader (see OpenParquet), so a file with few row groups
// still keeps every goroutine busy to the end. With WithBudget, every byte
// of the call is charged to the budget as ReadPart charges it, and a refused
// allocation fails the whole call, freeing what it allocated.
func ReadAll(ctx context.Context, s Source, mem memory.Allocator) ([]arrow.RecordBatch, error) {
	if ps, ok := s.(*parquetSource); ok {
		return ps.readAll(ctx, mem)
	}
	out := make([]arrow.RecordBatch, s.NumParts())
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(runtime.GOMAXPROCS(0))
	started := 0
	for i := range out {
		if gctx.Err() != nil {
			break
		}
		started++
		g.Go(func() error {
			var err error
			out[i], err = s.ReadPart(gctx, i, mem)
			return err
		})
	}
	err := g.Wait()
	if err == nil && started < len(out) {
		err = fmt.Errorf("kvio: read %s: %w", s.Name(), ctx.Err())
	}
	if err != nil {
		for _, b := range out {
			if b != nil {
				b.Release()
			}
		}
		return nil, err
	}
	return out, nil
}

// parts holds what both Source implementations share: the file, the
// projected schema, the row count of each part, the budget, and the closed
// flag with the ReadPart calls in flight.
type parts struct {
	file    *File
	schema  *arrow.Schema
	rows    []int64
	budget  *buffers.Budget
	onClose func() error // run once by Close after the reads in flight; may be nil
	parent  *parts       // the Source a Select view reads through, or nil

	mu       sync.Mutex // guards closed and the Add of inflight
	closed   bool
	inflight sync.WaitGroup
}

func (p *parts) Name() string          { return p.file.Name() }
func (p *parts) Schema() *arrow.Schema { return p.schema }
func (p *parts) NumParts() int         { return len(p.rows) }
func (p *parts) PartRows(i int) int64  { return p.rows[i] }

func (p *parts) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	p.inflight.Wait()
	if p.onClose != nil {
		return p.onClose()
	}
	return nil
}

// begin returns the error ReadPart reports before reading part i, or
// registers the read in flight, with the parent too for a Select view;
// the caller then calls p.end.
func (p *parts) begin(ctx context.Context, i int) error {
	if p.parent != nil {
		if err := p.parent.begin(ctx, i); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	switch {
	case p.closed:
		err = fmt.Errorf("kvio: read %s part %d: %w", p.Name(), i, ErrClosed)
	case i < 0 || i >= len(p.rows):
		err = fmt.Errorf("kvio: read %s: part %d out of range [0, %d)", p.Name(), i, len(p.rows))
	case ctx.Err() != nil:
		err = fmt.Errorf("kvio: read %s part %d: %w", p.Name(), i, ctx.Err())
	}
	if err != nil {
		if p.parent != nil {
			p.parent.end()
		}
		return err
	}
	p.inflight.Add(1)
	return nil
}

// beginAll is begin for a call that reads every part: it returns the
// error of a closed Source or a done ctx, or registers the call in flight;
// the caller then calls p.end.
func (p *parts) beginAll(ctx context.Context) error {
	if p.parent != nil {
		if err := p.parent.beginAll(ctx); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var err error
	switch {
	case p.closed:
		err = fmt.Errorf("kvio: read %s: %w", p.Name(), ErrClosed)
	case ctx.Err() != nil:
		err = fmt.Errorf("kvio: read %s: %w", p.Name(), ctx.Err())
	}
	if err != nil {
		if p.parent != nil {
			p.parent.end()
		}
		return err
	}
	p.inflight.Add(1)
	return nil
}

// end ends a read registered by begin or beginAll.
func (p *parts) end() {
	p.inflight.Done()
	if p.parent != nil {
		p.parent.end()
	}
}

// view returns the parts of a Select view of p with the given schema: the
// same file, rows and budget, its own closed flag, and reads registered
// with p as well, so that p's Close waits for them and fails later ones.
func (p *parts) view(schema *arrow.Schema) parts {
	return parts{file: p.file, schema: schema, rows: p.rows, budget: p.budget, parent: p}
}

// readPart runs decode for part i with the budget applied to mem: it
// registers the read, recovers arrow-go's panics, and on failure frees what
// decode allocated and left behind, returning it to the budget.
func (p *parts) readPart(ctx context.Context, i int, mem memory.Allocator, decode func(memory.Allocator) (arrow.RecordBatch, error)) (arrow.RecordBatch, error) {
	if err := p.begin(ctx, i); err != nil {
		return nil, err
	}
	defer p.end()
	var ba *budgetAllocator
	if p.budget != nil {
		ba = newBudgetAllocator(mem, p.budget)
		mem = ba
	}
	var rec arrow.RecordBatch
	err := safely(func() (err error) {
		rec, err = decode(mem)
		return err
	})
	if err != nil {
		if ba != nil {
			if refused := ba.abandon(); refused != nil {
				err = refused // pqarrow recovers panics itself, hiding ours
			}
		}
		return nil, fmt.Errorf("kvio: read %s part %d: %w", p.Name(), i, err)
	}
	return rec, nil
}

// reader returns an io.ReaderAt (and io.Seeker) over the whole file whose
// reads stop when ctx is done.
func (p *parts) reader(ctx context.Context) *io.SectionReader {
	return io.NewSectionReader(readerAtFunc(func(b []byte, off int64) (int, error) {
		return p.file.ReadAtContext(ctx, b, off)
	}), 0, p.file.Size())
}

// readerAtFunc adapts a function to io.ReaderAt.
type readerAtFunc func(p []byte, off int64) (int, error)

func (fn readerAtFunc) ReadAt(p []byte, off int64) (int, error) { return fn(p, off) }

// project returns the indices in sc of the top-level columns names, in the
// order given, or nil for no names. A name that is not one column's (none,
// or several share it) or that is given twice is an error; op names the
// call in errors ("open", "select").
func project(op, file string, sc *arrow.Schema, names []string) ([]int, error) {
	if len(names) == 0 {
		return nil, nil
	}
	idx := make([]int, 0, len(names))
	for _, name := range names {
		i := sc.FieldIndices(name)
		switch {
		case len(i) == 0:
			return nil, fmt.Errorf("kvio: %s %s: unknown column %q (have %s)", op, file, name, fieldNames(sc))
		case len(i) > 1:
			return nil, fmt.Errorf("kvio: %s %s: column %q is ambiguous: columns %d and %d have that name", op, file, name, i[0], i[1])
		case slices.Contains(idx, i[0]):
			return nil, fmt.Errorf("kvio: %s %s: column %q selected twice", op, file, name)
		}
		idx = append(idx, i[0])
	}
	return idx, nil
}

// fieldNames lists the first few column names of sc and how many follow.
func fieldNames(sc *arrow.Schema) string {
	const show = 8
	names := make([]string, 0, show)
	for _, f := range sc.Fields()[:min(show, sc.NumFields())] {
		names = append(names, f.Name)
	}
	s := strings.Join(names, ", ")
	if more := sc.NumFields() - show; more > 0 {
		s += fmt.Sprintf(" and %d more", more)
	}
	return s
}

// safely runs fn and turns a panic raised inside it, as arrow-go does on some
// corrupt input, into an error; a budgetAllocator's over-budget panic
// becomes its error.
func safely(fn func() error) (err error) {
	defer func() {
		if v := recover(); v != nil {
			if ob, ok := v.(overBudget); ok {
				err = ob.err
				return
			}
			err = fmt.Errorf("corrupt data: panic: %v", v)
		}
	}()
	return fn()
}

// newLoadConfig applies opts in order (skipping nil ones) and returns the
// first option's error, prefixed with "kvio: ".
func newLoadConfig(opts []LoadOption) (loadConfig, error) {
	var c loadConfig
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return loadConfig{}, fmt.Errorf("kvio: %w", err)
		}
	}
	return c, nil
}
