package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/internal/faultdev"
	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// codePair is two code devices of one kind under test, and how many
// bytes each has allocated (nil where the device does not say).
type codePair struct {
	name string
	make func(t *testing.T) (a, b gpu.CodeDevice, live func(gpu.CodeDevice) int64)
}

// codePairs returns the pairs of code devices the drain tests run on: two
// fake ones, and two devices of the machine's first OpenCL device (the
// case skips where there is none, and fails under CI).
func codePairs() []codePair {
	fakeLive := func(d gpu.CodeDevice) int64 { return d.(*fakeCode).live() }
	return []codePair{
		{"fake", func(t *testing.T) (gpu.CodeDevice, gpu.CodeDevice, func(gpu.CodeDevice) int64) {
			return fakeDevice(t, 7, 2), fakeDevice(t, 8, 2), fakeLive
		}},
		{"opencl", func(t *testing.T) (gpu.CodeDevice, gpu.CodeDevice, func(gpu.CodeDevice) int64) {
			a := openCLDevice(t, 2)
			ds, err := opencl.Devices()
			require.NoError(t, err)
			b, err := opencl.NewDevice(ds[0], opencl.WithStreams(2), opencl.WithIndex(1))
			require.NoError(t, err)
			t.Cleanup(func() { require.NoError(t, b.Close()) })
			return a, b, nil
		}},
	}
}

// fakeDevice returns a fake code device openclN with streams streams,
// closed at cleanup, which checks that it has no memory left allocated.
func fakeDevice(t *testing.T, n, streams int) *fakeCode {
	d := newFakeCode(topology.OpenCL(n), streams, fakeKernels)
	t.Cleanup(func() {
		require.NoError(t, d.Close())
		assert.Zero(t, d.live(), "device memory left allocated on %s", d.ID())
	})
	return d
}

// readMem returns the bytes of m, memory of code device d.
func readMem(t *testing.T, d gpu.Device, m gpu.Memory) []byte {
	t.Helper()
	require.NotNil(t, m)
	b := make([]byte, m.Bytes())
	s := d.Stream(0).(gpu.CodeStream)
	_, err := s.CopyOut(b, m, 0)
	require.NoError(t, err)
	require.NoError(t, s.Record().Wait(t.Context()))
	return b
}

// ulongsOf returns b as little-endian ulongs.
func ulongsOf(b []byte) []uint64 {
	out := make([]uint64, len(b)/8)
	for j := range out {
		out[j] = binary.LittleEndian.Uint64(b[8*j:])
	}
	return out
}

// keptRun runs p once with base, keeping its device memory, and checks
// the answer.
func keptRun(t *testing.T, e *exec.Executor, p *exec.Plan, in, out dag.BufferID, base uint64, w int) *exec.Report {
	t.Helper()
	res, err := e.Execute(t.Context(), p, exec.WithInput(in, base), exec.WithKeepDeviceMemory())
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, keptWant(base, w), keptOut(t, res, out, w))
	return res.Report
}

// launchesOn counts the launches of rep on dev.
func launchesOn(rep *exec.Report, dev topology.DeviceID) int {
	n := 0
	for _, l := range rep.Launches() {
		if l.Device == dev {
			n++
		}
	}
	return n
}

