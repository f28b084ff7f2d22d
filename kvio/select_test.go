package kvio_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/kvio"
)

// foreign is a Source kvio did not open: Select reads its whole parts.
type foreign struct{ kvio.Source }

func TestSelect(t *testing.T) {
	pq := writeParquet(t, 1000, 300)
	ipc := writeIPC(t, 300, 300, 300, 100)
	tests := []struct {
		name  string
		path  string
		open  func(context.Context, *kvio.File, ...kvio.LoadOption) (kvio.Source, error)
		opts  []kvio.LoadOption
		wrap  bool     // select from a foreign wrapper of the Source
		pick  []string // Select's names
		want  []string // the view's columns; pick when nil
		twice []string // a second Select of the view, when set
	}{
		{name: "parquet", path: pq, open: kvio.OpenParquet, pick: []string{"val", "id"}},
		{name: "parquet all", path: pq, open: kvio.OpenParquet, want: []string{"id", "name", "big", "val"}},
		{name: "parquet of projected", path: pq, open: kvio.OpenAuto, opts: []kvio.LoadOption{kvio.WithColumns("big", "val", "id")}, pick: []string{"id", "big"}},
		{name: "parquet twice", path: pq, open: kvio.OpenParquet, pick: []string{"val", "big", "id"}, twice: []string{"id", "val"}},
		{name: "ipc", path: ipc, open: kvio.OpenIPC, pick: []string{"val", "id"}},
		{name: "ipc mmap", path: ipc, open: kvio.OpenIPC, opts: []kvio.LoadOption{kvio.WithMmap()}, pick: []string{"big", "id"}},
		{name: "ipc of projected", path: ipc, open: kvio.OpenAuto, opts: []kvio.LoadOption{kvio.WithColumns("val", "name", "id")}, pick: []string{"id", "name"}},
		{name: "ipc twice", path: ipc, open: kvio.OpenIPC, pick: []string{"name", "val", "id"}, twice: []string{"val"}},
		{name: "foreign", path: pq, open: kvio.OpenParquet, wrap: true, pick: []string{"name", "id"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := leaktest.Allocator(t)
			s := openSource(t, tc.path, tc.open, tc.opts...)
			from := s
			if tc.wrap {
				from = foreign{s}
			}
			v, err := kvio.Select(from, tc.pick...)
			require.NoError(t, err)
			want := tc.want
			if want == nil {
				want = tc.pick
			}
			if tc.twice != nil {
				v, err = kvio.Select(v, tc.twice...)
				require.NoError(t, err)
				want = tc.twice
			}
			defer func() { assert.NoError(t, v.Close()) }()
			assert.Equal(t, s.Name(), v.Name())
			assert.Equal(t, want, fieldNames(v.Schema()))
			require.Equal(t, s.NumParts(), v.NumParts())

			parts := make([]arrow.RecordBatch, v.NumParts())
			for i := range parts {
				assert.Equal(t, s.PartRows(i), v.PartRows(i), "part %d", i)
				parts[i], err = v.ReadPart(t.Context(), i, mem)
				require.NoError(t, err, "part %d", i)
				assert.True(t, parts[i].Schema().Equal(v.Schema()), "part %d schema %s", i, parts[i].Schema())
			}
			defer release(parts)
			assert.Equal(t, 1000, checkBatches(t, parts, want...))

			all, err := kvio.ReadAll(t.Context(), v, mem)
			require.NoError(t, err)
			defer release(all)
			assert.Equal(t, 1000, checkBatches(t, all, want...))
		})
	}
}

// TestSelectReadsOnlyItsColumns: a Parquet view reads no byte of the
// column chunks it leaves out, in ReadPart and ReadAll, and gets the same
// values as a read of every column.
func TestSelectReadsOnlyItsColumns(t *testing.T) {
	data, err := os.ReadFile(writeParquet(t, 1000, 250))
	require.NoError(t, err)
	pf, err := file.NewParquetReader(bytes.NewReader(data))
	require.NoError(t, err)
	meta := pf.MetaData()
	require.NoError(t, pf.Close())
	// The byte ranges of the chunks of "name" and "big" (leaves 1 and 2).
	var skipped [][2]int64
	for rg := range meta.NumRowGroups() {
		for _, c := range []int{1, 2} {
			col, err := meta.RowGroup(rg).ColumnChunk(c)
			require.NoError(t, err)
			start := col.DataPageOffset()
			if col.HasDictionaryPage() && col.DictionaryPageOffset() > 0 {
				start = min(start, col.DictionaryPageOffset())
			}
			skipped = append(skipped, [2]int64{start, start + col.TotalCompressedSize()})
		}
	}
	for _, all := range []bool{false, true} {
		t.Run(fmt.Sprintf("ReadAll=%t", all), func(t *testing.T) {
			mem := leaktest.Allocator(t)
			log := &callLog{data: data}
			f, err := kvio.NewFile("test.parquet", log, int64(len(data)))
			require.NoError(t, err)
			defer func() { assert.NoError(t, f.Close()) }()
			s, err := kvio.OpenParquet(t.Context(), f)
			require.NoError(t, err)
			defer func() { assert.NoError(t, s.Close()) }()
			v, err := kvio.Select(s, "val", "id")
			require.NoError(t, err)
			log.mu.Lock()
			log.calls = nil // the footer
			log.mu.Unlock()

			var got []arrow.RecordBatch
			if all {
				got, err = kvio.ReadAll(t.Context(), v, mem)
				require.NoError(t, err)
			} else {
				for i := range v.NumParts() {
					b, err := v.ReadPart(t.Context(), i, mem)
					require.NoError(t, err)
					got = append(got, b)
				}
			}
			defer release(got)
			assert.Equal(t, 1000, checkBatches(t, got, "val", "id"))

			log.mu.Lock()
			defer log.mu.Unlock()
			require.NotEmpty(t, log.calls)
			for _, c := range log.calls {
				for _, sk := range skipped {
					assert.False(t, c[0] < sk[1] && sk[0] < c[0]+c[1],
						"read [%d, %d) overlaps a chunk left out [%d, %d)", c[0], c[0]+c[1], sk[0], sk[1])
				}
			}
		})
	}
}

