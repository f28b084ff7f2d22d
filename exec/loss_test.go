package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/topology"
)

// sumGraph: 16 sources write 8-byte counters, 16 mappers double them, one
// reducer sums them all into out.
func sumGraph(pin *topology.DeviceID) (*dag.Graph, dag.BufferID) {
	g := dag.New()
	var mids []dag.BufferID
	for i := range 16 {
		src := g.AddBuffer(fmt.Sprint("src", i), 8)
		mid := g.AddBuffer(fmt.Sprint("mid", i), 8)
		opts := []dag.KernelOption{dag.Writes(src)}
		if pin != nil && i == 0 {
			opts = append(opts, dag.OnDevice(*pin))
		}
		g.AddKernel(fmt.Sprintf("source[%d]", i), func(_ context.Context, l dag.Launch) error {
			binary.LittleEndian.PutUint64(bytesOf(l, src), uint64(i+1))
			return nil
		}, opts...)
		g.AddKernel(fmt.Sprintf("map[%d]", i), func(_ context.Context, l dag.Launch) error {
			binary.LittleEndian.PutUint64(bytesOf(l, mid), 2*binary.LittleEndian.Uint64(bytesOf(l, src)))
			return nil
		}, dag.Reads(src), dag.Writes(mid))
		mids = append(mids, mid)
	}
	out := g.AddBuffer("out", 8)
	g.AddKernel("reduce", func(_ context.Context, l dag.Launch) error {
		var sum uint64
		for _, mid := range mids {
			sum += binary.LittleEndian.Uint64(bytesOf(l, mid))
		}
		binary.LittleEndian.PutUint64(bytesOf(l, out), sum)
		return nil
	}, dag.Reads(mids...), dag.Writes(out))
	return g, out
}

// A simulated GPU that reports its loss part-way (after a share of its
// own launches): the kernels that had not run move by the placement
// engine's migration plan, lost buffers are recomputed, and the result is
// the same.
func TestDeviceLossRecovers(t *testing.T) {
	for _, at := range []float64{0, 0.25, 0.5, 0.9} {
		t.Run(fmt.Sprint("after=", at), func(t *testing.T) {
			e, _ := lossyMachine(t, "dgx1-v100", 1, sim.WithLoss(topology.GPU(3), at), exec.WithPlacement(exec.PlaceRoundRobin))
			g, out := sumGraph(nil)
			res, err := e.Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			b, err := res.Buffer(out)
			require.NoError(t, err)
			assert.Equal(t, uint64(2*16*17/2), binary.LittleEndian.Uint64(b.Bytes()))
			require.NotNil(t, res.Report.Lost)
			assert.Equal(t, topology.GPU(3), *res.Report.Lost)
			for _, m := range res.Report.Migrations {
				assert.Equal(t, topology.GPU(3), m.From)
				assert.NotEqual(t, topology.GPU(3), m.To)
			}
			if at == 0 {
				assert.NotEmpty(t, res.Report.Migrations, "round-robin placed kernels on gpu3")
			}
			final := map[string]exec.LaunchReport{} // each kernel's last launch
			for _, l := range res.Report.Launches() {
				final[l.Kernel] = l
			}
			for _, k := range g.Kernels() {
				assert.Equal(t, exec.StatusOK, final[k.Name].Status, k.Name)
			}
			for _, m := range res.Report.Migrations {
				assert.NotEqual(t, topology.GPU(3), final[m.Kernel].Device, "%s moved off gpu3", m.Kernel)
			}
			t.Logf("after %.2f: %d migrations, re-runs %v", at, len(res.Report.Migrations), res.Report.Reruns)
		})
	}
}

// readAll returns the bytes of every buffer of g in res, by name.
func readAll(t *testing.T, res *exec.Result, g *dag.Graph) map[string][]byte {
	t.Helper()
	bufs := map[string][]byte{}
	for id := range g.NumBuffers() {
		b, err := res.Buffer(dag.BufferID(id))
		require.NoError(t, err, g.Buffer(dag.BufferID(id)).Name)
		bufs[g.Buffer(dag.BufferID(id)).Name] = slices.Clone(b.Bytes())
	}
	return bufs
}

// lostAndRan counts res's launches lost with a device, and those that
// ran (StatusOK) on dev.
func lostAndRan(res *exec.Result, dev topology.DeviceID) (lost, ran int) {
	for _, l := range res.Report.Launches() {
		switch {
		case l.Status == exec.StatusLost:
			lost++
		case l.Device == dev && l.Status == exec.StatusOK:
			ran++
		}
	}
	return lost, ran
}

