package shard_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamdag/streamdag/beam/shard"
	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/kvio"
)

func TestMain(m *testing.M) { ptest.Main(m) }

// singleNode is the CSV `streamdag run flights --out FILE.csv` writes
// for input (""; the embedded sample), minDelay, top and airports ("":
// none), from flights.Job on a 2-stream CPU device.
func singleNode(t *testing.T, input string, minDelay int64, top int, airports string) string {
	t.Helper()
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	defer dev.Close()
	path := filepath.Join(t.TempDir(), "single.csv")
	job := flights.Job{Input: input, Options: []flights.Option{flights.WithMinDelay(minDelay)},
		Files: flights.Files{Result: flights.OutputFile{Path: path}}}
	if top > 0 {
		job.Options = append(job.Options, flights.WithTopK(top))
	}
	if airports != "" {
		job.Options = append(job.Options, flights.WithAirports(func() (io.ReadCloser, error) { return os.Open(airports) }))
	}
	defer job.Close()
	e, err := exec.New(dev)
	require.NoError(t, err)
	out, err := job.Run(t.Context(), e)
	require.NoError(t, err)
	require.True(t, out.Complete())
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	return string(b)
}

// sharded runs cfg and returns its outcome, which must be complete.
func sharded(t *testing.T, cfg shard.Config) *shard.Outcome {
	t.Helper()
	out, err := shard.Run(t.Context(), cfg)
	require.NoError(t, err)
	require.True(t, out.Complete(), "lost %v", out.Table.Lost)
	return out
}

// multiPart writes the embedded sample as Parquet with row groups of
// 25,000 rows (8 of them) and returns its path.
func multiPart(t *testing.T) string {
	t.Helper()
	f, err := flights.Sample()
	require.NoError(t, err)
	defer f.Close()
	src, err := kvio.OpenAuto(t.Context(), f)
	require.NoError(t, err)
	defer src.Close()
	recs, err := kvio.ReadAll(t.Context(), src, memory.DefaultAllocator)
	require.NoError(t, err)
	defer func() {
		for _, r := range recs {
			r.Release()
		}
	}()
	path := filepath.Join(t.TempDir(), "sample-8rg.parquet")
	writeParquet(t, path, src.Schema(), recs)
	return path
}

// TestShardedRowGroupsMatchSingleNode: the sample as a Parquet file of 8
// row groups runs in 1, 2 and 4 shards of row-group ranges, each giving
// the single-node CSV byte for byte (all groups, --top 0).
func TestShardedRowGroupsMatchSingleNode(t *testing.T) {
	path := multiPart(t)
	for _, d := range []int64{0, 15, 60} {
		want := singleNode(t, path, d, 0, "")
		for _, n := range []int{1, 2, 4} {
			t.Run(fmt.Sprintf("min-delay=%d/shards=%d", d, n), func(t *testing.T) {
				out := sharded(t, shard.Config{Input: path, Shards: n, MinDelay: d})
				require.Len(t, out.Reports, n)
				next := 0
				for i, r := range out.Reports {
					assert.Equal(t, i, r.Shard)
					assert.Equal(t, next, r.Range.PartLo, "shards cover the parts in order")
					next = r.Range.PartHi
				}
				assert.Equal(t, 8, next)
				assert.Equal(t, int64(200000), out.Rows)
				assert.Equal(t, want, string(out.CSV))
			})
		}
	}
}

// dataFile returns the path of the shared data set name: in
// $STREAMDAG_DATA (a relative path is taken from the repository root),
// else in the repository's ../shared/data. It skips the test when the
// file is absent, and fails it instead when STREAMDAG_DATA or CI is set.
func dataFile(t *testing.T, name string) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	dir := os.Getenv("STREAMDAG_DATA")
	required := dir != "" || os.Getenv("CI") != ""
	switch {
	case dir == "":
		dir = filepath.Join(root, "..", "shared", "data")
	case !filepath.IsAbs(dir):
		dir = filepath.Join(root, dir)
	}
	path := filepath.Join(dir, name)
	if _, err := os.Stat(path); err != nil {
		if required {
			t.Fatalf("shard: data set %s missing (set STREAMDAG_DATA): %v", name, err)
		}
		t.Skipf("shard: data set %s missing (set STREAMDAG_DATA): %v", name, err)
	}
	return path
}

