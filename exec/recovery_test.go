package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"sync/atomic"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/internal/faultdev"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/topology"
)

// A merge that reads its inputs optionally does not run on a result the
// device loss left partial: it waits for the recovery, so its consumer
// (which writes outside the graph) runs once, on the whole result.
func TestDeviceLossRunsConsumersOnce(t *testing.T) {
	for _, at := range []float64{0, 0.3, 0.6} {
		t.Run(fmt.Sprint("after=", at), func(t *testing.T) {
			e := twoSimGPUs(t, 2, sim.WithLoss(topology.GPU(1), at))
			g := dag.New()
			var parts []dag.BufferID
			for i := range 4 {
				b := g.AddBuffer(fmt.Sprint("part", i), 8)
				parts = append(parts, b)
				g.AddKernel(fmt.Sprint("source", i), putU64(b, 0, uint64(i+1), nil), dag.Writes(b), dag.PreferDevice(topology.GPU(i%2)))
			}
			merged, out := g.AddBuffer("merged", 8), g.AddBuffer("out", 8)
			g.AddKernel("merge", func(_ context.Context, l dag.Launch) error {
				var sum uint64
				for _, p := range parts {
					if l.Missing(p) == nil {
						sum += binary.LittleEndian.Uint64(bytesOf(l, p))
					}
				}
				binary.LittleEndian.PutUint64(bytesOf(l, merged), sum)
				return nil
			}, dag.ReadsOptional(parts...), dag.Writes(merged), dag.PreferDevice(topology.GPU(0)))
			var writes atomic.Int32
			var written atomic.Uint64
			g.AddKernel("write", func(_ context.Context, l dag.Launch) error {
				writes.Add(1)
				written.Store(binary.LittleEndian.Uint64(bytesOf(l, merged)))
				copy(bytesOf(l, out), bytesOf(l, merged))
				return nil
			}, dag.Reads(merged), dag.Writes(out), dag.PreferDevice(topology.GPU(0)))
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			require.NotNil(t, res.Report.Lost)
			assert.Equal(t, int32(1), writes.Load(), "the consumer ran once")
			assert.Equal(t, uint64(1+2+3+4), written.Load(), "on the whole result")
			b, err := res.Buffer(out)
			require.NoError(t, err)
			assert.Equal(t, uint64(10), binary.LittleEndian.Uint64(b.Bytes()))
		})
	}
}

// Losing gpu0 loses nothing the caller can still read: inputs come back
// from the host's copy, buffers that lived on the lost device are
// recomputed even when every reader had already run, and every buffer
// reads as on one device.
func TestDeviceLossIsTransparent(t *testing.T) {
	for _, at := range []float64{0, 0.5, 1} {
		t.Run(fmt.Sprint("after=", at), func(t *testing.T) {
			e := twoSimGPUs(t, 1, sim.WithLoss(topology.GPU(0), at))
			g := dag.New()
			in := dag.AddValue[int](g, "in", dag.Input())
			a, b, c := dag.AddValue[int](g, "a"), dag.AddValue[int](g, "b"), dag.AddValue[int](g, "c")
			double := func(in, out dag.Value[int]) dag.KernelFunc {
				return func(_ context.Context, l dag.Launch) error {
					v, err := dag.Get(l, in)
					if err != nil {
						return err
					}
					return dag.Put(l, out, 2*v)
				}
			}
			g.AddKernel("ka", double(in, a), dag.Reads(in.ID()), dag.Writes(a.ID()), dag.PreferDevice(topology.GPU(0)))
			g.AddKernel("kb", double(in, b), dag.Reads(in.ID()), dag.Writes(b.ID()), dag.PreferDevice(topology.GPU(1)))
			g.AddKernel("kc", double(a, c), dag.Reads(a.ID()), dag.Writes(c.ID()), dag.PreferDevice(topology.GPU(1)))
			res, err := e.Run(t.Context(), g, exec.WithInput(in.ID(), 21))
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			require.NotNil(t, res.Report.Lost)
			for _, k := range g.Kernels() {
				assert.Equal(t, exec.StatusOK, statuses(res.Report)[k.Name], k.Name)
			}
			for _, want := range []struct {
				id dag.BufferID
				v  int
			}{{in.ID(), 21}, {a.ID(), 42}, {b.ID(), 42}, {c.ID(), 84}} {
				v, err := res.Value(want.id)
				require.NoError(t, err, "buffer %d", want.id)
				assert.Equal(t, want.v, v, "buffer %d", want.id)
			}
		})
	}
}

