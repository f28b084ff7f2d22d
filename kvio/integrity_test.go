package kvio_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/kvio"
)

// le32 returns vs as little-endian int32s, as Arrow offsets are stored.
func le32(vs ...int32) []byte {
	var b []byte
	for _, v := range vs {
		b = binary.LittleEndian.AppendUint32(b, uint32(v))
	}
	return b
}

// at returns a copy of b with edit applied at the first index of pattern,
// which must occur in b.
func at(t *testing.T, b, pattern []byte, edit func(c []byte)) []byte {
	t.Helper()
	i := bytes.Index(b, pattern)
	require.GreaterOrEqual(t, i, 0, "pattern % x not found", pattern)
	c := bytes.Clone(b)
	edit(c[i:])
	return c
}

// pqBytes writes test rows [0, rows) as one row group of Parquet with codec,
// without dictionary encoding, so an int64 column's values are stored
// plainly.
func pqBytes(t *testing.T, rows int, codec compress.Compression) []byte {
	t.Helper()
	rec := testBatch(0, rows)
	defer rec.Release()
	tbl := array.NewTableFromRecords(testSchema, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var buf bytes.Buffer
	props := parquet.NewWriterProperties(parquet.WithCompression(codec), parquet.WithDictionaryDefault(false))
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, int64(rows), props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
	return buf.Bytes()
}

// TestIntegrity checks what the package documentation says of damaged
// bytes inside the data of a file (its structure is TestCorruptFiles'):
// Arrow IPC record batches are validated as a whole (offsets, UTF-8, null
// counts), but neither format carries a checksum of its values, so a
// changed value byte loads as a wrong value without an error.
func TestIntegrity(t *testing.T) {
	const rows = 100
	ipcFile := ipcBytes(t, testSchema, testBatch, rows)
	validity := []byte{0x7e, 0xbf, 0xdf, 0xef} // val: null at ids 0, 7, 14, 21, …
	tests := []struct {
		name  string
		data  []byte
		want  string // part of the error; "" when not detected
		check func(t *testing.T, rec arrow.RecordBatch)
	}{
		{name: "ipc value byte changed", data: at(t, ipcFile, binary.LittleEndian.AppendUint64(nil, 42), func(c []byte) { c[0] ^= 1 }),
			check: func(t *testing.T, rec arrow.RecordBatch) {
				assert.Equal(t, int64(43), rec.Column(0).(*array.Int64).Value(42), "id 42 loads as 43")
			}},
		{name: "ipc string byte changed, still utf-8", data: at(t, ipcFile, []byte("n0n1n2n3"), func(c []byte) { c[7] = '2' }),
			check: func(t *testing.T, rec arrow.RecordBatch) {
				assert.Equal(t, "n2", rec.Column(1).(*array.String).Value(3), `"n3" loads as "n2"`)
			}},
		{name: "ipc string byte changed, not utf-8", data: at(t, ipcFile, []byte("n0n1n2n3"), func(c []byte) { c[7] = 0xff }),
			want: `corrupt data: column "name": arrow/array: string at index 3 is not valid utf8`},
		{name: "ipc offsets out of order", data: at(t, ipcFile, le32(0, 2, 4, 6), func(c []byte) { copy(c[8:], le32(1)) }),
			want: `corrupt data: column "name": arrow/array: string offsets are not monotonically non-decreasing at index 2: 1 < 2`},
		{name: "ipc offset past the values", data: at(t, ipcFile, le32(0, 2, 4, 6), func(c []byte) { copy(c[12:], le32(1<<20)) }),
			want: "corrupt data"},
		{name: "ipc validity bit flipped", data: at(t, ipcFile, validity, func(c []byte) { c[0] ^= 0x02 }),
			want: `corrupt data: column "val": arrow/array: null count value (15) does not match actual number of nulls in array (16)`},
		{name: "parquet uncompressed value byte changed", data: at(t, pqBytes(t, rows, compress.Codecs.Uncompressed), binary.LittleEndian.AppendUint64(nil, 42), func(c []byte) { c[0] ^= 1 }),
			check: func(t *testing.T, rec arrow.RecordBatch) {
				assert.Equal(t, int64(43), rec.Column(0).(*array.Int64).Value(42), "id 42 loads as 43")
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := leaktest.Allocator(t)
			f, err := kvio.NewFile("damaged", bytes.NewReader(tc.data), int64(len(tc.data)))
			require.NoError(t, err)
			s, err := kvio.OpenAuto(t.Context(), f)
			require.NoError(t, err, "the structure is intact")
			defer s.Close()
			batches, err := kvio.ReadAll(t.Context(), s, mem)
			defer release(batches)
			if tc.want != "" {
				require.Error(t, err)
				assert.ErrorContains(t, err, "kvio: read damaged part 0: ")
				assert.ErrorContains(t, err, tc.want)
				return
			}
			require.NoError(t, err, "not detected")
			require.Len(t, batches, 1)
			tc.check(t, batches[0])
		})
	}
}

// TestParquetPageDamage changes, one at a time, every byte of each column
// chunk (page headers and page data) of a Parquet file and reads it: with
// a codec that checks its content (gzip, zstd as arrow-go writes it) each
// change fails the read or loads exactly the values written; without one
// (no compression, Snappy, LZ4, Brotli) some changes load wrong values
// without an error.
func TestParquetPageDamage(t *testing.T) {
	const rows = 100
	want := testBatch(0, rows)
	defer want.Release()
	tests := []struct {
		codec     compress.Compression
		undetects bool // some changes load wrong values
	}{
		{compress.Codecs.Gzip, false},
		{compress.Codecs.Zstd, false},
		{compress.Codecs.Snappy, true},
		{compress.Codecs.Lz4Raw, true},
		{compress.Codecs.Brotli, true},
		{compress.Codecs.Uncompressed, true},
	}
	for _, tc := range tests {
		t.Run(tc.codec.String(), func(t *testing.T) {
			data := pqBytes(t, rows, tc.codec)
			r, err := file.NewParquetReader(bytes.NewReader(data))
			require.NoError(t, err)
			rg := r.MetaData().RowGroup(0)
			var failed, same int
			var wrong []string
			for c := range int(r.MetaData().Schema.NumColumns()) {
				col, err := rg.ColumnChunk(c)
				require.NoError(t, err)
				start := col.DataPageOffset()
				for i := start; i < start+col.TotalCompressedSize(); i++ {
					damaged := bytes.Clone(data)
					damaged[i] ^= 0x10
					got, err := readDamaged(t, damaged)
					switch {
					case err != nil:
						failed++
					case array.RecordEqual(want, got):
						same++
					default:
						wrong = append(wrong, fmt.Sprintf("column %d byte %d", c, i-start))
					}
					if got != nil {
						got.Release()
					}
				}
			}
			require.NoError(t, r.Close())
			t.Logf("%s: %d changes failed, %d loaded the values written, %d loaded wrong values", tc.codec, failed, same, len(wrong))
			assert.Positive(t, failed)
			if tc.undetects {
				assert.NotEmpty(t, wrong, "a changed value byte loads without an error")
			} else {
				assert.Empty(t, wrong, "changes that load wrong values")
			}
		})
	}
}

// readDamaged reads the one row group of the Parquet file data.
func readDamaged(t *testing.T, data []byte) (arrow.RecordBatch, error) {
	f, err := kvio.NewFile("damaged", bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	s, err := kvio.OpenParquet(t.Context(), f)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	return s.ReadPart(t.Context(), 0, leaktest.Allocator(t))
}
