package exec_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

// OpenCL C of the code-device tests, and the fake device's twins of it.
const (
	// scaleCL: out[i] = in[i] * k + add, over ulongs; one work item each.
	scaleCL = `__kernel void scale(__global const ulong *in, __global ulong *out, ulong k, ulong add) {
	size_t i = get_global_id(0);
	out[i] = in[i] * k + add;
}`
	// checkCL: out[0] = in[0]; status = 7 when in[0] is odd.
	checkCL = `__kernel void check(__global const ulong *in, __global ulong *out, __global int *status) {
	out[0] = in[0];
	if (in[0] & 1) *status = 7;
}`
)

// fakeKernels are the fake device's entry points for the sources above.
var fakeKernels = map[string]fakeKernel{
	"scale": func(global []int, args []any) error {
		in, out := args[0].([]byte), args[1].([]byte)
		k, add := args[2].(uint64), args[3].(uint64)
		for i := range global[0] {
			binary.LittleEndian.PutUint64(out[8*i:], u64(in, 8*i)*k+add)
		}
		return nil
	},
	"check": func(_ []int, args []any) error {
		in, out, status := args[0].([]byte), args[1].([]byte), args[2].([]byte)
		copy(out[:8], in[:8])
		if u64(in, 0)&1 == 1 {
			binary.LittleEndian.PutUint32(status, 7)
		}
		return nil
	},
}

// ulongs is the launch shape of scaleCL: one work item per ulong of the
// first argument.
func ulongs(argBytes []int64) dag.Shape { return dag.Shape{Global: []int{int(argBytes[0] / 8)}} }

// codeDev is a code device under test and how to make one.
type codeDev struct {
	name string
	make func(t *testing.T, streams int) gpu.CodeDevice
}

// codeDevs returns the code devices the tests run on: the fake one
// always, and an OpenCL device when the machine has one.
func codeDevs() []codeDev {
	return []codeDev{{"fake", func(t *testing.T, streams int) gpu.CodeDevice {
		d := newFakeCode(topology.GPU(7), streams, fakeKernels)
		t.Cleanup(func() {
			require.NoError(t, d.Close())
			assert.Zero(t, d.live(), "device memory left allocated")
		})
		return d
	}}}
}

// cpuAnd returns an executor over a CPU device with cpuStreams streams
// and code device cd.
func cpuAnd(t *testing.T, cpuStreams int, cd gpu.Device, opts ...exec.Option) *exec.Executor {
	t.Helper()
	dev, err := cpu.New(cpu.WithStreams(cpuStreams))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.Close()) })
	e, err := exec.NewMulti([]gpu.Device{dev, cd}, nil, append([]exec.Option{exec.WithAllocator(leaktest.Allocator(t))}, opts...)...)
	require.NoError(t, err)
	return e
}

// scaleGraph builds: n host sources writing seeded ulong vectors of w
// values, n "scale" kernels (OpenCL only, or with a host twin too when
// twin) computing in×3+i, and a host kernel summing everything. It returns
// the graph, the sum's buffer and the expected sum.
// opts, when given, adds options to scale kernel i.
func scaleGraph(seed uint64, n, w int, twin bool, opts ...func(i int) []dag.KernelOption) (*dag.Graph, dag.BufferID, uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	g := dag.New()
	var outs []dag.BufferID
	var want uint64
	for i := range n {
		a, s := g.AddBuffer(fmt.Sprint("a", i), int64(8*w)), g.AddBuffer(fmt.Sprint("s", i), int64(8*w))
		vals := make([]uint64, w)
		for j := range vals {
			vals[j] = rng.Uint64N(1 << 30)
			want += vals[j]*3 + uint64(i)
		}
		g.AddKernel(fmt.Sprint("src", i), func(_ context.Context, l dag.Launch) error {
			b := l.Out(0).Bytes()
			for j, v := range vals {
				binary.LittleEndian.PutUint64(b[8*j:], v)
			}
			return nil
		}, dag.Writes(a))
		var fn dag.KernelFunc
		if twin {
			add := uint64(i)
			fn = func(_ context.Context, l dag.Launch) error {
				in, out := l.In(0).Bytes(), l.Out(0).Bytes()
				for j := range w {
					binary.LittleEndian.PutUint64(out[8*j:], u64(in, 8*j)*3+add)
				}
				return nil
			}
		}
		kopts := []dag.KernelOption{dag.Reads(a), dag.Writes(s),
			dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(a), dag.BufferArg(s), dag.ScalarArg(uint64(3)), dag.ScalarArg(uint64(i)))}
		for _, o := range opts {
			kopts = append(kopts, o(i)...)
		}
		g.AddKernel(fmt.Sprint("scale", i), fn, kopts...)
		outs = append(outs, s)
	}
	total := g.AddBuffer("total", 8)
	g.AddKernel("sum", func(_ context.Context, l dag.Launch) error {
		var v uint64
		for i := range l.NumIn() {
			b := l.In(i).Bytes()
			for j := 0; j < len(b); j += 8 {
				v += u64(b, j)
			}
		}
		binary.LittleEndian.PutUint64(l.Out(0).Bytes(), v)
		return nil
	}, dag.Reads(outs...), dag.Writes(total))
	return g, total, want
}