func TestSelectErrors(t *testing.T) {
	for name, path := range map[string]string{"parquet": writeParquet(t, 10, 10), "ipc": writeIPC(t, 10)} {
		t.Run(name, func(t *testing.T) {
			s := openSource(t, path, kvio.OpenAuto)
			_, err := kvio.Select(s, "id", "nope")
			assert.EqualError(t, err, fmt.Sprintf("kvio: select %s: unknown column %q (have id, name, big, val)", path, "nope"))
			_, err = kvio.Select(s, "id", "val", "id")
			assert.EqualError(t, err, fmt.Sprintf("kvio: select %s: column %q selected twice", path, "id"))
			_, err = kvio.Select(foreign{s}, "name", "nope")
			assert.EqualError(t, err, fmt.Sprintf("kvio: select %s: unknown column %q (have id, name, big, val)", path, "nope"))

			proj := openSource(t, path, kvio.OpenAuto, kvio.WithColumns("val", "id"))
			_, err = kvio.Select(proj, "id", "big")
			assert.EqualError(t, err, fmt.Sprintf("kvio: select %s: unknown column %q (have val, id)", path, "big"))
		})
	}
}

// A column name two columns of the file share is ambiguous: opening or
// selecting by it is an error naming both, not a silent pick of the first.
func TestSelectAmbiguousColumn(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{{Name: "delay", Type: arrow.PrimitiveTypes.Int16}, {Name: "id", Type: arrow.PrimitiveTypes.Int16}, {Name: "delay", Type: arrow.PrimitiveTypes.Int16}}, nil)
	batch := func(_, n int) arrow.RecordBatch {
		b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
		defer b.Release()
		for i := range 3 {
			b.Field(i).(*array.Int16Builder).AppendValues(make([]int16, n), nil)
		}
		return b.NewRecordBatch()
	}
	path := filepath.Join(t.TempDir(), "dup.arrow")
	require.NoError(t, os.WriteFile(path, ipcBytes(t, sc, batch, 4), 0o600))
	f, err := kvio.Open(path)
	require.NoError(t, err)
	defer f.Close()
	_, err = kvio.OpenAuto(t.Context(), f, kvio.WithColumns("id", "delay"))
	assert.EqualError(t, err, fmt.Sprintf("kvio: open %s: column %q is ambiguous: columns 0 and 2 have that name", path, "delay"))
	s := openSource(t, path, kvio.OpenAuto)
	_, err = kvio.Select(s, "delay")
	assert.EqualError(t, err, fmt.Sprintf("kvio: select %s: column %q is ambiguous: columns 0 and 2 have that name", path, "delay"))
}

// TestSelectClose: closing a view fails its later reads but not those of
// its Source; closing the Source fails the view's reads too.
func TestSelectClose(t *testing.T) {
	for name, path := range map[string]string{"parquet": writeParquet(t, 100, 50), "ipc": writeIPC(t, 50, 50), "ipc mmap": writeIPC(t, 50, 50)} {
		t.Run(name, func(t *testing.T) {
			mem := leaktest.Allocator(t)
			var opts []kvio.LoadOption
			if name == "ipc mmap" {
				opts = append(opts, kvio.WithMmap())
			}
			f, err := kvio.Open(path)
			require.NoError(t, err)
			defer func() { assert.NoError(t, f.Close()) }()
			s, err := kvio.OpenAuto(t.Context(), f, opts...)
			require.NoError(t, err)
			for _, src := range []kvio.Source{s, foreign{s}} {
				v, err := kvio.Select(src, "id")
				require.NoError(t, err)
				require.NoError(t, v.Close())
				require.NoError(t, v.Close(), "idempotent")
				_, err = v.ReadPart(t.Context(), 0, mem)
				require.ErrorIs(t, err, kvio.ErrClosed)
				assert.ErrorContains(t, err, path)
				_, err = kvio.ReadAll(t.Context(), v, mem)
				require.ErrorIs(t, err, kvio.ErrClosed)
			}
			b, err := s.ReadPart(t.Context(), 1, mem)
			require.NoError(t, err, "the Source reads on after its view closed")
			assert.Equal(t, int64(50), b.NumRows())
			b.Release()

			v, err := kvio.Select(s, "val")
			require.NoError(t, err)
			w, err := kvio.Select(foreign{s}, "val")
			require.NoError(t, err)
			require.NoError(t, s.Close())
			for _, view := range []kvio.Source{v, w} {
				_, err = view.ReadPart(t.Context(), 0, mem)
				require.ErrorIs(t, err, kvio.ErrClosed)
				_, err = kvio.ReadAll(t.Context(), view, mem)
				require.ErrorIs(t, err, kvio.ErrClosed)
				assert.NoError(t, view.Close())
			}
		})
	}
}
