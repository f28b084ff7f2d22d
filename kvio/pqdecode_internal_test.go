package kvio

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/testdata"
)

// pageSchema has a column of every kind the page decoder reads, and one
// (a timestamp) it leaves to pqarrow.
var pageSchema = arrow.NewSchema([]arrow.Field{
	{Name: "i32", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
	{Name: "i64", Type: arrow.PrimitiveTypes.Int64},
	{Name: "f32", Type: arrow.PrimitiveTypes.Float32, Nullable: true},
	{Name: "f64", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "s", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "ls", Type: arrow.BinaryTypes.LargeString, Nullable: true},
	{Name: "ts", Type: arrow.FixedWidthTypes.Timestamp_us, Nullable: true},
}, nil)

// pageBatch returns rows seeded random rows of pageSchema. Each block of
// 1000 rows has its own null density, from none to all, so that row
// groups and pages hold no null, some, or only nulls; the number columns
// draw from few distinct values (dictionary-friendly) or many (so a small
// dictionary page limit makes the writer fall back to plain pages).
func pageBatch(seed uint64, rows int) arrow.RecordBatch {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := array.NewRecordBuilder(memory.NewGoAllocator(), pageSchema)
	defer b.Release()
	densities := []float64{0, 0.3, 1, 0.01, 0.9}
	for r := range rows {
		nullP := densities[(r/1000)%len(densities)]
		null := func() bool { return rng.Float64() < nullP }
		distinct := int64(50)
		if (r/1500)%2 == 1 {
			distinct = 1 << 40
		}
		v := rng.Int64N(distinct) - distinct/2
		if null() {
			b.Field(0).AppendNull()
		} else {
			b.Field(0).(*array.Int32Builder).Append(int32(v))
		}
		b.Field(1).(*array.Int64Builder).Append(v)
		if null() {
			b.Field(2).AppendNull()
		} else {
			b.Field(2).(*array.Float32Builder).Append(float32(v) / 3)
		}
		if null() {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.Float64Builder).Append(float64(v) / 7)
		}
		if null() {
			b.Field(4).AppendNull()
		} else {
			b.Field(4).(*array.StringBuilder).Append(fmt.Sprint("k", v))
		}
		if null() {
			b.Field(5).AppendNull()
		} else {
			b.Field(5).(*array.LargeStringBuilder).Append(fmt.Sprint("big", v%13))
		}
		if null() {
			b.Field(6).AppendNull()
		} else {
			b.Field(6).(*array.TimestampBuilder).Append(arrow.Timestamp(v))
		}
	}
	return b.NewRecordBatch()
}

// writePages writes rows of pageBatch as Parquet with the given writer
// properties and row groups of groupRows rows, and returns the path.
func writePages(t testing.TB, seed uint64, rows, groupRows int, props ...parquet.WriterProperty) string {
	t.Helper()
	rec := pageBatch(seed, rows)
	defer rec.Release()
	tbl := array.NewTableFromRecords(pageSchema, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var buf bytes.Buffer
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, int64(groupRows), parquet.NewWriterProperties(props...),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
	path := filepath.Join(t.TempDir(), "pages.parquet")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
	return path
}

// openPages opens path as a Parquet Source with every string column read
// as a dictionary where the file allows.
func openPages(t testing.TB, path string) *parquetSource {
	s, _ := openPagesDict(t, path)
	return s
}

// openPagesDict is openPages, and returns the columns read as
// dictionaries too.
func openPagesDict(t testing.TB, path string) (*parquetSource, []string) {
	t.Helper()
	f, err := Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = f.Close() })
	src, err := OpenParquet(context.Background(), f)
	require.NoError(t, err)
	t.Cleanup(func() { _ = src.Close() })
	var strs []string
	for _, fld := range src.Schema().Fields() {
		if id := fld.Type.ID(); id == arrow.STRING || id == arrow.LARGE_STRING {
			strs = append(strs, fld.Name)
		}
	}
	v, dict, err := Dictionary(src, strs...)
	require.NoError(t, err)
	return v.(*parquetSource), dict
}

