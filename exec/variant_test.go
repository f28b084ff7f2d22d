package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

// doubleCL is the OpenCL C twin of double: out[0] = 2 × in[0].
const doubleCL = `__kernel void double_it(__global const ulong *in, __global ulong *out) { out[0] = 2 * in[0]; }`

// oneItem is the launch shape of doubleCL: one work item.
func oneItem([]int64) dag.Shape { return dag.Shape{Global: []int{1}} }

// double returns a kernel writing into out twice the uint64 it reads
// from in: doubleCL's host variant.
func double(in, out dag.BufferID) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		binary.LittleEndian.PutUint64(bytesOf(l, out), 2*binary.LittleEndian.Uint64(bytesOf(l, in)))
		return nil
	}
}

// put returns a kernel function that writes v as out's first uint64.
func put(out dag.BufferID, v uint64) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		binary.LittleEndian.PutUint64(bytesOf(l, out), v)
		return nil
	}
}

// uint64Of reads buffer id of res as a uint64.
func uint64Of(t *testing.T, res *exec.Result, id dag.BufferID) uint64 {
	t.Helper()
	b, err := res.Buffer(id)
	require.NoError(t, err)
	return binary.LittleEndian.Uint64(b.Bytes())
}

// A kernel with a Go function and an OpenCL variant runs its Go function
// on the CPU device.
func TestBothVariantsRunHostOnCPU(t *testing.T) {
	e := newExecutor(t, 2)
	g := dag.New()
	x, y := g.AddBuffer("x", 8), g.AddBuffer("y", 8)
	g.AddKernel("produce", put(x, 21), dag.Writes(x))
	g.AddKernel("double", double(x, y), dag.Reads(x), dag.Writes(y),
		dag.OpenCL(doubleCL, "double_it", oneItem, dag.BufferArg(x), dag.BufferArg(y)))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, uint64(42), uint64Of(t, res, y))
	for _, l := range res.Report.Launches() {
		assert.Equal(t, exec.StatusOK, l.Status, l.Kernel)
	}
}

// A kernel with only an OpenCL variant has no code for the CPU device:
// Plan (and Run) fail naming it.
func TestOpenCLOnlyKernelOnCPUIsAPlanError(t *testing.T) {
	e := newExecutor(t, 2)
	g := dag.New()
	x, y := g.AddBuffer("x", 8), g.AddBuffer("y", 8)
	g.AddKernel("produce", put(x, 21), dag.Writes(x))
	g.AddKernel("double", nil, dag.Reads(x), dag.Writes(y),
		dag.OpenCL(doubleCL, "double_it", oneItem, dag.BufferArg(x), dag.BufferArg(y)))
	require.NoError(t, g.Validate(), "the graph itself is valid: dag does not know the devices")
	const want = `exec: kernel "double": no device of the plan has code for it (the kernel has opencl code; cpu runs go code)`
	_, err := e.Plan(g)
	assert.EqualError(t, err, want)
	res, err := e.Run(t.Context(), g)
	assert.Nil(t, res)
	assert.EqualError(t, err, want)
}

// mixedGraph builds a graph of host-only kernels and one kernel with a Go
// function and an OpenCL variant: n sources write seeded values, pairs are
// summed by host kernels, the sums doubled by the both-variant kernel
// (one launch per sum), and a host kernel adds everything up. It returns
// the graph and the total's buffer.
func mixedGraph(seed uint64, n int) (*dag.Graph, dag.BufferID, uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	g := dag.New()
	var want uint64
	var sums []dag.BufferID
	for i := range n / 2 {
		a, b := g.AddBuffer(fmt.Sprint("a", i), 8), g.AddBuffer(fmt.Sprint("b", i), 8)
		va, vb := rng.Uint64N(1<<20), rng.Uint64N(1<<20)
		g.AddKernel(fmt.Sprint("src-a", i), put(a, va), dag.Writes(a), dag.Estimate(time.Millisecond))
		g.AddKernel(fmt.Sprint("src-b", i), put(b, vb), dag.Writes(b), dag.Estimate(time.Millisecond))
		s, d := g.AddBuffer(fmt.Sprint("s", i), 8), g.AddBuffer(fmt.Sprint("d", i), 8)
		g.AddKernel(fmt.Sprint("sum", i), func(_ context.Context, l dag.Launch) error {
			v := binary.LittleEndian.Uint64(bytesOf(l, a)) + binary.LittleEndian.Uint64(bytesOf(l, b))
			binary.LittleEndian.PutUint64(bytesOf(l, s), v)
			return nil
		}, dag.Reads(a, b), dag.Writes(s), dag.Estimate(time.Millisecond))
		g.AddKernel(fmt.Sprint("double", i), double(s, d), dag.Reads(s), dag.Writes(d), dag.Estimate(time.Millisecond),
			dag.OpenCL(doubleCL, "double_it", oneItem, dag.BufferArg(s), dag.BufferArg(d)))
		sums = append(sums, d)
		want += 2 * (va + vb)
	}
	total := g.AddBuffer("total", 8)
	g.AddKernel("add-up", func(_ context.Context, l dag.Launch) error {
		var v uint64
		for _, d := range sums {
			v += binary.LittleEndian.Uint64(bytesOf(l, d))
		}
		binary.LittleEndian.PutUint64(bytesOf(l, total), v)
		return nil
	}, dag.Reads(sums...), dag.Writes(total))
	return g, total, want
}

