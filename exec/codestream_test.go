package exec_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/internal/faultdev"
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
	name  string
	avail func() error // nil: always there; else why there is none (make skips then)
	make  func(t *testing.T, streams int) gpu.CodeDevice
}

// codeDevs returns the code devices the tests run on: the fake one, and
// the machine's first OpenCL device (the test skips that case with the
// reason where there is none, and fails under CI, which installs PoCL).
func codeDevs() []codeDev {
	return []codeDev{
		{"fake", nil, func(t *testing.T, streams int) gpu.CodeDevice { return fakeDevice(t, 7, streams) }},
		{"opencl", openCLAvailable, func(t *testing.T, streams int) gpu.CodeDevice { return openCLDevice(t, streams) }},
	}
}

// openCLAvailable returns nil when the machine has an OpenCL device,
// else why not.
func openCLAvailable() error {
	ds, err := opencl.Devices()
	if err == nil && len(ds) == 0 {
		err = errors.New("no OpenCL device on any platform")
	}
	return err
}

// openCLDevice opens the machine's first OpenCL device with streams
// streams, closed at cleanup; it skips the test when there is none (fails
// it under CI).
func openCLDevice(t testing.TB, streams int) gpu.CodeDevice {
	t.Helper()
	if os.Getenv("POCL_CACHE_DIR") == "" {
		t.Setenv("POCL_CACHE_DIR", filepath.Join(os.TempDir(), "streamdag-pocl-cache"))
	}
	err := openCLAvailable()
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("OpenCL needed under CI (.ci/run installs pocl-opencl-icd): %v", err)
		}
		t.Skipf("no OpenCL here: %v", err)
	}
	ds, _ := opencl.Devices()
	d, err := opencl.NewDevice(ds[0], opencl.WithStreams(streams))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

// cpuAnd returns an executor over a CPU device with cpuStreams streams
// and code device cd.
func cpuAnd(t testing.TB, cpuStreams int, cd gpu.Device, opts ...exec.Option) *exec.Executor {
	t.Helper()
	return cpuWith(t, cpuStreams, []gpu.Device{cd}, opts...)
}

