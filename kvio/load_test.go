package kvio_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/compress"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/kvio"
)

var testSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "name", Type: arrow.BinaryTypes.String},
	{Name: "big", Type: arrow.BinaryTypes.LargeString},
	{Name: "val", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
}, nil)

// testBatch returns rows [start, start+n) of the test data: id, name "n<id>",
// big "big-<id>", and val id/2, null for every seventh id.
func testBatch(start, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.NewGoAllocator(), testSchema)
	defer b.Release()
	for id := start; id < start+n; id++ {
		b.Field(0).(*array.Int64Builder).Append(int64(id))
		b.Field(1).(*array.StringBuilder).Append(fmt.Sprint("n", id))
		b.Field(2).(*array.LargeStringBuilder).Append(fmt.Sprint("big-", id))
		if id%7 == 0 {
			b.Field(3).AppendNull()
		} else {
			b.Field(3).(*array.Float64Builder).Append(float64(id) / 2)
		}
	}
	return b.NewRecordBatch()
}

// writeParquet writes rows test rows as Parquet with row groups of groupRows
// rows and returns the path.
func writeParquet(t testing.TB, rows, groupRows int) string {
	t.Helper()
	rec := testBatch(0, rows)
	defer rec.Release()
	tbl := array.NewTableFromRecords(testSchema, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var buf bytes.Buffer
	props := parquet.NewWriterProperties(parquet.WithCompression(compress.Codecs.Zstd))
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, int64(groupRows), props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
	path := filepath.Join(t.TempDir(), "test.parquet")
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
	return path
}

// writeIPC writes one record batch per entry of sizes as an Arrow IPC file
// and returns the path.
func writeIPC(t testing.TB, sizes ...int) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "test.arrow")
	require.NoError(t, os.WriteFile(path, ipcBytes(t, testSchema, testBatch, sizes...), 0o600))
	return path
}

// ipcBytes writes one record batch of batch(start, n) per entry of sizes
// as an Arrow IPC file in memory.
func ipcBytes(t testing.TB, sc *arrow.Schema, batch func(start, n int) arrow.RecordBatch, sizes ...int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(sc))
	require.NoError(t, err)
	start := 0
	for _, n := range sizes {
		rec := batch(start, n)
		require.NoError(t, w.Write(rec))
		rec.Release()
		start += n
	}
	require.NoError(t, w.Close())
	return buf.Bytes()
}

// str returns element i of a utf8 or large_utf8 array.
func str(t testing.TB, a arrow.Array, i int) string {
	t.Helper()
	switch a := a.(type) {
	case *array.String:
		return a.Value(i)
	case *array.LargeString:
		return a.Value(i)
	}
	t.Fatalf("column of type %s is not a string column", a.DataType())
	return ""
}

// checkBatches checks that batches hold test rows 0, 1, … in order, with the
// columns named in cols, and returns the row count.
func checkBatches(t *testing.T, batches []arrow.RecordBatch, cols ...string) int {
	t.Helper()
	id := 0
	for _, b := range batches {
		require.Equal(t, len(cols), int(b.NumCols()))
		for r := range int(b.NumRows()) {
			for c, name := range cols {
				col := b.Column(c)
				switch name {
				case "id":
					require.Equal(t, int64(id), col.(*array.Int64).Value(r))
				case "name":
					require.Equal(t, fmt.Sprint("n", id), str(t, col, r))
				case "big":
					require.Equal(t, fmt.Sprint("big-", id), str(t, col, r))
				case "val":
					require.Equal(t, id%7 == 0, col.IsNull(r), "row %d null", id)
					if id%7 != 0 {
						require.Equal(t, float64(id)/2, col.(*array.Float64).Value(r))
					}
				}
			}
			id++
		}
	}
	return id
}

func release(batches []arrow.RecordBatch) {
	for _, b := range batches {
		b.Release()
	}
}