// viaPqarrow returns a copy of s that reads every column through pqarrow.
func viaPqarrow(s *parquetSource) *parquetSource {
	c := s.selectColumns(s.schema, nil)
	c.fields = make([]pqColumn, len(s.fields))
	for j, f := range s.fields {
		f.pages = pageNone
		c.fields[j] = f
	}
	return c
}

// assertSameColumn asserts that got and want hold the same values and
// nulls; dictionary arrays are compared by the strings their indices
// name, as two readers may build different dictionaries.
func assertSameColumn(t *testing.T, want, got arrow.Array, msg string) {
	t.Helper()
	require.Equal(t, want.Len(), got.Len(), msg)
	require.Equal(t, want.NullN(), got.NullN(), msg)
	wd, ok := want.(*array.Dictionary)
	if !ok {
		assert.True(t, array.Equal(want, got), "%s: want %v, got %v", msg, want, got)
		return
	}
	gd, ok := got.(*array.Dictionary)
	require.True(t, ok, "%s: got %s, want a dictionary", msg, got.DataType())
	wv := array.MakeFromData(wd.Data().Dictionary())
	defer wv.Release()
	gv := array.MakeFromData(gd.Data().Dictionary())
	defer gv.Release()
	if array.Equal(wv, gv) {
		assert.True(t, array.Equal(wd.Indices(), gd.Indices()), "%s: indices differ", msg)
		return
	}
	for i := range want.Len() {
		require.Equal(t, want.IsNull(i), got.IsNull(i), "%s row %d", msg, i)
		if want.IsNull(i) {
			continue
		}
		require.Equal(t, wv.ValueStr(wd.GetValueIndex(i)), gv.ValueStr(gd.GetValueIndex(i)), "%s row %d", msg, i)
	}
}

// assertSameParts reads every part of s with the page decoder and through
// pqarrow alone, and asserts the batches are equal. It returns how many
// column chunks the page decoder read itself.
func assertSameParts(t *testing.T, s *parquetSource) int {
	t.Helper()
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	return sameParts(t, s, mem)
}

// sameParts is assertSameParts allocating from mem.
func sameParts(t *testing.T, s *parquetSource, mem memory.Allocator) int {
	t.Helper()
	ctx := context.Background()
	ref := viaPqarrow(s)
	decoded := 0
	for i := range s.NumParts() {
		got, err := s.ReadPart(ctx, i, mem)
		require.NoError(t, err, "part %d", i)
		want, err := ref.ReadPart(ctx, i, mem)
		require.NoError(t, err, "part %d", i)
		require.True(t, want.Schema().Equal(got.Schema()), "part %d: schema %s, want %s", i, got.Schema(), want.Schema())
		for j := range int(want.NumCols()) {
			assertSameColumn(t, want.Column(j), got.Column(j), fmt.Sprintf("part %d column %s", i, want.ColumnName(j)))
		}
		want.Release()
		got.Release()
		// Count the chunks the page decoder takes on (a fallback reads
		// through pqarrow).
		pf, err := ref.pageReader(ctx)
		require.NoError(t, err)
		for j, c := range s.fields {
			if c.pages == pageNone {
				continue
			}
			a, err := s.readPages(ctx, pf, mem, j, i, c.pages)
			if err == nil {
				a.Release()
				decoded++
			} else {
				require.ErrorIs(t, err, errFallback, "part %d column %d", i, j)
			}
		}
	}
	return decoded
}

