package kvio

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/bitutil"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/metadata"
)

// The page decoder: a column chunk of a flat column (one leaf that
// repeats nothing, at most one definition level) of a fixed-width number
// type, or of strings read as a dictionary (see Dictionary), is decoded
// page by page from arrow-go's page reader (which reads the chunk and
// decompresses its pages) straight into the Arrow buffers of the result:
// definition levels into the validity bitmap, plain values copied,
// dictionary indices unpacked and looked up (or, for a dictionary column,
// kept as the array's int32 indices), at the column's width or, for a
// column of Narrow, at the narrower width once each value (or dictionary
// entry) is checked to lie in the narrower type. Nothing is allocated per
// row, and a chunk without nulls has no validity bitmap. Every other column, or a
// chunk whose metadata lists an encoding this decoder does not know, goes
// through pqarrow; so does a chunk whose pages turn out to use one
// (errFallback), read again from the start. Bad bytes (a level or an index
// out of range, a run or a page that holds fewer values than it claims,
// more values than the row group's rows) are errors naming the column and
// page, never a panic.

// pageKind says how the page decoder reads an output column, if at
// all.
type pageKind uint8

const (
	pageNone     pageKind = iota // through pqarrow
	pageInt32                    // INT32 as int32
	pageInt64                    // INT64 as int64
	pageFloat32                  // FLOAT as float32
	pageFloat64                  // DOUBLE as float64
	pageDictUTF8                 // BYTE_ARRAY as dictionary<values=utf8, indices=int32>
)

// width returns the bytes of one value of the physical type (of an index,
// for a dictionary column).
func (k pageKind) width() int {
	switch k {
	case pageInt64, pageFloat64:
		return 8
	}
	return 4
}

// errFallback means a chunk uses what the page decoder does not read;
// the caller reads it through pqarrow instead.
var errFallback = errors.New("kvio: chunk needs pqarrow")

// pageKindOf returns how output column c, of Arrow type typ, can be read
// directly from the file described by meta.
func pageKindOf(meta *metadata.FileMetaData, c pqColumn, typ arrow.DataType) pageKind {
	if len(c.leaves) != 1 {
		return pageNone
	}
	var leaf int
	for l := range c.leaves {
		leaf = l
	}
	descr := meta.Schema.Column(leaf)
	if descr.MaxRepetitionLevel() != 0 || descr.MaxDefinitionLevel() > 1 {
		return pageNone
	}
	// A leaf at definition level 1 must be the top-level field itself,
	// not a required leaf of an optional group.
	if descr.MaxDefinitionLevel() == 1 && descr.SchemaNode().RepetitionType() != parquet.Repetitions.Optional {
		return pageNone
	}
	switch pt, id := descr.PhysicalType(), typ.ID(); {
	case c.dict != nil:
		if pt == parquet.Types.ByteArray {
			return pageDictUTF8
		}
	case pt == parquet.Types.Int32 && id == arrow.INT32:
		return pageInt32
	case pt == parquet.Types.Int64 && id == arrow.INT64:
		return pageInt64
	case pt == parquet.Types.Float && id == arrow.FLOAT32:
		return pageFloat32
	case pt == parquet.Types.Double && id == arrow.FLOAT64:
		return pageFloat64
	}
	return pageNone
}

// pageEncodings reports whether the chunk of leaf column leaf in row group
// rg lists only encodings the page decoder reads.
func pageEncodings(meta *metadata.FileMetaData, rg, leaf int) bool {
	col, err := meta.RowGroup(rg).ColumnChunk(leaf)
	if err != nil {
		return false
	}
	for _, e := range col.Encodings() {
		switch e {
		case parquet.Encodings.Plain, parquet.Encodings.PlainDict, parquet.Encodings.RLEDict, parquet.Encodings.RLE:
		default:
			return false
		}
	}
	return true
}

// scratch holds the buffers one decode reuses from page to page and
// chunk to chunk; kept in scratchPool between reads.
type scratch struct {
	levels []uint32 // definition levels of a page
	idx    []uint32 // dictionary indices of a page
	vals   []uint64 // the values present in a page, as raw bits of the physical type
	dict   []uint64 // a numeric dictionary, as raw bits of the physical type
}

var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// grow returns b resized to n elements, reallocating only to grow.
func grow[T any](b []T, n int) []T {
	if cap(b) < n {
		return make([]T, n)
	}
	return b[:n]
}