// A recovery that cannot start (its memory cannot be reserved before ctx
// ends) is an error from Execute, not a panic. The kernel that ends ctx
// is the lost device's only launch: the device reports its loss when
// that launch's completion is published, on the kernel's own stream, so
// the run has met the loss before anything can see ctx end (a list
// withdrawn because ctx ended first never reports a loss), and the
// recovery, which must run the kernel again for the bytes lost with the
// device, finds ctx done when it reserves them.
func TestDeviceLossFailedRecoveryIsAnError(t *testing.T) {
	for run := range 100 { // the order held in every run, not by chance
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			e := twoSimGPUs(t, 1, sim.WithLossAfter(topology.GPU(1), 1))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			g := dag.New()
			y := g.AddBuffer("y", 8)
			g.AddKernel("cancel", func(context.Context, dag.Launch) error { cancel(); return nil }, dag.Writes(y), dag.PreferDevice(topology.GPU(1)))
			res, err := e.Run(ctx, g)
			if res != nil {
				res.Close()
			}
			require.Nil(t, res)
			require.ErrorIs(t, err, context.Canceled)
			assert.ErrorContains(t, err, "exec: recover from losing gpu1")
		})
	}
}

// soleInput is an input value with Release but no Retain, so its buffer
// holds its only reference: it counts its releases, and the reads made
// after the first. Copies to another device are values of their own.
type soleInput struct {
	v        int
	releases atomic.Int32
	late     atomic.Int32 // reads after the first release
}

func (s *soleInput) Release() { s.releases.Add(1) }

func (s *soleInput) get() int {
	if s.releases.Load() > 0 {
		s.late.Add(1)
	}
	return s.v
}

func (s *soleInput) CopyTo(memory.Allocator) (any, int64, error) {
	return &soleInput{v: s.get()}, 8, nil
}

// An input whose value cannot be retained is released exactly once,
// after its last read, whether the lost device held it (the recovery
// moves it to the second phase, or carries a copy) or not (it is
// carried), and whenever the loss comes.
func TestDeviceLossReleasesSoleInputOnce(t *testing.T) {
	for _, lose := range []topology.DeviceID{topology.GPU(0), topology.GPU(1)} {
		for _, at := range []float64{0, 0.5, 1} {
			t.Run(fmt.Sprintf("lose=%s/after=%g", lose, at), func(t *testing.T) {
				e := twoSimGPUs(t, 1, sim.WithLoss(lose, at))
				g := dag.New()
				in := dag.AddValue[*soleInput](g, "in", dag.Input())
				a, b := dag.AddValue[int](g, "a"), dag.AddValue[int](g, "b")
				double := func(out dag.Value[int]) dag.KernelFunc {
					return func(_ context.Context, l dag.Launch) error {
						s, err := dag.Get(l, in)
						if err != nil {
							return err
						}
						return dag.Put(l, out, 2*s.get())
					}
				}
				g.AddKernel("ka", double(a), dag.Reads(in.ID()), dag.Writes(a.ID()), dag.PreferDevice(topology.GPU(0)))
				g.AddKernel("kb", double(b), dag.Reads(in.ID()), dag.Writes(b.ID()), dag.PreferDevice(topology.GPU(1)))
				p, err := e.Plan(g)
				require.NoError(t, err)
				home := p.Devices()[p.Buffers()[in.ID()].Device]
				v := &soleInput{v: 21}
				res, err := e.Execute(t.Context(), p, exec.WithInput(in.ID(), v))
				require.NoError(t, err)
				require.NoError(t, res.Err())
				require.NotNil(t, res.Report.Lost)
				for _, id := range []dag.BufferID{a.ID(), b.ID()} {
					got, err := res.Value(id)
					require.NoError(t, err)
					assert.Equal(t, 42, got, "buffer %d", id)
				}
				got, err := res.Value(in.ID())
				require.NoError(t, err)
				require.IsType(t, v, got)
				assert.Equal(t, 21, got.(*soleInput).get(), "the input reads as given")
				assert.Zero(t, got.(*soleInput).late.Load(), "the result's input was released (input on %s, %s lost)", home, lose)
				res.Close()
				assert.Equal(t, int32(1), v.releases.Load(), "releases (input on %s, %s lost)", home, lose)
				assert.Zero(t, v.late.Load(), "reads after a release (input on %s, %s lost)", home, lose)
			})
		}
	}
}

