package kvio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/kvio"
)

// edgeSchema has a dictionary-encoded string column and a column with
// sparse nulls (one row in 997).
var edgeSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "origin", Type: &arrow.DictionaryType{IndexType: arrow.PrimitiveTypes.Int32, ValueType: arrow.BinaryTypes.String}},
	{Name: "sparse", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
}, nil)

var airports = []string{"ATL", "ORD", "DFW", "DEN", "LAX"}

func edgeBatch(start, n int) arrow.RecordBatch {
	mem := memory.NewGoAllocator()
	ids, sparse, idx := array.NewInt64Builder(mem), array.NewInt64Builder(mem), array.NewInt32Builder(mem)
	defer ids.Release()
	defer sparse.Release()
	defer idx.Release()
	for id := start; id < start+n; id++ {
		ids.Append(int64(id))
		idx.Append(int32(id * id % len(airports)))
		if id%997 == 3 {
			sparse.AppendNull()
		} else {
			sparse.Append(int64(3 * id))
		}
	}
	// One dictionary for every batch: the IPC file format allows no
	// replacement.
	dict := array.NewStringBuilder(mem)
	defer dict.Release()
	dict.AppendValues(airports, nil)
	values, indices := dict.NewArray(), idx.NewArray()
	defer values.Release()
	defer indices.Release()
	origin := array.NewDictionaryArray(edgeSchema.Field(1).Type, indices, values)
	defer origin.Release()
	idCol, sparseCol := ids.NewArray(), sparse.NewArray()
	defer idCol.Release()
	defer sparseCol.Release()
	return array.NewRecordBatch(edgeSchema, []arrow.Array{idCol, origin, sparseCol}, int64(n))
}

// checkEdge checks batches of edge rows 0, 1, …, n-1 and returns n.
func checkEdge(t *testing.T, batches []arrow.RecordBatch) int {
	t.Helper()
	id := 0
	for _, b := range batches {
		origin := b.Column(1)
		for r := range int(b.NumRows()) {
			require.Equal(t, int64(id), b.Column(0).(*array.Int64).Value(r))
			var code string
			switch o := origin.(type) {
			case *array.Dictionary: // IPC, and Parquet with the stored Arrow schema
				code = o.Dictionary().(*array.String).Value(o.GetValueIndex(r))
			default:
				code = str(t, origin, r)
			}
			require.Equal(t, airports[id*id%len(airports)], code, "row %d", id)
			sp := b.Column(2)
			require.Equal(t, id%997 == 3, sp.IsNull(r), "row %d null", id)
			if id%997 != 3 {
				require.Equal(t, int64(3*id), sp.(*array.Int64).Value(r))
			}
			id++
		}
	}
	return id
}

func writeEdgeIPC(t testing.TB, sizes ...int) []byte {
	t.Helper()
	return ipcBytes(t, edgeSchema, edgeBatch, sizes...)
}

func writeEdgeParquet(t testing.TB, rows, groupRows int) []byte {
	t.Helper()
	rec := edgeBatch(0, rows)
	defer rec.Release()
	tbl := array.NewTableFromRecords(edgeSchema, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var buf bytes.Buffer
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, int64(groupRows), parquet.NewWriterProperties(),
		pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
	return buf.Bytes()
}

func tempFile(t testing.TB, name string, data []byte) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	return path
}

// TestDictionaryAndSparseNulls loads dictionary-encoded and sparsely null
// columns from Parquet and IPC (read and mapped), and with empty batches.
func TestDictionaryAndSparseNulls(t *testing.T) {
	clearEnv(t)
	tests := []struct {
		name string
		data []byte
		opts []kvio.LoadOption
		rows int
	}{
		{"parquet", writeEdgeParquet(t, 5000, 1500), nil, 5000},
		{"ipc", writeEdgeIPC(t, 2000, 0, 2999, 1, 0), nil, 5000},
		{"ipc mmap", writeEdgeIPC(t, 2000, 0, 2999, 1, 0), []kvio.LoadOption{kvio.WithMmap()}, 5000},
		{"ipc only empty batches", writeEdgeIPC(t, 0, 0), nil, 0},
		{"parquet no rows", writeEdgeParquet(t, 0, 100), nil, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := leaktest.Allocator(t)
			s := openSource(t, tempFile(t, "edge", tc.data), kvio.OpenAuto, tc.opts...)
			batches, err := kvio.ReadAll(t.Context(), s, mem)
			require.NoError(t, err)
			defer release(batches)
			assert.Equal(t, tc.rows, checkEdge(t, batches))
			var rows int64
			for i := range s.NumParts() {
				rows += s.PartRows(i)
			}
			assert.Equal(t, int64(tc.rows), rows)
		})
	}
}