// TestShardedMatchesSingleNode: the embedded sample (one record batch,
// so cut into row ranges) and each shared data set, for --min-delay 0,
// 15 and 60 in 1, 2 and 4 shards, give the single-node CSV byte for
// byte (top 10; the 3M-row Parquet file with the airports join), and
// run as that many shards, which cover the input's rows.
func TestShardedMatchesSingleNode(t *testing.T) {
	for _, tc := range []struct {
		file     string // "" is the embedded sample
		rows     int64
		airports bool
	}{
		{"", 200000, false},
		{"flights-3m.parquet", 0, true},
		{"flights-200k.arrow", 200000, false},
		{"flights-231k-multibatch.arrow", 0, false},
	} {
		name := tc.file
		if name == "" {
			name = "sample"
		}
		t.Run(name, func(t *testing.T) {
			path, airports := "", ""
			if tc.file != "" {
				path = dataFile(t, tc.file)
			}
			if tc.airports {
				airports = dataFile(t, "airports.csv")
			}
			for _, d := range []int64{0, 15, 60} {
				want := singleNode(t, path, d, 10, airports)
				for _, n := range []int{1, 2, 4} {
					t.Run(fmt.Sprintf("min-delay=%d/shards=%d", d, n), func(t *testing.T) {
						out := sharded(t, shard.Config{Input: path, Shards: n, MinDelay: d, TopK: 10, Airports: airports})
						require.Len(t, out.Reports, n)
						var rows int64
						for i, r := range out.Reports {
							assert.Equal(t, i, r.Shard)
							assert.Positive(t, r.Rows, "shard %d", i)
							rows += r.Rows
						}
						assert.Equal(t, out.Rows, rows)
						if tc.rows > 0 {
							assert.Equal(t, tc.rows, out.Rows)
						}
						assert.Equal(t, tc.airports, out.Names)
						assert.Equal(t, want, string(out.CSV))
					})
				}
			}
		})
	}
}

// TestShardFailureInRowRange: the embedded sample in 2 shards is two
// row ranges of its one record batch; a kernel that fails in shard 1
// loses rows [100000, 200000) of part 0, and the result says so.
func TestShardFailureInRowRange(t *testing.T) {
	out, err := shard.Run(t.Context(), shard.Config{Shards: 2, Streams: 1,
		Fail: []shard.Fault{{Shard: 1, Fault: flights.Fault{Kernel: "filter[0]"}}}})
	require.NoError(t, err)
	require.Len(t, out.Reports, 2)
	assert.Equal(t, shard.Range{PartLo: 0, PartHi: 1, RowLo: 100000, RowHi: 200000}, out.Reports[1].Range)
	require.Len(t, out.Table.Lost, 1)
	l := out.Table.Lost[0]
	var f *shard.Failure
	require.ErrorAs(t, l.Err, &f)
	assert.Equal(t, [4]int64{0, 1, 100000, 200000}, [4]int64{int64(f.PartLo), int64(f.PartHi), f.RowLo, f.RowHi})
	assert.Equal(t, 1, l.Partition)
	assert.Equal(t, "partition 1: 100000 rows lost (rows [100000, 200000) of part 0): "+f.Error(), l.String())
	head, _, _ := strings.Cut(string(out.CSV), "\n")
	assert.Equal(t, "# PARTIAL RESULT: 1 of 2 partitions lost (100000 of 200000 input rows not counted)", head)
}