func TestPageDecoderMatchesPqarrow(t *testing.T) {
	const rows, groupRows = 12000, 5000 // 3 row groups
	numbers := map[string]pageKind{"i32": pageInt32, "i64": pageInt64, "f32": pageFloat32, "f64": pageFloat64, "ts": pageNone}
	tests := []struct {
		name  string
		props []parquet.WriterProperty
		dict  bool // the string columns are read as dictionaries
		// chunks: the column chunks the page decoder must read itself
		// (the others fall back to pqarrow); -1 for at least one.
		chunks int
		// pqarrowLeaks: pqarrow's DELTA_BINARY_PACKED decoder (arrow-go
		// v18.8.0) leaves 64 bytes of each block allocated, so the
		// allocator is not checked.
		pqarrowLeaks bool
	}{
		{"dictionary zstd v1", []parquet.WriterProperty{parquet.WithCompression(compress.Codecs.Zstd)}, true, 3 * 6, false},
		{"dictionary snappy v2", []parquet.WriterProperty{parquet.WithCompression(compress.Codecs.Snappy),
			parquet.WithDataPageVersion(parquet.DataPageV2)}, true, 3 * 6, false},
		{"plain uncompressed v1", []parquet.WriterProperty{parquet.WithDictionaryDefault(false)}, false, 3 * 4, false},
		{"plain gzip v2", []parquet.WriterProperty{parquet.WithDictionaryDefault(false), parquet.WithCompression(compress.Codecs.Gzip),
			parquet.WithDataPageVersion(parquet.DataPageV2)}, false, 3 * 4, false},
		{"small pages", []parquet.WriterProperty{parquet.WithDataPageSize(512), parquet.WithBatchSize(100)}, true, 3 * 6, false},
		{"small pages v2", []parquet.WriterProperty{parquet.WithDataPageSize(512), parquet.WithBatchSize(100),
			parquet.WithDataPageVersion(parquet.DataPageV2)}, true, 3 * 6, false},
		// Dictionaries of at most 2 KiB: the columns of many distinct
		// values go on in plain pages, s (read as a dictionary) through
		// pqarrow, the numbers through the page decoder.
		{"dictionary falls back to plain", append(noCostFallback(), parquet.WithDictionaryPageSizeLimit(2048),
			parquet.WithDataPageSize(1024), parquet.WithBatchSize(64)), true, 3 * 5, false},
		{"delta encoding", []parquet.WriterProperty{parquet.WithDictionaryDefault(false),
			parquet.WithEncodingFor("i64", parquet.Encodings.DeltaBinaryPacked),
			parquet.WithEncodingFor("i32", parquet.Encodings.DeltaBinaryPacked)}, false, 3 * 2, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, dict := openPagesDict(t, writePages(t, 42, rows, groupRows, tc.props...))
			want := maps.Clone(numbers)
			want["s"], want["ls"] = pageNone, pageNone
			if tc.dict {
				assert.Equal(t, []string{"s", "ls"}, dict)
				want["s"], want["ls"] = pageDictUTF8, pageDictUTF8
			}
			got := map[string]pageKind{}
			for j, c := range s.fields {
				got[s.schema.Field(j).Name] = c.pages
			}
			assert.Equal(t, want, got)
			var decoded int
			if tc.pqarrowLeaks {
				decoded = sameParts(t, s, memory.NewGoAllocator())
			} else {
				decoded = assertSameParts(t, s)
			}
			if tc.chunks < 0 {
				assert.Positive(t, decoded)
			} else {
				assert.Equal(t, tc.chunks, decoded)
			}
		})
	}
}

// noCostFallback keeps the writer from dropping a dictionary because plain
// pages would be smaller.
func noCostFallback() []parquet.WriterProperty {
	var props []parquet.WriterProperty
	for _, f := range pageSchema.Fields() {
		props = append(props, parquet.WithDictionaryCostFallbackFor(f.Name, false))
	}
	return props
}

// The test files of the other tests, the fuzz seeds among them, and the
// real flights file read the same through both decoders.
func TestPageDecoderOtherFiles(t *testing.T) {
	seeds, err := filepath.Glob(filepath.Join("testdata", "fuzz", "*", "*"))
	require.NoError(t, err)
	for _, seed := range seeds {
		t.Run(filepath.Base(seed), func(t *testing.T) {
			// Seeds are "go test fuzz v1" files of []byte values; only a
			// Parquet one (which starts PAR1 after the quoting) is read.
			b, err := os.ReadFile(seed)
			require.NoError(t, err)
			data, ok := fuzzSeedBytes(b)
			if !ok || !bytes.HasPrefix(data, []byte("PAR1")) {
				t.Skip("not a Parquet seed")
			}
			path := filepath.Join(t.TempDir(), "seed.parquet")
			require.NoError(t, os.WriteFile(path, data, 0o600))
			f, err := Open(path)
			require.NoError(t, err)
			defer f.Close()
			src, err := OpenParquet(context.Background(), f)
			if err != nil {
				t.Skip("seed does not open:", err)
			}
			defer src.Close()
			ps := src.(*parquetSource)
			ref := viaPqarrow(ps)
			for i := range ps.NumParts() {
				got, gerr := ps.ReadPart(context.Background(), i, memory.DefaultAllocator)
				want, werr := ref.ReadPart(context.Background(), i, memory.DefaultAllocator)
				if werr != nil {
					if gerr == nil {
						got.Release()
					}
					continue // a damaged seed: pqarrow refuses it, the page decoder may too
				}
				require.NoError(t, gerr, "part %d", i)
				for j := range int(want.NumCols()) {
					assertSameColumn(t, want.Column(j), got.Column(j), fmt.Sprintf("part %d column %d", i, j))
				}
				want.Release()
				got.Release()
			}
		})
	}
	t.Run("kvio test file", func(t *testing.T) {
		assert.Positive(t, assertSameParts(t, openPages(t, writeTestParquet(t))))
	})
	t.Run("flights-3m.parquet", func(t *testing.T) {
		s := openPages(t, testdata.File(t, "flights-3m.parquet"))
		// date is a timestamp: through pqarrow.
		assert.Equal(t, 11*4, assertSameParts(t, s))
	})
}