// cpuWith returns an executor over a CPU device with cpuStreams streams
// (device 0) and devs, allocating through a leak-checked allocator.
func cpuWith(t testing.TB, cpuStreams int, devs []gpu.Device, opts ...exec.Option) *exec.Executor {
	t.Helper()
	dev, err := cpu.New(cpu.WithStreams(cpuStreams))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.Close()) })
	e, err := exec.NewMulti(append([]gpu.Device{dev}, devs...), nil, append([]exec.Option{exec.WithAllocator(leaktest.Allocator(t))}, opts...)...)
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
			b := bytesOf(l, a)
			for j, v := range vals {
				binary.LittleEndian.PutUint64(b[8*j:], v)
			}
			return nil
		}, dag.Writes(a))
		var fn dag.KernelFunc
		if twin {
			add := uint64(i)
			fn = func(_ context.Context, l dag.Launch) error {
				in, out := bytesOf(l, a), bytesOf(l, s)
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
	return g, addSum(g, outs), want
}

// addSum adds to g a buffer "total" and a kernel "sum" writing into it
// the sum of every ulong of outs; it returns the buffer.
func addSum(g *dag.Graph, outs []dag.BufferID) dag.BufferID {
	total := g.AddBuffer("total", 8)
	g.AddKernel("sum", func(_ context.Context, l dag.Launch) error {
		var v uint64
		for _, s := range outs {
			b := bytesOf(l, s)
			for j := 0; j < len(b); j += 8 {
				v += u64(b, j)
			}
		}
		binary.LittleEndian.PutUint64(bytesOf(l, total), v)
		return nil
	}, dag.Reads(outs...), dag.Writes(total))
	return total
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

			dev := cd.make(t, 4)
			e := cpuAnd(t, 2, dev, exec.WithLaunchTiming(true))
			p, err := e.Plan(g)
			require.NoError(t, err)
			t.Cleanup(p.ReleaseDeviceMemory) // before the device's leak check
			assert.Equal(t, []int{2, 4}, p.Streams(), "a CPU device with 2 streams and a code device with 4")
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
			// The plan's DOT and the run's trace show the code device's
			// streams like any other.
			dot, err := p.MarshalDOT()
			require.NoError(t, err)
			assert.Contains(t, string(dot), dev.ID().String()+" stream 3")
			var trace strings.Builder
			require.NoError(t, exec.WriteTrace(&trace, p, res.Report))
			assert.Contains(t, trace.String(), dev.ID().String()+" stream 0")
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
	v := dag.AddValue[any](g, "table").ID()
	x := g.AddBuffer("x", 8)
	g.AddKernel("fill", func(context.Context, dag.Launch) error { return nil }, dag.Writes(v))
	g.AddKernel("k", nil, dag.Reads(v), dag.Writes(x), dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(x), dag.BufferArg(x),
		dag.ScalarArg(uint64(1)), dag.ScalarArg(uint64(0))))
	_, err := e.Plan(g)
	assert.EqualError(t, err, `exec: kernel "k" would run on opencl7, a code device, but reads or writes value buffer "table": a code device holds only raw bytes`)

	// With a host twin, it runs on the CPU instead.
	g2 := dag.New()
	v2 := dag.AddValue[any](g2, "table").ID()
	x2 := g2.AddBuffer("x", 8)
	g2.AddKernel("fill", func(context.Context, dag.Launch) error { return nil }, dag.Writes(v2))
	g2.AddKernel("k", put(x2, 9), dag.Reads(v2), dag.Writes(x2), dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(x2), dag.BufferArg(x2),
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

// launchByName returns the report of the launch of kernel name.
func launchByName(t *testing.T, res *exec.Result, name string) exec.LaunchReport {
	t.Helper()
	for _, l := range res.Report.Launches() {
		if l.Kernel == name {
			return l
		}
	}
	t.Fatalf("no launch %q", name)
	return exec.LaunchReport{}
}

// A failed producer on one stream with its consumer on another: the
// consumer is skipped with the root failure and its chain, whether the
// producer failed on the CPU, softly on the code device (its status
// word), or as a command the device reports failed; an unrelated branch
// runs on.
func TestCodeDeviceFailedProducerSkipsConsumer(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name     string
		onlyFake bool
		build    func(g *dag.Graph, in, mid, out dag.BufferID)
		root     func(t *testing.T, err error)
	}{
		{
			name: "host producer fails",
			build: func(g *dag.Graph, in, mid, out dag.BufferID) {
				g.AddKernel("produce", func(context.Context, dag.Launch) error { return boom }, dag.Writes(mid), dag.Reads(in))
			},
			root: func(t *testing.T, err error) { assert.ErrorIs(t, err, boom) },
		},
		{
			name: "code producer fails softly",
			build: func(g *dag.Graph, in, mid, out dag.BufferID) {
				g.AddKernel("produce", nil, dag.Reads(in), dag.Writes(mid), dag.OnStream(0),
					dag.OpenCL(checkCL, "check", ulongs, dag.BufferArg(in), dag.BufferArg(mid), dag.StatusArg()))
			},
			root: func(t *testing.T, err error) {
				var se *exec.StatusError
				require.ErrorAs(t, err, &se)
				assert.Equal(t, exec.StatusError{Kernel: "produce", Value: 7}, *se)
			},
		},
		{
			name:     "device command fails",
			onlyFake: true,
			build: func(g *dag.Graph, in, mid, out dag.BufferID) {
				g.AddKernel("produce", nil, dag.Reads(in), dag.Writes(mid), dag.OnStream(0),
					dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(in), dag.BufferArg(mid), dag.ScalarArg(uint64(1)), dag.ScalarArg(uint64(0))))
			},
			root: func(t *testing.T, err error) {
				var ce *gpu.CommandError
				require.ErrorAs(t, err, &ce)
				assert.Equal(t, "produce", ce.Label)
				assert.ErrorIs(t, err, boom)
			},
		},
	}
	for _, cd := range codeDevs() {
		for _, c := range cases {
			if c.onlyFake && cd.name != "fake" {
				continue // only the fake device fails commands on purpose
			}
			t.Run(cd.name+"/"+c.name, func(t *testing.T) {
				dev := cd.make(t, 2)
				if f, ok := dev.(*fakeCode); ok {
					f.fail = func(label string) error {
						if label == "produce" && c.onlyFake {
							return boom
						}
						return nil
					}
				}
				e := cpuAnd(t, 2, dev)
				g := dag.New()
				in, mid, out := g.AddBuffer("in", 8), g.AddBuffer("mid", 8), g.AddBuffer("out", 8)
				g.AddKernel("source", put(in, 3), dag.Writes(in)) // odd: check fails softly
				c.build(g, in, mid, out)
				g.AddKernel("consume", nil, dag.Reads(mid), dag.Writes(out), dag.OnStream(1), dag.OnDevice(dev.ID()),
					dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(mid), dag.BufferArg(out), dag.ScalarArg(uint64(2)), dag.ScalarArg(uint64(0))))
				other, otherOut := g.AddBuffer("other", 8), g.AddBuffer("other-out", 8)
				g.AddKernel("unrelated-source", put(other, 20), dag.Writes(other))
				g.AddKernel("unrelated", nil, dag.Reads(other), dag.Writes(otherOut), dag.OnStream(1),
					dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(other), dag.BufferArg(otherOut), dag.ScalarArg(uint64(2)), dag.ScalarArg(uint64(1))))
				res, err := e.Run(t.Context(), g)
				require.NoError(t, err)
				defer res.Close()

				prod := launchByName(t, res, "produce")
				assert.Equal(t, exec.StatusFailed, prod.Status)
				c.root(t, prod.Err)
				cons := launchByName(t, res, "consume")
				assert.Equal(t, exec.StatusSkipped, cons.Status)
				assert.Equal(t, dev.ID(), cons.Device)
				assert.Equal(t, prod.Failure, cons.Failure, "skipped with the root failure")
				c.root(t, cons.Err)
				require.NotEmpty(t, cons.Chain)
				assert.Equal(t, "produce", cons.Chain[len(cons.Chain)-1], "the chain ends at the root kernel: %v", cons.Chain)
				_, err = res.Buffer(out)
				var ue *failgraph.UnwrittenError
				require.ErrorAs(t, err, &ue)
				assert.Equal(t, "produce", ue.Kernel)
				c.root(t, ue.Root)

				assert.Equal(t, exec.StatusOK, launchByName(t, res, "unrelated").Status)
				assert.Equal(t, uint64(41), uint64Of(t, res, otherOut), "the unrelated branch runs on")
			})
		}
	}
}