// Draining a code device the coordinator unregisters moves its kernels to
// the other code device, and the device memory the plan kept there (the
// resident buffers a, mid and out) reaches the target as checkpoints,
// byte for byte; the next run launches nothing on the drained device,
// allocates nothing on the target, and gives the same answer.
func TestDrainMovesResidentBuffers(t *testing.T) {
	const w = 16
	for _, cp := range codePairs() {
		t.Run(cp.name, func(t *testing.T) {
			a, b, live := cp.make(t)
			e := cpuWith(t, 2, []gpu.Device{a, b})
			g, in, out := keptGraph(w)
			p, err := exec.PlanPlaced(e, g, []int{0, 1, 1}) // src on the CPU; first, second on a
			require.NoError(t, err)
			t.Cleanup(p.ReleaseDeviceMemory)
			const base = 1000
			rep := keptRun(t, e, p, in, out, base, w)
			require.Positive(t, launchesOn(rep, a.ID()))

			c, err := placement.NewCoordinator()
			require.NoError(t, err)
			for _, d := range []gpu.Device{a, b} {
				c.Register(placement.DeviceInfo{ID: d.ID()})
			}
			for k, d := range p.Placement().Device {
				if d > 0 {
					require.NoError(t, c.Assign(g.KernelName(dag.KernelID(k)), p.Devices()[d]))
				}
			}
			un, err := c.Unregister(a.ID())
			require.NoError(t, err)
			p2, mr, err := e.Drain(t.Context(), p, a.ID(), un.Migrations)
			require.NoError(t, err)
			t.Cleanup(p2.ReleaseDeviceMemory)

			assert.Equal(t, a.ID(), mr.Device)
			assert.Equal(t, []exec.Migration{{Kernel: "first", From: a.ID(), To: b.ID()}, {Kernel: "second", From: a.ID(), To: b.ID()}}, mr.Migrations)
			assert.Empty(t, mr.Failed)
			var names []string
			var sum exec.MigrationStats
			for _, bm := range mr.Buffers {
				names = append(names, bm.Buffer)
				assert.NoError(t, bm.Err)
				assert.Zero(t, bm.Phase)
				assert.Equal(t, a.ID(), bm.From)
				assert.Equal(t, b.ID(), bm.To)
				assert.Equal(t, int64(8*w), bm.Bytes)
				sum.Checkpoint += bm.Checkpoint
				sum.Transfer += bm.Transfer
				sum.Restore += bm.Restore
			}
			assert.Equal(t, []string{"a", "mid", "out"}, names, "each resident buffer once, by kernel, reads first")
			assert.Equal(t, exec.MigrationStats{Migrated: 2, Checkpoints: 3, BytesMoved: 3 * 8 * w,
				Checkpoint: sum.Checkpoint, Transfer: sum.Transfer, Restore: sum.Restore}, mr.Stats)

			// The checkpoints on the target hold the last run's bytes.
			wantA, wantMid := make([]uint64, w), make([]uint64, w)
			for j := range w {
				wantA[j] = base + uint64(j)
				wantMid[j] = wantA[j]*3 + 1
			}
			for _, x := range []struct {
				buf  dag.BufferID
				want []uint64
			}{{dag.BufferID(1), wantA}, {dag.BufferID(2), wantMid}, {out, keptWant(base, w)}} {
				assert.Nil(t, exec.KeptMemory(p2, x.buf, a.ID()), "nothing kept on the drained device")
				assert.Equal(t, x.want, ulongsOf(readMem(t, b, exec.KeptMemory(p2, x.buf, b.ID()))), "%s on the target", g.Buffer(x.buf).Name)
			}
			if live != nil {
				assert.Zero(t, live(a), "the drained device keeps no memory")
				assert.Equal(t, int64(3*8*w), live(b))
			}

			allocs := 0
			if f, ok := b.(*fakeCode); ok {
				allocs = f.allocCount()
			}
			for _, base := range []uint64{base, 77} {
				rep := keptRun(t, e, p2, in, out, base, w)
				assert.Zero(t, launchesOn(rep, a.ID()), "no launch on the drained device")
				assert.Positive(t, launchesOn(rep, b.ID()))
				if f, ok := b.(*fakeCode); ok {
					assert.Equal(t, allocs, f.allocCount(), "the run takes the migrated memory")
				}
			}
		})
	}
}

