package flights

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/kvio"
	"github.com/streamdag/streamdag/topology"
)

// Option configures the pipeline (Build, Run, Job.Options). An option
// given bad input returns an error, which Build returns prefixed with
// "flights: ", building nothing; nil options are skipped; a later option
// of one kind replaces an earlier one.
type Option func(*settings) error

// settings are what the options set; the zero value is the defaults.
type settings struct {
	MinDelay   int64
	TopK       int
	Partitions int
	Rows       *[2]int64 // WithRows' [lo, hi); nil: all rows
	Airports   func() (io.ReadCloser, error)
	Sink       func(*Table) error
	OpenCL     bool
	Device     *topology.DeviceID
}

// newSettings applies opts in order and returns the first option's error,
// prefixed with "flights: ".
func newSettings(opts []Option) (settings, error) {
	var s settings
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&s); err != nil {
			return settings{}, fmt.Errorf("flights: %w", err)
		}
	}
	return s, nil
}

// WithMinDelay keeps rows with delay > minutes (default 0; negative
// minutes keep early flights too).
func WithMinDelay(minutes int64) Option {
	return func(s *settings) error { s.MinDelay = minutes; return nil }
}

// WithTopK keeps the first k groups (default: all). Errors: k < 1.
func WithTopK(k int) Option {
	return func(s *settings) error {
		if k < 1 {
			return fmt.Errorf("WithTopK(%d): want at least 1 group", k)
		}
		s.TopK = k
		return nil
	}
}

// WithPartitions asks for at least n partitions (default 1; Job.Run and
// Run: one per stream of every device of the executor). A source with
// fewer row groups or batches than that is split into row ranges; the
// executor spreads partitions over its streams. Errors: n < 1.
func WithPartitions(n int) Option {
	return func(s *settings) error {
		if n < 1 {
			return fmt.Errorf("WithPartitions(%d): want at least 1 partition", n)
		}
		s.Partitions = n
		return nil
	}
}

// WithRows keeps rows [lo, hi) of the parts the pipeline reads (all of
// src for Build, parts [lo, hi) for BuildParts), counted from the first
// row of its first part, and drops the others before the filter
// (default: all rows). The parts wholly outside [lo, hi) are still
// read: give BuildParts only the parts the rows touch. Build and
// BuildParts fail, naming the source, when hi exceeds those parts' rows.
// Errors: lo < 0 or hi < lo.
func WithRows(lo, hi int64) Option {
	return func(s *settings) error {
		if lo < 0 || hi < lo {
			return fmt.Errorf("WithRows(%d, %d): want 0 <= lo <= hi", lo, hi)
		}
		s.Rows = &[2]int64{lo, hi}
		return nil
	}
}

// SplitRows cuts rows [lo, hi) into n ranges of consecutive rows, as even
// as they go: [lo, hi) pairs in order covering [lo, hi) (some empty when
// hi-lo < n). It is how the pipeline cuts a source into partitions. It
// panics for n below 1.
func SplitRows(lo, hi int64, n int) [][2]int64 {
	if n < 1 {
		panic("flights: SplitRows needs 1 or more ranges")
	}
	out := make([][2]int64, n)
	for j := range n {
		out[j] = [2]int64{lo + (hi-lo)*int64(j)/int64(n), lo + (hi-lo)*int64(j+1)/int64(n)}
	}
	return out
}

// WithAirports makes the join open airports.csv (header iata,name,city,…)
// with open, which the airports kernel calls at run time. The kernel
// reads at most 64 MiB of it, and stops at a read after its context is
// done: a source that gives more fails the kernel, and the result goes
// on without names. Errors: a nil open.
func WithAirports(open func() (io.ReadCloser, error)) Option {
	return func(s *settings) error {
		if open == nil {
			return errors.New("WithAirports: nil open function")
		}
		s.Airports = open
		return nil
	}
}

// WithSink makes the write kernel give the final table to sink. Errors: a
// nil sink.
func WithSink(sink func(*Table) error) Option {
	return func(s *settings) error {
		if sink == nil {
			return errors.New("WithSink: nil sink")
		}
		s.Sink = sink
		return nil
	}
}

// WithOpenCL builds the device graph: filter[p] and partial[p] run over
// raw buffers of the partition's delay values and group codes, which a
// columns[p] kernel writes, and carry an OpenCL C variant beside their Go
// function, so an executor with an OpenCL device may run them there (and
// one without runs the Go function, with the same result); a decode[p]
// kernel turns partial's tables into groups. A partition then holds at
// most DeviceGroups distinct keys. The result is the same as without
// OpenCL, byte for byte. Without it, filter and partial read the Arrow
// batches directly.
func WithOpenCL() Option {
	return func(s *settings) error { s.OpenCL = true; return nil }
}

// WithDevice, with WithOpenCL, runs filter[p] and partial[p] on device id
// (dag.OnDevice: planning fails on an executor without it). Without it
// placement chooses, preferring opencl0 (dag.PreferDevice).
func WithDevice(id topology.DeviceID) Option {
	return func(s *settings) error { s.Device = &id; return nil }
}

// KeyKind says what a group key is.
type KeyKind uint8

const (
	// KeyOrigin groups by origin airport code.
	KeyOrigin KeyKind = iota
	// KeyHour groups by the hour of day, 0–23.
	KeyHour
)

// Row is one group of the result.
type Row struct {
	Key       string  `json:"key"`        // airport code, or the hour as a decimal integer
	Count     int64   `json:"count"`      // flights with delay > MinDelay
	DelaySum  int64   `json:"delay_sum"`  // minutes
	DelayMean float64 `json:"delay_mean"` // DelaySum / Count, minutes
	DelayMax  int64   `json:"delay_max"`  // minutes
	Name      string  `json:"name,omitempty"`
	City      string  `json:"city,omitempty"`
	hour      int64
}