// A simulated GPU that reports its loss at any step of its lists (the
// publish after its nth launch returns the loss) leaves every buffer as
// the run without a loss does; the launches of the device from the loss
// on are reported lost, and so is the device. A second run on the same
// devices, whose lists the lost GPU takes and answers with its loss at
// their first publish, recovers alike.
func TestReportedLossGivesTheSameBuffers(t *testing.T) {
	lose := topology.GPU(3)
	e, _ := simMachine(t, "dgx1-v100", 2, exec.WithPlacement(exec.PlaceRoundRobin))
	g, _ := sumGraph(nil)
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	require.NoError(t, res.Err())
	require.Nil(t, res.Report.Lost)
	want := readAll(t, res, g)
	on := 0 // launches on the device to lose
	for _, l := range res.Report.Launches() {
		if l.Device == lose {
			on++
		}
	}
	res.Close()
	require.Greater(t, on, 2, "round-robin placed launches on %s", lose)
	for n := 1; n < on; n++ {
		t.Run(fmt.Sprint("after=", n), func(t *testing.T) {
			e, _ := lossyMachine(t, "dgx1-v100", 2, sim.WithLossAfter(lose, n), exec.WithPlacement(exec.PlaceRoundRobin))
			for run := range 2 {
				g, _ := sumGraph(nil)
				res, err := e.Run(t.Context(), g)
				require.NoError(t, err, "run %d", run)
				defer res.Close()
				require.NoError(t, res.Err(), "run %d", run)
				assert.Equal(t, want, readAll(t, res, g), "run %d", run)
				require.NotNil(t, res.Report.Lost, "run %d: the device's reported loss", run)
				assert.Equal(t, lose, *res.Report.Lost, "run %d", run)
				lost, ran := lostAndRan(res, lose)
				assert.Positive(t, lost, "run %d: launches lost with the device", run)
				if run == 0 {
					assert.LessOrEqual(t, ran, n+1, "at most the launches before the loss, and one per other stream, ran on %s", lose)
				} else {
					assert.Zero(t, ran, "the second run's lists ran nothing on the lost device")
				}
			}
		})
	}
}

// A kernel pinned to the lost device cannot move: its launch fails with an
// error naming the device; what depends on it is skipped.
func TestDeviceLossPinnedKernelFails(t *testing.T) {
	e, _ := lossyMachine(t, "dgx1-v100", 1, sim.WithLoss(topology.GPU(3), 0))
	pin := topology.GPU(3)
	g, out := sumGraph(&pin)
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	_, err = res.Buffer(out)
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
	assert.ErrorContains(t, err, "gpu3")
}

// A run on one device cannot recover from its loss: Execute returns the
// run's Result and an error naming the device, wrapping gpu.ErrDeviceLost;
// the launches are cancelled with the loss.
func TestDeviceLossOnTheOnlyDevice(t *testing.T) {
	set, err := sim.New([]topology.DeviceFacts{{ID: topology.GPU(0)}}, sim.WithLossAfter(topology.GPU(0), 1))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, set.Close()) })
	e, err := exec.NewMulti(set.Devices(), nil)
	require.NoError(t, err)
	g, out := sumGraph(nil)
	res, err := e.Run(t.Context(), g)
	require.NotNil(t, res)
	defer res.Close()
	require.ErrorIs(t, err, gpu.ErrDeviceLost)
	assert.ErrorContains(t, err, "exec: gpu0 refused the run's work: lost, and the run has no other device to recover on")
	assert.Nil(t, res.Report.Lost, "no recovery")
	assert.Equal(t, 1, res.Report.Count(exec.StatusOK), "the launch before the loss")
	_, err = res.Buffer(out)
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
}

// A simulated GPU lost in an earlier run takes the later runs' lists
// (gpu.Lister), whose first publish answers its loss: each later run
// reports the device lost, runs nothing on it, and every buffer holds what
// the CPU device alone gives.
func TestListsQueuedAfterTheLossGiveTheCPUAnswer(t *testing.T) {
	lose := topology.GPU(3)
	g, _ := sumGraph(nil)
	res, err := newExecutor(t, 2).Run(t.Context(), g)
	require.NoError(t, err)
	require.NoError(t, res.Err())
	want := readAll(t, res, g)
	res.Close()
	e, _ := lossyMachine(t, "dgx1-v100", 2, sim.WithLossAfter(lose, 1), exec.WithPlacement(exec.PlaceRoundRobin))
	for run := range 3 {
		g, _ := sumGraph(nil)
		res, err := e.Run(t.Context(), g)
		require.NoError(t, err, "run %d", run)
		require.NoError(t, res.Err(), "run %d", run)
		assert.Equal(t, want, readAll(t, res, g), "run %d", run)
		require.NotNil(t, res.Report.Lost, "run %d", run)
		assert.Equal(t, lose, *res.Report.Lost, "run %d", run)
		lost, ran := lostAndRan(res, lose)
		assert.Positive(t, lost, "run %d: launches lost with the device", run)
		if run > 0 {
			assert.Zero(t, ran, "run %d: nothing ran on the lost device", run)
		}
		res.Close()
	}
}