// A failure the device reports is its launch's by sequence number, not
// by label: on a device that labels every command "" (blank), the one
// kernel of three in a segment that fails is the one failed, and the
// others, before and after it on the stream, succeed.
func TestCodeDeviceFailureBySeq(t *testing.T) {
	d := newFakeCode(topology.OpenCL(7), 1, fakeKernels)
	boom := errors.New("boom")
	d.blank = true
	d.fail = func(label string) error {
		if label == "second" {
			return boom
		}
		return nil
	}
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	e := cpuAnd(t, 1, d)
	g := dag.New()
	in, a, b, c := g.AddBuffer("in", 8), g.AddBuffer("a", 8), g.AddBuffer("b", 8), g.AddBuffer("c", 8)
	g.AddKernel("source", put(in, 5), dag.Writes(in))
	scale := func(name string, from, to dag.BufferID, add uint64) {
		g.AddKernel(name, nil, dag.Reads(from), dag.Writes(to), dag.OnDevice(d.ID()),
			dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(from), dag.BufferArg(to), dag.ScalarArg(uint64(1)), dag.ScalarArg(add)))
	}
	scale("first", in, a, 1)
	scale("second", a, b, 2)
	scale("third", in, c, 3)
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, exec.StatusOK, launchByName(t, res, "first").Status)
	assert.Equal(t, exec.StatusOK, launchByName(t, res, "third").Status)
	second := launchByName(t, res, "second")
	assert.Equal(t, exec.StatusFailed, second.Status)
	assert.ErrorIs(t, second.Err, boom)
	assert.Equal(t, uint64(6), uint64Of(t, res, a))
	assert.Equal(t, uint64(8), uint64Of(t, res, c))
	_, err = res.Buffer(b)
	var ue *failgraph.UnwrittenError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, "second", ue.Kernel)
	assert.ErrorIs(t, ue.Root, boom)
}

// A kernel's soft failure: its status word, zeroed before the launch,
// holds a non-zero value after it; the launch fails naming the kernel and
// the value. The same kernel on an even input succeeds.
func TestCodeDeviceSoftFailure(t *testing.T) {
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			e := cpuAnd(t, 1, cd.make(t, 1))
			for _, c := range []struct {
				in   uint64
				want string
			}{
				{4, ""},
				{9, `exec: kernel "check" set its status word to 7`},
				{10, ""},
			} {
				g := dag.New()
				in, out := g.AddBuffer("in", 8), g.AddBuffer("out", 8)
				g.AddKernel("source", put(in, c.in), dag.Writes(in))
				g.AddKernel("check", nil, dag.Reads(in), dag.Writes(out),
					dag.OpenCL(checkCL, "check", ulongs, dag.BufferArg(in), dag.BufferArg(out), dag.StatusArg()))
				res, err := e.Run(t.Context(), g)
				require.NoError(t, err)
				l := launchByName(t, res, "check")
				if c.want == "" {
					assert.Equal(t, exec.StatusOK, l.Status, "input %d", c.in)
					assert.Equal(t, c.in, uint64Of(t, res, out))
				} else {
					assert.Equal(t, exec.StatusFailed, l.Status, "input %d", c.in)
					assert.EqualError(t, l.Err, c.want)
					_, err := res.Buffer(out)
					assert.Error(t, err, "the failed launch's writes are tainted")
				}
				res.Close()
			}
		})
	}
}

// A build error fails the kernel's launch with the compiler's log and its
// name; the rest of the graph runs on.
func TestCodeDeviceBuildError(t *testing.T) {
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			e := cpuAnd(t, 1, cd.make(t, 1))
			g := dag.New()
			in, out := g.AddBuffer("in", 8), g.AddBuffer("out", 8)
			g.AddKernel("source", put(in, 1), dag.Writes(in))
			g.AddKernel("broken", nil, dag.Reads(in), dag.Writes(out),
				dag.OpenCL("#error this kernel does not build\n__kernel void scale(__global ulong *a) {}", "scale", ulongs, dag.BufferArg(in)))
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			l := launchByName(t, res, "broken")
			assert.Equal(t, exec.StatusFailed, l.Status)
			assert.ErrorContains(t, l.Err, `exec: kernel "broken": `)
			assert.LessOrEqual(t, strings.Count(l.Err.Error(), "opencl:"), 1, "one package prefix: %v", l.Err)
			assert.ErrorContains(t, l.Err, "this kernel does not build", "the compiler's log")
			assert.Equal(t, exec.StatusOK, launchByName(t, res, "source").Status)
		})
	}
}

// Kernels that share a source that does not build each fail naming
// themselves, and the second names the kernel whose program it shares
// rather than passing that kernel's name off as its own program's.
func TestCodeDeviceSharedBuildErrorNamesKernels(t *testing.T) {
	const broken = "#error this kernel does not build\n__kernel void scale(__global ulong *a) {}"
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			e := cpuAnd(t, 1, cd.make(t, 1))
			g := dag.New()
			in, a, b := g.AddBuffer("in", 8), g.AddBuffer("a", 8), g.AddBuffer("b", 8)
			g.AddKernel("source", put(in, 1), dag.Writes(in))
			g.AddKernel("first", nil, dag.Reads(in), dag.Writes(a), dag.OpenCL(broken, "scale", ulongs, dag.BufferArg(in)))
			g.AddKernel("second", nil, dag.Reads(in), dag.Writes(b), dag.OpenCL(broken, "scale", ulongs, dag.BufferArg(in)))
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			first, second := launchByName(t, res, "first"), launchByName(t, res, "second")
			require.Equal(t, exec.StatusFailed, first.Status)
			require.Equal(t, exec.StatusFailed, second.Status)
			if strings.Contains(first.Err.Error(), "the program it shares") { // the builds' order is the list's
				first, second = second, first
			}
			assert.NotContains(t, first.Err.Error(), "the program it shares")
			assert.ErrorContains(t, second.Err, fmt.Sprintf(`exec: kernel %q: the program it shares with kernel %q: `, second.Kernel, first.Kernel))
			for _, l := range []exec.LaunchReport{first, second} {
				assert.ErrorContains(t, l.Err, "this kernel does not build", "the compiler's log")
			}
		})
	}
}