// TestShardFailureGivesPartialResult: a kernel that fails in shard 1
// loses that shard's partition; the outcome is partial, marked as
// `streamdag run flights` marks it, and the lost partition's record
// names the shard, its parts and rows, the kernel, the root error and
// the chain.
func TestShardFailureGivesPartialResult(t *testing.T) {
	path := multiPart(t)
	out, err := shard.Run(t.Context(), shard.Config{Input: path, Shards: 2, Streams: 1, MinDelay: 15,
		Fail: []shard.Fault{{Shard: 1, Fault: flights.Fault{Kernel: "filter[0]"}}}})
	require.NoError(t, err)
	assert.False(t, out.Complete())
	require.Len(t, out.Table.Lost, 1)
	l := out.Table.Lost[0]
	var f *shard.Failure
	require.ErrorAs(t, l.Err, &f)
	assert.Equal(t, 1, f.Shard)
	assert.Equal(t, 0, f.Partition)
	assert.Equal(t, [2]int{4, 7}, [2]int{f.PartLo, f.PartHi}, "sources read at least 65,536 rows: parts 4-6, then 7")
	assert.Equal(t, int64(75000), f.RowHi-f.RowLo)
	assert.Equal(t, "filter[0]", f.Kernel)
	assert.Equal(t, "groups[0]", f.Buffer)
	assert.Equal(t, `exec: kernel "filter[0]": dag: injected failure`, f.Root)
	assert.Equal(t, []string{"partial[0]", "filter[0]"}, f.Chain)
	assert.Equal(t, 2, l.Partition, "numbered after shard 0's two partitions")
	assert.Equal(t, "shard 1 partition 0: groups[0] was not written: partial[0] ← filter[0]: "+f.Root, f.Error())
	head, _, _ := strings.Cut(string(out.CSV), "\n")
	assert.Equal(t, "# PARTIAL RESULT: 1 of 4 partitions lost (75000 of 200000 input rows not counted)", head)
	assert.Equal(t, head[2:], flights.PartialNote(out.Table, out.Partitions, out.Rows))

	// The rows are those of the other parts: their single-node result.
	half := filepath.Join(t.TempDir(), "kept.parquet")
	writeParts(t, path, half, 0, 1, 2, 3, 7)
	want := singleNode(t, half, 15, 0, "")
	_, body, _ := strings.Cut(string(out.CSV), "\n")
	assert.Equal(t, want, body)
}

// TestShardMergeFailureLosesItsPartitions: a kernel past a shard's
// partitions (its merge) that fails leaves the shard no result: each of
// its partitions is lost to that failure, with its chain, in a partial
// result; the shard is not run again.
func TestShardMergeFailureLosesItsPartitions(t *testing.T) {
	out, err := shard.Run(t.Context(), shard.Config{Shards: 4, Streams: 2,
		Fail: []shard.Fault{{Shard: 1, Fault: flights.Fault{Kernel: "merge"}}}})
	require.NoError(t, err)
	assert.False(t, out.Complete())
	require.Len(t, out.Table.Lost, 2)
	for i, l := range out.Table.Lost {
		var f *shard.Failure
		require.ErrorAs(t, l.Err, &f)
		assert.Equal(t, 1, f.Shard)
		assert.Equal(t, i, f.Partition)
		assert.Equal(t, 2+i, l.Partition, "numbered after shard 0's two partitions")
		assert.Equal(t, int64(25000), l.Rows)
		assert.Equal(t, "merge", f.Kernel)
		assert.Equal(t, "result", f.Buffer)
		assert.Equal(t, []string{"write", "topk", "sort", "merge"}, f.Chain)
		assert.Equal(t, `exec: kernel "merge": dag: injected failure`, f.Root)
	}
	assert.Equal(t, 1, out.Reports[1].Attempt)
	head, _, _ := strings.Cut(string(out.CSV), "\n")
	assert.Equal(t, "# PARTIAL RESULT: 2 of 8 partitions lost (50000 of 200000 input rows not counted)", head)
}

// writeParts writes row groups parts of the Parquet file in to out.
func writeParts(t *testing.T, in, out string, parts ...int) {
	t.Helper()
	f, err := kvio.Open(in)
	require.NoError(t, err)
	defer f.Close()
	src, err := kvio.OpenAuto(t.Context(), f)
	require.NoError(t, err)
	defer src.Close()
	var recs []arrow.RecordBatch
	for _, i := range parts {
		rec, err := src.ReadPart(t.Context(), i, memory.DefaultAllocator)
		require.NoError(t, err)
		defer rec.Release()
		recs = append(recs, rec)
	}
	writeParquet(t, out, src.Schema(), recs)
}

