package flights

import (
	"context"
	"fmt"
	"os"
	osexec "os/exec"
	"regexp"
	"testing"
	"time"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/kvio"
	"github.com/streamdag/streamdag/topology"
)

// benchLaunch is the dag.Launch a kernel function sees, over buffers of
// its own, for calling kernels outside an executor: every buffer made by
// its benchBuffers, for any access.
type benchLaunch struct {
	bufs map[dag.BufferID]*buffers.Buffer
}

func (l *benchLaunch) Kernel() string                         { return "bench" }
func (l *benchLaunch) Device() topology.DeviceID              { return topology.CPU }
func (l *benchLaunch) Stream() int                            { return 0 }
func (l *benchLaunch) Allocator() memory.Allocator            { return memory.DefaultAllocator }
func (l *benchLaunch) Missing(dag.BufferID) error             { return nil }
func (l *benchLaunch) Wrote(dag.BufferID, int64, int64) error { return nil }
func (l *benchLaunch) Buffer(id dag.BufferID, acc dag.Access) (*buffers.Buffer, error) {
	if b := l.bufs[id]; b != nil {
		return b, nil
	}
	return nil, &dag.AccessError{Kernel: "bench", Buffer: id, Access: acc}
}

var _ dag.Launch = (*benchLaunch)(nil)

// benchBuffers makes host buffers outside an executor, declared in a
// graph of their own for their ids and handles, and held by its launch.
type benchBuffers struct {
	g    *dag.Graph
	pool *buffers.DeviceAllocator
	l    benchLaunch
}

func newBenchBuffers() *benchBuffers {
	return &benchBuffers{g: dag.New(), pool: buffers.NewDeviceAllocator(topology.CPU, memory.DefaultAllocator, buffers.NewBudget(1<<40)),
		l: benchLaunch{bufs: map[dag.BufferID]*buffers.Buffer{}}}
}

func benchValue[T any](bb *benchBuffers, name string) (dag.Value[T], *buffers.Buffer) {
	h := dag.AddValue[T](bb.g, name)
	b := bb.pool.AllocateValues([]buffers.ValueSpec{{ID: h.ID(), Name: name}})[0]
	bb.l.bufs[h.ID()] = b
	return h, b
}

func (bb *benchBuffers) raw(tb testing.TB, name string, size int64) (dag.BufferID, *buffers.Buffer) {
	id := bb.g.AddBuffer(name, size)
	b, err := bb.pool.Allocate(context.Background(), id, name, size)
	require.NoError(tb, err)
	bb.l.bufs[id] = b
	return id, b
}