// pageMem holds the buffers of the page decoder's page readers
// (decompressed data and dictionary pages) between them, so the pages of
// a file reuse the memory of those decoded before them.
var pageMem = &recycler{}

// pageReader returns a Parquet reader over the shared footer whose reads
// go through the File and stop when ctx is done, and whose page readers
// take their buffers from pageMem. It reads a column chunk as a buffered
// stream, page by page: a page header through a 16 KiB buffer, the rest
// of the page straight into the page reader's buffer, rather than the
// whole chunk into a new allocation of its size, so the reads of a part
// touch no fresh memory once pageMem holds buffers of its pages' sizes.
func (s *parquetSource) pageReader(ctx context.Context) (*file.Reader, error) {
	props := parquet.NewReaderProperties(pageMem)
	props.BufferedStreamEnabled = true
	return file.NewParquetReader(s.reader(ctx), file.WithMetadata(s.meta), file.WithReadProps(props))
}

// readPages decodes output column j of row group rg, of kind k, into an
// array of the row group's rows from mem, reading through pf (of
// pageReader). It returns errFallback, holding nothing, when the chunk
// needs pqarrow.
func (s *parquetSource) readPages(ctx context.Context, pf *file.Reader, mem memory.Allocator, j, rg int, k pageKind) (arrow.Array, error) {
	var leaf int
	for l := range s.fields[j].leaves {
		leaf = l
	}
	if !pageEncodings(s.meta, rg, leaf) {
		return nil, errFallback
	}
	pr, err := pf.RowGroup(rg).GetColumnPageReader(leaf)
	if err != nil {
		return nil, err
	}
	defer pr.Close()
	sc := scratchPool.Get().(*scratch)
	defer scratchPool.Put(sc)
	d := newChunkDecoder(s.schema.Field(j).Name, k, int(s.rows[rg]), s.meta.Schema.Column(leaf).MaxDefinitionLevel() == 1,
		s.schema.Field(j).Type, mem, sc)
	defer d.release()
	for page := 0; pr.Next(); page++ {
		if ctx.Err() != nil {
			return nil, context.Cause(ctx)
		}
		if err := d.page(pr.Page()); err != nil {
			if errors.Is(err, errFallback) {
				return nil, err
			}
			return nil, fmt.Errorf("column %q page %d: %w", d.name, page, err)
		}
	}
	if err := pr.Err(); err != nil {
		return nil, fmt.Errorf("column %q: %w", d.name, err)
	}
	if d.filled != d.rows {
		return nil, fmt.Errorf("column %q: pages hold %d values for %d rows", d.name, d.filled, d.rows)
	}
	return d.array(s.schema.Field(j).Type), nil
}

// chunkDecoder decodes the pages of one column chunk into its arrays.
type chunkDecoder struct {
	name     string
	kind     pageKind
	rows     int   // the row group's rows: values the chunk must hold
	optional bool  // one definition level
	width    int   // bytes of an output value: kind.width(), or less when narrowed
	narrow   bool  // the output type is narrower than the physical type:
	lo, hi   int64 // its range, which every value must lie in
	mem      memory.Allocator
	sc       *scratch

	values   *memory.Buffer // rows values of width bytes
	valid    *memory.Buffer // validity bitmap; nil while no null was seen
	nulls    int
	filled   int         // values decoded so far
	dictLen  int         // entries of the dictionary page; -1 before it
	dictUTF8 *array.Data // pageDictUTF8: the dictionary page's strings
}

// newChunkDecoder returns a decoder of the chunk of column name, of kind
// k, that holds rows values, with a definition level when optional, into
// an array of type out (a narrower signed integer type than k's, for a
// column of Narrow), allocating the output from mem.
func newChunkDecoder(name string, k pageKind, rows int, optional bool, out arrow.DataType, mem memory.Allocator, sc *scratch) *chunkDecoder {
	d := &chunkDecoder{name: name, kind: k, rows: rows, optional: optional, width: k.width(), mem: mem, sc: sc, dictLen: -1}
	if k != pageDictUTF8 {
		if fw, ok := out.(arrow.FixedWidthDataType); ok && fw.BitWidth()/8 < d.width {
			d.width, d.narrow = fw.BitWidth()/8, true
			d.lo, d.hi = intBounds(out.ID())
		}
	}
	d.values = memory.NewResizableBuffer(mem)
	d.values.Resize(rows * d.width)
	return d
}