// Cancellation: a host kernel cancels the run's ctx while a long chain
// waits for it on the code device. The code stream stops enqueueing; what
// it had enqueued runs to completion, what it had not is cancelled, and
// Execute returns with ctx's error in the result.
func TestCodeDeviceCancellation(t *testing.T) {
	const chain = 300
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			e := cpuAnd(t, 1, cd.make(t, 1))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			g := dag.New()
			prev := g.AddBuffer("x", 8)
			g.AddKernel("stop", func(context.Context, dag.Launch) error { cancel(); return nil }, dag.Writes(prev))
			for i := range chain {
				next := g.AddBuffer(fmt.Sprint("c", i), 8)
				g.AddKernel(fmt.Sprint("link", i), nil, dag.Reads(prev), dag.Writes(next),
					dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(prev), dag.BufferArg(next), dag.ScalarArg(uint64(1)), dag.ScalarArg(uint64(1))))
				prev = next
			}
			res, err := e.Run(ctx, g)
			require.NoError(t, err)
			defer res.Close()
			assert.ErrorIs(t, res.Err(), context.Canceled)
			counts := map[exec.Status]int{}
			for _, l := range res.Report.Launches() {
				counts[l.Status]++
			}
			assert.Positive(t, counts[exec.StatusCancelled], "launches not enqueued are cancelled: %v", counts)
			assert.Equal(t, res.Report.NumLaunches(), counts[exec.StatusOK]+counts[exec.StatusCancelled], "%v", counts)
			assert.Less(t, counts[exec.StatusOK], 200, "the code stream stopped enqueueing: %v", counts)
			_, err = res.Buffer(prev)
			assert.ErrorIs(t, err, context.Canceled)
		})
	}
}

// Runs with failures, cancellation and device memory leave no goroutine
// of theirs behind (the devices' own run until they close, checked by
// TestMain), and no device memory allocated.
func TestCodeDeviceNoLeaks(t *testing.T) {
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			dev := cd.make(t, 2)
			e := cpuAnd(t, 2, dev)
			devices := goleak.IgnoreCurrent() // the devices' workers
			for seed := range uint64(4) {
				g, total, want := scaleGraph(seed, 3, 4, false)
				res, err := e.Run(t.Context(), g)
				require.NoError(t, err)
				assert.Equal(t, want, uint64Of(t, res, total), "seed %d", seed)
				res.Close()

				// A run that fails a kernel and is cancelled from another.
				ctx, cancel := context.WithCancel(t.Context())
				fg := dag.New()
				x, y, z := fg.AddBuffer("x", 8), fg.AddBuffer("y", 8), fg.AddBuffer("z", 8)
				fg.AddKernel("source", put(x, seed), dag.Writes(x))
				fg.AddKernel("fails", nil, dag.Reads(x), dag.Writes(y),
					dag.OpenCL(checkCL, "check", ulongs, dag.BufferArg(x), dag.BufferArg(y), dag.StatusArg()))
				fg.AddKernel("stop", func(context.Context, dag.Launch) error { cancel(); return nil }, dag.Reads(y), dag.Writes(z))
				res, err = e.Run(ctx, fg)
				cancel()
				require.NoError(t, err)
				res.Close()
			}
			goleak.VerifyNone(t, devices)
			if f, ok := dev.(*fakeCode); ok {
				assert.Zero(t, f.live(), "device memory held after the runs")
			}
		})
	}
}

// Bytes written on one code device and read on another go through the
// buffer's host copy: a CopyOut on the first device's stream, a CopyIn on
// the second's; each device keeps its own stream count.
func TestCodeDeviceToCodeDeviceThroughHost(t *testing.T) {
	a := newFakeCode(topology.GPU(5), 2, fakeKernels)
	b := newFakeCode(topology.GPU(6), 4, fakeKernels)
	t.Cleanup(func() {
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
		assert.Zero(t, a.live()+b.live(), "device memory left allocated")
	})
	dev, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.Close()) })
	e, err := exec.NewMulti([]gpu.Device{dev, a, b}, nil, exec.WithAllocator(leaktest.Allocator(t)))
	require.NoError(t, err)
	g := dag.New()
	in, mid, out := g.AddBuffer("in", 16), g.AddBuffer("mid", 16), g.AddBuffer("out", 16)
	g.AddKernel("source", func(_ context.Context, l dag.Launch) error {
		binary.LittleEndian.PutUint64(bytesOf(l, in), 5)
		binary.LittleEndian.PutUint64(bytesOf(l, in)[8:], 6)
		return nil
	}, dag.Writes(in))
	g.AddKernel("on-a", nil, dag.Reads(in), dag.Writes(mid), dag.OnDevice(a.ID()),
		dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(in), dag.BufferArg(mid), dag.ScalarArg(uint64(10)), dag.ScalarArg(uint64(1))))
	g.AddKernel("on-b", nil, dag.Reads(mid), dag.Writes(out), dag.OnDevice(b.ID()),
		dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(mid), dag.BufferArg(out), dag.ScalarArg(uint64(2)), dag.ScalarArg(uint64(0))))
	p, err := e.Plan(g)
	require.NoError(t, err)
	t.Cleanup(p.ReleaseDeviceMemory) // before the device's leak check
	assert.Equal(t, []int{1, 2, 4}, p.Streams())
	res, err := e.Execute(t.Context(), p)
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())
	ob, err := res.Buffer(out)
	require.NoError(t, err)
	assert.Equal(t, []uint64{102, 122}, []uint64{u64(ob.Bytes(), 0), u64(ob.Bytes(), 8)})
	var route []string
	for _, c := range res.Report.Copies {
		route = append(route, fmt.Sprintf("%s %s→%s", c.Buffer, c.From, c.To))
	}
	assert.Contains(t, route, "mid gpu5→cpu", "a's output comes out to its host copy")
	assert.Contains(t, route, "mid cpu→gpu6", "and goes in to b from there")
	assert.NotContains(t, route, "mid gpu5→gpu6")
}

