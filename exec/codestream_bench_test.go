package exec_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
)

// nopCL is an empty kernel over one buffer: the per-launch cost of
// enqueueing it is all host overhead.
const nopCL = `__kernel void nop(__global uchar *in, __global uchar *out) {}`

// nopChain returns a graph of n OpenCL-only kernels, kernel i reading
// 64-byte buffer i-1 and writing buffer i (the first reads and writes
// buffer 0): a chain on one code stream.
func nopChain(n int) *dag.Graph {
	g := dag.New()
	one := func([]int64) dag.Shape { return dag.Shape{Global: []int{1}} }
	var b dag.BufferID
	for i := range n {
		next := g.AddBuffer(fmt.Sprint("b", i), 64)
		opts := []dag.KernelOption{dag.Writes(next)}
		if i == 0 {
			b = next
		} else {
			opts = append(opts, dag.Reads(b))
		}
		opts = append(opts, dag.OpenCL(nopCL, "nop", one, dag.BufferArg(b), dag.BufferArg(next)))
		g.AddKernel(fmt.Sprint("nop", i), nil, opts...)
		b = next
	}
	return g
}

// BenchmarkCodeStreamOverhead is the host overhead per launch of a chain
// of n empty OpenCL C kernels on one stream of the machine's OpenCL
// device: exec.Execute of a reused plan (the chain, with the copies the
// plan makes; the plan keeps its device memory between runs:
// WithKeepDeviceMemory) against, in the same iteration, a raw
// loop of n CodeStream.LaunchKernel calls and one Record and Wait at the
// end, binding the same arguments (memory allocated once, outside the
// timer), and the same raw loop with its memory allocated and released
// inside the timer, as a run allocates its buffers. It reports exec and
// raw per launch (exec-ns/launch, raw-ns/launch) and the ratios exec/raw
// and exec/raw+alloc.
func BenchmarkCodeStreamOverhead(b *testing.B) {
	for _, n := range []int{64, 1024} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			dev := openCLDevice(b, 1)
			e := cpuAnd(b, 1, dev)
			p, err := e.Plan(nopChain(n))
			require.NoError(b, err)
			b.Cleanup(p.ReleaseDeviceMemory) // before the device closes
			prog, err := dev.Program("nop", nopCL, "")
			require.NoError(b, err)
			// The raw loop's launches bind what the plan's do: kernel i
			// reads memory i-1 and writes memory i.
			st := dev.Stream(0).(gpu.CodeStream)
			kls := make([]gpu.KernelLaunch, n)
			for i := range kls {
				m, err := dev.Alloc(64)
				require.NoError(b, err)
				defer m.Release()
				in := m
				if i > 0 {
					in = kls[i-1].Args[1].Mem
				}
				kls[i] = gpu.KernelLaunch{Program: prog, Entry: "nop", Global: []int{1},
					Args: []gpu.KernelArg{{Mem: in}, {Mem: m}}, Label: fmt.Sprint("nop", i)}
			}
			// Warm both paths (program builds, kernel objects, pools).
			res, err := e.Execute(b.Context(), p, exec.WithKeepDeviceMemory())
			require.NoError(b, err)
			require.NoError(b, res.Err())
			res.Close()
			var execT, rawT, allocT time.Duration
			kla := make([]gpu.KernelLaunch, n)
			b.ReportAllocs()
			for b.Loop() {
				t0 := time.Now()
				res, err := e.Execute(b.Context(), p, exec.WithKeepDeviceMemory())
				if err != nil {
					b.Fatal(err)
				}
				if err := res.Err(); err != nil {
					b.Fatal(err)
				}
				res.Close()
				t1 := time.Now()
				for i := range kls {
					if _, err := st.LaunchKernel(&kls[i]); err != nil {
						b.Fatal(err)
					}
				}
				if err := st.Record().Wait(b.Context()); err != nil {
					b.Fatal(err)
				}
				t2 := time.Now()
				// The raw loop again, with its memory allocated and
				// released inside the timer, as a run does.
				ms := make([]gpu.Memory, n)
				for i := range ms {
					m, err := dev.Alloc(64)
					if err != nil {
						b.Fatal(err)
					}
					ms[i] = m
					kla[i] = kls[i]
					kla[i].Args = []gpu.KernelArg{{Mem: ms[max(i-1, 0)]}, {Mem: m}}
				}
				for i := range kla {
					if _, err := st.LaunchKernel(&kla[i]); err != nil {
						b.Fatal(err)
					}
				}
				if err := st.Record().Wait(b.Context()); err != nil {
					b.Fatal(err)
				}
				for _, m := range ms {
					m.Release()
				}
				execT += t1.Sub(t0)
				rawT += t2.Sub(t1)
				allocT += time.Since(t2)
			}
			launches := float64(b.N * n)
			b.ReportMetric(float64(execT.Nanoseconds())/launches, "exec-ns/launch")
			b.ReportMetric(float64(rawT.Nanoseconds())/launches, "raw-ns/launch")
			b.ReportMetric(float64(execT)/float64(rawT), "exec/raw")
			b.ReportMetric(float64(execT)/float64(allocT), "exec/raw+alloc")
		})
	}
}
