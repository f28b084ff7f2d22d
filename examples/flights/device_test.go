package flights_test

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/internal/faultdev"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/kvio"
)

// nullableParquet returns seeded random flights as Parquet bytes: rows
// rows in row groups of groupRows, delay int64 in [-20, 60] and origin
// one of codes distinct codes, each null one time in 20, dictionary-
// encoded or plain.
func nullableParquet(t *testing.T, rows, groupRows, codes int, dict bool, seed uint64) []byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	sc := arrow.NewSchema([]arrow.Field{
		{Name: "delay", Type: arrow.PrimitiveTypes.Int64, Nullable: true},
		{Name: "origin", Type: arrow.BinaryTypes.String, Nullable: true},
	}, nil)
	b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
	defer b.Release()
	for range rows {
		if rng.IntN(20) == 0 {
			b.Field(0).AppendNull()
		} else {
			b.Field(0).(*array.Int64Builder).Append(rng.Int64N(81) - 20)
		}
		if rng.IntN(20) == 0 {
			b.Field(1).AppendNull()
		} else {
			b.Field(1).(*array.StringBuilder).Append(fmt.Sprintf("K%04d", rng.IntN(codes)))
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer tbl.Release()
	props := parquet.NewWriterProperties(parquet.WithDictionaryDefault(dict), parquet.WithStats(true))
	var buf bytes.Buffer
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, int64(groupRows), props, pqarrow.NewArrowWriterProperties(pqarrow.WithStoreSchema())))
	return buf.Bytes()
}

// csvOf is the result's CSV as `streamdag run flights --out` writes it.
func csvOf(t *testing.T, out *flights.Output) string {
	t.Helper()
	require.NoError(t, out.Report.Err())
	require.NotNil(t, out.Table)
	require.Empty(t, out.Table.Lost)
	var b bytes.Buffer
	require.NoError(t, flights.WriteCSV(&b, out.Table.Rows, false))
	return b.String()
}

// TestDeviceGraphMatchesCPUGraph: the device graph (WithOpenCL) run
// with its kernels' Go variants gives the CPU graph's rows and CSV, byte
// for byte: on the embedded sample, the real files, and random Parquet
// files with null delays and origins, dictionary-encoded or plain, in
// row groups small enough that one partition spans several (each with
// its own dictionary).
func TestDeviceGraphMatchesCPUGraph(t *testing.T) {
	type input struct {
		name string
		open func(t *testing.T) kvio.Source
	}
	file := func(name string) input { return input{name, openFile(name)} }
	generated := func(name string, dict bool, seed uint64) input {
		return input{name, func(t *testing.T) kvio.Source {
			data := nullableParquet(t, 30000, 2500, 200, dict, seed)
			return openParquet(t, name, bytes.NewReader(data), int64(len(data)))
		}}
	}
	inputs := []input{
		{"sample", func(t *testing.T) kvio.Source {
			f, err := flights.Sample()
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, f.Close()) })
			src, err := kvio.OpenIPC(t.Context(), f)
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, src.Close()) })
			return src
		}},
		file("flights-3m.parquet"),
		file("flights-231k-multibatch.arrow"),
		generated("nulls-dictionary.parquet", true, 141),
		generated("nulls-plain.parquet", false, 142),
	}
	for _, in := range inputs {
		for _, minDelay := range []int64{0, 30, 1000} {
			for _, streams := range []int{1, 3} {
				t.Run(fmt.Sprintf("%s/min=%d/streams=%d", in.name, minDelay, streams), func(t *testing.T) {
					src := in.open(t)
					want := runOnCPU(t, src, streams, flights.WithMinDelay(minDelay))
					got := runOnCPU(t, src, streams, flights.WithMinDelay(minDelay), flights.WithOpenCL())
					assert.Equal(t, want.Pipeline.Partitions, got.Pipeline.Partitions)
					require.NotNil(t, got.Table)
					assert.Equal(t, want.Table.Rows, got.Table.Rows)
					assert.Equal(t, csvOf(t, want), csvOf(t, got))
					if minDelay < 1000 {
						assert.NotEmpty(t, got.Table.Rows)
					}
				})
			}
		}
	}
}