// A code device's memory counts against its budget (its memory): an
// instance that does not fit reads as an unallocated failure wrapping
// buffers.ErrOverBudget, the launches that need it are skipped with it,
// and unrelated branches run on.
func TestCodeDeviceMemoryBudget(t *testing.T) {
	d := newFakeCode(topology.OpenCL(7), 1, fakeKernels)
	d.memBytes = 100
	t.Cleanup(func() {
		require.NoError(t, d.Close())
		assert.Zero(t, d.live())
	})
	e := cpuAnd(t, 1, d)
	g := dag.New()
	big, bigOut := g.AddBuffer("big", 128), g.AddBuffer("big-out", 8)
	small, smallOut := g.AddBuffer("small", 8), g.AddBuffer("small-out", 8)
	g.AddKernel("src-big", put(big, 1), dag.Writes(big))
	g.AddKernel("src-small", put(small, 4), dag.Writes(small))
	g.AddKernel("use-big", nil, dag.Reads(big), dag.Writes(bigOut),
		dag.OpenCL(scaleCL, "scale", func([]int64) dag.Shape { return dag.Shape{Global: []int{1}} },
			dag.BufferArg(big), dag.BufferArg(bigOut), dag.ScalarArg(uint64(1)), dag.ScalarArg(uint64(0))))
	g.AddKernel("use-small", nil, dag.Reads(small), dag.Writes(smallOut),
		dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(small), dag.BufferArg(smallOut), dag.ScalarArg(uint64(3)), dag.ScalarArg(uint64(0))))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	l := launchByName(t, res, "use-big")
	assert.Equal(t, exec.StatusSkipped, l.Status)
	assert.ErrorIs(t, l.Err, buffers.ErrOverBudget)
	_, err = res.Buffer(bigOut)
	assert.ErrorIs(t, err, buffers.ErrOverBudget)
	assert.Equal(t, exec.StatusOK, launchByName(t, res, "use-small").Status)
	assert.Equal(t, uint64(12), uint64Of(t, res, smallOut))
	assert.Zero(t, d.runs("use-big"), "a launch whose taint was known before it was enqueued is never enqueued")
	assert.Equal(t, 1, d.runs("use-small"))
}

// Concurrent runs on one code device interleave their commands and each gets its
// own answer; a chain longer than the enqueue window settles as it goes.
func TestCodeDeviceConcurrentRunsAndLongChains(t *testing.T) {
	const runs, links = 4, exec.CodeWindow + 150
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			e := cpuAnd(t, 2, cd.make(t, 2))
			chain := func(start uint64) (*dag.Graph, dag.BufferID) {
				g := dag.New()
				prev := g.AddBuffer("x", 8)
				g.AddKernel("start", put(prev, start), dag.Writes(prev))
				for i := range links {
					next := g.AddBuffer(fmt.Sprint("c", i), 8)
					g.AddKernel(fmt.Sprint("link", i), nil, dag.Reads(prev), dag.Writes(next),
						dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(prev), dag.BufferArg(next), dag.ScalarArg(uint64(1)), dag.ScalarArg(uint64(2))))
					prev = next
				}
				return g, prev
			}
			errs := make(chan error, runs)
			for r := range runs {
				go func() {
					g, last := chain(uint64(1000 * r))
					res, err := e.Run(t.Context(), g)
					if err != nil {
						errs <- err
						return
					}
					err = res.Err()
					if err == nil {
						var b *buffers.Buffer
						if b, err = res.Buffer(last); err == nil && u64(b.Bytes(), 0) != uint64(1000*r+2*links) {
							err = fmt.Errorf("run %d: got %d, want %d", r, u64(b.Bytes(), 0), 1000*r+2*links)
						}
					}
					res.Close()
					errs <- err
				}()
			}
			for range runs {
				assert.NoError(t, <-errs)
			}
		})
	}
}

// What Execute refuses on a plan with a code device, with an error naming
// why: a run from inside a kernel; and a run whose last device that is
// not a code device (a simulated GPU beside the code device) reports its
// loss, which it cannot recover from.
func TestCodeDeviceExecuteRefuses(t *testing.T) {
	d := codeDevs()[0].make(t, 1)
	e := cpuAnd(t, 1, d)
	g, _, _ := scaleGraph(1, 1, 2, false)
	p, err := e.Plan(g)
	require.NoError(t, err)
	t.Cleanup(p.ReleaseDeviceMemory) // before the device's leak check

	t.Run("losing the last device that is not a code device", func(t *testing.T) {
		set, err := sim.New([]topology.DeviceFacts{{ID: topology.GPU(0)}}, sim.WithLoss(topology.GPU(0), 0))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, set.Close()) })
		e, err := exec.NewMulti([]gpu.Device{set.Devices()[0], d}, nil, exec.WithAllocator(leaktest.Allocator(t)))
		require.NoError(t, err)
		g, total, _ := scaleGraph(1, 1, 2, false)
		res, err := e.Run(t.Context(), g)
		require.NotNil(t, res)
		defer res.Close()
		require.ErrorIs(t, err, gpu.ErrDeviceLost)
		assert.ErrorContains(t, err, "exec: gpu0 refused the run's work: lost, and a plan with code devices cannot recover from losing its last device that is not one")
		assert.Nil(t, res.Report.Lost, "no recovery")
		_, err = res.Buffer(total)
		assert.Error(t, err)
	})
	t.Run("from inside a kernel", func(t *testing.T) {
		outer := dag.New()
		var inner error
		outer.AddKernel("nest", func(ctx context.Context, _ dag.Launch) error {
			_, inner = e.Execute(ctx, p)
			return nil
		}, dag.Writes(outer.AddBuffer("z", 8)))
		res, err := newExecutor(t, 1).Run(t.Context(), outer)
		require.NoError(t, err)
		res.Close()
		assert.EqualError(t, inner, "exec: a graph run from inside a kernel cannot launch on a code device")
	})
}

