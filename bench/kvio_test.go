package bench_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

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
// the baseline "one-goroutine", a loop of os.File.ReadAt in 4 MiB chunks;
// "kvio-defaults", a kvio File with KvikIO's settings (1 thread, 4 MiB
// tasks, and the goroutine waiting for the read helping); and
// "kvio-threads=N". The variants are compared in pairs run back to back in
// the order A B B A (B A A B in odd rounds), so that a change in the
// machine's load during a pair weighs on both sides alike, and each result
// is the median over the rounds of the pair's ratio:
//
//   - defaults/baseline: one-goroutine's time over kvio-defaults' (target
//     ≥ 0.95);
//   - threads=N/threads=1: kvio-threads=1's time over kvio-threads=N's
//     (target ≥ 1 within noise: more threads must not be slower);
//   - <variant>-GB/s: each variant's median throughput;
//   - others-%: the median share of all CPUs that other processes used
//     during a round (Linux only): ratios from a busy machine are noise.
//
// Each iteration is warmRounds rounds; run with -benchtime=5x or more.
func BenchmarkWarmRead(b *testing.B) {
	path := warmFile(b)
	buf := kvio.AlignedBytes(warmBytes)
	for i := 0; i < len(buf); i += 4096 { // fault the pages in before any timer
		buf[i] = 1
	}
	osf, err := os.Open(path)
	require.NoError(b, err)
	defer osf.Close()
	type variant struct {
		name string
		read func() error
		secs []float64
	}
	variants := []*variant{{name: "one-goroutine", read: func() error {
		for off := 0; off < warmBytes; off += 4 << 20 {
			if _, err := osf.ReadAt(buf[off:off+4<<20], int64(off)); err != nil {
				return err
			}
		}
		return nil
	}}}
	add := func(name string, opts ...kvio.Option) *variant {
		f, err := kvio.Open(path, opts...)
		require.NoError(b, err)
		b.Cleanup(func() { f.Close() })
		v := &variant{name: name, read: func() error {
			_, err := f.ReadAt(buf, 0)
			return err
		}}
		variants = append(variants, v)
		return v
	}
	defaults := add("kvio-defaults")
	one := add("kvio-threads=1", kvio.WithThreads(1))
	type pair struct {
		metric string
		a, b   *variant  // ratio: a's time over b's
		ratios []float64 // one per round
	}
	pairs := []*pair{{metric: "defaults/baseline", a: variants[0], b: defaults}}
	for _, n := range []int{2, 4, 8} {
		pairs = append(pairs, &pair{metric: fmt.Sprintf("threads=%d/threads=1", n), a: one, b: add(fmt.Sprintf("kvio-threads=%d", n), kvio.WithThreads(n))})
	}
	timed := func(v *variant) float64 {
		start := time.Now()
		if err := v.read(); err != nil {
			b.Fatal(err)
		}
		secs := time.Since(start).Seconds()
		v.secs = append(v.secs, secs)
		return secs
	}

	const warmRounds = 2
	var others []float64
	round := 0
	for b.Loop() {
		for range warmRounds {
			others = append(others, otherLoad(func() {
				for _, p := range pairs {
					x, y := p.a, p.b
					if round%2 == 1 {
						x, y = y, x
					}
					tx := timed(x)
					ty := timed(y) + timed(y)
					tx += timed(x)
					if round%2 == 1 {
						tx, ty = ty, tx
					}
					p.ratios = append(p.ratios, tx/ty)
				}
			}))
			round++
		}
	}
	for _, p := range pairs {
		b.ReportMetric(median(p.ratios), p.metric)
	}
	for _, v := range variants {
		b.ReportMetric(warmBytes/median(v.secs)/1e9, v.name+"-GB/s")
	}
	b.ReportMetric(100*median(others), "others-%")
}

// median returns the median of xs, leaving xs as it is; NaN for none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	xs = slices.Clone(xs)
	slices.Sort(xs)
	if len(xs)%2 == 1 {
		return xs[len(xs)/2]
	}
	return (xs[len(xs)/2-1] + xs[len(xs)/2]) / 2
}