// TestIPCWithoutEOS reads an IPC file whose writer left out the
// end-of-stream marker (0xFFFFFFFF 0x00000000) before the footer: the
// footer says where the batches are, so it loads.
func TestIPCWithoutEOS(t *testing.T) {
	clearEnv(t)
	data := writeEdgeIPC(t, 100, 200)
	footerLen := int(binary.LittleEndian.Uint32(data[len(data)-10:]))
	footerAt := len(data) - 10 - footerLen
	eos := []byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}
	require.Equal(t, eos, data[footerAt-8:footerAt], "arrow-go writes the marker")
	cut := append(bytes.Clone(data[:footerAt-8]), data[footerAt:]...)

	mem := leaktest.Allocator(t)
	for _, opts := range [][]kvio.LoadOption{nil, {kvio.WithMmap()}} {
		s := openSource(t, tempFile(t, "noeos.arrow", cut), kvio.OpenIPC, opts...)
		batches, err := kvio.ReadAll(t.Context(), s, mem)
		require.NoError(t, err)
		assert.Equal(t, 300, checkEdge(t, batches))
		release(batches)
	}
}

// TestCutFiles cuts files in the middle of a Parquet row group and of an IPC
// record batch body, as a copy interrupted mid-way leaves them: the footer
// is gone, and opening fails naming the file, never panics.
func TestCutFiles(t *testing.T) {
	clearEnv(t)
	pq := writeEdgeParquet(t, 5000, 1000)
	meta, err := file.NewParquetReader(bytes.NewReader(pq))
	require.NoError(t, err)
	rg := meta.MetaData().RowGroup(2)
	col, err := rg.ColumnChunk(0)
	require.NoError(t, err)
	pqCut := int(col.DataPageOffset() + col.TotalCompressedSize()/2)

	arrow := writeEdgeIPC(t, 1000, 1000, 1000)
	r, err := ipc.NewFileReader(bytes.NewReader(arrow))
	require.NoError(t, err)
	rec, err := r.RecordBatchAt(1)
	require.NoError(t, err)
	rec.Release()
	r.Close()
	ipcCut := len(arrow) / 2 // inside the second batch of three of equal size

	for name, data := range map[string][]byte{"parquet row group": pq[:pqCut], "ipc batch": arrow[:ipcCut]} {
		t.Run(name, func(t *testing.T) {
			path := tempFile(t, "cut", data)
			f, err := kvio.Open(path)
			require.NoError(t, err)
			defer f.Close()
			_, err = kvio.OpenAuto(t.Context(), f)
			require.Error(t, err)
			assert.ErrorContains(t, err, "kvio: open "+path)
		})
	}

	// A footer that claims more than the file holds: the row group's data
	// was cut out, the footer kept.
	hole := append(bytes.Clone(pq[:pqCut]), pq[len(pq)-8-int(binary.LittleEndian.Uint32(pq[len(pq)-8:])):]...)
	f, err := kvio.NewFile("hole.parquet", bytes.NewReader(hole), int64(len(hole)))
	require.NoError(t, err)
	_, err = kvio.OpenParquet(t.Context(), f)
	assert.ErrorContains(t, err, "kvio: open hole.parquet: row group 2 column 0")
	assert.ErrorContains(t, err, "lies outside the file")
}