// writeParquet writes recs as Parquet to path, in row groups of 25,000
// rows, with statistics.
func writeParquet(t *testing.T, path string, sc *arrow.Schema, recs []arrow.RecordBatch) {
	t.Helper()
	tbl := array.NewTableFromRecords(sc, recs)
	defer tbl.Release()
	var buf bytes.Buffer
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, 25000, parquet.NewWriterProperties(parquet.WithStats(true)), pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
	require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o600))
}

// TestShardFailsOnceThenSucceeds: shard 1 of 4 (and of 2) whose first
// attempt fails, before its graph runs or after it has emitted its
// output (which then reaches the merge and the finish), is run again
// by the next attempt's stage, in a bundle of its own; the job succeeds with the single-node CSV,
// the rows and partitions of a run without the failure (counted once),
// and the shard's report is its second attempt's.
func TestShardFailsOnceThenSucceeds(t *testing.T) {
	path := multiPart(t)
	want := singleNode(t, path, 15, 0, "")
	for _, n := range []int{4, 2} {
		base := sharded(t, shard.Config{Input: path, Shards: n, MinDelay: 15, Streams: 1})
		for _, afterEmit := range []bool{false, true} {
			t.Run(fmt.Sprintf("shards=%d/after-emit=%t", n, afterEmit), func(t *testing.T) {
				cfg := shard.Config{Input: path, Shards: n, MinDelay: 15, Streams: 1}
				shard.WithFlaky(&cfg, 1, 1, afterEmit)
				out := sharded(t, cfg)
				require.Len(t, out.Reports, n)
				for i, r := range out.Reports {
					assert.Equal(t, i, r.Shard)
					attempt := 1
					if i == 1 {
						attempt = 2
					}
					assert.Equal(t, attempt, r.Attempt, "shard %d", i)
					assert.Len(t, r.Failed, attempt-1, "shard %d", i)
				}
				assert.Equal(t, int64(200000), out.Rows)
				assert.Equal(t, base.Partitions, out.Partitions)
				assert.Equal(t, want, string(out.CSV))
			})
		}
	}
}

// TestShardAttemptsExhausted: a shard whose every attempt fails (3 by
// default) fails the job with an error naming the shard, the attempts
// and the last error, and every device its attempts acquired is closed:
// no goroutine of streamdag code (a CPU device's stream) outlives the
// job.
func TestShardAttemptsExhausted(t *testing.T) {
	if raceEnabled {
		// When a job fails, the Go SDK's harness (harness.MainWithOptions)
		// closes its response channel while a bundle's goroutine, having
		// checked the shutdown flag, may still send on it.
		t.Skip("the Beam SDK harness races on a failed job's shutdown under the race detector")
	}
	for _, tc := range []struct {
		attempts, failed int
		afterEmit        bool
	}{
		{0, 3, false},
		{2, 2, true},
	} {
		t.Run(fmt.Sprintf("attempts=%d/after-emit=%t", tc.attempts, tc.afterEmit), func(t *testing.T) {
			before := goleak.IgnoreCurrent()
			cfg := shard.Config{Shards: 2, Attempts: tc.attempts}
			shard.WithFlaky(&cfg, 1, tc.failed, tc.afterEmit)
			_, err := shard.Run(t.Context(), cfg)
			assert.EqualError(t, err, fmt.Sprintf("shard: shard 1: %d attempts failed; the last: injected transient failure", tc.failed))
			_, ok := errors.AsType[*shard.JobError](err)
			assert.True(t, ok)
			assert.Empty(t, streamdagGoroutines(before), "goroutines of streamdag code left by the job")
		})
	}
}

// streamdagGoroutines returns the stacks of the goroutines started
// since before (goleak.IgnoreCurrent) that run streamdag code, waiting
// as goleak.Find waits for them to end. Beam's own goroutines are not
// counted: its harness leaves some of a failed job's behind.
func streamdagGoroutines(before goleak.Option) []string {
	err := goleak.Find(before)
	if err == nil {
		return nil
	}
	var ours []string
	for _, g := range strings.Split(err.Error(), "\n\n") {
		if strings.Contains(g, "github.com/streamdag/streamdag/") {
			ours = append(ours, g)
		}
	}
	return ours
}