// TestDeviceGraphTooManyKeys: a partition with more distinct keys than
// DeviceGroups fails its columns kernel with an error naming the
// partition and the limit, and the result says which rows were lost.
func TestDeviceGraphTooManyKeys(t *testing.T) {
	data := nullableParquet(t, 20000, 20000, 5000, true, 143)
	src := openParquet(t, "many.parquet", bytes.NewReader(data), int64(len(data)))
	out := runOnCPU(t, src, 1, flights.WithOpenCL())
	err := out.Report.Err()
	require.Error(t, err)
	assert.Contains(t, err.Error(), fmt.Sprintf("flights: columns[0]: partition rows [0, 20000) have more than %d distinct keys", flights.DeviceGroups))
	require.NotNil(t, out.Table)
	require.Len(t, out.Table.Lost, 1)
	assert.Equal(t, int64(20000), out.Table.Lost[0].Rows)
}

// TestDeviceGraphOnOpenCL: the device graph with filter and partial on
// the OpenCL device (their OpenCL C, the rest on the CPU device) gives
// the CPU graph's rows, byte for byte in CSV, on the real files and on
// random Parquet with nulls; every filter and partial ran on opencl0.
func TestDeviceGraphOnOpenCL(t *testing.T) {
	ds, err := opencl.Devices()
	if err != nil || len(ds) == 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("no OpenCL device: %v", err)
		}
		t.Skipf("no OpenCL device (apt-get install pocl-opencl-icd ocl-icd-libopencl1): %v", err)
	}
	inputs := []struct {
		name string
		open func(t *testing.T) kvio.Source
	}{
		{"nulls-dictionary.parquet", func(t *testing.T) kvio.Source {
			data := nullableParquet(t, 30000, 2500, 200, true, 144)
			return openParquet(t, "nulls-dictionary.parquet", bytes.NewReader(data), int64(len(data)))
		}},
		{"flights-3m.parquet", openFile("flights-3m.parquet")},
		{"flights-200k.arrow", openFile("flights-200k.arrow")},
		{"flights-231k-multibatch.arrow", openFile("flights-231k-multibatch.arrow")},
	}
	for _, in := range inputs {
		for _, minDelay := range []int64{0, 45} {
			t.Run(fmt.Sprintf("%s/min=%d", in.name, minDelay), func(t *testing.T) {
				src := in.open(t)
				want := runOnCPU(t, src, 2, flights.WithMinDelay(minDelay))
				host, err := cpu.New(cpu.WithStreams(2))
				require.NoError(t, err)
				defer func() { assert.NoError(t, host.Close()) }()
				cl, err := opencl.NewDevice(ds[0], opencl.WithStreams(2))
				require.NoError(t, err)
				defer func() { assert.NoError(t, cl.Close()) }()
				e, err := exec.NewMulti([]gpu.Device{host, cl}, nil, exec.WithAllocator(leaktest.Allocator(t)))
				require.NoError(t, err)
				id := cl.ID()
				got, err := flights.Run(t.Context(), e, src, flights.WithMinDelay(minDelay), flights.WithOpenCL(), flights.WithDevice(id), flights.WithPartitions(4))
				require.NoError(t, err)
				assert.Equal(t, csvOf(t, want), csvOf(t, got))
				assert.Equal(t, want.Table.Rows, got.Table.Rows)
				ran := map[string]int{}
				for _, l := range got.Report.Launches() {
					name, _, _ := strings.Cut(l.Kernel, "[")
					if name == "filter" || name == "partial" {
						assert.Equal(t, id, l.Device, l.Kernel)
						ran[name]++
					}
				}
				assert.Equal(t, map[string]int{"filter": len(got.Pipeline.Partitions), "partial": len(got.Pipeline.Partitions)}, ran)
				assert.NotEmpty(t, got.Report.Copies)
			})
		}
	}
}