// A launch shape that fails Shape.Check fails the launch, naming the
// kernel and what is wrong; the device runs nothing for it.
func TestCodeDeviceBadShape(t *testing.T) {
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			e := cpuAnd(t, 1, cd.make(t, 1))
			g := dag.New()
			in, out := g.AddBuffer("in", 8), g.AddBuffer("out", 8)
			g.AddKernel("source", put(in, 1), dag.Writes(in))
			g.AddKernel("bad", nil, dag.Reads(in), dag.Writes(out),
				dag.OpenCL(scaleCL, "scale", func([]int64) dag.Shape { return dag.Shape{Global: []int{1, 1, 1, 1}} },
					dag.BufferArg(in), dag.BufferArg(out), dag.ScalarArg(uint64(1)), dag.ScalarArg(uint64(0))))
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			l := launchByName(t, res, "bad")
			assert.Equal(t, exec.StatusFailed, l.Status)
			assert.EqualError(t, l.Err, `exec: kernel "bad": dag: launch shape with 4 dimensions: want 1 to 3`)
			_, err = res.Buffer(out)
			assert.Error(t, err)
		})
	}
}

// Runs share a code device without taking turns: while one run's code
// stream waits for a host kernel that does not return, another run on the
// same code device (beside a CPU device of its own: a CPU stream runs its
// lists in order) runs to its end.
func TestCodeDeviceRunsShareADevice(t *testing.T) {
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			dev := cd.make(t, 1)
			e, other := cpuAnd(t, 1, dev), cpuAnd(t, 1, dev)
			started, release := make(chan struct{}), make(chan struct{})
			hold := dag.New()
			x, y := hold.AddBuffer("x", 8), hold.AddBuffer("y", 8)
			hold.AddKernel("wait", func(context.Context, dag.Launch) error {
				close(started)
				<-release
				return nil
			}, dag.Writes(x))
			hold.AddKernel("scale", nil, dag.Reads(x), dag.Writes(y),
				dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(x), dag.BufferArg(y), dag.ScalarArg(uint64(1)), dag.ScalarArg(uint64(0))))
			done := make(chan error, 1)
			go func() {
				res, err := e.Run(t.Context(), hold)
				if err == nil {
					err = res.Err()
					res.Close()
				}
				done <- err
			}()
			<-started
			g, total, want := scaleGraph(2, 3, 4, false)
			res, err := other.Run(t.Context(), g)
			require.NoError(t, err)
			require.NoError(t, res.Err())
			assert.Equal(t, want, uint64Of(t, res, total), "the second run ends while the first waits")
			res.Close()
			close(release)
			assert.NoError(t, <-done)
		})
	}
}

// A buffer that device code writes and only device code reads is not
// copied back by the run; a Result's read of it fetches its bytes from
// the device then (the right ones, and its taint with them: a failed
// producer's output reads as failed), while a buffer a host kernel reads
// is copied back once, before that kernel.
func TestCodeDeviceFetchOnRead(t *testing.T) {
	const seed, w = 5, 32
	for _, cd := range codeDevs() {
		for _, tc := range []struct {
			name       string
			fail, read bool
		}{{"ok", false, true}, {"failed", true, true}, {"unread", false, false}} {
			fail := tc.fail
			t.Run(cd.name+"/"+tc.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, seed))
				vals := make([]uint64, w)
				for j := range vals {
					vals[j] = rng.Uint64N(1 << 20)
				}
				g := dag.New()
				a, mid := g.AddBuffer("a", 8*w), g.AddBuffer("mid", 8*w)
				out, total := g.AddBuffer("out", 8*w), g.AddBuffer("total", 8)
				g.AddKernel("src", func(_ context.Context, l dag.Launch) error {
					for j, v := range vals {
						binary.LittleEndian.PutUint64(bytesOf(l, a)[8*j:], v)
					}
					return nil
				}, dag.Writes(a))
				code := dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(a), dag.BufferArg(mid), dag.ScalarArg(uint64(3)), dag.ScalarArg(uint64(1)))
				if fail { // a soft failure: vals[0] is odd
					vals[0] |= 1
					code = dag.OpenCL(checkCL, "check", func([]int64) dag.Shape { return dag.Shape{Global: []int{1}} },
						dag.BufferArg(a), dag.BufferArg(mid), dag.StatusArg())
				}
				g.AddKernel("first", nil, dag.Reads(a), dag.Writes(mid), code)
				g.AddKernel("second", nil, dag.Reads(mid), dag.Writes(out),
					dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(mid), dag.BufferArg(out), dag.ScalarArg(uint64(2)), dag.ScalarArg(uint64(5))))
				g.AddKernel("sum", func(_ context.Context, l dag.Launch) error {
					var v uint64
					for j := range w {
						v += u64(bytesOf(l, out), 8*j)
					}
					binary.LittleEndian.PutUint64(bytesOf(l, total), v)
					return nil
				}, dag.Reads(out), dag.Writes(total))
				bud := buffers.NewBudget(1 << 20)
				e := cpuAnd(t, 1, cd.make(t, 2), exec.WithBudget(bud))
				res, err := e.Run(t.Context(), g)
				require.NoError(t, err)
				defer res.Close()
				if !tc.read {
					// Closed unread: every byte of the budget comes back,
					// mid's host bytes (never made) too.
					res.Close()
					assert.True(t, bud.TryAcquire(bud.TotalBytes()), "seed %d: budget bytes left taken", seed)
					return
				}
				var back []string
				for _, c := range res.Report.Copies {
					if c.To == topology.CPU {
						back = append(back, c.Buffer)
					}
				}
				assert.Equal(t, []string{"out"}, back, "seed %d: copied back: only what a host kernel reads", seed)
				b, err := res.Buffer(mid)
				if fail {
					var uw *failgraph.UnwrittenError
					require.ErrorAs(t, err, &uw, "seed %d: mid's producer failed", seed)
					assert.Equal(t, []string{"copy mid " + e.Devices()[1].ID().String() + "→cpu", "first"}, uw.Chain, "seed %d", seed)
					return
				}
				require.NoError(t, err)
				var want uint64
				for j, v := range vals {
					assert.Equal(t, v*3+1, u64(b.Bytes(), 8*j), "seed %d: mid[%d]", seed, j)
					want += (v*3+1)*2 + 5
				}
				b2, err := res.Buffer(mid) // a second read fetches nothing more
				require.NoError(t, err)
				assert.Equal(t, b.Bytes(), b2.Bytes())
				assert.Equal(t, want, uint64Of(t, res, total), "seed %d", seed)
			})
		}
	}
}