// release frees what the decoder still holds (after array, nothing).
func (d *chunkDecoder) release() {
	for _, b := range []*memory.Buffer{d.values, d.valid} {
		if b != nil {
			b.Release()
		}
	}
	if d.dictUTF8 != nil {
		d.dictUTF8.Release()
	}
	d.values, d.valid, d.dictUTF8 = nil, nil, nil
}

// array returns the decoded chunk as an array of type typ, handing over
// the decoder's buffers.
func (d *chunkDecoder) array(typ arrow.DataType) arrow.Array {
	var data *array.Data
	bufs := []*memory.Buffer{d.valid, d.values}
	if d.kind == pageDictUTF8 {
		if d.dictUTF8 == nil { // no value in the chunk at all
			d.dictUTF8 = array.NewData(arrow.BinaryTypes.String, 0,
				[]*memory.Buffer{nil, memory.NewBufferBytes(make([]byte, 4)), nil}, nil, 0, 0)
		}
		data = array.NewDataWithDictionary(typ, d.rows, bufs, d.nulls, 0, d.dictUTF8)
	} else {
		data = array.NewData(typ, d.rows, bufs, nil, d.nulls, 0)
	}
	defer data.Release()
	d.release()
	return array.MakeFromData(data)
}

// page decodes one page.
func (d *chunkDecoder) page(p file.Page) error {
	switch p := p.(type) {
	case *file.DictionaryPage:
		return d.dictionary(p)
	case *file.DataPageV1:
		data := p.Data()
		var levels []byte
		if d.optional {
			if p.DefinitionLevelEncoding() != parquet.Encodings.RLE {
				return errFallback
			}
			if len(data) < 4 {
				return fmt.Errorf("%d bytes, too few for the definition levels' length", len(data))
			}
			n := binary.LittleEndian.Uint32(data)
			if uint64(n) > uint64(len(data)-4) {
				return fmt.Errorf("definition levels of %d bytes in a page of %d", n, len(data))
			}
			levels, data = data[4:4+n], data[4+n:]
		}
		return d.data(parquet.Encoding(p.Encoding()), int(p.NumValues()), levels, data)
	case *file.DataPageV2:
		data := p.Data()
		rep, def := int(p.RepetitionLevelByteLen()), int(p.DefinitionLevelByteLen())
		if rep < 0 || def < 0 || rep+def > len(data) {
			return fmt.Errorf("levels of %d and %d bytes in a page of %d", rep, def, len(data))
		}
		levels := data[rep : rep+def]
		if !d.optional {
			levels = nil
		}
		return d.data(parquet.Encoding(p.Encoding()), int(p.NumValues()), levels, data[rep+def:])
	}
	return nil // index pages and the like carry no values
}

// dictionary decodes a dictionary page.
func (d *chunkDecoder) dictionary(p *file.DictionaryPage) error {
	if e := parquet.Encoding(p.Encoding()); e != parquet.Encodings.Plain && e != parquet.Encodings.PlainDict {
		return errFallback
	}
	return d.dictionaryValues(int(p.NumValues()), p.Data())
}

// dictionaryValues decodes the n PLAIN values of a dictionary page.
func (d *chunkDecoder) dictionaryValues(n int, data []byte) error {
	if d.dictLen >= 0 {
		return errors.New("a second dictionary page")
	}
	if n < 0 {
		return fmt.Errorf("dictionary of %d values", n)
	}
	if d.kind == pageDictUTF8 {
		dict, err := plainStrings(d.mem, n, data)
		if err != nil {
			return fmt.Errorf("dictionary: %w", err)
		}
		d.dictUTF8, d.dictLen = dict, n
		return nil
	}
	w := d.kind.width()
	if n > len(data)/w {
		return fmt.Errorf("dictionary of %d values in %d bytes", n, len(data))
	}
	d.sc.dict = grow(d.sc.dict, n)
	for i := range n {
		if w == 8 {
			d.sc.dict[i] = binary.LittleEndian.Uint64(data[8*i:])
		} else {
			d.sc.dict[i] = uint64(binary.LittleEndian.Uint32(data[4*i:]))
		}
	}
	if err := d.checkRange(d.sc.dict); err != nil {
		return fmt.Errorf("dictionary: %w", err)
	}
	d.dictLen = n
	return nil
}