// Cost-model figures for placement (dag.Estimate, dag.SizeHint): rough
// per-row costs on the CPU device (the 3M-row Parquet file decodes,
// filters and groups in about 0.6 s on 2 cores, decoding most of it); a
// decoded row of the five columns is about 40 bytes, about half of the
// rows pass a delay > 0 filter (a bit a row), and a partial group
// table is a few KiB. They steer placement only; results never depend on
// them.
const (
	sourceNsPerRow  = 60
	filterNsPerRow  = 3
	partialNsPerRow = 15
	bytesPerRow     = 40
	groupsBytes     = 8 << 10
)

// minSourceRows is the least number of rows a source kernel reads when
// parts are small (IPC files of many small batches).
const minSourceRows = 1 << 16

// Pipeline is the flights DAG over one source, with the ids a caller needs
// to read its result.
type Pipeline struct {
	Graph      *dag.Graph
	Key        KeyKind
	Partitions []Partition
	Output     dag.Value[*Table] // the result, once write has run
	// Columns are the columns the source kernels read, in this order:
	// "delay", then "origin" or "time" (the key). No other column of the
	// source is read or decoded (see kvio.Select).
	Columns []string
	// Dictionary holds "origin" when the source reads it as a dictionary
	// array (kvio.Dictionary: a Parquet file that stores it
	// dictionary-encoded); the partial group-by then keys on the
	// dictionary index and decodes each distinct code once per batch.
	// The source keeps each batch's indices at the narrowest of uint8,
	// uint16 and int32 that holds them (see narrowCodes).
	Dictionary []string
	// Skipped are the parts of the source that are not read: those whose
	// "delay" statistics (kvio.IntRanger) show that no row passes the
	// filter, every delay being null or at most MinDelay. They count in
	// their partitions' rows as parts that were read and kept no row.
	Skipped []int
	src     kvio.Source // the view of Columns
	// codesMem, with a Dictionary, is the allocator of the source
	// kernels' reads: a pool, so that the int32 indices narrowCodes
	// replaces serve the next read instead of fresh memory.
	codesMem memory.Allocator
	skip     []bool // skip[i]: part i is in Skipped
	opts     settings
}

// Partition is the work of one filter/partial pair: rows [RowLo, RowHi) of
// the concatenated parts [PartLo, PartHi) of the source.
type Partition struct {
	Source         int // index of its source kernel
	PartLo, PartHi int
	RowLo, RowHi   int64
}

// Build returns the flights pipeline over src, configured by opts. It
// fails on an option's error, or when src lacks a
// signed integer "delay" column or both an "origin" and a "time" column,
// naming the source and the columns it has. The source kernels read
// src through kvio.Select of Pipeline.Columns, so the other columns of
// src are not read, with "delay" as the narrowest signed integer type
// the file's statistics allow (kvio.Narrow), and read no part whose
// statistics prove the filter rejects all its rows (Pipeline.Skipped);
// the pipeline does not close src nor its view.
func Build(src kvio.Source, opts ...Option) (*Pipeline, error) {
	s, err := newSettings(opts)
	if err != nil {
		return nil, err
	}
	return build(src, 0, src.NumParts(), s)
}

// BuildParts returns the flights pipeline over parts [lo, hi) of src
// alone, as Build does over all of them: one shard of a run whose
// shards together cover src. Its Partitions and Skipped name parts by
// their index in src, and its result (Pipeline.Result) is the merged
// groups of those parts (all of them without WithTopK, as Finish
// takes them). It fails as Build does, and with an error naming src when
// [lo, hi) is not a range of its parts.
func BuildParts(src kvio.Source, lo, hi int, opts ...Option) (*Pipeline, error) {
	if lo < 0 || lo > hi || hi > src.NumParts() {
		return nil, fmt.Errorf("flights: parts [%d, %d) of %s: want 0 <= lo <= hi <= %d", lo, hi, src.Name(), src.NumParts())
	}
	s, err := newSettings(opts)
	if err != nil {
		return nil, err
	}
	return build(src, lo, hi, s)
}