// Losing a code device gives back every byte the run reserved: the
// bytes of a buffer whose final version was on the lost device alone
// (its host bytes made only by a fetch that cannot come) included, at
// every command of the run where the device can report its loss.
func TestCodeDeviceLossGivesBackItsBudget(t *testing.T) {
	const w = 8
	d := newFakeCode(topology.OpenCL(7), 1, fakeKernels)
	t.Cleanup(func() {
		require.NoError(t, d.Close())
		assert.Zero(t, d.live())
	})
	count := faultdev.New(d, math.MaxInt64, 0)
	g, in, _ := keptGraph(w)
	res, err := cpuAnd(t, 1, count).Run(t.Context(), g, exec.WithInput(in, uint64(2)))
	require.NoError(t, err)
	require.NoError(t, res.Err())
	res.Close()
	commands := count.Commands()
	require.Positive(t, commands)
	for after := range commands {
		t.Run(fmt.Sprint("after=", after), func(t *testing.T) {
			budget := buffers.NewBudget(1 << 20)
			fd := faultdev.New(d, after, 0)
			e := cpuAnd(t, 1, fd, exec.WithBudget(budget))
			g, in, out := keptGraph(w)
			res, err := e.Run(t.Context(), g, exec.WithInput(in, uint64(2)))
			require.NoError(t, err)
			require.True(t, fd.Lost())
			require.NotNil(t, res.Report.Lost)
			_, err = res.Buffer(out)
			require.ErrorIs(t, err, gpu.ErrDeviceLost, "out was computed by OpenCL code alone")
			res.Close()
			require.True(t, budget.TryAcquire(1<<20), "the run gave every byte back")
			budget.Release(1 << 20)
			assert.Zero(t, d.live())
		})
	}
}

// A kernel of a lost code device moves to the least loaded surviving
// device that has code for it, counting only such devices: here the CPU
// device holds the fewest kernels but runs no OpenCL C, so the OpenCL-only
// kernel of the lost device goes to the code device with 2 kernels, not
// to the one with 3 (nor to the first code device that has code for it).
func TestCodeDeviceLossMovesToLeastLoadedCodeDevice(t *testing.T) {
	const w = 4
	devs := []*fakeCode{newFakeCode(topology.OpenCL(1), 1, fakeKernels), newFakeCode(topology.OpenCL(2), 1, fakeKernels),
		newFakeCode(topology.OpenCL(3), 1, fakeKernels)}
	t.Cleanup(func() {
		for _, d := range devs {
			require.NoError(t, d.Close())
		}
	})
	host, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, host.Close()) })
	lossy := faultdev.New(devs[0], 0, 0) // lost at its first command
	e, err := exec.NewMulti([]gpu.Device{host, lossy, devs[1], devs[2]}, nil, exec.WithAllocator(leaktest.Allocator(t)))
	require.NoError(t, err)
	g := dag.New()
	a := g.AddBuffer("a", 8*w)
	g.AddKernel("src", func(_ context.Context, l dag.Launch) error {
		for j := range w {
			binary.LittleEndian.PutUint64(bytesOf(l, a)[8*j:], uint64(j))
		}
		return nil
	}, dag.Writes(a))
	place := []int{0} // src on the CPU device
	var outs []dag.BufferID
	for i, d := range []int{1, 2, 2, 2, 3, 3} { // the moving kernel on opencl1; 3 on opencl2, 2 on opencl3
		s := g.AddBuffer(fmt.Sprint("s", i), 8*w)
		g.AddKernel(fmt.Sprint("scale", i), nil, dag.Reads(a), dag.Writes(s),
			dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(a), dag.BufferArg(s), dag.ScalarArg(uint64(3)), dag.ScalarArg(uint64(i))))
		place, outs = append(place, d), append(outs, s)
	}
	p, err := exec.PlanPlaced(e, g, place)
	require.NoError(t, err)
	res, err := e.Execute(t.Context(), p)
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())
	assert.Equal(t, []exec.Migration{{Kernel: "scale0", From: topology.OpenCL(1), To: topology.OpenCL(3)}}, res.Report.Migrations)
	for i, s := range outs {
		v, err := res.Buffer(s)
		require.NoError(t, err, "s%d", i)
		b := v.Bytes()
		for j := range w {
			assert.Equal(t, uint64(3*j+i), binary.LittleEndian.Uint64(b[8*j:]), "s%d[%d]", i, j)
		}
	}
}