// fuzzSeedBytes returns the []byte value of a "go test fuzz v1" file
// holding one.
func fuzzSeedBytes(b []byte) ([]byte, bool) {
	_, rest, ok := bytes.Cut(b, []byte("[]byte("))
	if !ok {
		return nil, false
	}
	q, ok := bytes.CutSuffix(bytes.TrimSpace(rest), []byte(")"))
	if !ok {
		return nil, false
	}
	s, err := strconv.Unquote(string(q))
	return []byte(s), err == nil
}

// writeTestParquet writes the kvio tests' usual Parquet file shape (an
// int64 id, utf8 and large_utf8 strings, a float64 with nulls) with the
// writer's defaults.
func writeTestParquet(t testing.TB) string {
	t.Helper()
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.PrimitiveTypes.Int64},
		{Name: "name", Type: arrow.BinaryTypes.String},
		{Name: "big", Type: arrow.BinaryTypes.LargeString},
		{Name: "val", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
	defer b.Release()
	for id := range 2000 {
		b.Field(0).(*array.Int64Builder).Append(int64(id))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprint("n", id))
		b.Field(2).(*array.LargeStringBuilder).Append(fmt.Sprint("big-", id))
		if id%7 == 0 {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.Float64Builder).Append(float64(id) / 2)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var buf bytes.Buffer
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, 500, parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd)),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
	path := filepath.Join(t.TempDir(), "test.parquet")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
	return path
}