// build is Build over parts [lo, hi) of src, with the options applied.
func build(src kvio.Source, lo, hi int, opts settings) (*Pipeline, error) {
	key, err := keyOf(src.Name(), src.Schema())
	if err != nil {
		return nil, err
	}
	if key == KeyHour && opts.Airports != nil {
		return nil, fmt.Errorf("flights: %s has no origin column, so there are no airport codes to join airports.csv on (it is grouped by hour)", src.Name())
	}
	cols := []string{"delay", "origin"}
	if key == KeyHour {
		cols[1] = "time"
	}
	view, err := kvio.Select(src, cols...)
	if err != nil {
		return nil, fmt.Errorf("flights: %w", err)
	}
	var dict []string
	if key == KeyOrigin {
		if view, dict, err = kvio.Dictionary(view, "origin"); err != nil {
			return nil, fmt.Errorf("flights: %w", err)
		}
	}
	// delay as the narrowest integer its statistics allow: the kernels
	// widen it to int64 as they read it.
	if view, _, err = kvio.Narrow(view, "delay"); err != nil {
		return nil, fmt.Errorf("flights: %w", err)
	}
	p := &Pipeline{Graph: dag.New(), Key: key, Columns: cols, Dictionary: dict, src: view, opts: opts}
	if len(dict) > 0 {
		p.codesMem = kvio.NewPoolAllocator()
	}
	g := p.Graph
	nparts := src.NumParts()
	p.skip = make([]bool, nparts)
	if rs, ok := view.(kvio.IntRanger); ok {
		for i := lo; i < hi; i++ {
			if r, ok := rs.IntRange(i, "delay"); ok && (r.AllNull || r.Max <= opts.MinDelay) {
				p.skip[i] = true
				p.Skipped = append(p.Skipped, i)
			}
		}
	}
	want := max(opts.Partitions, 1)
	// Sources: one per part (a Parquet row group, an IPC batch), except that
	// consecutive small parts are grouped into ranges of at least
	// minSourceRows rows.
	// kept are the rows [kept.lo, kept.hi) of each source (WithRows).
	type srcRange struct {
		lo, hi int
		rows   int64
		kept   struct{ lo, hi int64 }
	}
	var ranges []srcRange
	var total int64
	for i := lo; i < hi; i++ {
		n := len(ranges)
		if n == 0 || ranges[n-1].rows >= minSourceRows {
			ranges = append(ranges, srcRange{lo: i, hi: i})
			n++
		}
		ranges[n-1].hi = i + 1
		ranges[n-1].rows += src.PartRows(i)
		total += src.PartRows(i)
	}
	keep := [2]int64{0, total}
	if opts.Rows != nil {
		if opts.Rows[1] > total {
			return nil, fmt.Errorf("flights: rows [%d, %d) of parts [%d, %d) of %s: the parts have %d rows", opts.Rows[0], opts.Rows[1], lo, hi, src.Name(), total)
		}
		keep = *opts.Rows
	}
	var off int64
	for i := range ranges {
		r := &ranges[i]
		r.kept.lo, r.kept.hi = min(max(keep[0]-off, 0), r.rows), min(max(keep[1]-off, 0), r.rows)
		off += r.rows
	}
	// A source is split into row ranges when there are fewer sources than
	// partitions wanted.
	splits := 1
	if len(ranges) > 0 && len(ranges) < want {
		splits = (want + len(ranges) - 1) / len(ranges)
	}
	var partials []dag.Value[*groups]
	// Lanes (CPU graph): source s is on lane s%want, and reads, as an
	// optional input it ignores, the groups of the previous source of its
	// lane. The planner keeps each lane's chain on one stream, so a
	// stream runs source, filter and partial of one source before it
	// decodes the next, and filter and partial read the batches while
	// they are still in cache; without the order the plan decodes every
	// source first. A failed partial does not stop the next source.
	lanes := make([][]dag.BufferID, want)
	for s, r := range ranges {
		lo, hi, rows := r.lo, r.hi, r.rows
		batches := dag.AddValue[batchList](g, fmt.Sprintf("batches[%d]", s), dag.SizeHint(rows*bytesPerRow))
		lane := &lanes[s%want]
		g.AddKernel(fmt.Sprintf("source[%d]", s), p.source(lo, hi, batches), dag.Writes(batches.ID()),
			dag.ReadsOptional(*lane...), dag.Estimate(time.Duration(rows)*sourceNsPerRow))
		*lane = nil
		for _, rr := range SplitRows(r.kept.lo, r.kept.hi, splits) {
			part := Partition{Source: s, PartLo: lo, PartHi: hi, RowLo: rr[0], RowHi: rr[1]}
			i := len(p.Partitions)
			p.Partitions = append(p.Partitions, part)
			if opts.OpenCL {
				partials = append(partials, p.addDeviceKernels(i, part, batches))
				continue
			}
			prows := part.RowHi - part.RowLo
			sel := dag.AddValue[selection](g, fmt.Sprintf("selected[%d]", i), dag.SizeHint(prows/8+8))
			grp := dag.AddValue[*groups](g, fmt.Sprintf("groups[%d]", i), dag.SizeHint(groupsBytes))
			g.AddKernel(fmt.Sprintf("filter[%d]", i), p.filter(part, batches, sel), dag.Reads(batches.ID()), dag.Writes(sel.ID()),
				dag.Estimate(time.Duration(prows)*filterNsPerRow))
			g.AddKernel(fmt.Sprintf("partial[%d]", i), p.partial(batches, sel, grp), dag.Reads(batches.ID(), sel.ID()), dag.Writes(grp.ID()),
				dag.Estimate(time.Duration(prows)*partialNsPerRow))
			partials = append(partials, grp)
			*lane = append(*lane, grp.ID())
		}
	}
	merged := dag.AddValue[*groups](g, "merged")
	partialIDs := make([]dag.BufferID, len(partials))
	for i, h := range partials {
		partialIDs[i] = h.ID()
	}
	g.AddKernel("merge", p.merge(partials, merged), dag.ReadsOptional(partialIDs...), dag.Writes(merged.ID()))
	p.addFinish(merged)
	return p, g.Validate()
}

// addFinish adds the kernels after merge to p's graph: sort, topk, the
// join with its airports source when Options.Airports is set, and write
// (Pipeline.Output).
func (p *Pipeline) addFinish(merged dag.Value[*groups]) {
	g, opts := p.Graph, p.opts
	sorted := dag.AddValue[*Table](g, "sorted")
	top := dag.AddValue[*Table](g, "top")
	g.AddKernel("sort", p.sort(merged, sorted), dag.Reads(merged.ID()), dag.Writes(sorted.ID()))
	g.AddKernel("topk", p.topk(sorted, top), dag.Reads(sorted.ID()), dag.Writes(top.ID()))
	final := top
	if opts.Airports != nil {
		airports := dag.AddValue[airportMap](g, "airport_names")
		joined := dag.AddValue[*Table](g, "joined")
		g.AddKernel("airports", p.airports(airports), dag.Writes(airports.ID()))
		// airports.csv is optional to the result: when it cannot be read,
		// join passes the rows on without names (Table.NamesErr says why).
		g.AddKernel("join", join(top, airports, joined), dag.Reads(top.ID()), dag.ReadsOptional(airports.ID()), dag.Writes(joined.ID()))
		final = joined
	}
	p.Output = dag.AddValue[*Table](g, "result")
	g.AddKernel("write", p.write(final, p.Output), dag.Reads(final.ID()), dag.Writes(p.Output.ID()))
}

