package bench_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/kvio"
)

const warmBytes = 1 << 30

// warmFile writes a 1 GiB file of non-zero bytes in b's temporary
// directory and reads it once so it is in the page cache. It skips when the
// file system has less than 2 GiB free.
func warmFile(b *testing.B) string {
	dir := b.TempDir()
	path := filepath.Join(dir, "warm-1g.bin")
	var fs syscall.Statfs_t
	require.NoError(b, syscall.Statfs(dir, &fs))
	if free := int64(fs.Bavail) * fs.Bsize; free < 2*warmBytes {
		b.Skipf("%d bytes free in %s, want 2 GiB", free, dir)
	}
	f, err := os.Create(path)
	require.NoError(b, err)
	chunk := make([]byte, 4<<20)
	for i := range chunk {
		chunk[i] = byte(i*31 + 7)
	}
	for off := 0; off < warmBytes; off += len(chunk) {
		_, err := f.Write(chunk)
		require.NoError(b, err)
	}
	require.NoError(b, f.Close())
	// Warm the cache.
	f, err = os.Open(path)
	require.NoError(b, err)
	for off := int64(0); off < warmBytes; off += int64(len(chunk)) {
		_, err := f.ReadAt(chunk, off)
		require.NoError(b, err)
	}
	require.NoError(b, f.Close())
	return path
}

// BenchmarkWarmRead reads a warm 1 GiB file into one page-aligned buffer:
// "kvio-defaults" (KvikIO's settings: 1 thread, 4 MiB tasks, and the
// waiting goroutine helping), "kvio-threads=N", and the baseline
// "one-goroutine", a loop of os.File.ReadAt in 4 MiB chunks into the same
// kind of buffer. Targets: defaults ≥ 0.95× the baseline; more threads
// never below one.
func BenchmarkWarmRead(b *testing.B) {
	path := warmFile(b)
	buf := kvio.AlignedBytes(warmBytes)
	for i := 0; i < len(buf); i += 4096 { // fault the pages in before any timer
		buf[i] = 1
	}

	b.Run("one-goroutine", func(b *testing.B) {
		f, err := os.Open(path)
		require.NoError(b, err)
		defer f.Close()
		b.SetBytes(warmBytes)
		for b.Loop() {
			for off := 0; off < warmBytes; off += 4 << 20 {
				if _, err := f.ReadAt(buf[off:off+4<<20], int64(off)); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	run := func(name string, opts ...kvio.Option) {
		b.Run(name, func(b *testing.B) {
			f, err := kvio.Open(path, opts...)
			require.NoError(b, err)
			defer f.Close()
			b.SetBytes(warmBytes)
			for b.Loop() {
				if _, err := f.ReadAt(buf, 0); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	run("kvio-defaults")
	for _, n := range []int{1, 2, 4, 8} {
		run("kvio-threads="+strconv.Itoa(n), kvio.WithThreads(n))
	}
}

// BenchmarkDecodeParquet decodes flights-3m.parquet, all five columns:
// "parallel-row-groups" is kvio (one ReadPart per row group, as the flights
// source kernels do, on GOMAXPROCS goroutines); "pqarrow-sequential", the
// baseline, is pqarrow's plain ReadTable on an os.File. Target ≥ 1.6× on 2
// cores.
func BenchmarkDecodeParquet(b *testing.B) {
	path := testdata.File(b, "flights-3m.parquet")
	const rows = 3_000_000
	mem := memory.DefaultAllocator
	b.Run("parallel-row-groups", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f, err := kvio.Open(path)
			require.NoError(b, err)
			s, err := kvio.OpenParquet(b.Context(), f)
			require.NoError(b, err)
			recs, err := kvio.ReadAll(b.Context(), s, mem)
			require.NoError(b, err)
			n := int64(0)
			for _, r := range recs {
				n += r.NumRows()
				r.Release()
			}
			require.Equal(b, int64(rows), n)
			s.Close()
			f.Close()
		}
		b.ReportMetric(rows*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("pqarrow-sequential", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			f, err := os.Open(path)
			require.NoError(b, err)
			tbl, err := pqarrow.ReadTable(b.Context(), f, parquet.NewReaderProperties(mem), pqarrow.ArrowReadProperties{}, mem)
			require.NoError(b, err)
			require.Equal(b, int64(rows), tbl.NumRows())
			tbl.Release()
			f.Close()
		}
		b.ReportMetric(rows*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
}

// flightsIPC converts flights-3m.parquet into an Arrow IPC file in b's
// temporary directory, one record batch per row group, and returns its path.
func flightsIPC(b *testing.B, src string) string {
	ctx := context.Background()
	f, err := kvio.Open(src)
	require.NoError(b, err)
	defer f.Close()
	s, err := kvio.OpenParquet(ctx, f)
	require.NoError(b, err)
	defer s.Close()
	path := filepath.Join(b.TempDir(), "flights-3m.arrow")
	out, err := os.Create(path)
	require.NoError(b, err)
	w, err := ipc.NewFileWriter(out, ipc.WithSchema(s.Schema()))
	require.NoError(b, err)
	for i := range s.NumParts() {
		rec, err := s.ReadPart(ctx, i, memory.DefaultAllocator)
		require.NoError(b, err)
		err = w.Write(rec)
		rec.Release()
		require.NoError(b, err)
	}
	require.NoError(b, w.Close())
	require.NoError(b, out.Close())
	return path
}

// BenchmarkFlightsFrom runs the flights pipeline end to end (open, decode,
// filter, group, merge, sort, top-k) from the Parquet file, from an Arrow
// IPC copy of its 3M rows (read, and mapped with WithMmap), beside the
// plain sequential loop over already-decoded columns of BenchmarkFlights;
// all in rows/s.
func BenchmarkFlightsFrom(b *testing.B) {
	pq := testdata.File(b, "flights-3m.parquet")
	arrowPath := flightsIPC(b, pq)
	const rows = 3_000_000
	run := func(name, path string, opts ...kvio.LoadOption) {
		b.Run(name, func(b *testing.B) { benchFlightsRun(b, path, opts...) })
	}
	run("parquet", pq)
	run("ipc", arrowPath)
	run("ipc-mmap", arrowPath, kvio.WithMmap())
	b.Run("sequential-loop", func(b *testing.B) { benchSequentialLoop(b, arrowPath) })
}
