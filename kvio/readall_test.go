package kvio_test

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/kvio"
)

// TestReadAllParquetEqualsReadPart reads Parquet files whole with ReadAll,
// which shares the column chunks among goroutines, and part by part with
// ReadPart, under several GOMAXPROCS (so several worker counts and runs),
// with and without projection: the batches are equal, one per row group.
func TestReadAllParquetEqualsReadPart(t *testing.T) {
	files := []struct {
		name             string
		rows, groupRows  int
		wantParts, procs int
	}{
		{"one row group", 100, 100, 1, 0},
		{"15 row groups", 1000, 70, 15, 0},
		{"37 row groups of 3", 111, 3, 37, 0},
	}
	projections := [][]string{nil, {"big", "id"}, {"val"}}
	for _, fc := range files {
		path := writeParquet(t, fc.rows, fc.groupRows)
		for _, procs := range []int{1, 2, 3, 8} {
			for _, cols := range projections {
				t.Run(fmt.Sprintf("%s/procs=%d/cols=%v", fc.name, procs, cols), func(t *testing.T) {
					defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
					mem := leaktest.Allocator(t)
					var opts []kvio.LoadOption
					if cols != nil {
						opts = append(opts, kvio.WithColumns(cols...))
					}
					s := openSource(t, path, kvio.OpenParquet, opts...)
					require.Equal(t, fc.wantParts, s.NumParts())
					all, err := kvio.ReadAll(t.Context(), s, mem)
					require.NoError(t, err)
					defer release(all)
					require.Len(t, all, s.NumParts())
					for i, b := range all {
						one, err := s.ReadPart(t.Context(), i, mem)
						require.NoError(t, err)
						assert.True(t, array.RecordEqual(one, b), "part %d:\n%v\n%v", i, one, b)
						assert.True(t, b.Schema().Equal(s.Schema()), "part %d schema %s", i, b.Schema())
						assert.Equal(t, s.PartRows(i), b.NumRows())
						one.Release()
					}
					if cols == nil {
						assert.Equal(t, fc.rows, checkBatches(t, all, "id", "name", "big", "val"))
					}
				})
			}
		}
	}
}

// nestedSchema has columns of several Parquet leaves (a struct) and of
// repeated values (a list), whose value counts differ from the row count.
var nestedSchema = arrow.NewSchema([]arrow.Field{
	{Name: "id", Type: arrow.PrimitiveTypes.Int64},
	{Name: "pair", Type: arrow.StructOf(
		arrow.Field{Name: "a", Type: arrow.PrimitiveTypes.Int32},
		arrow.Field{Name: "b", Type: arrow.BinaryTypes.String, Nullable: true},
	), Nullable: true},
	{Name: "tags", Type: arrow.ListOf(arrow.PrimitiveTypes.Int64), Nullable: true},
}, nil)

// nestedBatch returns rows [start, start+n): pair {id, "b<id>"} (b null
// every fifth row, pair null every eleventh), tags id%4 values id, id+1, …
// (null every seventh row).
func nestedBatch(start, n int) arrow.RecordBatch {
	b := array.NewRecordBuilder(memory.NewGoAllocator(), nestedSchema)
	defer b.Release()
	pair := b.Field(1).(*array.StructBuilder)
	tags := b.Field(2).(*array.ListBuilder)
	for id := start; id < start+n; id++ {
		b.Field(0).(*array.Int64Builder).Append(int64(id))
		if id%11 == 0 {
			pair.AppendNull()
		} else {
			pair.Append(true)
			pair.FieldBuilder(0).(*array.Int32Builder).Append(int32(id))
			if id%5 == 0 {
				pair.FieldBuilder(1).AppendNull()
			} else {
				pair.FieldBuilder(1).(*array.StringBuilder).Append(fmt.Sprint("b", id))
			}
		}
		if id%7 == 0 {
			tags.AppendNull()
		} else {
			tags.Append(true)
			for k := range id % 4 {
				tags.ValueBuilder().(*array.Int64Builder).Append(int64(id + k))
			}
		}
	}
	return b.NewRecordBatch()
}