// Table is the pipeline's result: the rows, and the partitions whose
// rows are missing from them because their launches failed.
type Table struct {
	Rows []Row
	Lost []Loss
	// NamesErr, when airports.csv was given but could not be read, is the
	// error graph's read error of the airport names: the rows then have
	// no Name or City. nil otherwise.
	NamesErr error
}

// Loss is one partition whose rows did not reach the result.
type Loss struct {
	Partition int
	Part      Partition
	Rows      int64 // rows of the partition, all lost
	Err       error // the error graph's read error: failure, chain, root error
}

// String describes the loss on one line.
func (l Loss) String() string {
	msg, _, _ := strings.Cut(l.Err.Error(), "\n")
	parts := fmt.Sprintf("part %d", l.Part.PartLo)
	if l.Part.PartHi-l.Part.PartLo > 1 {
		parts = fmt.Sprintf("parts %d–%d", l.Part.PartLo, l.Part.PartHi-1)
	}
	return fmt.Sprintf("partition %d: %d rows lost (rows [%d, %d) of %s): %s",
		l.Partition, l.Rows, l.Part.RowLo, l.Part.RowHi, parts, msg)
}

// Result returns the result of a finished run: the rows (all of them, or
// those of the partitions that ran when some failed, with Lost saying
// which), or the error graph's read error when no result could be
// computed at all.
func (p *Pipeline) Result(res *exec.Result) (*Table, error) {
	v, err := res.Value(p.Output.ID())
	if err != nil {
		return nil, err
	}
	t, ok := v.(*Table)
	if !ok {
		return nil, fmt.Errorf("flights: result holds %T", v)
	}
	return t, nil
}

func keyOf(name string, sc *arrow.Schema) (KeyKind, error) {
	bad := func(what string) error {
		var have []string
		for _, f := range sc.Fields() {
			have = append(have, f.Name+" "+f.Type.String())
		}
		return fmt.Errorf("flights: %s: %s (columns: %v)", name, what, have)
	}
	d, ok := sc.FieldsByName("delay")
	if !ok || !isSignedInt(d[0].Type) {
		return 0, bad(`needs a signed integer "delay" column`)
	}
	if f, ok := sc.FieldsByName("origin"); ok {
		if id := f[0].Type.ID(); id == arrow.STRING || id == arrow.LARGE_STRING || id == arrow.STRING_VIEW {
			return KeyOrigin, nil
		}
		return 0, bad(`"origin" must be a string column`)
	}
	if f, ok := sc.FieldsByName("time"); ok {
		if id := f[0].Type.ID(); id == arrow.FLOAT32 || id == arrow.FLOAT64 {
			return KeyHour, nil
		}
		return 0, bad(`"time" must be a float column`)
	}
	return 0, bad(`needs an "origin" or a "time" column`)
}

func isSignedInt(t arrow.DataType) bool {
	switch t.ID() {
	case arrow.INT8, arrow.INT16, arrow.INT32, arrow.INT64:
		return true
	}
	return false
}

// batchList is the value of a batches[s] buffer: the record batches of one
// source, one per part, nil for a part not read (Pipeline.Skipped);
// released with the buffer.
type batchList []arrow.RecordBatch

// Release releases every batch.
func (b batchList) Release() {
	for _, r := range b {
		if r != nil {
			r.Release()
		}
	}
}

func (p *Pipeline) source(lo, hi int, batches dag.Value[batchList]) dag.KernelFunc {
	return func(ctx context.Context, l dag.Launch) error {
		out := make(batchList, 0, hi-lo)
		mem := l.Allocator()
		if p.codesMem != nil {
			mem = p.codesMem
		}
		for i := lo; i < hi; i++ {
			if p.skip[i] {
				out = append(out, nil)
				continue
			}
			rec, err := p.src.ReadPart(ctx, i, mem)
			if err != nil {
				out.Release()
				return err
			}
			if p.codesMem != nil {
				rec = narrowCodes(rec, "origin", l.Allocator())
			}
			out = append(out, rec)
		}
		return dag.Put(l, batches, out)
	}
}

// selection is the value of a selected[p] buffer: for each batch of the
// source, the rows kept (an empty rowSet for a batch outside the
// partition or not read).
type selection []rowSet

// rowSet is a set of rows of one batch as a bitmap: row r is in the set
// when bit r%64 of words[(r-base)/64] is set. base is a multiple of 64, so
// a partition's rows [lo, hi) take (hi-base+63)/64 words: one bit a row.
type rowSet struct {
	base  int
	words []uint64
}

// empty reports whether no row is in the set.
func (s rowSet) empty() bool {
	for _, w := range s.words {
		if w != 0 {
			return false
		}
	}
	return true
}

// len returns the number of rows in the set.
func (s rowSet) len() int {
	n := 0
	for _, w := range s.words {
		n += bits.OnesCount64(w)
	}
	return n
}

// rows yields the rows in the set in increasing order.
func (s rowSet) rows(yield func(int) bool) {
	for wi, w := range s.words {
		for row := s.base + wi*64; w != 0; w &= w - 1 {
			if !yield(row + bits.TrailingZeros64(w)) {
				return
			}
		}
	}
}