// A migration whose transfer fails (the target reports its loss at the
// first copy into it) leaves its kernel on the drained device with the
// reason; the kernel whose buffers reached their target moves; the
// counts and bytes are exact, the failed target keeps nothing, and the
// next run is no loss: it gives the same answer with the kernel still on
// the drained device.
func TestDrainFailedTransferKeepsKernel(t *testing.T) {
	const w = 8
	a, bad, c := fakeDevice(t, 1, 2), fakeDevice(t, 2, 2), fakeDevice(t, 3, 2)
	fb := faultdev.New(bad, 0, 0)
	e := cpuWith(t, 2, []gpu.Device{a, fb, c})
	g, in, out := keptGraph(w)
	p, err := exec.PlanPlaced(e, g, []int{0, 1, 1})
	require.NoError(t, err)
	t.Cleanup(p.ReleaseDeviceMemory)
	keptRun(t, e, p, in, out, 5, w)
	p2, mr, err := e.Drain(t.Context(), p, a.ID(), []placement.MigrationPlan{
		{Kernel: "first", Source: a.ID(), Target: c.ID()},
		{Kernel: "second", Source: a.ID(), Target: fb.ID()},
	})
	require.NoError(t, err)
	t.Cleanup(p2.ReleaseDeviceMemory)
	require.True(t, fb.Lost())

	assert.Equal(t, []exec.Migration{{Kernel: "first", From: a.ID(), To: c.ID()}}, mr.Migrations)
	require.Len(t, mr.Failed, 1)
	f := mr.Failed[0]
	assert.Equal(t, exec.Migration{Kernel: "second", From: a.ID(), To: fb.ID()}, f.Migration)
	assert.ErrorIs(t, f.Err, gpu.ErrDeviceLost)
	assert.ErrorContains(t, f.Err, `exec: kernel "second" stays on opencl1: exec: migrate "mid" opencl1→opencl2: transfer: `)
	require.Len(t, mr.Buffers, 3)
	for i, want := range []struct {
		buf   string
		to    topology.DeviceID
		phase exec.MigrationPhase
	}{{"a", c.ID(), 0}, {"mid", c.ID(), 0}, {"mid", fb.ID(), exec.PhaseTransfer}} {
		bm := mr.Buffers[i]
		assert.Equal(t, want.buf, bm.Buffer, "buffer %d", i)
		assert.Equal(t, want.to, bm.To, "buffer %d", i)
		assert.Equal(t, want.phase, bm.Phase, "buffer %d", i)
		assert.Equal(t, want.phase != 0, bm.Err != nil, "buffer %d: %v", i, bm.Err)
		if want.phase != 0 {
			assert.Zero(t, bm.Restore, "no restore after a failed transfer")
		}
	}
	assert.Equal(t, 1, mr.Stats.Migrated)
	assert.Equal(t, 1, mr.Stats.Failed)
	assert.Equal(t, 2, mr.Stats.Checkpoints)
	assert.Equal(t, 1, mr.Stats.FailedCheckpoints)
	assert.Equal(t, int64(2*8*w), mr.Stats.BytesMoved)
	assert.Zero(t, bad.live(), "the failed target keeps no memory")
	assert.Equal(t, int64(2*8*w), c.live(), "a and mid reached the target")
	assert.Equal(t, []uint64{(5*3 + 1), (6*3 + 1), (7*3 + 1)}, ulongsOf(readMem(t, c, exec.KeptMemory(p2, 2, c.ID())))[:3])

	placed := p2.Placement().Device
	assert.Equal(t, []int{0, 3, 1}, placed, "first on its target, second where it was")
	for _, base := range []uint64{5, 9} {
		rep := keptRun(t, e, p2, in, out, base, w)
		assert.Nil(t, rep.Lost, "a failed migration is not a loss")
		assert.Zero(t, launchesOn(rep, fb.ID()))
		assert.Positive(t, launchesOn(rep, a.ID()), "the kernel that stayed runs where it was")
	}

	// A second drain, to a target that works, moves the kernel that
	// stayed: its buffers on a (mid, copied in, and out) go to c.
	p3, mr, err := e.Drain(t.Context(), p2, a.ID(), []placement.MigrationPlan{{Kernel: "second", Source: a.ID(), Target: c.ID()}})
	require.NoError(t, err)
	t.Cleanup(p3.ReleaseDeviceMemory)
	assert.Equal(t, []exec.Migration{{Kernel: "second", From: a.ID(), To: c.ID()}}, mr.Migrations)
	assert.Empty(t, mr.Failed)
	assert.Equal(t, exec.MigrationStats{Migrated: 1, Checkpoints: 2, BytesMoved: 2 * 8 * w,
		Checkpoint: mr.Buffers[0].Checkpoint + mr.Buffers[1].Checkpoint, Transfer: mr.Buffers[0].Transfer + mr.Buffers[1].Transfer,
		Restore: mr.Buffers[0].Restore + mr.Buffers[1].Restore}, mr.Stats)
	assert.Equal(t, keptWant(9, w), ulongsOf(readMem(t, c, exec.KeptMemory(p3, out, c.ID()))), "the last run's out reached c")
	assert.Zero(t, a.live(), "a keeps nothing once drained")
	assert.Equal(t, []int{0, 3, 3}, p3.Placement().Device)
	rep := keptRun(t, e, p3, in, out, 11, w)
	assert.Zero(t, launchesOn(rep, a.ID()))
	assert.Zero(t, launchesOn(rep, fb.ID()))
}