// BenchmarkDeviceKernels compares, on flights-3m.parquet with one
// partition per row group (read and decoded outside the timer), in one
// run and interleaved (see interleaved), as milliseconds per iteration
// and ratios to the first of each group:
//
//   - kernels: go-arrow, the CPU graph's filter and partial (Go, over the
//     Arrow batches), the baseline; go-raw, the device graph's Go variants
//     over the raw columns; opencl, its OpenCL C on the first OpenCL
//     device (PoCL here) through gpu's code-stream contract, the columns
//     already in device memory, every partition's two launches on one
//     stream, then one Record and Wait; and
//     opencl+copies, the same with the columns copied in and the tables
//     copied out;
//   - run: `streamdag run flights` end to end (Run: build, plan, read,
//     decode, …, write): cpu, the CPU graph on the CPU device, the
//     baseline; opencl, the device graph on the CPU device plus the
//     OpenCL device, filter and partial on the OpenCL device.
//
// The Go kernels run one partition after another on one goroutine; an
// OpenCL launch spreads its work-groups over the device's compute units.
// Run it short: go test -run '^$' -bench DeviceKernels -benchtime=10x
// ./examples/flights/ (needs flights-3m.parquet; skipped without an
// OpenCL device).
func BenchmarkDeviceKernels(b *testing.B) {
	path := testdata.File(b, "flights-3m.parquet")
	ctx := context.Background()
	f, err := kvio.Open(path)
	require.NoError(b, err)
	defer f.Close()
	src, err := kvio.OpenAuto(ctx, f)
	require.NoError(b, err)
	defer src.Close()
	pc, err := Build(src)
	require.NoError(b, err)
	pd, err := Build(src, WithOpenCL())
	require.NoError(b, err)
	require.Equal(b, pc.Partitions, pd.Partitions)

	bb := newBenchBuffers()
	l := &bb.l
	batches := map[int]dag.Value[batchList]{}
	// The raw buffers of a partition, by handle and by buffer.
	type partBufs struct {
		batches                 dag.Value[batchList]
		sel                     dag.Value[selection]
		grp                     dag.Value[*groups]
		codes                   dag.Value[*groupCodes]
		delayID, keyID, keepID  dag.BufferID
		tableID                 dag.BufferID
		delay, key, keep, table *buffers.Buffer
	}
	parts := make([]partBufs, len(pd.Partitions))
	var rows int64
	width := pd.delayWidth() // the delay column's byte width, as Arrow holds it
	for i, part := range pd.Partitions {
		if _, ok := batches[part.Source]; !ok {
			h, _ := benchValue[batchList](bb, "batches")
			batches[part.Source] = h
			require.NoError(b, pc.source(part.PartLo, part.PartHi, h)(ctx, l))
		}
		n := part.RowHi - part.RowLo
		rows += n
		pb := partBufs{batches: batches[part.Source]}
		pb.sel, _ = benchValue[selection](bb, "sel")
		pb.grp, _ = benchValue[*groups](bb, "grp")
		pb.codes, _ = benchValue[*groupCodes](bb, "codes")
		pb.delayID, pb.delay = bb.raw(b, "delay", max(n*int64(width), minDeviceBytes))
		pb.keyID, pb.key = bb.raw(b, "key", max(n*4, minDeviceBytes))
		pb.keepID, pb.keep = bb.raw(b, "keep", max(n, minDeviceBytes))
		pb.tableID, pb.table = bb.raw(b, "table", tableBytes(partialGroups(n)))
		require.NoError(b, pd.columns(part, pb.batches, pb.delayID, pb.keyID, pb.codes)(ctx, l))
		parts[i] = pb
	}
	defer func() {
		for _, x := range l.bufs {
			x.Release()
		}
	}()

	goArrow := func(b *testing.B) {
		for i, part := range pc.Partitions {
			pb := parts[i]
			if err := pc.filter(part, pb.batches, pb.sel)(ctx, l); err != nil {
				b.Fatal(err)
			}
			if err := pc.partial(pb.batches, pb.sel, pb.grp)(ctx, l); err != nil {
				b.Fatal(err)
			}
		}
	}
	goRaw := func(*testing.B) {
		for i, part := range pd.Partitions {
			pb := parts[i]
			n := part.RowHi - part.RowLo
			_ = hostFilter(width, n, 0, pb.delayID, pb.keyID, pb.keepID)(ctx, l)
			_ = hostPartial(width, n, pb.delayID, pb.keyID, pb.keepID, pb.tableID)(ctx, l)
		}
	}

	ds, err := opencl.Devices()
	if err != nil || len(ds) == 0 {
		b.Skipf("no OpenCL device: %v", err)
	}
	cpuDev, err := cpu.New()
	require.NoError(b, err)
	defer cpuDev.Close()
	clDev, err := opencl.NewDevice(ds[0], opencl.WithStreams(cpuDev.NumStreams()))
	require.NoError(b, err)
	defer clDev.Close()
	s := clDev.Stream(0).(gpu.CodeStream)
	prog, err := clDev.Program("flights", deviceSource(width), "")
	require.NoError(b, err)
	type devMem struct{ delay, key, keep, table gpu.Memory }
	dev := make([]devMem, len(parts))
	for i, pb := range parts {
		for _, x := range []struct {
			dst *gpu.Memory
			src *buffers.Buffer
		}{{&dev[i].delay, pb.delay}, {&dev[i].key, pb.key}, {&dev[i].keep, pb.keep}, {&dev[i].table, pb.table}} {
			*x.dst, err = clDev.Alloc(x.src.SizeBytes())
			require.NoError(b, err)
			defer (*x.dst).Release()
			require.NoError(b, errOf(s.CopyIn(*x.dst, 0, x.src.Bytes())))
		}
	}
	arg := func(m gpu.Memory) gpu.KernelArg { return gpu.KernelArg{Mem: m} }
	launch := func(b *testing.B, copies bool) {
		for i, part := range pd.Partitions {
			n := part.RowHi - part.RowLo
			d := dev[i]
			if copies {
				require.NoError(b, errOf(s.CopyIn(d.delay, 0, parts[i].delay.Bytes())))
				require.NoError(b, errOf(s.CopyIn(d.key, 0, parts[i].key.Bytes())))
			}
			if n > 0 {
				require.NoError(b, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: prog, Entry: "flights_filter", Global: []int{int(n)},
					Args: []gpu.KernelArg{arg(d.delay), arg(d.key), arg(d.keep), {Scalar: int64(0)}}, Label: "filter"})))
			}
			require.NoError(b, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: prog, Entry: "flights_partial",
				Global: []int{partialGroups(n) * deviceWorkGroup}, Local: []int{deviceWorkGroup},
				Args: []gpu.KernelArg{arg(d.delay), arg(d.key), arg(d.keep), arg(d.table), {Scalar: n}}, Label: "partial"})))
			if copies {
				require.NoError(b, errOf(s.CopyOut(parts[i].table.Bytes(), d.table, 0)))
			}
		}
		require.NoError(b, s.Record().Wait(ctx))
	}
	// The OpenCL tables equal the Go variants' (checked once).
	launch(b, false)
	for i, pb := range parts {
		got := make([]byte, pb.table.SizeBytes())
		require.NoError(b, errOf(s.CopyOut(got, dev[i].table, 0)))
		require.NoError(b, s.Record().Wait(ctx))
		want := make([]byte, len(got))
		n := pd.Partitions[i].RowHi - pd.Partitions[i].RowLo
		filterRows(width, pb.delay.Bytes(), int32s(pb.key.Bytes())[:n], pb.keep.Bytes()[:n], 0)
		partialRows(width, pb.delay.Bytes(), int32s(pb.key.Bytes())[:n], pb.keep.Bytes()[:n], int64s(want))
		require.Equal(b, want, got, "partition %d", i)
	}
	interleaved(b, "kernels", rows, []variant{
		{"go-arrow", goArrow},
		{"go-raw", goRaw},
		{"opencl", func(b *testing.B) { launch(b, false) }},
		{"opencl+copies", func(b *testing.B) { launch(b, true) }},
	})

	runOn := func(devs []gpu.Device, openCL bool) func(*testing.B) {
		e, err := exec.NewMulti(devs, nil)
		require.NoError(b, err)
		opts := []Option{WithPartitions(len(devs) * cpuDev.NumStreams())}
		if openCL {
			opts = append(opts, WithOpenCL(), WithDevice(clDev.ID()))
		}
		return func(b *testing.B) {
			out, err := Run(ctx, e, src, opts...)
			if err != nil {
				b.Fatal(err)
			}
			if err := out.Report.Err(); err != nil || out.Table == nil {
				b.Fatal(fmt.Errorf("run: %v, no table: %t", err, out.Table == nil))
			}
		}
	}
	interleaved(b, "run", rows, []variant{
		{"cpu", runOn([]gpu.Device{cpuDev}, false)},
		{"opencl", runOn([]gpu.Device{cpuDev, clDev}, true)},
	})
}