// plainStrings returns n PLAIN-encoded byte arrays (a 4-byte little-endian
// length, then the bytes) as a utf8 array from mem. It does not check
// that the bytes are UTF-8, as pqarrow does not.
func plainStrings(mem memory.Allocator, n int, data []byte) (*array.Data, error) {
	if n > len(data)/4 {
		return nil, fmt.Errorf("%d strings in %d bytes", n, len(data))
	}
	offsets := memory.NewResizableBuffer(mem)
	offsets.Resize(4 * (n + 1))
	offs := arrow.Int32Traits.CastFromBytes(offsets.Bytes())
	bytesLen := 0
	rest := data
	for i := range n {
		if len(rest) < 4 {
			offsets.Release()
			return nil, fmt.Errorf("string %d of %d: past the end of the page", i, n)
		}
		l := binary.LittleEndian.Uint32(rest)
		if uint64(l) > uint64(len(rest)-4) {
			offsets.Release()
			return nil, fmt.Errorf("string %d of %d: %d bytes past the end of the page", i, n, l)
		}
		rest = rest[4+l:]
		offs[i] = int32(bytesLen)
		bytesLen += int(l)
	}
	if bytesLen > math.MaxInt32 {
		offsets.Release()
		return nil, fmt.Errorf("%d bytes of strings, more than a utf8 array holds", bytesLen)
	}
	offs[n] = int32(bytesLen)
	values := memory.NewResizableBuffer(mem)
	values.Resize(bytesLen)
	vb := values.Bytes()
	rest = data
	for i := range n {
		l := int(binary.LittleEndian.Uint32(rest))
		copy(vb[offs[i]:], rest[4:4+l])
		rest = rest[4+l:]
	}
	dict := array.NewData(arrow.BinaryTypes.String, n, []*memory.Buffer{nil, offsets, values}, nil, 0, 0)
	offsets.Release()
	values.Release()
	return dict, nil
}

// data decodes a data page of n values (nulls included) with the given
// value encoding, definition levels (nil for a required column) and
// values.
func (d *chunkDecoder) data(enc parquet.Encoding, n int, levels, values []byte) error {
	if n < 0 || n > d.rows-d.filled {
		return fmt.Errorf("%d values, more than the %d rows left of the row group", n, d.rows-d.filled)
	}
	dict := enc == parquet.Encodings.RLEDict || enc == parquet.Encodings.PlainDict
	if !dict && (enc != parquet.Encodings.Plain || d.kind == pageDictUTF8) {
		return errFallback
	}
	present := n
	if levels != nil {
		var err error
		if present, err = d.definitions(n, levels); err != nil {
			return err
		}
	}
	spaced := present != n
	out := d.values.Bytes()[d.filled*d.width : (d.filled+n)*d.width]
	if dict {
		if d.dictLen < 0 {
			return errors.New("dictionary-encoded values before any dictionary page")
		}
		if len(values) < 1 {
			return errors.New("no bit width for the dictionary indices")
		}
		bw := int(values[0])
		if bw > 32 {
			return fmt.Errorf("dictionary indices of %d bits", bw)
		}
		h := hybrid{data: values[1:], bw: bw}
		if !spaced {
			// Indices straight into the output (strings), or a block at a
			// time through the cache into the dictionary's values.
			if err := d.indices(&h, out); err != nil {
				return err
			}
			d.filled += n
			return nil
		}
		d.sc.idx = grow(d.sc.idx, present)
		if err := h.read(d.sc.idx); err != nil {
			return fmt.Errorf("dictionary indices: %w", err)
		}
		if d.kind == pageDictUTF8 {
			if err := d.checkIndices(d.sc.idx); err != nil {
				return err
			}
			spread(arrow.Uint32Traits.CastFromBytes(out), d.sc.idx, d.sc.levels, spaced)
			d.filled += n
			return nil
		}
		// The dictionary's values were checked against the output type
		// when it was read.
		d.sc.vals = grow(d.sc.vals, present)
		if err := lookup(d.sc.vals, d.sc.idx, d.sc.dict); err != nil {
			return err
		}
	} else {
		w := d.kind.width()
		if len(values) < present*w {
			return fmt.Errorf("%d plain values in %d bytes", present, len(values))
		}
		d.sc.vals = grow(d.sc.vals, present)
		if w == 8 {
			for i := range d.sc.vals {
				d.sc.vals[i] = binary.LittleEndian.Uint64(values[8*i:])
			}
		} else {
			for i := range d.sc.vals {
				d.sc.vals[i] = uint64(binary.LittleEndian.Uint32(values[4*i:]))
			}
		}
		if err := d.checkRange(d.sc.vals); err != nil {
			return err
		}
	}
	switch d.width {
	case 8:
		spread(arrow.Uint64Traits.CastFromBytes(out), d.sc.vals, d.sc.levels, spaced)
	case 4:
		spread(arrow.Uint32Traits.CastFromBytes(out), d.sc.vals, d.sc.levels, spaced)
	case 2:
		spread(arrow.Uint16Traits.CastFromBytes(out), d.sc.vals, d.sc.levels, spaced)
	default:
		spread(out, d.sc.vals, d.sc.levels, spaced)
	}
	d.filled += n
	return nil
}