// openSource opens path with kvio.Open and open, closing both at cleanup.
func openSource(t testing.TB, path string, open func(context.Context, *kvio.File, ...kvio.LoadOption) (kvio.Source, error), opts ...kvio.LoadOption) kvio.Source {
	t.Helper()
	f, err := kvio.Open(path, kvio.WithTaskSize(256))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	s, err := open(t.Context(), f, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, s.Close()) })
	return s
}

func TestLoad(t *testing.T) {
	all := []string{"id", "name", "big", "val"}
	tests := []struct {
		name      string
		path      func(t testing.TB) string
		open      func(context.Context, *kvio.File, ...kvio.LoadOption) (kvio.Source, error)
		partRows  []int64
		wantTypes []arrow.Type
	}{
		{
			name:     "parquet",
			path:     func(t testing.TB) string { return writeParquet(t, 1000, 300) },
			open:     kvio.OpenParquet,
			partRows: []int64{300, 300, 300, 100},
		},
		{
			name:     "ipc",
			path:     func(t testing.TB) string { return writeIPC(t, 10, 0, 500, 1, 489) },
			open:     kvio.OpenIPC,
			partRows: []int64{10, 0, 500, 1, 489},
		},
		{
			name:     "ipc one batch",
			path:     func(t testing.TB) string { return writeIPC(t, 1000) },
			open:     kvio.OpenIPC,
			partRows: []int64{1000},
		},
		{
			name:     "auto parquet",
			path:     func(t testing.TB) string { return writeParquet(t, 1000, 1000) },
			open:     kvio.OpenAuto,
			partRows: []int64{1000},
		},
		{
			name:     "auto ipc",
			path:     func(t testing.TB) string { return writeIPC(t, 999, 1) },
			open:     kvio.OpenAuto,
			partRows: []int64{999, 1},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := leaktest.Allocator(t)
			path := tc.path(t)

			s := openSource(t, path, tc.open)
			assert.Equal(t, path, s.Name())
			assert.Equal(t, columns(testSchema), columns(s.Schema()), "Parquet adds field metadata")
			require.Equal(t, len(tc.partRows), s.NumParts())
			for i, n := range tc.partRows {
				assert.Equal(t, n, s.PartRows(i), "part %d", i)
			}
			batches, err := kvio.ReadAll(t.Context(), s, mem)
			require.NoError(t, err)
			defer release(batches)
			for i, b := range batches {
				assert.Equal(t, tc.partRows[i], b.NumRows(), "part %d", i)
				assert.True(t, b.Schema().Equal(s.Schema()), "part %d schema %s", i, b.Schema())
			}
			assert.Equal(t, 1000, checkBatches(t, batches, all...))

			proj := openSource(t, path, tc.open, kvio.WithColumns("big", "id"))
			assert.Equal(t, []string{"big", "id"}, fieldNames(proj.Schema()))
			b, err := proj.ReadPart(t.Context(), len(tc.partRows)-1, mem)
			require.NoError(t, err)
			defer b.Release()
			assert.True(t, b.Schema().Equal(proj.Schema()), "schema %s", b.Schema())
			assert.Equal(t, tc.partRows[len(tc.partRows)-1], b.NumRows())
			assert.Equal(t, arrow.LARGE_STRING, b.Column(0).DataType().ID())
		})
	}
}

func fieldNames(sc *arrow.Schema) []string {
	var names []string
	for _, f := range sc.Fields() {
		names = append(names, f.Name)
	}
	return names
}

// columns describes each field of sc as "name type", ignoring metadata.
func columns(sc *arrow.Schema) []string {
	var cols []string
	for _, f := range sc.Fields() {
		cols = append(cols, fmt.Sprintf("%s %s nullable=%t", f.Name, f.Type, f.Nullable))
	}
	return cols
}