// Bad drains are errors that name what is wrong, and change nothing.
func TestDrainErrors(t *testing.T) {
	a, b := fakeDevice(t, 1, 2), fakeDevice(t, 2, 2)
	e := cpuWith(t, 2, []gpu.Device{a, b})
	g, in, out := keptGraph(8)
	p, err := exec.PlanPlaced(e, g, []int{0, 1, 1})
	require.NoError(t, err)
	t.Cleanup(p.ReleaseDeviceMemory)
	keptRun(t, e, p, in, out, 1, 8)
	kept := a.live()
	for _, tc := range []struct {
		name  string
		dev   topology.DeviceID
		moves []placement.MigrationPlan
		want  string
	}{
		{"unknown device", topology.GPU(4), nil, "exec: drain gpu4: not a device of the plan"},
		{"last host", topology.CPU, nil, "exec: drain cpu: it is the plan's last device that is not a code device"},
		{"unknown kernel", a.ID(), []placement.MigrationPlan{{Kernel: "nope", Source: a.ID(), Target: b.ID()}}, `kernel "nope", which the graph does not have`},
		{"not on the device", a.ID(), []placement.MigrationPlan{{Kernel: "src", Source: a.ID(), Target: b.ID()}}, `move of kernel "src" from opencl1: the plan runs it on cpu`},
		{"no code there", a.ID(), []placement.MigrationPlan{{Kernel: "first", Source: a.ID(), Target: topology.CPU}}, `kernel "first" cannot move to cpu`},
		{"to itself", a.ID(), []placement.MigrationPlan{{Kernel: "first", Source: a.ID(), Target: a.ID()}}, `kernel "first" cannot move to opencl1`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p2, mr, err := e.Drain(t.Context(), p, tc.dev, tc.moves)
			require.Error(t, err)
			assert.Nil(t, p2)
			assert.Nil(t, mr)
			assert.ErrorContains(t, err, tc.want)
			assert.Equal(t, kept, a.live(), "the plan keeps its memory")
		})
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, _, err = e.Drain(ctx, p, a.ID(), nil)
	require.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "exec: drain opencl1: ")
	assert.Equal(t, kept, a.live(), "the plan keeps its memory")

	// An OpenCL-only kernel with no other code device stays, with why.
	e1 := cpuWith(t, 2, []gpu.Device{a})
	p1, err := exec.PlanPlaced(e1, g, []int{0, 1, 1})
	require.NoError(t, err)
	p2, mr, err := e1.Drain(t.Context(), p1, a.ID(), nil)
	require.NoError(t, err)
	assert.Empty(t, mr.Migrations)
	require.Len(t, mr.Failed, 2)
	assert.ErrorContains(t, mr.Failed[0].Err, `exec: kernel "first" stays on opencl1: no other device that is not drained has code for it`)
	assert.Equal(t, []int{0, 1, 1}, p2.Placement().Device)
}

// On simulated GPUs of a real machine (the DGX-1's topology as its
// description in the shared topologies gives it; the test skips without
// them, and fails under CI), where nothing is resident (their buffers are
// host memory, released when a run ends), draining the GPUs the
// coordinator unregisters one after the other moves their kernels where
// it plans, copies no bytes, and every later run launches nothing on a
// drained GPU and gives the same answer.
func TestDrainSimulatedGPUs(t *testing.T) {
	const n, w = 8, 4
	desc, err := os.ReadFile(testdata.TopologyFile(t, "dgx1-v100.json"))
	require.NoError(t, err)
	m, err := topology.ParseMachine(desc)
	require.NoError(t, err)
	e, topo := simExecutor(t, m, 2, nil, exec.WithPlacement(exec.PlaceRoundRobin))
	g, total, want := scaleGraph(3, n, w, true)
	p, err := e.Plan(g)
	require.NoError(t, err)
	c, err := placement.NewCoordinator(placement.WithTopology(topo))
	require.NoError(t, err)
	for _, d := range e.Devices() {
		c.Register(placement.DeviceInfo{ID: d.ID()})
	}
	for k, d := range p.Placement().Device {
		require.NoError(t, c.Assign(g.KernelName(dag.KernelID(k)), p.Devices()[d]))
	}
	var drained []topology.DeviceID
	for _, dev := range []topology.DeviceID{topology.GPU(3), topology.GPU(0)} {
		on := c.KernelsOn(dev)
		require.NotEmpty(t, on, "%s has kernels to move", dev)
		un, err := c.Unregister(dev)
		require.NoError(t, err)
		require.Empty(t, un.Orphaned)
		p2, mr, err := e.Drain(t.Context(), p, dev, un.Migrations)
		require.NoError(t, err)
		drained = append(drained, dev)
		p = p2
		require.Len(t, mr.Migrations, len(on))
		for i, m := range mr.Migrations {
			k, _ := g.KernelByName(m.Kernel)
			assert.Equal(t, m.To, p.Devices()[p.Placement().Device[k]], "%s where the coordinator sent it", m.Kernel)
			to, _ := c.DeviceOf(m.Kernel)
			assert.Equal(t, to, m.To)
			assert.Equal(t, dev, m.From, "migration %d", i)
		}
		assert.Empty(t, mr.Failed)
		assert.Empty(t, mr.Buffers)
		assert.Equal(t, exec.MigrationStats{Migrated: len(on)}, mr.Stats)
		for run := range 2 {
			res, err := e.Execute(t.Context(), p)
			require.NoError(t, err)
			assert.Equal(t, want, uint64Of(t, res, total), "after draining %v, run %d", drained, run)
			for _, d := range drained {
				assert.Zero(t, launchesOn(res.Report, d), "no launch on drained %s", d)
			}
			res.Close()
		}
	}
}