func TestHybrid(t *testing.T) {
	tests := []struct {
		name string
		bw   int
		data []byte
		want []uint32
	}{
		{"repeated", 3, []byte{5 << 1, 6}, []uint32{6, 6, 6, 6, 6}},
		{"repeated two bytes", 9, []byte{2 << 1, 0x2c, 0x01}, []uint32{300, 300}},
		{"bit-packed", 3, []byte{1<<1 | 1, 0b10001000, 0b11000110, 0b11111010}, []uint32{0, 1, 2, 3, 4, 5, 6, 7}},
		{"bit-packed cut at the last value", 8, []byte{1<<1 | 1, 1, 2, 3}, []uint32{1, 2, 3}},
		{"width 0", 0, []byte{4 << 1}, []uint32{0, 0, 0, 0}},
		{"runs in a row", 1, []byte{2 << 1, 1, 1<<1 | 1, 0b101}, []uint32{1, 1, 1, 0, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := make([]uint32, len(tc.want))
			h := hybrid{data: tc.data, bw: tc.bw}
			require.NoError(t, h.read(got))
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestHybridErrors(t *testing.T) {
	tests := []struct {
		name string
		bw   int
		data []byte
		n    int
		want string
	}{
		{"empty", 1, nil, 1, "1 values missing: no run header"},
		{"runs end early", 3, []byte{2 << 1, 1}, 3, "1 values missing"},
		{"header cut", 3, []byte{0x80}, 1, "no run header"},
		{"header too large", 3, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, 1, "no run header"},
		{"repeated value cut", 9, []byte{2 << 1, 0x2c}, 1, "repeated run cut short"},
		{"repeated value too wide", 1, []byte{2 << 1, 2}, 1, "repeated value 2 wider than 1 bits"},
		{"bit-packed run cut", 8, []byte{1<<1 | 1, 1, 2}, 4, "2 values missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := hybrid{data: tc.data, bw: tc.bw}
			err := h.read(make([]uint32, tc.n))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// The page decoder refuses bad pages with an error naming what is wrong,
// and holds nothing of mem afterwards.
func TestChunkDecoderBadPages(t *testing.T) {
	dict4 := []byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0} // two int64s
	tests := []struct {
		name     string
		kind     pageKind
		optional bool
		feed     func(d *chunkDecoder) error
		want     string
		out      arrow.DataType // nil: the kind's own type
	}{
		{"index out of range", pageInt64, false, func(d *chunkDecoder) error {
			require.NoError(t, d.dictionaryValues(2, dict4))
			return d.data(parquet.Encodings.RLEDict, 3, nil, []byte{2, 3 << 1, 3})
		}, "dictionary index 3 out of range [0, 2)", nil},
		{"index bit width", pageInt64, false, func(d *chunkDecoder) error {
			require.NoError(t, d.dictionaryValues(2, dict4))
			return d.data(parquet.Encodings.RLEDict, 3, nil, []byte{33, 3 << 1, 0})
		}, "dictionary indices of 33 bits", nil},
		{"no bit width", pageInt64, false, func(d *chunkDecoder) error {
			require.NoError(t, d.dictionaryValues(2, dict4))
			return d.data(parquet.Encodings.RLEDict, 3, nil, nil)
		}, "no bit width", nil},
		{"indices before the dictionary", pageInt64, false, func(d *chunkDecoder) error {
			return d.data(parquet.Encodings.RLEDict, 3, nil, []byte{1, 3 << 1, 0})
		}, "before any dictionary page", nil},
		{"two dictionaries", pageInt64, false, func(d *chunkDecoder) error {
			require.NoError(t, d.dictionaryValues(2, dict4))
			return d.dictionaryValues(2, dict4)
		}, "a second dictionary page", nil},
		{"dictionary too short", pageInt64, false, func(d *chunkDecoder) error {
			return d.dictionaryValues(3, dict4)
		}, "dictionary of 3 values in 16 bytes", nil},
		{"more values than rows", pageInt64, false, func(d *chunkDecoder) error {
			return d.data(parquet.Encodings.Plain, 11, nil, make([]byte, 88))
		}, "11 values, more than the 10 rows left", nil},
		{"plain values short", pageInt32, false, func(d *chunkDecoder) error {
			return d.data(parquet.Encodings.Plain, 4, nil, make([]byte, 15))
		}, "4 plain values in 15 bytes", nil},
		{"definition levels short", pageFloat64, true, func(d *chunkDecoder) error {
			return d.data(parquet.Encodings.Plain, 4, []byte{2 << 1, 1}, make([]byte, 32))
		}, "definition levels: 2 values missing", nil},
		{"string dictionary cut", pageDictUTF8, true, func(d *chunkDecoder) error {
			return d.dictionaryValues(2, []byte{1, 0, 0, 0, 'a', 5, 0, 0, 0, 'b'})
		}, "string 1 of 2: 5 bytes past the end of the page", nil},
		{"string dictionary count", pageDictUTF8, true, func(d *chunkDecoder) error {
			return d.dictionaryValues(3, []byte{1, 0, 0, 0, 'a'})
		}, "3 strings in 5 bytes", nil},
		{"narrowed plain value too large", pageInt64, false, func(d *chunkDecoder) error {
			return d.data(parquet.Encodings.Plain, 2, nil, []byte{1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0})
		}, "value 256 outside [-128, 127]", arrow.PrimitiveTypes.Int8},
		{"narrowed dictionary value too small", pageInt32, false, func(d *chunkDecoder) error {
			return d.dictionaryValues(2, []byte{1, 0, 0, 0, 0, 0, 0xff, 0xff})
		}, "dictionary: value -65536 outside [-32768, 32767]", arrow.PrimitiveTypes.Int16},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			defer mem.AssertSize(t, 0)
			out := tc.out
			if out == nil {
				out = map[pageKind]arrow.DataType{pageInt32: arrow.PrimitiveTypes.Int32, pageInt64: arrow.PrimitiveTypes.Int64,
					pageFloat64: arrow.PrimitiveTypes.Float64, pageDictUTF8: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}}[tc.kind]
			}
			d := newChunkDecoder("c", tc.kind, 10, tc.optional, out, mem, new(scratch))
			err := tc.feed(d)
			d.release()
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
}

// Seeded garbage over the pages of an uncompressed file: the page
// decoder returns an error or values, never panics (readPages is called
// without the recover of ReadPart) and holds nothing after an error.
func TestPageDecoderGarbage(t *testing.T) {
	clean, err := os.ReadFile(writePages(t, 3, 3000, 1000, parquet.WithCompression(compress.Codecs.Uncompressed)))
	require.NoError(t, err)
	s := openPages(t, writePages(t, 3, 3000, 1000, parquet.WithCompression(compress.Codecs.Uncompressed)))
	var lo, hi int64 = -1, 0 // the bytes of the chunks the page decoder reads
	for rg := range s.meta.NumRowGroups() {
		for j, c := range s.fields {
			if c.pages == pageNone {
				continue
			}
			for leaf := range c.leaves {
				cc, err := s.meta.RowGroup(rg).ColumnChunk(leaf)
				require.NoError(t, err, "column %d", j)
				start := cc.DataPageOffset()
				if cc.HasDictionaryPage() && cc.DictionaryPageOffset() < start {
					start = cc.DictionaryPageOffset()
				}
				if lo < 0 || start < lo {
					lo = start
				}
				hi = max(hi, start+cc.TotalCompressedSize())
			}
		}
	}
	require.Positive(t, hi-lo)
	const seed = 11
	rng := rand.New(rand.NewPCG(seed, seed))
	refused := 0
	for round := range 200 {
		b := bytes.Clone(clean)
		for range 1 + rng.IntN(8) {
			off := lo + rng.Int64N(hi-lo)
			b[off] = byte(rng.Uint32())
		}
		path := filepath.Join(t.TempDir(), "garbage.parquet")
		require.NoError(t, os.WriteFile(path, b, 0o600))
		g := openPages(t, path)
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		for rg := range g.NumParts() {
			pf, err := g.pageReader(context.Background())
			require.NoError(t, err)
			for j, c := range g.fields {
				if c.pages == pageNone {
					continue
				}
				a, err := g.readPages(context.Background(), pf, mem, j, rg, c.pages)
				if err != nil {
					refused++
					continue
				}
				require.Equal(t, int(g.rows[rg]), a.Len(), "seed %d round %d part %d column %d", seed, round, rg, j)
				a.Release()
			}
		}
		mem.AssertSize(t, 0)
	}
	assert.Positive(t, refused, "seed %d: no damaged chunk was refused", seed)
}

// ReadPart allocates little more than the batch it returns: decoding
// takes no memory per row besides the output and reused scratch, and the
// chunks it reads (compressed, and decompressed page by page) go through
// pooled buffers, not a new allocation of each chunk's size.
func TestParquetReadAllocations(t *testing.T) {
	path := writePages(t, 5, 100000, 100000, parquet.WithCompression(compress.Codecs.Zstd))
	s, err := Select(openPages(t, path), "i64", "s")
	require.NoError(t, err)
	ps := s.(*parquetSource)
	var chunks int64
	for _, c := range ps.fields {
		for leaf := range c.leaves {
			cc, err := ps.meta.RowGroup(0).ColumnChunk(leaf)
			require.NoError(t, err)
			chunks += cc.TotalCompressedSize() + cc.TotalUncompressedSize()
		}
	}
	mem := memory.NewGoAllocator()
	// The least of a few reads: pools (kvio's scratch, zstd's decoders)
	// may have been emptied by a collection before any one of them.
	alloc := int64(math.MaxInt64)
	var rec arrow.RecordBatch
	for range 4 {
		if rec != nil {
			rec.Release()
		}
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		var err error
		rec, err = ps.ReadPart(context.Background(), 0, mem)
		runtime.ReadMemStats(&after)
		require.NoError(t, err)
		alloc = min(alloc, int64(after.TotalAlloc-before.TotalAlloc))
	}
	defer rec.Release()
	var out int64
	for _, col := range rec.Columns() {
		for _, b := range col.Data().Buffers() {
			if b != nil {
				out += int64(b.Len())
			}
		}
	}
	t.Logf("allocated %d bytes for a batch of %d bytes from chunks of %d bytes", alloc, out, chunks)
	// pqarrow allocates 16 MB here, 13 times the batch; reading each
	// compressed chunk whole into a new allocation, 1.3 MB besides it.
	bound := out + 1<<20
	if raceEnabled {
		// The race detector makes sync.Pool drop a share of what is put
		// back, so the page buffers are often new.
		bound = 2*out + chunks + 512<<10
	}
	assert.LessOrEqual(t, alloc, bound, "bytes allocated by ReadPart")
}

// narrowArray (the pqarrow path of a narrowed column) refuses a value
// outside the narrow type, naming it, and holds nothing afterwards.
func TestNarrowArray(t *testing.T) {
	mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
	defer mem.AssertSize(t, 0)
	b := array.NewInt64Builder(mem)
	b.AppendValues([]int64{1, -128, 127}, nil)
	b.AppendNull()
	ok := b.NewArray()
	b.AppendValues([]int64{5, 300}, nil)
	bad := b.NewArray()
	b.Release()

	got, err := narrowArray(ok, arrow.PrimitiveTypes.Int8, "c", mem)
	require.NoError(t, err)
	assert.Equal(t, "[1 -128 127 (null)]", fmt.Sprint(got))
	got.Release()
	_, err = narrowArray(bad, arrow.PrimitiveTypes.Int8, "c", mem)
	assert.EqualError(t, err, `column "c": value 300 outside [-128, 127], the bounds its statistics state`)
}

func TestRecycler(t *testing.T) {
	r, ok := NewPoolAllocator().(*recycler)
	require.True(t, ok, "NewPoolAllocator is a recycler")
	b := r.Allocate(100)
	require.Len(t, b, 100)
	assert.Equal(t, 128, cap(b))
	for i := range b {
		b[i] = 0xff
	}
	b = r.Reallocate(120, b) // fits: the same buffer
	assert.Equal(t, byte(0xff), b[99])
	big := r.Reallocate(300, b) // grows: copies, keeps b for later
	assert.Equal(t, 512, cap(big))
	assert.Equal(t, byte(0xff), big[99])
	assert.Equal(t, byte(0), big[299])
	r.Free(big)
	r.Free(make([]byte, 100)) // not a power of two: dropped
	for _, n := range []int{1, 65, 128, 500} {
		c := r.Allocate(n)
		require.Len(t, c, n)
		assert.Equal(t, make([]byte, n), c, "a reused buffer of %d bytes comes back zeroed", n)
		r.Free(c)
	}
	assert.Empty(t, r.Allocate(0))
	assert.Panics(t, func() { r.Allocate(-1) })
}

// FuzzPageDecoder feeds arbitrary dictionary and data pages to the page
// decoder, outside ReadPart's recover: it must return an error or fill
// the output, never panic.
func FuzzPageDecoder(f *testing.F) {
	f.Add(uint8(1), true, true, uint16(3), []byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}, []byte{3 << 1, 1}, []byte{1, 3 << 1, 1})
	f.Add(uint8(4), true, false, uint16(2), []byte{1, 0, 0, 0, 'a', 1, 0, 0, 0, 'b'}, []byte{1<<1 | 1, 0b01}, []byte{1, 1<<1 | 1, 0b1})
	f.Add(uint8(0), false, true, uint16(4), []byte(nil), []byte{2 << 1, 1, 2 << 1, 0}, []byte{1, 0, 0, 0, 2, 0, 0, 0})
	f.Add(uint8(2), true, true, uint16(9), []byte{0, 0, 0, 0, 0, 0, 0xf0, 0x3f}, []byte{9 << 1, 1}, []byte{0, 9 << 1})
	kinds := []pageKind{pageInt32, pageInt64, pageFloat32, pageFloat64, pageDictUTF8, pageInt64}
	types := []arrow.DataType{arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64, arrow.PrimitiveTypes.Float32,
		arrow.PrimitiveTypes.Float64, &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String},
		arrow.PrimitiveTypes.Int8}
	f.Fuzz(func(t *testing.T, kind uint8, dict, optional bool, n uint16, dictPage, levels, values []byte) {
		k := int(kind) % len(kinds)
		const rows = 64
		mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
		d := newChunkDecoder("c", kinds[k], rows, optional, types[k], mem, new(scratch))
		defer func() {
			d.release()
			mem.AssertSize(t, 0)
		}()
		if dictPage != nil {
			if err := d.dictionaryValues(len(dictPage)/4, dictPage); err != nil {
				return
			}
		}
		enc := parquet.Encodings.Plain
		if dict {
			enc = parquet.Encodings.RLEDict
		}
		if !optional {
			levels = nil
		} else if levels == nil {
			levels = []byte{}
		}
		if err := d.data(enc, int(n)%(rows+2), levels, values); err != nil {
			return
		}
		if d.filled == rows {
			d.array(types[k]).Release()
		}
	})
}

// ReadPart decodes the columns of a part in parallel, and its error is
// that of the first column, in schema order, that fails, as reading the
// columns one after the other finds it; it then holds nothing. Seeded
// garbage over the chunks of an uncompressed file makes columns fail.
func TestReadPartFirstColumnError(t *testing.T) {
	clean, err := os.ReadFile(writePages(t, 3, 3000, 1000, parquet.WithCompression(compress.Codecs.Uncompressed)))
	require.NoError(t, err)
	s := openPages(t, writePages(t, 3, 3000, 1000, parquet.WithCompression(compress.Codecs.Uncompressed)))
	cc, err := s.meta.RowGroup(0).ColumnChunk(0)
	require.NoError(t, err)
	lo := cc.DataPageOffset()
	if cc.HasDictionaryPage() && cc.DictionaryPageOffset() < lo {
		lo = cc.DictionaryPageOffset()
	}
	hi := int64(len(clean)) - 8 - int64(binary.LittleEndian.Uint32(clean[len(clean)-8:])) // the footer's start
	const seed = 13
	rng := rand.New(rand.NewPCG(seed, seed))
	failed := map[int]bool{} // columns found failing first
	for round := range 100 {
		b := bytes.Clone(clean)
		for range 1 + rng.IntN(16) {
			b[lo+rng.Int64N(hi-lo)] = byte(rng.Uint32())
		}
		path := filepath.Join(t.TempDir(), "garbage.parquet")
		require.NoError(t, os.WriteFile(path, b, 0o600))
		g := openPages(t, path)
		for rg := range g.NumParts() {
			// The columns one after the other, as the first error to expect.
			cols, first, want := readInOrder(context.Background(), g, rg, memory.DefaultAllocator)
			releaseAll(cols)
			mem := memory.NewCheckedAllocator(memory.NewGoAllocator())
			rec, err := g.ReadPart(context.Background(), rg, mem)
			if want == nil {
				require.NoError(t, err, "seed %d round %d part %d", seed, round, rg)
				rec.Release()
			} else {
				require.Error(t, err, "seed %d round %d part %d: want %v", seed, round, rg, want)
				assert.Contains(t, err.Error(), want.Error(), "seed %d round %d part %d", seed, round, rg)
				failed[first] = true
			}
			mem.AssertSize(t, 0)
		}
	}
	assert.GreaterOrEqual(t, len(failed), 2, "seed %d: columns found failing first: %v", seed, failed)
}

// readInOrder reads the columns of row group rg of s one after the other
// on the calling goroutine, with one set of readers, until one fails: it
// returns the arrays read (nil from the failed column on) and the failed
// column and its error (-1 and nil when none failed).
func readInOrder(ctx context.Context, s *parquetSource, rg int, mem memory.Allocator) ([]arrow.Array, int, error) {
	rd := &readers{s: s, ctx: ctx, mem: mem}
	cols := make([]arrow.Array, len(s.fields))
	for j := range s.fields {
		taken := false
		next := func() int {
			if taken {
				return -1
			}
			taken = true
			return rg
		}
		if _, err := s.readRun(ctx, rd, mem, j, rg, rg+1, next, func(_ int, a arrow.Array) { cols[j] = a }); err != nil {
			return cols, j, err
		}
	}
	return cols, -1, nil
}