// A plan of one CPU device and one code device: host-only kernels run on
// the CPU, OpenCL-only kernels on the code device, each of their inputs
// is copied in and each output out (timed, reported with its bytes), and
// the answer is the CPU device's alone (with host twins).
func TestCodeDeviceMixedPlan(t *testing.T) {
	const seed, n, w = 3, 4, 16
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			g, total, want := scaleGraph(seed, n, w, false)
			gHost, totalHost, _ := scaleGraph(seed, n, w, true)
			cpuRes, err := newExecutor(t, 2).Run(t.Context(), gHost)
			require.NoError(t, err)
			defer cpuRes.Close()
			require.Equal(t, want, uint64Of(t, cpuRes, totalHost), "seed %d: CPU alone", seed)

			dev := cd.make(t, 2)
			e := cpuAnd(t, 2, dev, exec.WithLaunchTiming(true))
			p, err := e.Plan(g)
			require.NoError(t, err)
			for _, l := range p.Launches() {
				if l.Kernel >= 0 {
					want := 0
					if strings.HasPrefix(g.KernelName(l.Kernel), "scale") {
						want = 1
					}
					assert.Equal(t, want, l.Device, "seed %d: %s", seed, l.Name)
				}
			}
			assert.Equal(t, 2*n, p.Copies(), "seed %d: one copy in and one out per scale kernel", seed)
			res, err := e.Execute(t.Context(), p)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			assert.Equal(t, want, uint64Of(t, res, total), "seed %d: CPU + %s", seed, cd.name)
			require.Len(t, res.Report.Copies, 2*n)
			in, out := 0, 0
			for _, c := range res.Report.Copies {
				assert.Equal(t, exec.StatusOK, c.Status, c.Buffer)
				assert.EqualValues(t, 8*w, c.Bytes, c.Buffer)
				switch {
				case c.From == topology.CPU && c.To == dev.ID():
					in++
				case c.From == dev.ID() && c.To == topology.CPU:
					out++
				default:
					t.Errorf("copy of %s from %s to %s", c.Buffer, c.From, c.To)
				}
			}
			assert.Equal(t, n, in)
			assert.Equal(t, n, out)
			for _, l := range res.Report.Launches() {
				assert.Equal(t, exec.StatusOK, l.Status, l.Kernel)
				assert.False(t, l.End.Before(l.Start), "%s ends before it starts", l.Kernel)
				assert.False(t, l.Start.IsZero(), "%s has no start", l.Kernel)
			}
		})
	}
}

// A kernel with a host and an OpenCL variant runs the OpenCL one on the
// code device when it is placed there (pinned), the host one elsewhere;
// with no code device in the executor it runs on the CPU with the same
// answer.
func TestBothVariantsFollowTheDevice(t *testing.T) {
	const seed, n, w = 5, 2, 8
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			dev := cd.make(t, 1)
			g, total, want := scaleGraph(seed, n, w, true)
			// scale0 pinned to the code device, scale1 to the CPU.
			pg, ptotal, _ := scaleGraph(seed, n, w, true, func(i int) []dag.KernelOption {
				return []dag.KernelOption{dag.OnDevice([]topology.DeviceID{dev.ID(), topology.CPU}[i])}
			})
			for _, c := range []struct {
				name  string
				e     *exec.Executor
				g     *dag.Graph
				total dag.BufferID
			}{
				{"cpu only", newExecutor(t, 2), g, total},
				{"cpu and code device", cpuAnd(t, 2, dev), pg, ptotal},
			} {
				res, err := c.e.Run(t.Context(), c.g)
				require.NoError(t, err, c.name)
				require.NoError(t, res.Err(), c.name)
				assert.Equal(t, want, uint64Of(t, res, c.total), "seed %d: %s", seed, c.name)
				for _, l := range res.Report.Launches() {
					switch {
					case l.Kernel == "scale0" && c.g == pg:
						assert.Equal(t, dev.ID(), l.Device, "the OpenCL variant, on the code device")
					case l.Kernel != "" && !strings.HasPrefix(l.Kernel, "copy"):
						assert.Equal(t, topology.CPU, l.Device, "%s: the host variant, on the CPU", l.Kernel)
					}
				}
				res.Close()
			}
		})
	}
}

// A value buffer cannot live on a code device: a kernel placed there
// that reads or writes one is a plan error naming kernel and buffer.
func TestValueBufferOnCodeDeviceIsAPlanError(t *testing.T) {
	dev := codeDevs()[0].make(t, 1)
	e := cpuAnd(t, 1, dev)
	g := dag.New()
	v := g.AddValue("table")
	x := g.AddBuffer("x", 8)
	g.AddKernel("fill", func(context.Context, dag.Launch) error { return nil }, dag.Writes(v))
	g.AddKernel("k", nil, dag.Reads(v), dag.Writes(x), dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(x), dag.BufferArg(x),
		dag.ScalarArg(uint64(1)), dag.ScalarArg(uint64(0))))
	_, err := e.Plan(g)
	assert.EqualError(t, err, `exec: kernel "k" would run on gpu7, a code device, but reads or writes value buffer "table": a code device holds only raw bytes`)

	// With a host twin, it runs on the CPU instead.
	g2 := dag.New()
	v2 := g2.AddValue("table")
	x2 := g2.AddBuffer("x", 8)
	g2.AddKernel("fill", func(context.Context, dag.Launch) error { return nil }, dag.Writes(v2))
	g2.AddKernel("k", put(9), dag.Reads(v2), dag.Writes(x2), dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(x2), dag.BufferArg(x2),
		dag.ScalarArg(uint64(1)), dag.ScalarArg(uint64(0))))
	p, err := e.Plan(g2)
	require.NoError(t, err)
	for _, d := range p.Placement().Device {
		assert.Equal(t, 0, d)
	}

	// An executor of code devices only has nowhere for host copies.
	only, err := exec.NewMulti([]gpu.Device{dev}, nil)
	require.NoError(t, err)
	_, err = only.Plan(g2)
	assert.ErrorContains(t, err, "are all code devices")
}

var _ = errors.New
var _ = failgraph.ErrCancelled