func (p *Pipeline) filter(part Partition, in dag.Value[batchList], out dag.Value[selection]) dag.KernelFunc {
	minDelay := p.opts.MinDelay
	return func(_ context.Context, l dag.Launch) error {
		batches, err := dag.Get(l, in)
		if err != nil {
			return err
		}
		sel := make(selection, len(batches))
		var off int64
		for b, rec := range batches {
			n := p.src.PartRows(part.PartLo + b)
			lo, hi := max(part.RowLo-off, 0), min(part.RowHi-off, n)
			off += n
			if lo >= hi || rec == nil { // nil: skipped, no row passes
				continue
			}
			if rec.NumRows() != n {
				return fmt.Errorf("flights: part %d has %d rows, want %d", part.PartLo+b, rec.NumRows(), n)
			}
			col, err := column(rec, "delay")
			if err != nil {
				return err
			}
			switch a := col.(type) {
			case *array.Int16:
				sel[b] = keepRows(a.Int16Values(), a, int(lo), int(hi), minDelay)
			case *array.Int32:
				sel[b] = keepRows(a.Int32Values(), a, int(lo), int(hi), minDelay)
			case *array.Int64:
				sel[b] = keepRows(a.Int64Values(), a, int(lo), int(hi), minDelay)
			case *array.Int8:
				sel[b] = keepRows(a.Int8Values(), a, int(lo), int(hi), minDelay)
			default:
				return fmt.Errorf("flights: column %q is %s, not a signed integer", "delay", col.DataType())
			}
		}
		return dag.Put(l, out, sel)
	}
}

// signed is the Go type of a signed integer Arrow column's values.
type signed interface {
	~int8 | ~int16 | ~int32 | ~int64
}

// keepRows returns the set of rows i in [lo, hi) whose delay vals[i] is
// valid in a and greater than minDelay, one bit a row of the range
// (branch-free where a has no nulls). vals are a's values (as
// Int16Values and the like give them, offset applied); 0 <= lo <= hi <=
// len(vals).
func keepRows[T signed](vals []T, a arrow.Array, lo, hi int, minDelay int64) rowSet {
	base := lo &^ 63
	s := rowSet{base: base, words: make([]uint64, (hi-base+63)/64)}
	nulls := a.NullN() > 0
	for i := lo; i < hi; {
		end := min((i|63)+1, hi) // the end of the word of row i
		var w uint64
		if nulls {
			for ; i < end; i++ {
				if int64(vals[i]) > minDelay && a.IsValid(i) {
					w |= 1 << (i & 63)
				}
			}
		} else {
			// Each row's bit enters at the top and moves down one place a
			// row (constant shifts keep the loop in registers); the last
			// shift puts row i at bit i%64.
			for _, v := range vals[i:end] {
				w = w>>1 | uint64(b2i(int64(v) > minDelay))<<63
			}
			w >>= uint(64 - (end - i) - i&63)
			i = end
		}
		s.words[(end-1-base)>>6] = w
	}
	return s
}

// b2i is 1 for true and 0 for false, without a branch.
func b2i(b bool) int {
	var i int
	if b {
		i = 1
	}
	return i
}

// agg accumulates one group.
type agg struct {
	count, sum, max int64
}

func (a *agg) add(d int64) {
	if a.count == 0 || d > a.max {
		a.max = d
	}
	a.count++
	a.sum += d
}

func (a *agg) merge(o agg) {
	if a.count == 0 || o.max > a.max {
		a.max = o.max
	}
	a.count += o.count
	a.sum += o.sum
}

// groups is the value of groups[p] and merged: aggregates by origin code
// or by hour.
type groups struct {
	byCode map[string]*agg
	byHour map[int64]*agg
	lost   []Loss
}

func newGroups() *groups { return &groups{byCode: map[string]*agg{}, byHour: map[int64]*agg{}} }

func (p *Pipeline) partial(in dag.Value[batchList], selected dag.Value[selection], out dag.Value[*groups]) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		batches, err := dag.Get(l, in)
		if err != nil {
			return err
		}
		sel, err := dag.Get(l, selected)
		if err != nil {
			return err
		}
		if len(sel) != len(batches) {
			return fmt.Errorf("flights: %s: %d selections for %d batches", l.Kernel(), len(sel), len(batches))
		}
		g := newGroups()
		var scratch []agg // groupByIndex's, one per dictionary index
		for b, rec := range batches {
			if sel[b].empty() {
				continue
			}
			if p.Key == KeyOrigin {
				if col, err := column(rec, "origin"); err == nil {
					if dict, ok := col.(*array.Dictionary); ok {
						dcol, err := column(rec, "delay")
						if err != nil {
							return err
						}
						if err := groupByIndex(g, dict, dcol, sel[b], &scratch); err != nil {
							return err
						}
						continue
					}
				}
			}
			delay, err := int64Column(rec, "delay")
			if err != nil {
				return err
			}
			if p.Key == KeyOrigin {
				key, err := stringColumn(rec, "origin")
				if err != nil {
					return err
				}
				for i := range sel[b].rows {
					k, ok := key(i)
					if !ok {
						continue
					}
					a := g.byCode[k]
					if a == nil {
						a = &agg{}
						g.byCode[strings.Clone(k)] = a // k points into Arrow memory
					}
					d, _ := delay(i)
					a.add(d)
				}
				continue
			}
			hour, err := hourColumn(rec, "time")
			if err != nil {
				return err
			}
			for i := range sel[b].rows {
				h, ok, err := hour(i)
				if err != nil {
					return err
				}
				if !ok {
					continue
				}
				a := g.byHour[h]
				if a == nil {
					a = &agg{}
					g.byHour[h] = a
				}
				d, _ := delay(i)
				a.add(d)
			}
		}
		return dag.Put(l, out, g)
	}
}

