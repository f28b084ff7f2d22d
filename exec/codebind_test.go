package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	osexec "os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/topology"
)

// plus1CL: out[i] = in[i] + 1 over uints, one work item each.
const plus1CL = `__kernel void plus1(__global const uint *in, __global uint *out) {
	size_t i = get_global_id(0);
	out[i] = in[i] + 1;
}`

// uints is the shape of a kernel over the uints of its last argument.
func uints(argBytes []int64) dag.Shape {
	return dag.Shape{Global: []int{int(argBytes[len(argBytes)-1] / 4)}}
}

// fillUints is a Go kernel writing v to every uint of raw buffer out.
func fillUints(v uint32, out dag.BufferID) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		b := bytesOf(l, out)
		for i := 0; i+4 <= len(b); i += 4 {
			binary.LittleEndian.PutUint32(b[i:], v)
		}
		return nil
	}
}

// The fake code device's twins of plus1CL, halfCL and the zero-byte
// test's mark.
func init() {
	fakeKernels["plus1"] = func(global []int, args []any) error {
		in, out := args[0].([]byte), args[1].([]byte)
		for i := range global[0] {
			binary.LittleEndian.PutUint32(out[4*i:], binary.LittleEndian.Uint32(in[4*i:])+1)
		}
		return nil
	}
	fakeKernels["firstn"] = func(global []int, args []any) error {
		n, out := binary.LittleEndian.Uint32(args[0].([]byte)), args[1].([]byte)
		for i := range min(global[0], int(n)) {
			binary.LittleEndian.PutUint32(out[4*i:], 7)
		}
		return nil
	}
	fakeKernels["mark"] = func(global []int, args []any) error {
		for i := range global[0] {
			binary.LittleEndian.PutUint32(args[1].([]byte)[4*i:], 5)
		}
		return nil
	}
}

// childRunEnv makes a re-executed test binary run the test it names as
// the subprocess half of that test.
const childRunEnv = "STREAMDAG_EXEC_CHILD"

// inChild runs the test t in a subprocess (the test binary again, with
// childRunEnv set and only t selected) and fails t with the child's
// output when the child fails or dies; it returns true in the child,
// which then does the work itself.
func inChild(t *testing.T) bool {
	t.Helper()
	if os.Getenv(childRunEnv) == t.Name() {
		return true
	}
	if err := openCLAvailable(); err != nil {
		openCLDevice(t, 1) // skips, or fails under CI
	}
	// The deadline only stops a hung child; it decides nothing.
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := osexec.CommandContext(ctx, os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childRunEnv+"="+t.Name())
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the child failed or died:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: "+t.Name())
	return false
}

// One OpenCL device and one CPU device kept across 300 one-shot runs, a
// new graph and executor each: the OpenCL kernel binds x from byte 128
// (a sub-buffer), and every run's z holds that run's x + 1. Run in a
// subprocess: a stale kernel argument can abort OpenCL.
func TestOpenCLSubBufferArgumentAcrossOneShotRuns(t *testing.T) {
	if !inChild(t) {
		return
	}
	cl := openCLDevice(t, 2)
	host, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	defer func() { require.NoError(t, host.Close()) }()
	for run := range 300 {
		g := dag.New()
		x, z := g.AddBuffer("x", 256), g.AddBuffer("z", 128)
		v := uint32(run + 1)
		g.AddKernel("fill", fillUints(v, x), dag.Writes(x))
		g.AddKernel("plus1", nil, dag.ReadsRange(x, 128, 128), dag.Writes(z),
			dag.OpenCL(plus1CL, "plus1", uints, dag.BufferArg(x), dag.BufferArg(z)))
		e, err := exec.NewMulti([]gpu.Device{host, cl}, nil)
		require.NoError(t, err)
		res, err := e.Run(t.Context(), g)
		require.NoError(t, err)
		require.NoError(t, res.Err(), "run %d", run)
		b, err := res.Buffer(z)
		require.NoError(t, err)
		for i := 0; i < 128; i += 4 {
			require.Equal(t, v+1, binary.LittleEndian.Uint32(b.Bytes()[i:]), "run %d: z[%d]", run, i/4)
		}
		res.Close()
	}
}