// TestDeviceGraphOnOpenCLLost: the device graph on the OpenCL device,
// which reports its loss part-way through the job (faultdev: after a
// share of the commands the job enqueues on it, its enqueues fail and
// the events after that point report the commands in flight as lost),
// gives the CPU graph's CSV byte for byte: the run marks the device lost,
// and its filters and partials move to the CPU device by their Go
// functions.
func TestDeviceGraphOnOpenCLLost(t *testing.T) {
	host, cl := hostAndOpenCL(t, 2)
	data := nullableParquet(t, 30000, 2500, 200, true, 146)
	src := openParquet(t, "nulls-dictionary.parquet", bytes.NewReader(data), int64(len(data)))
	opts := []flights.Option{flights.WithMinDelay(15), flights.WithOpenCL(), flights.WithPartitions(4)}
	want := runOnCPU(t, src, 2, flights.WithMinDelay(15))
	run := func(fd *faultdev.Device) *flights.Output {
		e, err := exec.NewMulti([]gpu.Device{host, fd}, nil, exec.WithAllocator(leaktest.Allocator(t)))
		require.NoError(t, err)
		out, err := flights.Run(t.Context(), e, src, opts...)
		require.NoError(t, err)
		return out
	}
	count := faultdev.New(cl, math.MaxInt64, 0)
	got := run(count)
	require.Nil(t, got.Report.Lost)
	require.Equal(t, csvOf(t, want), csvOf(t, got))
	onCL := 0
	for _, l := range got.Report.Launches() {
		if l.Device == cl.ID() {
			onCL++
		}
	}
	require.Positive(t, onCL, "the job ran on %s", cl.ID())
	total := count.Commands()
	for _, share := range []int64{0, 1, 2, 3} {
		after := total * share / 5
		t.Run(fmt.Sprintf("after=%d/%d", after, total), func(t *testing.T) {
			fd := faultdev.New(cl, after, share%2)
			got := run(fd)
			require.True(t, fd.Lost())
			require.NotNil(t, got.Report.Lost)
			assert.Equal(t, cl.ID(), *got.Report.Lost)
			assert.NotEmpty(t, got.Report.Migrations)
			for _, m := range got.Report.Migrations {
				assert.Equal(t, host.ID(), m.To, m.Kernel)
			}
			assert.Equal(t, csvOf(t, want), csvOf(t, got))
			assert.Equal(t, want.Table.Rows, got.Table.Rows)
		})
	}
}

// hostAndOpenCL returns a CPU device and the machine's first OpenCL
// device, each with streams streams, closed when the test ends; it skips
// the test without OpenCL (fails it under CI).
func hostAndOpenCL(t *testing.T, streams int) (gpu.Device, gpu.CodeDevice) {
	t.Helper()
	ds, err := opencl.Devices()
	if err != nil || len(ds) == 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("no OpenCL device: %v", err)
		}
		t.Skipf("no OpenCL device: %v", err)
	}
	host, err := cpu.New(cpu.WithStreams(streams))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, host.Close()) })
	cl, err := opencl.NewDevice(ds[0], opencl.WithStreams(streams))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, cl.Close()) })
	return host, cl
}

// openFile opens data set name as a source closed when the test ends.
func openFile(name string) func(t *testing.T) kvio.Source {
	return func(t *testing.T) kvio.Source {
		f, err := kvio.Open(testdata.File(t, name))
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, f.Close()) })
		src, err := kvio.OpenAuto(t.Context(), f)
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, src.Close()) })
		return src
	}
}

// TestDeviceGraphOnOpenCLEmptyPartitions: a source of fewer rows than
// partitions gives partitions of no rows, whose filter launches have no
// work-item: on the OpenCL device they run nothing, and the result is the
// CPU graph's.
func TestDeviceGraphOnOpenCLEmptyPartitions(t *testing.T) {
	host, cl := hostAndOpenCL(t, 1)
	data := nullableParquet(t, 5, 5, 3, true, 145)
	src := openParquet(t, "tiny.parquet", bytes.NewReader(data), int64(len(data)))
	want := runOnCPU(t, src, 1, flights.WithPartitions(8), flights.WithMinDelay(-100))
	e, err := exec.NewMulti([]gpu.Device{host, cl}, nil, exec.WithAllocator(leaktest.Allocator(t)))
	require.NoError(t, err)
	id := cl.ID()
	got, err := flights.Run(t.Context(), e, src, flights.WithPartitions(8), flights.WithMinDelay(-100), flights.WithOpenCL(), flights.WithDevice(id))
	require.NoError(t, err)
	empty := 0
	for _, p := range got.Pipeline.Partitions {
		if p.RowHi == p.RowLo {
			empty++
		}
	}
	require.Positive(t, empty, "some partitions have no rows")
	assert.Equal(t, csvOf(t, want), csvOf(t, got))
}