// groupByIndex adds the selected rows sel of a batch whose origin
// column is the dictionary array dict and whose delay column is delay
// (a signed integer array) to g: it aggregates by dictionary index in
// scratch (reused across batches, grown as needed), then adds each
// index's aggregate to g under its string, decoded once. Rows whose
// index or dictionary value is null are skipped, as in the string path;
// sel holds only rows whose delay is valid (the filter's), so delay's
// validity is not checked again.
func groupByIndex(g *groups, dict *array.Dictionary, delay arrow.Array, sel rowSet, scratch *[]agg) error {
	// Not dict.Dictionary(): it builds and caches the array on first use,
	// unsynchronised, and partitions of one batch run concurrently.
	dv := array.MakeFromData(dict.Data().Dictionary())
	defer dv.Release()
	values, err := stringArray(dv, "origin")
	if err != nil {
		return err
	}
	n := dv.Len()
	if cap(*scratch) < n {
		*scratch = make([]agg, n)
	}
	aggs := (*scratch)[:n]
	clear(aggs)
	if delay.Len() != dict.Len() {
		return fmt.Errorf("flights: delay has %d rows, origin %d", delay.Len(), dict.Len())
	}
	fast := true
	switch idx := dict.Indices().(type) {
	case *array.Uint8:
		err = aggregateDelays(aggs, idx.Uint8Values(), delay, dict, sel)
	case *array.Uint16:
		err = aggregateDelays(aggs, idx.Uint16Values(), delay, dict, sel)
	case *array.Int32:
		err = aggregateDelays(aggs, idx.Int32Values(), delay, dict, sel)
	default:
		fast = false
	}
	if err != nil {
		return err
	}
	if !fast {
		dval, err := int64Array(delay, "delay")
		if err != nil {
			return err
		}
		for i := range sel.rows {
			if !dict.IsValid(i) {
				continue
			}
			c := dict.GetValueIndex(i)
			if c < 0 || c >= n {
				return fmt.Errorf("flights: origin row %d: dictionary index %d out of [0, %d)", i, c, n)
			}
			d, _ := dval(i)
			aggs[c].add(d)
		}
	}
	for c := range aggs {
		if aggs[c].count == 0 {
			continue
		}
		k, ok := values(c)
		if !ok {
			continue
		}
		if a := g.byCode[k]; a != nil {
			a.merge(aggs[c])
		} else {
			a := aggs[c]
			g.byCode[strings.Clone(k)] = &a // k points into Arrow memory
		}
	}
	return nil
}

// aggregateDelays is aggregate over the values of delay, a signed
// integer array.
func aggregateDelays[C index](aggs []agg, codes []C, delay arrow.Array, dict *array.Dictionary, sel rowSet) error {
	switch d := delay.(type) {
	case *array.Int16:
		return aggregate(aggs, codes, d.Int16Values(), dict, sel)
	case *array.Int32:
		return aggregate(aggs, codes, d.Int32Values(), dict, sel)
	case *array.Int64:
		return aggregate(aggs, codes, d.Int64Values(), dict, sel)
	case *array.Int8:
		return aggregate(aggs, codes, d.Int8Values(), dict, sel)
	}
	return fmt.Errorf("flights: column %q is %s, not a signed integer", "delay", delay.DataType())
}

// index is the type of the dictionary indices groupByIndex reads fast.
type index interface{ uint8 | uint16 | int32 }

// aggregate adds delays[i] to aggs[codes[i]] for each row i of sel whose
// index is valid in dict (codes are dict's indices, delays the delay
// column's values, both offset applied). It fails on an index outside
// aggs, naming the row.
func aggregate[C index, T signed](aggs []agg, codes []C, delays []T, dict *array.Dictionary, sel rowSet) error {
	nulls := dict.NullN() > 0
	for wi, w := range sel.words {
		for row := sel.base + wi*64; w != 0; w &= w - 1 {
			i := row + bits.TrailingZeros64(w)
			if nulls && !dict.IsValid(i) {
				continue
			}
			c := codes[i]
			if uint32(c) >= uint32(len(aggs)) {
				return fmt.Errorf("flights: origin row %d: dictionary index %d out of [0, %d)", i, c, len(aggs))
			}
			aggs[c].add(int64(delays[i]))
		}
	}
	return nil
}

// merge returns the kernel that merges partials (one per partition, in
// partition order; optional reads) into merged, recording each missing
// one as a Loss.
func (p *Pipeline) merge(partials []dag.Value[*groups], merged dag.Value[*groups]) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		out := newGroups()
		for i, h := range partials {
			if err := l.Missing(h.ID()); err != nil {
				part := p.Partitions[i]
				out.lost = append(out.lost, Loss{Partition: i, Part: part, Rows: part.RowHi - part.RowLo, Err: err})
				continue
			}
			g, err := dag.Get(l, h)
			if err != nil {
				return err
			}
			out.add(g)
		}
		return dag.Put(l, merged, out)
	}
}

// add merges the aggregates of g into out.
func (out *groups) add(g *groups) {
	for k, a := range g.byCode {
		if o := out.byCode[k]; o != nil {
			o.merge(*a)
		} else {
			c := *a
			out.byCode[k] = &c
		}
	}
	for k, a := range g.byHour {
		if o := out.byHour[k]; o != nil {
			o.merge(*a)
		} else {
			c := *a
			out.byHour[k] = &c
		}
	}
}