// halfCL writes v to out[i] for i below n[0]: the kernel declares all of
// out but leaves the rest unwritten.
const halfCL = `__kernel void firstn(__global const uint *n, __global uint *out) {
	size_t i = get_global_id(0);
	if (i < n[0]) out[i] = 7;
}`

// Device memory starts zeroed in every run, as the CPU device's buffers
// do: the bytes a kernel declares but does not write read as zeroes, in
// one-shot runs on a kept device and in runs of one plan, whose memory
// the plan reuses (an earlier run wrote all of it).
func TestCodeDeviceUnwrittenBytesReadZero(t *testing.T) {
	const words = 64
	graph := func(count *uint32) (*dag.Graph, dag.BufferID) {
		g := dag.New()
		n, out := g.AddBuffer("n", 4), g.AddBuffer("out", 4*words)
		g.AddKernel("count", func(_ context.Context, l dag.Launch) error {
			binary.LittleEndian.PutUint32(bytesOf(l, n), *count)
			return nil
		}, dag.Writes(n))
		g.AddKernel("half", nil, dag.Reads(n), dag.Writes(out),
			dag.OpenCL(halfCL, "firstn", uints, dag.BufferArg(n), dag.BufferArg(out)))
		return g, out
	}
	check := func(t *testing.T, res *exec.Result, out dag.BufferID, count uint32, what string) {
		t.Helper()
		require.NoError(t, res.Err(), what)
		b, err := res.Buffer(out)
		require.NoError(t, err, what)
		for i := range uint32(words) {
			want := uint32(0)
			if i < count {
				want = 7
			}
			require.Equal(t, want, binary.LittleEndian.Uint32(b.Bytes()[4*i:]), "%s: out[%d]", what, i)
		}
		res.Close()
	}
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			dev := cd.make(t, 2)
			for run := range 6 {
				count := uint32(words)
				if run%2 == 1 {
					count = words / 2
				}
				g, out := graph(&count)
				res, err := cpuAnd(t, 1, dev).Run(t.Context(), g)
				require.NoError(t, err)
				check(t, res, out, count, fmt.Sprintf("one-shot run %d", run))
			}
			e := cpuAnd(t, 1, dev)
			var count uint32
			g, out := graph(&count)
			p, err := e.Plan(g)
			require.NoError(t, err)
			defer p.ReleaseDeviceMemory()
			for run := range 6 {
				count = words
				if run%2 == 1 {
					count = words / 2
				}
				res, err := e.Execute(t.Context(), p)
				require.NoError(t, err)
				check(t, res, out, count, fmt.Sprintf("plan run %d", run))
			}
		})
	}
}

// A zero-byte buffer bound as a kernel argument runs on a code device,
// as on the CPU device.
func TestCodeDeviceZeroByteBufferArgument(t *testing.T) {
	const emptyCL = `__kernel void mark(__global const uint *empty, __global uint *out) { out[get_global_id(0)] = 5; }`
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			e := cpuAnd(t, 1, cd.make(t, 1))
			g := dag.New()
			empty, out := g.AddBuffer("empty", 0), g.AddBuffer("out", 16)
			g.AddKernel("make", func(context.Context, dag.Launch) error { return nil }, dag.Writes(empty))
			g.AddKernel("mark", nil, dag.Reads(empty), dag.Writes(out),
				dag.OpenCL(emptyCL, "mark", uints, dag.BufferArg(empty), dag.BufferArg(out)))
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			b, err := res.Buffer(out)
			require.NoError(t, err)
			for i := 0; i < 16; i += 4 {
				assert.Equal(t, uint32(5), binary.LittleEndian.Uint32(b.Bytes()[i:]), "out[%d]", i/4)
			}
		})
	}
}