func TestReadAllParquetNested(t *testing.T) {
	rec := nestedBatch(0, 500)
	defer rec.Release()
	tbl := array.NewTableFromRecords(nestedSchema, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var buf bytes.Buffer
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, 60, parquet.NewWriterProperties(), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
	path := tempFile(t, "nested.parquet", buf.Bytes())

	for _, cols := range [][]string{nil, {"tags", "pair"}} {
		mem := leaktest.Allocator(t)
		s := openSource(t, path, kvio.OpenParquet, kvio.WithColumns(cols...))
		require.Equal(t, 9, s.NumParts())
		all, err := kvio.ReadAll(t.Context(), s, mem)
		require.NoError(t, err)
		names := cols
		if names == nil {
			names = []string{"id", "pair", "tags"}
		}
		for j, name := range names {
			// Parquet renames list elements and adds field metadata: compare values.
			want := rec.Column(nestedSchema.FieldIndices(name)[0])
			row := 0
			for i, b := range all {
				for r := range int(b.NumRows()) {
					require.Equal(t, want.ValueStr(row), b.Column(j).ValueStr(r), "column %s part %d row %d", name, i, r)
					row++
				}
			}
			assert.Equal(t, want.Len(), row)
		}
		release(all)
	}
}

// TestReadAllParquetBudget reads a file with ReadAll under budgets too small
// for the whole file: the call fails naming a part, frees what it
// allocated and returns every byte to the budget; a budget big enough
// charges the batches until they are released.
func TestReadAllParquetBudget(t *testing.T) {
	path := writeParquet(t, 3000, 200)
	for _, procs := range []int{1, 2} {
		t.Run(fmt.Sprint("procs=", procs), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			mem := leaktest.Allocator(t)
			s := openSource(t, path, kvio.OpenParquet)
			probe := buffers.NewBudget(1 << 30)
			sp := openSource(t, path, kvio.OpenParquet, kvio.WithBudget(probe))
			all, err := kvio.ReadAll(t.Context(), sp, mem)
			require.NoError(t, err)
			live := mem.CurrentAlloc()
			assert.False(t, probe.TryAcquire(1<<30-int64(live)+1), "the batches' bytes are charged")
			release(all)
			require.True(t, probe.TryAcquire(1<<30), "released batches return their bytes")

			for _, total := range []int64{1000, int64(live) / 2} {
				budget := buffers.NewBudget(total)
				s = openSource(t, path, kvio.OpenParquet, kvio.WithBudget(budget))
				_, err = kvio.ReadAll(t.Context(), s, mem)
				assert.ErrorIs(t, err, buffers.ErrOverBudget, "budget %d", total)
				assert.ErrorContains(t, err, fmt.Sprintf("kvio: read %s part ", path))
				assert.True(t, budget.TryAcquire(total), "a failed ReadAll returns what it took (budget %d)", total)
				assert.Zero(t, mem.CurrentAlloc(), "a failed ReadAll frees what it allocated (budget %d)", total)
			}
		})
	}
}

// TestReadAllParquetCanceled cancels ReadAll from inside a read: it stops,
// returns the cause, and holds nothing.
func TestReadAllParquetCanceled(t *testing.T) {
	path := writeParquet(t, 3000, 100)
	mem := leaktest.Allocator(t)
	ctx, cancel := context.WithCancelCause(t.Context())
	stop := fmt.Errorf("stop here")
	f, err := kvio.Open(path)
	require.NoError(t, err)
	defer f.Close()
	// The Source reads through the File; cancel once a few reads happened.
	reads := 0
	counting, err := kvio.NewFile(path, readerAtFunc(func(p []byte, off int64) (int, error) {
		if reads++; reads == 8 {
			cancel(stop)
		}
		return f.ReadAt(p, off)
	}), f.Size(), kvio.WithThreads(1))
	require.NoError(t, err)
	defer counting.Close()
	cs, err := kvio.OpenParquet(t.Context(), counting)
	require.NoError(t, err)
	defer cs.Close()
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1)) // one reader: the count is deterministic
	_, err = kvio.ReadAll(ctx, cs, mem)
	require.Error(t, err)
	assert.ErrorIs(t, err, stop)
	assert.ErrorContains(t, err, "kvio: read "+path)
	assert.Zero(t, mem.CurrentAlloc())
}

// readerAtFunc adapts a function to io.ReaderAt.
type readerAtFunc func(p []byte, off int64) (int, error)

func (fn readerAtFunc) ReadAt(p []byte, off int64) (int, error) { return fn(p, off) }