// ExampleExecutor_Drain removes a GPU gracefully: the coordinator plans
// where its kernels go, the executor moves them (and the device memory
// the plan keeps there), and the next run launches nothing on it.
func ExampleExecutor_Drain() {
	gpus := []topology.DeviceFacts{{ID: topology.GPU(0)}, {ID: topology.GPU(1)}, {ID: topology.GPU(2)}}
	set, err := sim.New(gpus)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Close()
	e, _ := exec.NewMulti(set.Devices(), nil, exec.WithPlacement(exec.PlaceRoundRobin))
	g := dag.New()
	var parts []dag.BufferID
	for i := range 3 {
		b := g.AddBuffer(fmt.Sprint("v", i), 8)
		parts = append(parts, b)
		g.AddKernel(fmt.Sprint("part", i), func(_ context.Context, l dag.Launch) error {
			out, err := dag.Bytes(l, b)
			if err != nil {
				return err
			}
			binary.LittleEndian.PutUint64(out, uint64(i+1))
			return nil
		}, dag.Writes(b))
	}
	sum := g.AddBuffer("total", 8)
	g.AddKernel("sum", func(_ context.Context, l dag.Launch) error {
		var v uint64
		for _, part := range parts {
			in, err := dag.Bytes(l, part)
			if err != nil {
				return err
			}
			v += binary.LittleEndian.Uint64(in)
		}
		out, err := dag.Bytes(l, sum)
		if err != nil {
			return err
		}
		binary.LittleEndian.PutUint64(out, v)
		return nil
	}, dag.Reads(parts...), dag.Writes(sum))
	p, err := e.Plan(g)
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := placement.NewCoordinator()
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, d := range e.Devices() {
		c.Register(placement.DeviceInfo{ID: d.ID()})
	}
	for k, d := range p.Placement().Device {
		_ = c.Assign(g.KernelName(dag.KernelID(k)), p.Devices()[d])
	}
	un, _ := c.Unregister(topology.GPU(1))
	p, rep, err := e.Drain(context.Background(), p, topology.GPU(1), un.Migrations)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("moved:", rep.Migrations)
	fmt.Printf("stats: %+v\n", rep.Stats)
	res, err := e.Execute(context.Background(), p)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer res.Close()
	b, _ := res.Buffer(sum)
	onGPU1 := 0
	for _, l := range res.Report.Launches() {
		if l.Device == topology.GPU(1) {
			onGPU1++
		}
	}
	fmt.Println("sum:", binary.LittleEndian.Uint64(b.Bytes()), "launches on gpu1:", onGPU1)
	// Output:
	// moved: [{part1 gpu1 gpu2}]
	// stats: {Migrated:1 Failed:0 Checkpoints:0 FailedCheckpoints:0 BytesMoved:0 Checkpoint:0s Transfer:0s Restore:0s}
	// sum: 6 launches on gpu1: 0
}