// A kernel whose OpenCL variant binds a buffer at an offset the code
// device cannot bind (not a multiple of its ArgAlignBytes) runs its Go
// function on the CPU device instead, even when it prefers the code
// device; with no other code, or pinned there, it is a plan error
// naming the kernel, the buffer, the offset and the alignment.
func TestCodeDeviceUnalignedArgumentOffset(t *testing.T) {
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			dev := cd.make(t, 1)
			if f, ok := dev.(*fakeCode); ok {
				f.align = 128 // as PoCL's
			}
			align := dev.(gpu.CodeDevice).ArgAlignBytes()
			require.Greater(t, align, int64(4))
			e := cpuAnd(t, 1, dev)
			twin := func(x, z dag.BufferID) dag.KernelFunc {
				return func(_ context.Context, l dag.Launch) error {
					in, out := bytesOf(l, x), bytesOf(l, z)
					for i := 0; i < len(out); i += 4 {
						binary.LittleEndian.PutUint32(out[i:], binary.LittleEndian.Uint32(in[i:])+1)
					}
					return nil
				}
			}
			graph := func(withTwin bool, opts ...dag.KernelOption) (*dag.Graph, dag.BufferID) {
				g := dag.New()
				x, z := g.AddBuffer("x", 256), g.AddBuffer("z", 128)
				var fn dag.KernelFunc
				if withTwin {
					fn = twin(x, z)
				}
				g.AddKernel("fill", fillUints(41, x), dag.Writes(x))
				g.AddKernel("plus1", fn, append([]dag.KernelOption{dag.ReadsRange(x, 4, 128), dag.Writes(z),
					dag.OpenCL(plus1CL, "plus1", uints, dag.BufferArg(x), dag.BufferArg(z))}, opts...)...)
				return g, z
			}
			g, z := graph(true, dag.PreferDevice(dev.ID()))
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			for _, l := range res.Report.Launches() {
				assert.Equal(t, topology.CPU, l.Device, l.Kernel)
			}
			b, err := res.Buffer(z)
			require.NoError(t, err)
			for i := 0; i < 128; i += 4 {
				require.Equal(t, uint32(42), binary.LittleEndian.Uint32(b.Bytes()[i:]), "z[%d]", i/4)
			}

			want := fmt.Sprintf(`exec: kernel "plus1" binds buffer "x" at offset 4, which is not a multiple of the %d-byte argument alignment on %s`, align, dev.ID())
			g, _ = graph(false)
			_, err = e.Plan(g)
			require.Error(t, err)
			assert.Equal(t, want+", and the kernel has code for no other device", err.Error())
			g, _ = graph(true, dag.OnDevice(dev.ID()))
			_, err = e.Plan(g)
			require.Error(t, err)
			assert.Equal(t, want+", which the kernel is pinned to", err.Error())
		})
	}
}

// A launch shape the device cannot run fails the launch with an error
// naming the kernel; it is never reported ok.
func TestOpenCLLaunchTooLargeFails(t *testing.T) {
	e := cpuAnd(t, 1, openCLDevice(t, 1))
	g := dag.New()
	x, z := g.AddBuffer("x", 16), g.AddBuffer("z", 16)
	g.AddKernel("fill", fillUints(1, x), dag.Writes(x))
	g.AddKernel("huge", nil, dag.Reads(x), dag.Writes(z), dag.OpenCL(plus1CL, "plus1", func([]int64) dag.Shape {
		return dag.Shape{Global: []int{1 << 62, 1 << 62}}
	}, dag.BufferArg(x), dag.BufferArg(z)))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	require.Error(t, res.Err())
	assert.ErrorContains(t, res.Err(), `exec: kernel "huge"`)
	assert.ErrorContains(t, res.Err(), "work-items exceed the device's 64-bit size_t")
	_, err = res.Buffer(z)
	assert.Error(t, err, "z was not written")
	assert.True(t, strings.Contains(err.Error(), "huge"), err.Error())
}