// TestUnknownFaultKernel: a fault naming no kernel of its shard's graph
// is an error before the job starts, a *flights.FaultError with its
// position among the faults.
func TestUnknownFaultKernel(t *testing.T) {
	cfg := shard.Config{Shards: 2, Streams: 1, Fail: []shard.Fault{{Shard: 0, Fault: flights.Fault{Kernel: "filter[0]"}}, {Shard: 1, Fault: flights.Fault{Kernel: "nosuch"}}}}
	_, err := shard.Run(t.Context(), cfg)
	fe, ok := errors.AsType[*flights.FaultError](err)
	require.True(t, ok, "%v", err)
	assert.Equal(t, 1, fe.Index)
	assert.EqualError(t, err, `shard: shard 1: flights: fault nosuch: dag: no kernel "nosuch" to fail (kernels: source[0], filter[0], partial[0], merge, sort, topk, write)`)
}

// TestBadAttempts: a negative attempt count is an error.
func TestBadAttempts(t *testing.T) {
	_, err := shard.Run(t.Context(), shard.Config{Shards: 2, Attempts: -1})
	assert.EqualError(t, err, "shard: -1 attempts: want 1 or more, or 0 (3)")
}

// TestBadStreams: a stream count a CPU device cannot open is an error
// before the job starts, not each shard's failed attempts.
func TestBadStreams(t *testing.T) {
	for _, n := range []int{-1, cpu.MaxStreams + 1} {
		_, err := shard.Run(t.Context(), shard.Config{Shards: 2, Streams: n})
		assert.EqualError(t, err, fmt.Sprintf("shard: %d streams: want 1 to 1024, or 0", n))
	}
}

// TestPartialCoder: a Partial crosses stages as an Arrow IPC stream and
// reads back as it was; bytes that are not one are an error.
func TestPartialCoder(t *testing.T) {
	p := shard.Partial{Shard: []int32{0, 3}, Key: []string{"SFO", "17"}, Count: []int64{5, 1}, Sum: []int64{70, -2}, Max: []int64{30, -2}}
	b, err := shard.EncodePartial(p)
	require.NoError(t, err)
	assert.Equal(t, []byte{0xff, 0xff, 0xff, 0xff}, b[:4], "an Arrow IPC stream message")
	got, err := shard.DecodePartial(b)
	require.NoError(t, err)
	assert.Equal(t, p, got)

	_, err = shard.EncodePartial(shard.Partial{Key: []string{"x"}})
	assert.EqualError(t, err, "shard: encode partial: columns of 0, 1, 0, 0 and 0 rows")
	_, err = shard.DecodePartial([]byte("not arrow"))
	assert.ErrorContains(t, err, "shard: decode partial: ")
}

// TestBackendHandle: the process's backend is shared by its holders and
// closed by the last release; a later open makes a new one.
func TestBackendHandle(t *testing.T) {
	before := shard.BackendHolders()
	a, err := shard.OpenBackend()
	require.NoError(t, err)
	b, err := shard.OpenBackend()
	require.NoError(t, err)
	assert.Same(t, a, b)
	assert.Equal(t, before+2, shard.BackendHolders())
	require.NoError(t, shard.ReleaseBackend(t.Context()))
	require.NoError(t, shard.ReleaseBackend(t.Context()))
	assert.Equal(t, before, shard.BackendHolders())
	if before == 0 {
		c, err := shard.OpenBackend()
		require.NoError(t, err)
		assert.NotSame(t, a, c)
		require.NoError(t, shard.ReleaseBackend(t.Context()))
	}
}