// indices decodes the dictionary indices of a page without nulls from h
// into out: as they are for a dictionary column, else looked up in the
// dictionary.
func (d *chunkDecoder) indices(h *hybrid, out []byte) error {
	if d.kind == pageDictUTF8 {
		idx := arrow.Uint32Traits.CastFromBytes(out)
		if err := h.read(idx); err != nil {
			return fmt.Errorf("dictionary indices: %w", err)
		}
		return d.checkIndices(idx)
	}
	var block [1024]uint32
	for off, n := 0, len(out)/d.width; off < n; off += len(block) {
		idx := block[:min(len(block), n-off)]
		if err := h.read(idx); err != nil {
			return fmt.Errorf("dictionary indices: %w", err)
		}
		var err error
		o := out[off*d.width : (off+len(idx))*d.width]
		switch d.width {
		case 8:
			err = lookup(arrow.Uint64Traits.CastFromBytes(o), idx, d.sc.dict)
		case 4:
			err = lookup(arrow.Uint32Traits.CastFromBytes(o), idx, d.sc.dict)
		case 2:
			err = lookup(arrow.Uint16Traits.CastFromBytes(o), idx, d.sc.dict)
		default:
			err = lookup(o, idx, d.sc.dict)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// checkIndices returns an error for an index of idx out of the dictionary.
func (d *chunkDecoder) checkIndices(idx []uint32) error {
	for _, c := range idx {
		if int(c) >= d.dictLen {
			return fmt.Errorf("dictionary index %d out of range [0, %d)", c, d.dictLen)
		}
	}
	return nil
}

// checkRange returns an error for a value in vals (raw bits of the
// column's physical type) outside [lo, hi], the range of a narrowed
// output type (see Narrow); it does nothing for a column not narrowed.
func (d *chunkDecoder) checkRange(vals []uint64) error {
	if !d.narrow {
		return nil
	}
	for _, v := range vals {
		x := int64(v)
		if d.kind == pageInt32 {
			x = int64(int32(uint32(v)))
		}
		if x < d.lo || x > d.hi {
			return fmt.Errorf("value %d outside [%d, %d], the bounds its statistics state", x, d.lo, d.hi)
		}
	}
	return nil
}

// lookup sets o[i] to the dictionary value dv[idx[i]], converted to o's
// width (a narrowed dictionary was checked to fit), for each index, or
// returns an error for an index out of range.
func lookup[T uint8 | uint16 | uint32 | uint64](o []T, idx []uint32, dv []uint64) error {
	for i, c := range idx[:len(o)] {
		if int(c) >= len(dv) {
			return fmt.Errorf("dictionary index %d out of range [0, %d)", c, len(dv))
		}
		o[i] = T(dv[c])
	}
	return nil
}

// spread writes vals to o, converted to o's width (a narrowed value was
// checked to fit), one per row of the page, or, when spaced, one per row
// whose definition level in levels is set (zero in the others).
func spread[T uint8 | uint16 | uint32 | uint64, V uint32 | uint64](o []T, vals []V, levels []uint32, spaced bool) {
	if !spaced {
		for i, v := range vals[:len(o)] {
			o[i] = T(v)
		}
		return
	}
	k := 0
	for i, l := range levels[:len(o)] {
		if l != 0 {
			o[i] = T(vals[k])
			k++
		}
	}
}

// definitions decodes the n definition levels of a page (bit width 1) into
// sc.levels, records the nulls in the validity bitmap, and returns the
// number of values present.
func (d *chunkDecoder) definitions(n int, levels []byte) (int, error) {
	// A page without nulls holds, as writers encode it, one repeated run
	// of level 1 at least as long as the page.
	if hdr, k := binary.Uvarint(levels); k > 0 && hdr&1 == 0 && hdr>>1 >= uint64(n) && len(levels) > k && levels[k] == 1 {
		if d.valid != nil {
			bitutil.SetBitsTo(d.valid.Bytes(), int64(d.filled), int64(n), true)
		}
		return n, nil
	}
	d.sc.levels = grow(d.sc.levels, n)
	h := hybrid{data: levels, bw: 1}
	if err := h.read(d.sc.levels); err != nil {
		return 0, fmt.Errorf("definition levels: %w", err)
	}
	present := 0
	for _, l := range d.sc.levels {
		present += int(l) // hybrid keeps values within the bit width
	}
	if present == n {
		if d.valid != nil {
			bitutil.SetBitsTo(d.valid.Bytes(), int64(d.filled), int64(n), true)
		}
		return n, nil
	}
	if d.valid == nil {
		d.valid = memory.NewResizableBuffer(d.mem)
		d.valid.Resize(int(bitutil.BytesForBits(int64(d.rows))))
		bitutil.SetBitsTo(d.valid.Bytes(), 0, int64(d.filled), true)
	}
	vb := d.valid.Bytes()
	for i, l := range d.sc.levels {
		if l != 0 {
			bitutil.SetBit(vb, d.filled+i)
		} else {
			bitutil.ClearBit(vb, d.filled+i)
		}
	}
	d.nulls += n - present
	return present, nil
}

// hybrid reads Parquet's RLE / bit-packing hybrid encoding of values of
// bw bits (0 to 32) from data: runs, each a ULEB128 header whose low bit
// says a bit-packed run of (header>>1)×8 values (bw bytes per 8 values,
// least significant bit first) or a repeated run of header>>1 copies of
// one value in ceil(bw/8) little-endian bytes. See the Parquet format's
// Encodings.md, "Run Length Encoding / Bit-Packing Hybrid".
type hybrid struct {
	data []byte
	bw   int

	repeat   int    // values left in the current repeated run
	value    uint32 // its value
	packed   []byte // the current bit-packed run
	pos, end int    // its next value and its count of values
}

// read fills out with the next len(out) values, or returns an error when
// data ends first or holds a value wider than bw bits.
func (h *hybrid) read(out []uint32) error {
	mask := uint64(1)<<h.bw - 1
	for len(out) > 0 {
		if h.repeat > 0 {
			k := min(h.repeat, len(out))
			v := h.value
			for i := range out[:k] {
				out[i] = v
			}
			out, h.repeat = out[k:], h.repeat-k
			continue
		}
		if h.pos < h.end {
			k := min(h.end-h.pos, len(out))
			unpack(out[:k], h.packed, h.pos, h.bw, mask)
			out, h.pos = out[k:], h.pos+k
			continue
		}
		hdr, n := binary.Uvarint(h.data)
		if n <= 0 || hdr > math.MaxUint32 {
			return fmt.Errorf("%d values missing: no run header", len(out))
		}
		h.data = h.data[n:]
		if hdr&1 == 0 {
			vb := (h.bw + 7) / 8
			if len(h.data) < vb {
				return errors.New("repeated run cut short")
			}
			var v uint64
			for i := range vb {
				v |= uint64(h.data[i]) << (8 * i)
			}
			if v > mask {
				return fmt.Errorf("repeated value %d wider than %d bits", v, h.bw)
			}
			h.data, h.repeat, h.value = h.data[vb:], int(hdr>>1), uint32(v)
			continue
		}
		nbytes := int(hdr>>1) * h.bw
		// The last run may stop before its padding: take what is there.
		nbytes = min(nbytes, len(h.data))
		h.packed, h.data = h.data[:nbytes], h.data[nbytes:]
		h.pos, h.end = 0, int(hdr>>1)*8
		if h.bw > 0 {
			h.end = min(h.end, nbytes*8/h.bw)
		}
	}
	return nil
}

// unpack sets out to the bw-bit values number pos, pos+1, … of the
// bit-packed bytes b, which hold them all; mask is 1<<bw - 1.
func unpack(out []uint32, b []byte, pos, bw int, mask uint64) {
	switch bw {
	case 0:
		clear(out)
		return
	case 8:
		for i, c := range b[pos : pos+len(out)] {
			out[i] = uint32(c)
		}
		return
	}
	bit := pos * bw
	i := 0
	// Whole 8-byte loads while they stay inside b.
	for ; i < len(out) && bit>>3+8 <= len(b); i++ {
		out[i] = uint32(binary.LittleEndian.Uint64(b[bit>>3:]) >> (bit & 7) & mask)
		bit += bw
	}
	for ; i < len(out); i++ {
		var w uint64
		for k, c := range b[bit>>3:] {
			w |= uint64(c) << (8 * k)
		}
		out[i] = uint32(w >> (bit & 7) & mask)
		bit += bw
	}
}