func TestBudget(t *testing.T) {
	clearEnv(t)
	for name, data := range map[string][]byte{"parquet": writeEdgeParquet(t, 5000, 1000), "ipc": writeEdgeIPC(t, 1000, 1000, 1000, 1000, 1000)} {
		t.Run(name, func(t *testing.T) {
			path := tempFile(t, "b", data)
			mem := leaktest.Allocator(t)

			// Enough for everything: every byte is charged until released.
			budget := buffers.NewBudget(1 << 30)
			s := openSource(t, path, kvio.OpenAuto, kvio.WithBudget(budget))
			batches, err := kvio.ReadAll(t.Context(), s, mem)
			require.NoError(t, err)
			assert.Equal(t, 5000, checkEdge(t, batches))
			live := mem.CurrentAlloc()
			require.Positive(t, live)
			assert.False(t, budget.TryAcquire(1<<30-int64(live)+1), "the batches' bytes are charged")
			release(batches)
			assert.True(t, budget.TryAcquire(1<<30), "released batches return their bytes")
			budget.Release(1 << 30)

			// Too small: the part fails, naming it, holding nothing.
			small := buffers.NewBudget(1000)
			s = openSource(t, path, kvio.OpenAuto, kvio.WithBudget(small))
			_, err = s.ReadPart(t.Context(), 1, mem)
			assert.ErrorIs(t, err, buffers.ErrOverBudget)
			assert.ErrorContains(t, err, fmt.Sprintf("kvio: read %s part 1: allocation of", path))
			assert.True(t, small.TryAcquire(1000), "a failed part returns what it took")
			assert.Zero(t, mem.CurrentAlloc(), "a failed part frees what it allocated")
		})
	}
}

func TestMmap(t *testing.T) {
	clearEnv(t)
	path := writeIPC(t, 10, 0, 500, 1, 489)
	mem := leaktest.Allocator(t)
	f, err := kvio.Open(path)
	require.NoError(t, err)
	defer f.Close()
	s, err := kvio.OpenAuto(t.Context(), f, kvio.WithMmap(), kvio.WithColumns("big", "val", "id"))
	require.NoError(t, err)
	batches, err := kvio.ReadAll(t.Context(), s, mem)
	require.NoError(t, err)
	require.NoError(t, s.Close(), "unmaps")
	require.NoError(t, s.Close())
	// The batches own copies in mem: still valid after the unmap.
	assert.Equal(t, 1000, checkBatches(t, batches, "big", "val", "id"))
	assert.Positive(t, mem.CurrentAlloc())
	release(batches)
	_, err = s.ReadPart(t.Context(), 0, mem)
	assert.ErrorIs(t, err, kvio.ErrClosed)

	// Only files kvio opened can be mapped.
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	nf, err := kvio.NewFile("mem.arrow", bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	_, err = kvio.OpenIPC(t.Context(), nf, kvio.WithMmap())
	assert.EqualError(t, err, "kvio: open mem.arrow: WithMmap needs a file opened by kvio.Open or OpenFile, not a NewFile reader")
	// Parquet ignores it.
	ps := openSource(t, writeParquet(t, 10, 10), kvio.OpenAuto, kvio.WithMmap())
	b, err := ps.ReadPart(context.Background(), 0, mem)
	require.NoError(t, err)
	b.Release()
}

// parquetSource writes tbl as Parquet (groupRows rows a row group) into
// memory and opens it as a Source named name; both close at cleanup.
func parquetSource(t *testing.T, name string, tbl arrow.Table, groupRows int64) kvio.Source {
	t.Helper()
	var buf bytes.Buffer
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, groupRows, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties()))
	f, err := kvio.NewFile(name, bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	src, err := kvio.OpenParquet(t.Context(), f)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, src.Close()) })
	return src
}

// ipcSource writes rec as an Arrow IPC file name in a temporary directory
// and opens it as a Source; both close at cleanup.
func ipcSource(t *testing.T, name string, sc *arrow.Schema, rec arrow.RecordBatch) kvio.Source {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	out, err := os.Create(path)
	require.NoError(t, err)
	w, err := ipc.NewFileWriter(out, ipc.WithSchema(sc))
	require.NoError(t, err)
	require.NoError(t, w.Write(rec))
	require.NoError(t, w.Close())
	require.NoError(t, out.Close())
	f, err := kvio.Open(path)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	src, err := kvio.OpenIPC(t.Context(), f)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, src.Close()) })
	return src
}