// pingPong builds a chain of n OpenCL-only scale kernels that alternate
// between streams 0 and 1 of their device (x_i = x_{i-1}*3 + i over w
// ulongs), fed by a host source; when stop is not nil, link at is a host
// kernel instead that calls stop before it computes its link. It returns
// the graph, the chain's buffers and their expected bytes.
func pingPong(seed uint64, n, w, at int, stop func()) (*dag.Graph, []dag.BufferID, [][]uint64) {
	rng := rand.New(rand.NewPCG(seed, seed))
	g := dag.New()
	xs := []dag.BufferID{g.AddBuffer("x0", int64(8*w))}
	want := [][]uint64{make([]uint64, w)}
	for j := range want[0] {
		want[0][j] = rng.Uint64N(1 << 40)
	}
	g.AddKernel("src", func(_ context.Context, l dag.Launch) error {
		for j, v := range want[0] {
			binary.LittleEndian.PutUint64(bytesOf(l, xs[0])[8*j:], v)
		}
		return nil
	}, dag.Writes(xs[0]))
	for i := 1; i <= n; i++ {
		x := g.AddBuffer(fmt.Sprint("x", i), int64(8*w))
		if stop != nil && i == at {
			add, prev := uint64(i), xs[i-1]
			g.AddKernel(fmt.Sprint("host", i), func(_ context.Context, l dag.Launch) error {
				stop()
				for j := range w {
					binary.LittleEndian.PutUint64(bytesOf(l, x)[8*j:], u64(bytesOf(l, prev), 8*j)*3+add)
				}
				return nil
			}, dag.Reads(xs[i-1]), dag.Writes(x))
		} else {
			g.AddKernel(fmt.Sprint("pp", i), nil, dag.Reads(xs[i-1]), dag.Writes(x), dag.OnStream(i%2),
				dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(xs[i-1]), dag.BufferArg(x), dag.ScalarArg(uint64(3)), dag.ScalarArg(uint64(i))))
		}
		next := make([]uint64, w)
		for j, v := range want[i-1] {
			next[j] = v*3 + uint64(i)
		}
		xs, want = append(xs, x), append(want, next)
	}
	return g, xs, want
}

// Two code streams of one device ping-pong a buffer: each launch waits
// for the other stream's on the device (Stream.Wait on its recorded
// event, no settle in between), and the bytes are right, also when the
// run's ctx ends mid-chain: what ran reads right, what did not is
// cancelled, and nothing hangs or leaks.
func TestCodeDevicePingPong(t *testing.T) {
	const n, w = 40, 16
	for _, cd := range codeDevs() {
		for _, seed := range []uint64{1, 2, 3} {
			for _, cancel := range []bool{false, true} {
				t.Run(fmt.Sprintf("%s/seed=%d/cancel=%v", cd.name, seed, cancel), func(t *testing.T) {
					dev := cd.make(t, 2)
					ctx, stop := context.WithCancel(t.Context())
					defer stop()
					var g *dag.Graph
					var xs []dag.BufferID
					var want [][]uint64
					if cancel {
						at := 2 + int(seed*7)%(n-2)
						g, xs, want = pingPong(seed, n, w, at, stop)
					} else {
						g, xs, want = pingPong(seed, n, w, 0, nil)
					}
					e := cpuAnd(t, 2, dev)
					p, err := e.Plan(g)
					require.NoError(t, err)
					t.Cleanup(p.ReleaseDeviceMemory) // before the device's leak check
					for _, l := range p.Launches() {
						if l.Kernel >= 0 && strings.HasPrefix(l.Name, "pp") {
							var i int
							fmt.Sscanf(l.Name, "pp%d", &i)
							require.Equal(t, 1, l.Device, "seed %d: %s on the code device", seed, l.Name)
							require.Equal(t, i%2, l.Stream, "seed %d: %s", seed, l.Name)
						}
					}
					res, err := e.Execute(ctx, p)
					require.NoError(t, err)
					defer res.Close()
					if !cancel {
						require.NoError(t, res.Err(), "seed %d", seed)
					}
					ran := 0
					for i, x := range xs {
						b, err := res.Buffer(x)
						if err != nil {
							require.True(t, cancel, "seed %d: x%d: %v", seed, i, err)
							assert.ErrorIs(t, err, context.Canceled, "seed %d: x%d", seed, i)
							continue
						}
						ran++
						for j, v := range want[i] {
							require.Equal(t, v, u64(b.Bytes(), 8*j), "seed %d: x%d[%d]", seed, i, j)
						}
					}
					if !cancel {
						assert.Equal(t, n+1, ran)
					}
					t.Logf("seed %d: %d of %d buffers written", seed, ran, n+1)
					if fd, ok := dev.(*fakeCode); ok {
						// Not asserted: a producer that has already settled
						// when its consumer is enqueued needs no device wait,
						// and on the fake device that is a matter of timing.
						t.Logf("seed %d: %d cross-stream waits taken on the device", seed, fd.waits.Load())
					}
				})
			}
		}
	}
}