// deviceKernelsCommand matches the command that runs BenchmarkDeviceKernels
// from the repository root: its -bench pattern and -benchtime.
var deviceKernelsCommand = regexp.MustCompile(`go test -run '\^\$' -bench (\S+)\s+-benchtime=(\d+x)\s+\./examples/flights/`)

// TestDeviceKernelsCommands: the commands bench/results/README.md gives
// for BenchmarkDeviceKernels name it and this package, and the benchmark
// they run, run once (this test binary with their -bench and
// -benchtime=1x), reports every figure of both groups: it neither fails nor skips where the data and an OpenCL
// device are there.
func TestDeviceKernelsCommands(t *testing.T) {
	testdata.File(t, "flights-3m.parquet")
	openCLDevice(t)
	var patterns []string
	for _, doc := range []string{"../../bench/results/README.md"} {
		b, err := os.ReadFile(doc)
		require.NoError(t, err)
		ms := deviceKernelsCommand.FindAllStringSubmatch(string(b), -1)
		require.NotEmpty(t, ms, "%s gives the command", doc)
		for _, m := range ms {
			assert.Regexp(t, m[1], "BenchmarkDeviceKernels", "%s: %s", doc, m[0])
			patterns = append(patterns, m[1])
		}
	}
	out, err := osexec.CommandContext(t.Context(), os.Args[0],
		"-test.run=^$", "-test.bench="+patterns[0], "-test.benchtime=1x").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for group, metrics := range map[string][]string{
		"kernels": {"go-arrow-ms", "go-raw-ms", "go-raw/go-arrow", "opencl-ms", "opencl/go-arrow", "opencl+copies-ms", "opencl+copies/go-arrow"},
		"run":     {"cpu-ms", "opencl-ms", "opencl/cpu"},
	} {
		line := regexp.MustCompile(`(?m)^BenchmarkDeviceKernels/` + group + `-\d+\s+1\s.*$`).FindString(string(out))
		if !assert.NotEmpty(t, line, "one iteration of the %s group:\n%s", group, out) {
			continue
		}
		for _, m := range metrics {
			assert.Regexp(t, `\s[0-9.]+\s+`+regexp.QuoteMeta(m)+`(\s|$)`, line)
		}
	}
	assert.NotContains(t, string(out), "SKIP")
}

// variant is one of the things an interleaved benchmark compares.
type variant struct {
	name string
	run  func(*testing.B)
}

// interleaved runs every variant once per iteration, in an order that
// rotates from one iteration to the next (so a change of the machine's
// load during the run falls on all of them alike), and reports each
// one's milliseconds per iteration ("NAME-ms") and its ratio to the
// first, the baseline ("NAME/BASE").
func interleaved(b *testing.B, name string, rows int64, vs []variant) {
	b.Run(name, func(b *testing.B) {
		b.SetBytes(rows * 8)
		total := make([]time.Duration, len(vs))
		it := 0
		for b.Loop() {
			for j := range vs {
				v := (it + j) % len(vs)
				start := time.Now()
				vs[v].run(b)
				total[v] += time.Since(start)
			}
			it++
		}
		for j, v := range vs {
			b.ReportMetric(total[j].Seconds()*1e3/float64(it), v.name+"-ms")
			if j > 0 {
				b.ReportMetric(total[j].Seconds()/total[0].Seconds(), v.name+"/"+vs[0].name)
			}
		}
	})
}
