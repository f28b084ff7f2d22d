package kvio

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"

	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// parquetSource reads the row groups of a Parquet file.
//
// Only the parsed footer is shared, read-only. A pqarrow.FileReader
// allocates from the allocator it was made with and reads through a reader
// fixed at construction (which carries the ctx of the call down to the
// reads), so each ReadPart call, and each goroutine of a ReadAll call, makes
// its own over the shared footer.
type parquetSource struct {
	parts
	meta   *metadata.FileMetaData
	fields []pqColumn // the output columns, in output order
}

// pqColumn is one output column: a top-level field of the file.
type pqColumn struct {
	field  int            // index in pqarrow's schema manifest
	leaves map[int]bool   // its Parquet leaf columns; read-only once built
	dict   arrow.DataType // the dictionary type it is read as (see Dictionary); nil: as the file says
	pages  pageKind       // how the page decoder reads it; pageNone: through pqarrow
}

var _ Source = (*parquetSource)(nil)

// pqArrowProps are the pqarrow read settings of every reader: arrays of
// variable-width columns get a data buffer sized from the row group's
// metadata before decoding, instead of growing from empty by doubling.
var pqArrowProps = pqarrow.ArrowReadProperties{PreAllocBinaryData: true}

// OpenParquet opens f as a Parquet file: it reads and parses the footer, and
// each ReadPart then reads one row group through f and decodes its
// columns on up to GOMAXPROCS goroutines (a column chunk that the page
// decoder reads, see below, page by page; any other in one read, a large
// one split in parallel by f). A top-level column of one leaf that repeats nothing,
// of Parquet INT32, INT64, FLOAT or DOUBLE read as its own Arrow type (or
// narrowed, see Narrow), or of strings read as a dictionary (see
// Dictionary), is decoded by kvio's page decoder, page by page from
// arrow-go's page reader into the Arrow buffers of the result, where its
// pages are PLAIN or dictionary-encoded with RLE definition levels:
// nothing is allocated per row besides the output, and a chunk without
// nulls has no validity bitmap. Every other column or chunk is decoded by
// arrow-go's pqarrow, with the same values. ReadAll on the Source decodes
// the file's column chunks on several goroutines (see ReadAll). The parts
// are the row groups; WithColumns selects top-level columns, and the
// others are not read. WithBudget applies; WithMmap is ignored.
//
// It returns an error naming the file for an empty, truncated or corrupt
// file (including a chunk of a column that repeats nothing whose value
// count differs from its row group's row count), an unknown or ambiguous
// column, or a failed read; ReadPart fails for a page that does not
// decode (the page decoder names the column, the page and what is
// wrong: a level or a dictionary index out of range, a run or a page
// holding fewer values than it claims, more values than the row group's
// rows). Page CRCs are not checked, so a changed value is found only
// where the page's codec checks its content (see the package
// documentation, "Damaged files").
// The footer, and buffers used while decoding (compressed and
// decompressed pages, decoded dictionaries), live on the Go heap, not in
// the allocator of ReadPart; the page decoder keeps decompressed pages
// between reads in pools that the garbage collector empties.
func OpenParquet(ctx context.Context, f *File, opts ...LoadOption) (Source, error) {
	cfg, err := newLoadConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &parquetSource{parts: parts{file: f, budget: cfg.budget}}
	var (
		fr   *pqarrow.FileReader
		full *arrow.Schema
	)
	err = safely(func() error {
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
		if fr, err = pqarrow.NewFileReader(pf, pqArrowProps, memory.DefaultAllocator); err != nil {
			return err
		}
		full, err = fr.Schema()
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("kvio: open %s: %w", f.Name(), err)
	}
	cols, err := project("open", f.Name(), full, cfg.columns)
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
	s.fields = make([]pqColumn, len(cols))
	for j, c := range cols {
		fields[j] = *fr.Manifest.Fields[c].Field
		s.fields[j] = pqColumn{field: c, leaves: map[int]bool{}}
		for _, leaf := range appendLeaves(nil, &fr.Manifest.Fields[c]) {
			s.fields[j].leaves[leaf] = true
		}
		s.fields[j].pages = pageKindOf(s.meta, s.fields[j], fields[j].Type)
	}
	s.schema = arrow.NewSchema(fields, fr.Manifest.SchemaMeta)
	s.rows = make([]int64, s.meta.NumRowGroups())
	for i := range s.rows {
		s.rows[i] = s.meta.RowGroup(i).NumRows()
	}
	return s, nil
}

// selectColumns returns Select's view of the columns idx of s, with the
// given schema.
func (s *parquetSource) selectColumns(schema *arrow.Schema, idx []int) *parquetSource {
	v := &parquetSource{parts: s.view(schema), meta: s.meta, fields: make([]pqColumn, len(idx))}
	for j, c := range idx {
		v.fields[j] = s.fields[c] // leaves is read-only: shared
	}
	return v
}

// checkChunks returns an error for a column chunk that the footer places
// outside the file (arrow-go would allocate the claimed length before
// finding out), or whose value count cannot be its row group's row count.
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
			// A column that repeats nothing has one value (or null) per
			// row; readRun relies on it to cut a column read across row
			// groups at the right rows.
			if meta.Schema.Column(c).MaxRepetitionLevel() == 0 && col.NumValues() != rgm.NumRows() {
				return fmt.Errorf("row group %d column %d: %d values for %d rows", rg, c, col.NumValues(), rgm.NumRows())
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

// ReadPart reads row group i, its columns shared out among up to
// GOMAXPROCS goroutines (each with its own readers), so that the columns
// of one part decode in parallel; see Source. Its error is that of the
// first column, in schema order, that failed.
func (s *parquetSource) ReadPart(ctx context.Context, i int, mem memory.Allocator) (arrow.RecordBatch, error) {
	return s.readPart(ctx, i, mem, func(mem memory.Allocator) (arrow.RecordBatch, error) {
		ncol := len(s.fields)
		cols := make([]arrow.Array, ncol)
		errs := make([]error, ncol)
		var claimed atomic.Int64 // columns claimed by the goroutines
		var wg sync.WaitGroup
		for range min(runtime.GOMAXPROCS(0), ncol) {
			wg.Go(func() {
				rd := &readers{s: s, ctx: ctx, mem: mem}
				for j := int(claimed.Add(1) - 1); j < ncol; j = int(claimed.Add(1) - 1) {
					taken := false
					next := func() int {
						if taken {
							return -1
						}
						taken = true
						return i
					}
					_, errs[j] = s.readRun(ctx, rd, mem, j, i, i+1, next, func(_ int, a arrow.Array) { cols[j] = a })
				}
			})
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				releaseAll(cols)
				return nil, err
			}
		}
		return s.batch(i, cols), nil
	})
}

// newReader returns a pqarrow.FileReader over the shared footer whose reads
// go through the File and stop when ctx is done, and whose arrays come
// from mem.
func (s *parquetSource) newReader(ctx context.Context, mem memory.Allocator) (*pqarrow.FileReader, error) {
	pf, err := file.NewParquetReader(s.reader(ctx), file.WithMetadata(s.meta))
	if err != nil {
		return nil, err
	}
	fr, err := pqarrow.NewFileReader(pf, pqArrowProps, mem)
	if err != nil {
		return nil, err
	}
	// A column read as a dictionary: pqarrow picks the reader by the
	// manifest's type (a stored ARROW:schema would restore the string type
	// over ArrowReadProperties.SetReadDict).
	for _, c := range s.fields {
		if c.dict != nil {
			f := *fr.Manifest.Fields[c.field].Field
			f.Type = c.dict
			fr.Manifest.Fields[c.field].Field = &f
		}
	}
	return fr, nil
}

// readers makes, on first use, the readers of one goroutine's reads of a
// parquetSource: a pqarrow.FileReader (newReader) and a file.Reader for
// the page decoder (pageReader). A read that the page decoder does alone
// makes no pqarrow reader, whose schema manifest costs more than a page.
type readers struct {
	s   *parquetSource
	ctx context.Context
	mem memory.Allocator
	fr  *pqarrow.FileReader
	pf  *file.Reader
}

// pqarrow returns the pqarrow reader, allocating from mem.
func (r *readers) pqarrow() (*pqarrow.FileReader, error) {
	if r.fr == nil {
		fr, err := r.s.newReader(r.ctx, r.mem)
		if err != nil {
			return nil, err
		}
		r.fr = fr
	}
	return r.fr, nil
}

// pages returns the page decoder's reader.
func (r *readers) pages() (*file.Reader, error) {
	if r.pf == nil {
		pf, err := r.s.pageReader(r.ctx)
		if err != nil {
			return nil, err
		}
		r.pf = pf
	}
	return r.pf, nil
}

// readRun reads row groups of output column j with one pqarrow column
// reader over [lo, hi), so the reader's scratch buffers (levels, decoded
// values) serve every row group after the first: next returns each row
// group to read, in order from lo, and -1 to stop, which may come before
// hi. It hands put one array per row group; put owns it. The arrays come
// from mem, through rd's readers. On failure it returns the row group being read and the error; the
// arrays already put stay with put's owner. It recovers arrow-go's panics
// (corrupt data, a budget refusal).
//
// One reader over several row groups needs each chunk to hold exactly its
// row group's rows: checkChunks ensures it for columns that repeat
// nothing, and oneArray verifies the row count of every array.
func (s *parquetSource) readRun(ctx context.Context, rd *readers, mem memory.Allocator, j, lo, hi int, next func() int, put func(rg int, a arrow.Array)) (int, error) {
	rg := lo
	err := safely(func() error {
		var cr *pqarrow.ColumnReader
		defer func() {
			if cr != nil {
				cr.Release()
			}
		}()
		for rg = next(); rg >= 0; rg = next() {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if k := s.fields[j].pages; k != pageNone {
				pf, err := rd.pages()
				if err != nil {
					return err
				}
				a, err := s.readPages(ctx, pf, mem, j, rg, k)
				if errors.Is(err, errFallback) {
					a, err = s.readOne(ctx, rd, mem, j, rg)
					if err == nil && (k == pageInt32 || k == pageInt64) && !arrow.TypeEqual(a.DataType(), s.schema.Field(j).Type) {
						a, err = narrowArray(a, s.schema.Field(j).Type, s.schema.Field(j).Name, mem)
					}
				}
				if err != nil {
					return err
				}
				put(rg, a)
				continue
			}
			if cr == nil { // only now: a run may end before its first row group
				rgs := make([]int, hi-lo)
				for k := range rgs {
					rgs[k] = lo + k
				}
				fr, err := rd.pqarrow()
				if err != nil {
					return err
				}
				if cr, err = fr.GetFieldReader(ctx, s.fields[j].field, s.fields[j].leaves, rgs); err != nil {
					return err
				}
				if cr == nil {
					return fmt.Errorf("column %q has no leaf to read", s.schema.Field(j).Name)
				}
			}
			ch, err := cr.NextBatch(s.rows[rg])
			if err != nil {
				if ch != nil {
					ch.Release()
				}
				return err
			}
			a, err := oneArray(ch, s.rows[rg], mem)
			if err != nil {
				return err
			}
			put(rg, a)
		}
		return nil
	})
	return rg, err
}

// readOne reads output column j of row group rg alone through pqarrow.
func (s *parquetSource) readOne(ctx context.Context, rd *readers, mem memory.Allocator, j, rg int) (arrow.Array, error) {
	fr, err := rd.pqarrow()
	if err != nil {
		return nil, err
	}
	cr, err := fr.GetFieldReader(ctx, s.fields[j].field, s.fields[j].leaves, []int{rg})
	if err != nil {
		return nil, err
	}
	if cr == nil {
		return nil, fmt.Errorf("column %q has no leaf to read", s.schema.Field(j).Name)
	}
	defer cr.Release()
	ch, err := cr.NextBatch(s.rows[rg])
	if err != nil {
		if ch != nil {
			ch.Release()
		}
		return nil, err
	}
	return oneArray(ch, s.rows[rg], mem)
}

// oneArray returns the chunks of ch, which holds one column of one row
// group, as one array of rows elements, and releases ch. Concatenating
// several chunks (a binary column of more than 2 GiB of data) allocates
// from mem.
func oneArray(ch *arrow.Chunked, rows int64, mem memory.Allocator) (arrow.Array, error) {
	defer ch.Release()
	if int64(ch.Len()) != rows {
		return nil, fmt.Errorf("column %s: read %d rows, want %d", ch.DataType(), ch.Len(), rows)
	}
	switch chunks := ch.Chunks(); len(chunks) {
	case 0:
		return array.MakeArrayOfNull(mem, ch.DataType(), 0), nil
	case 1:
		chunks[0].Retain()
		return chunks[0], nil
	default:
		return array.Concatenate(chunks, mem)
	}
}

// batch returns row group rg's batch of the arrays cols, one per output
// column, taking over the caller's references to them.
func (s *parquetSource) batch(rg int, cols []arrow.Array) arrow.RecordBatch {
	b := array.NewRecordBatch(s.schema, cols, s.rows[rg])
	releaseAll(cols)
	return b
}

// releaseAll releases the non-nil arrays of as.
func releaseAll(as []arrow.Array) {
	for _, a := range as {
		if a != nil {
			a.Release()
		}
	}
}

// readAll reads every row group; see ReadAll.
//
// The work is the column chunks, output column × row group. A goroutine
// takes the next column not yet started, in output order, and reads its
// row groups in order with one column reader; when every column has
// started, it splits the run with the most row groups left and takes the
// rear half, as in work-stealing schedulers that split ranges. So each
// column is read in a few long runs, each reader's scratch buffers
// (levels, decoded values) serving many row groups, yet no goroutine idles
// while another has more than the row group in hand left to read.
func (s *parquetSource) readAll(ctx context.Context, mem memory.Allocator) ([]arrow.RecordBatch, error) {
	if err := s.beginAll(ctx); err != nil {
		return nil, err
	}
	defer s.end()
	nrg, ncol := len(s.rows), len(s.fields)
	out := make([]arrow.RecordBatch, nrg)
	if nrg*ncol == 0 {
		for rg := range out {
			out[rg] = s.batch(rg, nil)
		}
		return out, nil
	}

	alloc := mem
	var ba *budgetAllocator
	if s.budget != nil {
		ba = newBudgetAllocator(mem, s.budget)
		alloc = ba
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	cols := make([]arrow.Array, nrg*ncol) // row group rg's arrays are cols[rg*ncol : (rg+1)*ncol]
	sched := &runs{nrg: nrg, ncol: ncol}
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), nrg*ncol) {
		wg.Go(func() {
			rd := &readers{s: s, ctx: ctx, mem: alloc}
			for r, hi := sched.claim(ctx); r != nil; r, hi = sched.claim(ctx) {
				// r.j and r.lo are fixed; r.hi, as claimed, bounds the run,
				// which a thief may shorten while it is read.
				j := r.j
				next := func() int { return sched.next(r) }
				if rg, err := s.readRun(ctx, rd, alloc, j, r.lo, hi, next, func(rg int, a arrow.Array) { cols[rg*ncol+j] = a }); err != nil {
					sched.fail(rg, err, cancel)
					return
				}
			}
		})
	}
	wg.Wait()

	err := sched.failed
	if err == nil && !sched.finished() {
		err = context.Cause(ctx)
	}
	if err != nil {
		releaseAll(cols)
		if ba != nil {
			if refused := ba.abandon(); refused != nil {
				err = refused // pqarrow recovers panics itself, hiding ours
			}
		}
		if sched.failed == nil {
			return nil, fmt.Errorf("kvio: read %s: %w", s.Name(), err)
		}
		return nil, fmt.Errorf("kvio: read %s part %d: %w", s.Name(), sched.badPart, err)
	}
	for rg := range out {
		out[rg] = s.batch(rg, cols[rg*ncol:(rg+1)*ncol])
	}
	return out, nil
}