func TestLoadProjectionErrors(t *testing.T) {
	for name, path := range map[string]string{"parquet": writeParquet(t, 10, 10), "ipc": writeIPC(t, 10)} {
		t.Run(name, func(t *testing.T) {
			f, err := kvio.Open(path)
			require.NoError(t, err)
			defer f.Close()
			_, err = kvio.OpenAuto(t.Context(), f, kvio.WithColumns("id", "nope"))
			assert.EqualError(t, err, fmt.Sprintf("kvio: open %s: unknown column %q (have id, name, big, val)", path, "nope"))
			_, err = kvio.OpenAuto(t.Context(), f, kvio.WithColumns("id", "val", "id"))
			assert.EqualError(t, err, fmt.Sprintf("kvio: open %s: column %q selected twice", path, "id"))
		})
	}
}

// TestLoadOptionErrors checks that a nil budget fails every open call,
// naming the option.
func TestLoadOptionErrors(t *testing.T) {
	f, err := kvio.Open(writeParquet(t, 10, 10))
	require.NoError(t, err)
	defer f.Close()
	for name, open := range map[string]func(context.Context, *kvio.File, ...kvio.LoadOption) (kvio.Source, error){
		"parquet": kvio.OpenParquet, "ipc": kvio.OpenIPC, "auto": kvio.OpenAuto,
	} {
		t.Run(name, func(t *testing.T) {
			s, err := open(t.Context(), f, kvio.WithBudget(nil))
			assert.EqualError(t, err, "kvio: WithBudget: nil budget (leave the option out to charge nothing)")
			assert.Nil(t, s)
		})
	}
}

func TestReadPartConcurrent(t *testing.T) {
	for name, path := range map[string]string{"parquet": writeParquet(t, 1000, 100), "ipc": writeIPC(t, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100)} {
		t.Run(name, func(t *testing.T) {
			mem := leaktest.Allocator(t)
			s := openSource(t, path, kvio.OpenAuto)
			require.Equal(t, 10, s.NumParts())
			got := make([]arrow.RecordBatch, 3*s.NumParts())
			var wg sync.WaitGroup
			for k := range got {
				wg.Go(func() {
					var err error
					got[k], err = s.ReadPart(t.Context(), k%3, mem) // parts 0-2, each many times
					assert.NoError(t, err)
				})
			}
			wg.Wait()
			defer release(got)
			for k, b := range got {
				want := k % 3
				assert.Equal(t, int64(want*100), b.Column(0).(*array.Int64).Value(0), "batch %d", k)
				assert.Equal(t, fmt.Sprint("big-", want*100+99), str(t, b.Column(2), 99))
			}
		})
	}
}

func TestReadPartErrors(t *testing.T) {
	for name, path := range map[string]string{"parquet": writeParquet(t, 10, 10), "ipc": writeIPC(t, 10)} {
		t.Run(name, func(t *testing.T) {
			mem := leaktest.Allocator(t)
			s := openSource(t, path, kvio.OpenAuto)
			for _, i := range []int{-1, 1} {
				_, err := s.ReadPart(t.Context(), i, mem)
				assert.EqualError(t, err, fmt.Sprintf("kvio: read %s: part %d out of range [0, 1)", path, i))
			}

			ctx, cancel := context.WithCancel(t.Context())
			cancel()
			_, err := s.ReadPart(ctx, 0, mem)
			assert.ErrorIs(t, err, context.Canceled)
			_, err = kvio.ReadAll(ctx, s, mem)
			assert.ErrorIs(t, err, context.Canceled)

			require.NoError(t, s.Close())
			require.NoError(t, s.Close())
			_, err = s.ReadPart(t.Context(), 0, mem)
			assert.ErrorIs(t, err, kvio.ErrClosed)
			assert.ErrorContains(t, err, path)
		})
	}
}

func TestBatchOutlivesSource(t *testing.T) {
	mem := leaktest.Allocator(t)
	for _, path := range []string{writeParquet(t, 100, 50), writeIPC(t, 50, 50)} {
		f, err := kvio.Open(path)
		require.NoError(t, err)
		s, err := kvio.OpenAuto(t.Context(), f)
		require.NoError(t, err)
		b, err := s.ReadPart(t.Context(), 1, mem)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		require.NoError(t, f.Close())
		assert.Equal(t, "big-99", str(t, b.Column(2), 49))
		b.Release()
	}
}