func (p *Pipeline) sort(in dag.Value[*groups], out dag.Value[*Table]) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		g, err := dag.Get(l, in)
		if err != nil {
			return err
		}
		rows := make([]Row, 0, len(g.byCode)+len(g.byHour))
		for k, a := range g.byCode {
			rows = append(rows, newRow(k, 0, *a))
		}
		for h, a := range g.byHour {
			rows = append(rows, newRow(strconv.FormatInt(h, 10), h, *a))
		}
		SortRows(rows, p.Key)
		return dag.Put(l, out, &Table{Rows: rows, Lost: g.lost})
	}
}

func newRow(key string, hour int64, a agg) Row {
	return Row{Key: key, hour: hour, Count: a.count, DelaySum: a.sum, DelayMax: a.max,
		DelayMean: float64(a.sum) / float64(a.count)}
}

// SortRows orders rows by count descending, then key ascending (numerically
// for hours).
func SortRows(rows []Row, key KeyKind) {
	slices.SortFunc(rows, func(a, b Row) int {
		if c := cmp.Compare(b.Count, a.Count); c != 0 {
			return c
		}
		if key == KeyHour {
			return cmp.Compare(a.hour, b.hour)
		}
		return cmp.Compare(a.Key, b.Key)
	})
}

func (p *Pipeline) topk(in, out dag.Value[*Table]) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		t, err := dag.Get(l, in)
		if err != nil {
			return err
		}
		rows := t.Rows
		if k := p.opts.TopK; k > 0 && k < len(rows) {
			rows = rows[:k]
		}
		return dag.Put(l, out, &Table{Rows: slices.Clone(rows), Lost: t.Lost})
	}
}

type airport struct{ name, city string }

// airportMap is the value of the airport_names buffer: iata → airport.
type airportMap map[string]airport

// maxAirportsBytes is the most bytes the airports kernel reads of an
// airports.csv (OurAirports' whole list is about 12 MiB): a source that
// gives more, such as a device that never ends, is not an airports.csv.
const maxAirportsBytes = 64 << 20

// airportsReader reads r for the airports kernel: an error once it has
// given maxAirportsBytes, or once ctx is done.
type airportsReader struct {
	ctx  context.Context
	r    io.Reader
	left int64
}

func (a *airportsReader) Read(b []byte) (int, error) {
	if err := a.ctx.Err(); err != nil {
		return 0, err
	}
	if a.left <= 0 {
		return 0, fmt.Errorf("more than %d MiB: not an airports.csv", maxAirportsBytes>>20)
	}
	if int64(len(b)) > a.left {
		b = b[:a.left]
	}
	n, err := a.r.Read(b)
	a.left -= int64(n)
	return n, err
}

func (p *Pipeline) airports(out dag.Value[airportMap]) dag.KernelFunc {
	return func(ctx context.Context, l dag.Launch) error {
		rc, err := p.opts.Airports()
		if err != nil {
			return fmt.Errorf("flights: airports: %w", err)
		}
		defer rc.Close()
		r := csv.NewReader(&airportsReader{ctx: ctx, r: rc, left: maxAirportsBytes})
		head, err := r.Read()
		if err != nil {
			return fmt.Errorf("flights: airports: header: %w", err)
		}
		col := map[string]int{}
		for i, h := range head {
			col[h] = i
		}
		iata, okI := col["iata"]
		name, okN := col["name"]
		city, okC := col["city"]
		if !okI || !okN || !okC {
			return fmt.Errorf("flights: airports: header %.60q lacks iata, name or city columns: not an airports.csv", strings.Join(head, ","))
		}
		m := airportMap{}
		for {
			rec, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				return fmt.Errorf("flights: airports: %w", err)
			}
			m[rec[iata]] = airport{rec[name], rec[city]}
		}
		return dag.Put(l, out, m)
	}
}

// join returns the kernel that names the airports of top's rows from
// names (an optional read: without it the rows go on unnamed, NamesErr
// saying why) into joined.
func join(top dag.Value[*Table], names dag.Value[airportMap], joined dag.Value[*Table]) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		t, err := dag.Get(l, top)
		if err != nil {
			return err
		}
		if err := l.Missing(names.ID()); err != nil {
			return dag.Put(l, joined, &Table{Rows: slices.Clone(t.Rows), Lost: t.Lost, NamesErr: err})
		}
		m, err := dag.Get(l, names)
		if err != nil {
			return err
		}
		out := slices.Clone(t.Rows)
		for i := range out {
			if a, ok := m[out[i].Key]; ok {
				out[i].Name, out[i].City = a.name, a.city
			}
		}
		return dag.Put(l, joined, &Table{Rows: out, Lost: t.Lost})
	}
}

func (p *Pipeline) write(in, out dag.Value[*Table]) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		t, err := dag.Get(l, in)
		if err != nil {
			return err
		}
		if p.opts.Sink != nil {
			if err := p.opts.Sink(t); err != nil {
				return fmt.Errorf("flights: write: %w", err)
			}
		}
		return dag.Put(l, out, t)
	}
}

// int64Column returns an accessor for a signed integer column: the value
// and whether it is valid (not null).
func int64Column(rec arrow.RecordBatch, name string) (func(int) (int64, bool), error) {
	col, err := column(rec, name)
	if err != nil {
		return nil, err
	}
	return int64Array(col, name)
}

// int64Array returns an accessor for a signed integer array of the
// column name.
func int64Array(col arrow.Array, name string) (func(int) (int64, bool), error) {
	switch a := col.(type) {
	case *array.Int64:
		return func(i int) (int64, bool) { return a.Value(i), a.IsValid(i) }, nil
	case *array.Int32:
		return func(i int) (int64, bool) { return int64(a.Value(i)), a.IsValid(i) }, nil
	case *array.Int16:
		return func(i int) (int64, bool) { return int64(a.Value(i)), a.IsValid(i) }, nil
	case *array.Int8:
		return func(i int) (int64, bool) { return int64(a.Value(i)), a.IsValid(i) }, nil
	}
	return nil, fmt.Errorf("flights: column %q is %s, not a signed integer", name, col.DataType())
}