// A drained plan's recovery from a lost device moves no kernel to the
// drained device: the lost GPU's kernels go to the others, and the answer
// is the same.
func TestDrainedPlanRecoversElsewhere(t *testing.T) {
	const n, w = 8, 4
	drained, lost := topology.GPU(3), topology.GPU(1)
	e, _ := lossyMachine(t, "dgx1-v100", 1, sim.WithLoss(lost, 0.5), exec.WithPlacement(exec.PlaceRoundRobin))
	g, total, want := scaleGraph(5, n, w, true)
	p, err := e.Plan(g)
	require.NoError(t, err)
	p, mr, err := e.Drain(t.Context(), p, drained, nil)
	require.NoError(t, err)
	require.NotEmpty(t, mr.Migrations, "the executor spreads the kernels itself")
	assert.Empty(t, mr.Failed)
	res, err := e.Execute(t.Context(), p)
	require.NoError(t, err)
	defer res.Close()
	require.NotNil(t, res.Report.Lost)
	assert.Equal(t, lost, *res.Report.Lost)
	require.NotEmpty(t, res.Report.Migrations)
	for _, m := range res.Report.Migrations {
		assert.NotEqual(t, drained, m.To, "%s moved to the drained device", m.Kernel)
	}
	assert.Zero(t, launchesOn(res.Report, drained))
	assert.Equal(t, want, uint64Of(t, res, total))
}

// A target whose budget cannot take a checkpoint fails that migration at
// its transfer with buffers.ErrOverBudget: the kernel that needs it
// stays, the one whose buffers fit moves, and the next run fits.
func TestDrainOverBudgetKeepsKernel(t *testing.T) {
	const w = 8
	a, b := fakeDevice(t, 1, 2), fakeDevice(t, 2, 2)
	b.memBytes = 2 * 8 * w // room for a and mid, not out
	e := cpuWith(t, 2, []gpu.Device{a, b})
	g, in, out := keptGraph(w)
	p, err := exec.PlanPlaced(e, g, []int{0, 1, 1})
	require.NoError(t, err)
	t.Cleanup(p.ReleaseDeviceMemory)
	keptRun(t, e, p, in, out, 3, w)
	p2, mr, err := e.Drain(t.Context(), p, a.ID(), nil)
	require.NoError(t, err)
	t.Cleanup(p2.ReleaseDeviceMemory)
	assert.Equal(t, []exec.Migration{{Kernel: "first", From: a.ID(), To: b.ID()}}, mr.Migrations)
	require.Len(t, mr.Failed, 1)
	assert.ErrorIs(t, mr.Failed[0].Err, buffers.ErrOverBudget)
	assert.ErrorContains(t, mr.Failed[0].Err, `exec: kernel "second" stays on opencl1: exec: migrate "out" opencl1→opencl2: transfer: 64 bytes are not free in the budget of 128`)
	last := mr.Buffers[len(mr.Buffers)-1]
	assert.Equal(t, exec.PhaseTransfer, last.Phase)
	assert.Equal(t, "transfer", last.Phase.String())
	assert.Equal(t, 2, mr.Stats.Checkpoints)
	assert.Equal(t, 1, mr.Stats.FailedCheckpoints)
	assert.Equal(t, int64(2*8*w), b.live())
	rep := keptRun(t, e, p2, in, out, 4, w)
	assert.Positive(t, launchesOn(rep, a.ID()))
}

// A kernel pinned to the drained device stays there, with the reason,
// and still runs; the others move.
func TestDrainKeepsPinnedKernel(t *testing.T) {
	e := twoSimGPUs(t, 1)
	g := dag.New()
	x, y := g.AddBuffer("x", 8), g.AddBuffer("y", 8)
	g.AddKernel("pinned", putU64(x, 0, 7, nil), dag.Writes(x), dag.OnDevice(topology.GPU(1)))
	g.AddKernel("free", putU64(y, 0, 9, nil), dag.Writes(y))
	p, err := exec.PlanPlaced(e, g, []int{1, 1})
	require.NoError(t, err)
	p2, mr, err := e.Drain(t.Context(), p, topology.GPU(1), nil)
	require.NoError(t, err)
	assert.Equal(t, []exec.Migration{{Kernel: "free", From: topology.GPU(1), To: topology.GPU(0)}}, mr.Migrations)
	require.Len(t, mr.Failed, 1)
	assert.Equal(t, "pinned", mr.Failed[0].Kernel)
	assert.EqualError(t, mr.Failed[0].Err, `exec: kernel "pinned" stays on gpu1: it is pinned there`)
	assert.Equal(t, []int{1, 0}, p2.Placement().Device)
	res, err := e.Execute(t.Context(), p2)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, uint64(7), uint64Of(t, res, x))
	assert.Equal(t, uint64(9), uint64Of(t, res, y))
}