// runs is the schedule of a readAll: the runs of row groups of one column
// that goroutines read. Safe for concurrent use.
type runs struct {
	nrg, ncol int

	mu      sync.Mutex
	started int    // columns started
	active  []*run // runs with row groups not yet taken
	failed  error  // the first failure
	badPart int    // the row group that failed
}

// run is the row groups [lo, hi) of output column j, read in order by one
// goroutine; next is the first one it has not taken. Guarded by runs.mu.
type run struct {
	j, lo, hi, next int
}

// claim returns a new run for the calling goroutine and its end as
// claimed, or nil when none is left, the read failed, or ctx is done.
func (rs *runs) claim(ctx context.Context) (*run, int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.failed != nil || ctx.Err() != nil {
		return nil, 0
	}
	if rs.started < rs.ncol {
		r := &run{j: rs.started, lo: 0, hi: rs.nrg}
		rs.started++
		rs.active = append(rs.active, r)
		return r, r.hi
	}
	// Split the run with the most row groups not yet taken.
	var victim *run
	for _, r := range rs.active {
		if victim == nil || r.hi-r.next > victim.hi-victim.next {
			victim = r
		}
	}
	if victim == nil || victim.hi == victim.next {
		return nil, 0
	}
	mid := victim.hi - (victim.hi-victim.next+1)/2
	r := &run{j: victim.j, lo: mid, hi: victim.hi, next: mid}
	victim.hi = mid
	rs.active = append(rs.active, r)
	return r, r.hi
}

// next takes the next row group of r for its goroutine, or returns -1 when
// r is done, or the read failed.
func (rs *runs) next(r *run) int {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if r.next >= r.hi || rs.failed != nil {
		rs.active = slices.DeleteFunc(rs.active, func(a *run) bool { return a == r })
		return -1
	}
	r.next++
	return r.next - 1
}

// fail records the first failure, at row group rg, and cancels the read.
func (rs *runs) fail(rg int, err error, cancel context.CancelCauseFunc) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if rs.failed == nil {
		rs.failed, rs.badPart = err, rg
		cancel(err)
	}
}

// finished reports whether every run was read to its end.
func (rs *runs) finished() bool {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.started == rs.ncol && len(rs.active) == 0
}
