package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
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
			binary.LittleEndian.PutUint64(l.Out(0).Bytes(), uint64(i+1))
			return nil
		}, opts...)
		g.AddKernel(fmt.Sprintf("map[%d]", i), func(_ context.Context, l dag.Launch) error {
			binary.LittleEndian.PutUint64(l.Out(0).Bytes(), 2*binary.LittleEndian.Uint64(l.In(0).Bytes()))
			return nil
		}, dag.Reads(src), dag.Writes(mid))
		mids = append(mids, mid)
	}
	out := g.AddBuffer("out", 8)
	g.AddKernel("reduce", func(_ context.Context, l dag.Launch) error {
		var sum uint64
		for i := range l.NumIn() {
			sum += binary.LittleEndian.Uint64(l.In(i).Bytes())
		}
		binary.LittleEndian.PutUint64(l.Out(0).Bytes(), sum)
		return nil
	}, dag.Reads(mids...), dag.Writes(out))
	return g, out
}

// Losing a simulated GPU part-way: the kernels that had not run move by
// the placement engine's migration plan, lost buffers are recomputed, and the
// result is the same.
func TestDeviceLossRecovers(t *testing.T) {
	for _, at := range []float64{0, 0.25, 0.5, 0.9} {
		t.Run(fmt.Sprint("after=", at), func(t *testing.T) {
			e, _ := simMachine(t, "dgx1-v100", 1, exec.WithPlacement(exec.PlaceRoundRobin))
			g, out := sumGraph(nil)
			res, err := e.Run(t.Context(), g, exec.WithDeviceLoss(topology.GPU(3), at))
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

// A kernel pinned to the lost device cannot move: its launch fails with an
// error naming the device; what depends on it is skipped.
func TestDeviceLossPinnedKernelFails(t *testing.T) {
	e, _ := simMachine(t, "dgx1-v100", 1)
	pin := topology.GPU(3)
	g, out := sumGraph(&pin)
	res, err := e.Run(t.Context(), g, exec.WithDeviceLoss(topology.GPU(3), 0))
	require.NoError(t, err)
	defer res.Close()
	_, err = res.Buffer(out)
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
	assert.ErrorContains(t, err, "gpu3")
}

func TestDeviceLossBadSpecs(t *testing.T) {
	for _, s := range []string{"gpu3", "gpu3@150%", "tpu1@50%", "gpu3@x"} {
		_, err := exec.ParseLossSpec(s)
		assert.Error(t, err, s)
	}
	spec, err := exec.ParseLossSpec("gpu3@50%")
	require.NoError(t, err)
	assert.Equal(t, exec.LossSpec{Device: topology.GPU(3), After: 0.5}, spec)

	e, _ := simMachine(t, "dgx1-v100", 1)
	g, _ := sumGraph(nil)
	_, err = e.Run(t.Context(), g, exec.WithDeviceLoss(topology.GPU(9), 0.5))
	assert.ErrorContains(t, err, "cannot lose gpu9")
}