// stringColumn returns an accessor for a utf8, large_utf8 or utf8_view
// column.
func stringColumn(rec arrow.RecordBatch, name string) (func(int) (string, bool), error) {
	col, err := column(rec, name)
	if err != nil {
		return nil, err
	}
	return stringArray(col, name)
}

// stringArray returns an accessor for a utf8, large_utf8 or utf8_view
// array of the column name.
func stringArray(col arrow.Array, name string) (func(int) (string, bool), error) {
	switch a := col.(type) {
	case *array.String:
		return func(i int) (string, bool) { return a.Value(i), a.IsValid(i) }, nil
	case *array.LargeString:
		return func(i int) (string, bool) { return a.Value(i), a.IsValid(i) }, nil
	case *array.StringView:
		return func(i int) (string, bool) { return a.Value(i), a.IsValid(i) }, nil
	}
	return nil, fmt.Errorf("flights: column %q is %s, not a string", name, col.DataType())
}

// hourColumn returns an accessor giving floor(time) of row i of a float
// column: ok is false for a null row, and err names the row and value of
// a time that is no hour of day (outside [0, 24), or NaN).
func hourColumn(rec arrow.RecordBatch, name string) (func(i int) (hour int64, ok bool, err error), error) {
	col, err := column(rec, name)
	if err != nil {
		return nil, err
	}
	switch a := col.(type) {
	case *array.Float32:
		return func(i int) (int64, bool, error) { return hourOf(i, float64(a.Value(i)), a.IsValid(i)) }, nil
	case *array.Float64:
		return func(i int) (int64, bool, error) { return hourOf(i, a.Value(i), a.IsValid(i)) }, nil
	}
	return nil, fmt.Errorf("flights: column %q is %s, not a float", name, col.DataType())
}

// hourOf is hourColumn's accessor for row i, of time t, valid or null.
func hourOf(i int, t float64, valid bool) (int64, bool, error) {
	if !valid {
		return 0, false, nil
	}
	if !(t >= 0 && t < 24) { // also NaN
		return 0, false, fmt.Errorf("flights: row %d: time %v is not an hour of day, want [0, 24)", i, t)
	}
	return int64(t), true, nil // t ≥ 0: the conversion is floor
}

func column(rec arrow.RecordBatch, name string) (arrow.Array, error) {
	idx := rec.Schema().FieldIndices(name)
	if len(idx) == 0 {
		return nil, fmt.Errorf("flights: batch has no column %q", name)
	}
	return rec.Column(idx[0]), nil
}

// narrowCodes returns rec with its column name, when that is a dictionary
// array of int32 indices at offset 0 whose every index (null rows'
// included) fits in uint8, or else in uint16, given those indices instead,
// copied into mem, the validity and the dictionary shared; it releases
// rec then. Otherwise it returns rec itself. A batch whose dictionary has
// at most 256 strings (airports per row group, say) so keeps a byte a row
// instead of four, and the int32 indices go back to their allocator at
// once: the memory a run touches, which on a virtual machine costs more
// to fault in than decoding takes, shrinks by nearly that much.
func narrowCodes(rec arrow.RecordBatch, name string, mem memory.Allocator) arrow.RecordBatch {
	j := rec.Schema().FieldIndices(name)
	if len(j) == 0 {
		return rec
	}
	d, ok := rec.Column(j[0]).(*array.Dictionary)
	if !ok || d.Data().Offset() != 0 {
		return rec
	}
	idx, ok := d.Indices().(*array.Int32)
	if !ok {
		return rec
	}
	codes, typ := narrowed[uint8](idx.Int32Values(), mem), arrow.DataType(arrow.PrimitiveTypes.Uint8)
	if codes == nil {
		codes, typ = narrowed[uint16](idx.Int32Values(), mem), arrow.PrimitiveTypes.Uint16
	}
	if codes == nil {
		return rec
	}
	defer codes.Release()
	data := d.Data()
	dt := &arrow.DictionaryType{IndexType: typ, ValueType: data.Dictionary().DataType(), Ordered: d.DataType().(*arrow.DictionaryType).Ordered}
	nd := array.NewDataWithDictionary(dt, data.Len(), []*memory.Buffer{data.Buffers()[0], codes}, data.NullN(), 0, data.Dictionary().(*array.Data))
	defer nd.Release()
	col := array.MakeFromData(nd)
	defer col.Release()
	fields := slices.Clone(rec.Schema().Fields())
	fields[j[0]].Type = dt
	cols := slices.Clone(rec.Columns())
	cols[j[0]] = col
	md := rec.Schema().Metadata()
	out := array.NewRecordBatch(arrow.NewSchema(fields, &md), cols, rec.NumRows())
	rec.Release()
	return out
}

// narrowed returns codes as Cs in a buffer from mem, or nil when one of
// them does not fit in C.
func narrowed[C uint8 | uint16](codes []int32, mem memory.Allocator) *memory.Buffer {
	limit := uint32(^C(0))
	for _, c := range codes {
		if uint32(c) > limit {
			return nil
		}
	}
	buf := memory.NewResizableBuffer(mem)
	buf.Resize(len(codes) * bits.Len32(limit) / 8)
	out := arrow.GetData[C](buf.Bytes())
	for i, c := range codes {
		out[i] = C(c)
	}
	return buf
}