// TestSplit: parts are cut into ranges as even as they go; an input
// with fewer parts than shards is cut into row ranges, each naming the
// parts it touches.
func TestSplit(t *testing.T) {
	eight := []int64{10, 10, 10, 10, 10, 10, 10, 10}
	assert.Equal(t, []shard.Range{{0, 2, 0, 20}, {2, 5, 0, 30}, {5, 8, 0, 30}}, shard.Split(eight, 3))
	assert.Equal(t, []shard.Range{{0, 1, 0, 3}, {0, 1, 3, 6}, {0, 1, 6, 10}}, shard.Split([]int64{10}, 3))
	assert.Equal(t, []shard.Range{{0, 1, 0, 10}, {1, 2, 0, 10}, {1, 2, 10, 20}, {2, 3, 0, 10}},
		shard.Split([]int64{10, 20, 10}, 4))
	assert.Equal(t, []shard.Range{{0, 1, 0, 10}, {0, 1, 10, 20}, {0, 2, 20, 30}}, shard.Split([]int64{25, 5}, 3),
		"the last range runs over the end of part 0 into part 1")
	assert.Equal(t, []shard.Range{{0, 1, 0, 1}, {0, 1, 1, 2}}, shard.Split([]int64{2}, 4))
	assert.Equal(t, []shard.Range{{0, 0, 0, 0}}, shard.Split(nil, 4))
	assert.Equal(t, []shard.Range{{0, 2, 0, 0}}, shard.Split([]int64{0, 0}, 4))
}

// TestInputErrorsBeforeTheJob: an input the flights job cannot run on
// (a delay column that is not an integer; --airports with an input
// grouped by hour) is the single-node command's error, before the job
// starts, not a shard's failed attempts.
func TestInputErrorsBeforeTheJob(t *testing.T) {
	dir := t.TempDir()
	airports := filepath.Join(dir, "airports.csv")
	require.NoError(t, os.WriteFile(airports, []byte("iata,name,city\nSFO,San Francisco,San Francisco\n"), 0o600))
	sc := arrow.NewSchema([]arrow.Field{{Name: "delay", Type: arrow.BinaryTypes.String}, {Name: "time", Type: arrow.PrimitiveTypes.Float32}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, sc)
	defer b.Release()
	for i := range 5 {
		b.Field(0).(*array.StringBuilder).Append(fmt.Sprint(i))
		b.Field(1).(*array.Float32Builder).Append(float32(i))
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	text := filepath.Join(dir, "text-delay.parquet")
	writeParquet(t, text, sc, []arrow.RecordBatch{rec})

	for _, tc := range []struct {
		name string
		cfg  shard.Config
	}{
		{"text delay", shard.Config{Input: text, Shards: 4}},
		{"airports by hour", shard.Config{Shards: 2, Airports: airports}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := kvio.Open(tc.cfg.Input)
			if tc.cfg.Input == "" {
				f, err = flights.Sample()
			}
			require.NoError(t, err)
			defer f.Close()
			src, err := kvio.OpenAuto(t.Context(), f)
			require.NoError(t, err)
			defer src.Close()
			var opts []flights.Option
			if tc.cfg.Airports != "" {
				opts = append(opts, flights.WithAirports(func() (io.ReadCloser, error) { return os.Open(airports) }))
			}
			_, want := flights.Build(src, opts...)
			require.Error(t, want)

			_, err = shard.Run(t.Context(), tc.cfg)
			require.Error(t, err)
			_, isJob := errors.AsType[*shard.JobError](err)
			assert.False(t, isJob, "a job error: %v", err)
			assert.EqualError(t, err, "shard: "+want.Error())
		})
	}
}

// TestRunStopped: a run whose context is cancelled while its shards run
// (SIGINT) stops with the context's error, not the runner's.
func TestRunStopped(t *testing.T) {
	if raceEnabled {
		// The job is cancelled while its bundles run: the SDK harness's
		// shutdown race of TestShardAttemptsExhausted.
		t.Skip("the Beam SDK harness races on a cancelled job's shutdown under the race detector")
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer shard.OnAttempt(cancel)()
	_, err := shard.Run(ctx, shard.Config{Shards: 2})
	require.ErrorIs(t, err, context.Canceled)
	assert.EqualError(t, err, "shard: run stopped: context canceled")
}

// TestRunLeavesNoTempFiles: a run leaves nothing in the temporary
// directory, not even the file the Beam SDK's loopback mode creates
// there and never removes.
func TestRunLeavesNoTempFiles(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	sharded(t, shard.Config{Shards: 2, TopK: 1})
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	var names []string
	for _, e := range left {
		names = append(names, e.Name())
	}
	assert.Empty(t, names)
}