// A code device lost mid-run (it reports its loss after a share of the
// run's commands) goes through the recovery: its kernels that have a Go
// function move to the CPU, producers whose bytes were lost with it run
// again, and the answer is the CPU device's alone; a kernel with only
// OpenCL C has nowhere to go and fails with an error naming it and the
// lost device.
func TestCodeDeviceLoss(t *testing.T) {
	const n, w = 6, 8
	for _, cd := range codeDevs() {
		for _, seed := range []uint64{1, 2} {
			for _, after := range []float64{0, 0.3, 0.6} {
				t.Run(fmt.Sprintf("%s/seed=%d/after=%v", cd.name, seed, after), func(t *testing.T) {
					gHost, totalHost, want := scaleGraph(seed, n, w, true)
					cpuRes, err := newExecutor(t, 2).Run(t.Context(), gHost)
					require.NoError(t, err)
					defer cpuRes.Close()
					require.Equal(t, want, uint64Of(t, cpuRes, totalHost), "seed %d: CPU alone", seed)

					dev := cd.make(t, 2)
					g, total, _ := scaleGraph(seed, n, w, true)
					place := placedOn(g, "scale")
					counted, count := runCounted(t, dev, g, place, math.MaxInt64, 0)
					require.NoError(t, counted.Err())
					counted.Close()
					at := int64(after * float64(count.Commands())) // the loss at that share of the commands
					res, fd := runCounted(t, dev, g, place, at, 0)
					defer res.Close()
					require.True(t, fd.Lost())
					require.NoError(t, res.Err(), "seed %d", seed)
					assert.Equal(t, want, uint64Of(t, res, total), "seed %d: lost %s after %d commands", seed, dev.ID(), at)
					require.NotNil(t, res.Report.Lost)
					assert.Equal(t, dev.ID(), *res.Report.Lost)
					for _, m := range res.Report.Migrations {
						assert.Equal(t, topology.CPU, m.To, "seed %d: %s", seed, m.Kernel)
					}
					if after == 0 {
						assert.Len(t, res.Report.Migrations, n, "seed %d: every scale kernel moves", seed)
					}
					t.Logf("seed %d: %d migrations, reruns %v", seed, len(res.Report.Migrations), res.Report.Reruns)
				})
			}
		}
		t.Run(cd.name+"/opencl only", func(t *testing.T) {
			dev := faultdev.New(cd.make(t, 1), 0, 0)
			e := cpuAnd(t, 1, dev)
			g, total, _ := scaleGraph(1, 2, w, false)
			p, err := e.Plan(g)
			require.NoError(t, err)
			t.Cleanup(p.ReleaseDeviceMemory) // before the device's leak check
			res, err := e.Execute(t.Context(), p)
			require.NoError(t, err)
			defer res.Close()
			require.Error(t, res.Err())
			assert.ErrorIs(t, res.Err(), gpu.ErrDeviceLost)
			assert.Contains(t, res.Err().Error(), `kernel "scale0" ran on `+dev.ID().String()+", which was lost, and no other device has code for it")
			_, err = res.Buffer(total)
			assert.ErrorIs(t, err, gpu.ErrDeviceLost)
		})
	}
}

// A buffer a host kernel reads part of is copied back only in that part
// by the run; a Result's read of the whole buffer fetches the rest.
func TestCodeDeviceFetchTheRest(t *testing.T) {
	const w = 8
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			g := dag.New()
			a, mid, first := g.AddBuffer("a", 8*w), g.AddBuffer("mid", 8*w), g.AddBuffer("first", 8)
			g.AddKernel("src", func(_ context.Context, l dag.Launch) error {
				for j := range w {
					binary.LittleEndian.PutUint64(bytesOf(l, a)[8*j:], uint64(10+j))
				}
				return nil
			}, dag.Writes(a))
			g.AddKernel("scale", nil, dag.Reads(a), dag.Writes(mid),
				dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(a), dag.BufferArg(mid), dag.ScalarArg(uint64(2)), dag.ScalarArg(uint64(1))))
			g.AddKernel("head", func(_ context.Context, l dag.Launch) error {
				copy(bytesOf(l, first), bytesOf(l, mid))
				return nil
			}, dag.ReadsRange(mid, 0, 8), dag.Writes(first))
			e := cpuAnd(t, 1, cd.make(t, 1))
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			var back []string
			for _, c := range res.Report.Copies {
				if c.To == topology.CPU {
					back = append(back, fmt.Sprint(c.Buffer, " ", c.Bytes))
				}
			}
			assert.Equal(t, []string{"mid 8"}, back, "one copy back, of the part the host kernel reads")
			assert.Equal(t, uint64(21), uint64Of(t, res, first))
			b, err := res.Buffer(mid)
			require.NoError(t, err)
			for j := range w {
				assert.Equal(t, uint64(10+j)*2+1, u64(b.Bytes(), 8*j), "mid[%d]", j)
			}
		})
	}
}