// BenchmarkDecodeParquet decodes flights-3m.parquet, all five columns, to
// Arrow: "kvio-ReadAll" is kvio.ReadAll on a kvio Parquet Source (its
// column chunks decoded on GOMAXPROCS goroutines, one batch per row
// group); "pqarrow-sequential", the baseline, is pqarrow's plain ReadTable
// on an os.File, with its default properties. Both allocate from
// memory.DefaultAllocator.
//
// "interleaved" runs both per iteration (after one untimed pass of each),
// in the order A B B A (B A A B in odd iterations), each pass after a
// garbage collection outside the timing so that neither inherits the
// other's garbage, and reports medians over the iterations: speedup (the
// baseline's time over kvio's within one iteration; target ≥ 1.6 on 2
// cores), cpu-ratio (kvio's process CPU time over the baseline's: the cost
// of going parallel), each side's ms and GC cycles per pass, and others-%
// (the share of all CPUs that other processes used during an iteration,
// Linux only: a speedup measured while other processes take a core is no
// measure of kvio). Run with -benchtime=5x or more.
func BenchmarkDecodeParquet(b *testing.B) {
	path := testdata.File(b, "flights-3m.parquet")
	const rows = 3_000_000
	mem := memory.DefaultAllocator
	readAll := func(b *testing.B) {
		f, err := kvio.Open(path)
		require.NoError(b, err)
		defer f.Close()
		s, err := kvio.OpenParquet(b.Context(), f)
		require.NoError(b, err)
		defer s.Close()
		recs, err := kvio.ReadAll(b.Context(), s, mem)
		require.NoError(b, err)
		n := int64(0)
		for _, r := range recs {
			n += r.NumRows()
			r.Release()
		}
		require.Equal(b, int64(rows), n)
	}
	sequential := func(b *testing.B) {
		f, err := os.Open(path)
		require.NoError(b, err)
		defer f.Close()
		tbl, err := pqarrow.ReadTable(b.Context(), f, parquet.NewReaderProperties(mem), pqarrow.ArrowReadProperties{}, mem)
		require.NoError(b, err)
		require.Equal(b, int64(rows), tbl.NumRows())
		tbl.Release()
	}
	// Each sub-benchmark runs one untimed pass first, so that its first
	// timed pass does not pay for growing the process's heap (page faults
	// on fresh memory), whichever runs first.
	b.Run("kvio-ReadAll", func(b *testing.B) {
		readAll(b)
		b.ReportAllocs()
		for b.Loop() {
			readAll(b)
		}
		b.ReportMetric(rows*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("pqarrow-sequential", func(b *testing.B) {
		sequential(b)
		b.ReportAllocs()
		for b.Loop() {
			sequential(b)
		}
		b.ReportMetric(rows*float64(b.N)/b.Elapsed().Seconds(), "rows/s")
	})
	b.Run("interleaved", func(b *testing.B) {
		type pass struct{ wall, cpu, gcs float64 }
		measure := func(run func(*testing.B)) pass {
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			cpu0, start := processCPU(), time.Now()
			run(b)
			wall, cpu := time.Since(start).Seconds(), (processCPU() - cpu0).Seconds()
			runtime.ReadMemStats(&after)
			return pass{wall, cpu, float64(after.NumGC - before.NumGC)}
		}
		var speedup, cpuRatio, kvMs, seqMs, kvGCs, seqGCs, others []float64
		readAll(b)
		sequential(b)
		i := 0
		for b.Loop() {
			var kv, seq [2]pass
			others = append(others, otherLoad(func() {
				if i%2 == 0 {
					seq[0], kv[0], kv[1], seq[1] = measure(sequential), measure(readAll), measure(readAll), measure(sequential)
				} else {
					kv[0], seq[0], seq[1], kv[1] = measure(readAll), measure(sequential), measure(sequential), measure(readAll)
				}
			}))
			speedup = append(speedup, (seq[0].wall+seq[1].wall)/(kv[0].wall+kv[1].wall))
			cpuRatio = append(cpuRatio, (kv[0].cpu+kv[1].cpu)/(seq[0].cpu+seq[1].cpu))
			for k := range 2 {
				kvMs, seqMs = append(kvMs, kv[k].wall*1e3), append(seqMs, seq[k].wall*1e3)
				kvGCs, seqGCs = append(kvGCs, kv[k].gcs), append(seqGCs, seq[k].gcs)
			}
			i++
		}
		b.ReportMetric(median(speedup), "speedup")
		b.ReportMetric(median(cpuRatio), "cpu-ratio")
		b.ReportMetric(median(kvMs), "kvio-ms")
		b.ReportMetric(median(seqMs), "pqarrow-ms")
		b.ReportMetric(median(kvGCs), "kvio-GCs")
		b.ReportMetric(median(seqGCs), "pqarrow-GCs")
		b.ReportMetric(100*median(others), "others-%")
	})
}

// processCPU returns the CPU time, user and system, that the process has
// used so far, every thread included.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// otherLoad runs fn and returns the share, in [0, 1], of all the machine's
// CPUs that other processes used meanwhile: the busy time of every CPU
// from /proc/stat, less this process's CPU time, over fn's wall time
// times the CPU count. It returns NaN where /proc/stat cannot be read.
// /proc/stat counts in clock ticks (10 ms), so short runs read coarsely.
func otherLoad(fn func()) float64 {
	busy0, ok0 := machineBusy()
	cpu0, start := processCPU(), time.Now()
	fn()
	busy1, ok1 := machineBusy()
	wall, own := time.Since(start), processCPU()-cpu0
	if !ok0 || !ok1 || wall <= 0 {
		return math.NaN()
	}
	return min(1, max(0, float64(busy1-busy0-own)/float64(wall)/float64(runtime.NumCPU())))
}

// machineBusy returns the time all CPUs have spent busy since boot, from
// the first line of /proc/stat (user, nice, system, irq, softirq and
// steal: not idle and iowait, nor guest time, which user and nice already
// count), taking clock ticks as 10 ms (USER_HZ 100, as on every common
// Linux build).
func machineBusy() (time.Duration, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, false
	}
	line, _, _ := strings.Cut(string(b), "\n")
	fields := strings.Fields(line)
	if len(fields) < 5 || fields[0] != "cpu" {
		return 0, false
	}
	var busy int64
	for k, f := range fields[1:] {
		n, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return 0, false
		}
		if k <= 2 || k >= 5 && k <= 7 {
			busy += n
		}
	}
	return time.Duration(busy) * 10 * time.Millisecond, true
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

// BenchmarkProjection reads a flights file with kvio.ReadAll twice per
// iteration each way, in the order A B B A (B A A B in odd iterations):
// "all" every column, "projected" only the flights pipeline's (delay and
// origin, or delay and time for the Arrow IPC file) through kvio.Select. It reports each side's median ms per read
// and speedup, the median over iterations of all's time over projected's.
// Each read opens the file and the Source afresh, as a run of the
// pipeline does. Run with -benchtime=5x or more.
func BenchmarkProjection(b *testing.B) {
	for _, in := range []struct{ name, key string }{{"flights-3m.parquet", "origin"}, {"flights-200k.arrow", "time"}} {
		name, path := in.name, testdata.File(b, in.name)
		read := func(cols ...string) func() time.Duration {
			return func() time.Duration {
				runtime.GC()
				start := time.Now()
				f, err := kvio.Open(path)
				require.NoError(b, err)
				defer f.Close()
				s, err := kvio.OpenAuto(b.Context(), f)
				require.NoError(b, err)
				defer s.Close()
				v := s
				if cols != nil {
					v, err = kvio.Select(s, cols...)
					require.NoError(b, err)
				}
				recs, err := kvio.ReadAll(b.Context(), v, memory.DefaultAllocator)
				require.NoError(b, err)
				d := time.Since(start)
				for _, r := range recs {
					require.Equal(b, int64(len(v.Schema().Fields())), r.NumCols())
					r.Release()
				}
				return d
			}
		}
		all, proj := read(), read("delay", in.key)
		b.Run(name, func(b *testing.B) {
			all()
			proj()
			var allMs, projMs, speedup []float64
			i := 0
			for b.Loop() {
				var a, p [2]time.Duration
				if i%2 == 0 {
					a[0], p[0], p[1], a[1] = all(), proj(), proj(), all()
				} else {
					p[0], a[0], a[1], p[1] = proj(), all(), all(), proj()
				}
				speedup = append(speedup, float64(a[0]+a[1])/float64(p[0]+p[1]))
				for k := range 2 {
					allMs, projMs = append(allMs, a[k].Seconds()*1e3), append(projMs, p[k].Seconds()*1e3)
				}
				i++
			}
			b.ReportMetric(median(allMs), "all-ms")
			b.ReportMetric(median(projMs), "projected-ms")
			b.ReportMetric(median(speedup), "speedup")
		})
	}
}