// Host-only kernels and a both-variant kernel on simulated GPUs (which
// run host code): the plan spreads them over several GPUs and the answer
// is the CPU device's.
func TestMixedVariantsOnSimulatedGPUs(t *testing.T) {
	const seed = 14
	g, total, want := mixedGraph(seed, 8)

	cpuRes, err := newExecutor(t, 2).Run(t.Context(), g)
	require.NoError(t, err)
	defer cpuRes.Close()
	require.Equal(t, want, uint64Of(t, cpuRes, total), "seed %d: CPU answer", seed)

	e, _ := simMachine(t, "dgx1-v100", 2)
	p, err := e.Plan(g)
	require.NoError(t, err, "seed %d", seed)
	used := map[int]bool{}
	for _, d := range p.Placement().Device {
		used[d] = true
	}
	assert.Greater(t, len(used), 1, "seed %d: independent heavy kernels spread over GPUs", seed)
	res, err := e.Execute(t.Context(), p)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, want, uint64Of(t, res, total), "seed %d: simulated GPUs' answer", seed)
}

// otherKind is a host device of a driver kind exec has never heard of.
type otherKind struct{ gpu.Device }

func (otherKind) Kind() string { return "other" }

// Placement and planning put kernels only on devices with code for them:
// beside a simulated GPU, a code device of a kind no kernel has code for
// gets nothing from any strategy, and the answer holds.
func TestPlacementSkipsDevicesWithoutCode(t *testing.T) {
	const seed = 7
	set, err := sim.New([]topology.DeviceFacts{{ID: topology.GPU(1)}}, sim.WithStreams(2))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	gpu1 := set.Devices()[0]
	fake := newFakeCode(topology.GPU(0), 2, nil)
	fake.kind, fake.code = "fakecl", "fakecl"
	t.Cleanup(func() { require.NoError(t, fake.Close()) })
	devs := []gpu.Device{fake, gpu1}
	for _, strategy := range []exec.Placement{exec.PlaceHEFT, exec.PlaceRoundRobin, exec.PlaceLeastLoaded} {
		t.Run(strategy.String(), func(t *testing.T) {
			e, err := exec.NewMulti(devs, nil, exec.WithAllocator(leaktest.Allocator(t)), exec.WithPlacement(strategy))
			require.NoError(t, err)
			g, total, want := mixedGraph(seed, 6)
			p, err := e.Plan(g)
			require.NoError(t, err, "seed %d", seed)
			for k, d := range p.Placement().Device {
				assert.Equal(t, 1, d, "seed %d: kernel %q placed on a device without code for it", seed, g.KernelName(dag.KernelID(k)))
			}
			res, err := e.Execute(t.Context(), p)
			require.NoError(t, err)
			defer res.Close()
			assert.Equal(t, want, uint64Of(t, res, total), "seed %d", seed)
		})
	}
	for _, c := range []struct {
		name string
		opts func(x dag.BufferID) (dag.KernelFunc, []dag.KernelOption)
		want string
	}{
		{"pinned to a device without code", func(x dag.BufferID) (dag.KernelFunc, []dag.KernelOption) {
			return put(x, 1), []dag.KernelOption{dag.OnDevice(topology.GPU(0))}
		}, `exec: kernel "k" is pinned to gpu0, which runs fakecl code, and the kernel has go code`},
		{"code of a kind no device runs", func(x dag.BufferID) (dag.KernelFunc, []dag.KernelOption) {
			return nil, []dag.KernelOption{dag.DeviceCode("cuda", "extern \"C\" __global__ void k(unsigned long *x) {}", "k", oneItem, dag.BufferArg(x))}
		}, `exec: kernel "k": no device of the plan has code for it (the kernel has cuda code; gpu0 runs fakecl code, gpu1 runs go code)`},
		{"OpenCL only, no OpenCL device", func(x dag.BufferID) (dag.KernelFunc, []dag.KernelOption) {
			return nil, []dag.KernelOption{dag.OpenCL("__kernel void k(__global ulong *x) {}", "k", oneItem, dag.BufferArg(x))}
		}, `exec: kernel "k": no device of the plan has code for it (the kernel has opencl code; gpu0 runs fakecl code, gpu1 runs go code)`},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, err := exec.NewMulti(devs, nil, exec.WithAllocator(leaktest.Allocator(t)))
			require.NoError(t, err)
			g := dag.New()
			x := g.AddBuffer("x", 8)
			fn, opts := c.opts(x)
			g.AddKernel("k", fn, append(opts, dag.Writes(x))...)
			_, err = e.Plan(g)
			assert.EqualError(t, err, c.want)
		})
	}
}
