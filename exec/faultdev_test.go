package exec_test

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/faultdev"
	"github.com/streamdag/streamdag/topology"
)

// placedOn returns a placement of g's kernels: those whose name starts
// with prefix on device 1, the rest on device 0.
func placedOn(g *dag.Graph, prefix string) []int {
	place := make([]int, g.NumKernels())
	for k := range place {
		if strings.HasPrefix(g.KernelName(dag.KernelID(k)), prefix) {
			place[k] = 1
		}
	}
	return place
}

// runCounted runs g placed by place on a CPU device and dev wrapped to
// report its loss after after commands (inflight more still enqueued),
// and returns the result and the wrapper.
func runCounted(t *testing.T, dev gpu.CodeDevice, g *dag.Graph, place []int, after, inflight int64) (*exec.Result, *faultdev.Device) {
	t.Helper()
	fd := faultdev.New(dev, after, inflight)
	e := cpuAnd(t, 2, fd)
	p, err := exec.PlanPlaced(e, g, place)
	require.NoError(t, err)
	res, err := e.Execute(t.Context(), p)
	require.NoError(t, err)
	return res, fd
}

// A code device that reports its loss part-way through a run (its
// enqueues refused past some command, the events after it reporting the
// commands in flight as lost) is lost for the run:
// its kernels move to the CPU device, producers whose bytes were lost
// run again, and the answer is the CPU device's alone, at every point of
// the loss.
func TestCodeDeviceReportsLoss(t *testing.T) {
	const n, w = 6, 8
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			dev := cd.make(t, 2)
			g, total, want := scaleGraph(1, n, w, true)
			place := placedOn(g, "scale")
			res, fd := runCounted(t, dev, g, place, math.MaxInt64, 0)
			require.NoError(t, res.Err())
			require.Equal(t, want, uint64Of(t, res, total))
			require.Nil(t, res.Report.Lost)
			res.Close()
			commands := fd.Commands()
			require.Positive(t, commands)
			for after := range commands {
				inflight := after % 3
				what := fmt.Sprintf("lost after %d of %d commands, %d in flight", after, commands, inflight)
				res, fd := runCounted(t, dev, g, place, after, inflight)
				require.True(t, fd.Lost(), what)
				require.NoError(t, res.Err(), what)
				assert.Equal(t, want, uint64Of(t, res, total), what)
				require.NotNil(t, res.Report.Lost, what)
				assert.Equal(t, dev.ID(), *res.Report.Lost, what)
				assert.NotEmpty(t, res.Report.Migrations, what)
				for _, m := range res.Report.Migrations {
					assert.Equal(t, topology.CPU, m.To, "%s: %s", what, m.Kernel)
				}
				lost := 0
				for _, l := range res.Report.Launches() {
					if l.Status == exec.StatusLost {
						lost++
					}
				}
				assert.Positive(t, lost, "%s: launches lost with the device", what)
				res.Close()
			}
		})
	}
}

// A kernel with only OpenCL C on a code device that reports its loss
// cannot move: it fails with an error naming it and the lost device,
// wrapping the device's own error, and what reads its output is
// unreadable for that reason.
func TestCodeDeviceReportsLossOpenCLOnly(t *testing.T) {
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			dev := cd.make(t, 1)
			g, total, _ := scaleGraph(1, 2, 4, false)
			res, fd := runCounted(t, dev, g, placedOn(g, "scale"), 1, 0)
			defer res.Close()
			require.True(t, fd.Lost())
			require.NotNil(t, res.Report.Lost)
			err := res.Err()
			require.Error(t, err)
			assert.ErrorIs(t, err, gpu.ErrDeviceLost)
			assert.Contains(t, err.Error(), "ran on "+dev.ID().String()+", which was lost, and no other device has code for it")
			assert.Contains(t, err.Error(), "made to fail after 1 commands", "the device's own error")
			_, err = res.Buffer(total)
			assert.ErrorIs(t, err, gpu.ErrDeviceLost)
		})
	}
}

// A run recovers from one lost device: a second code device that reports
// its loss in the same run makes Execute return an error naming both,
// wrapping gpu.ErrDeviceLost.
func TestCodeDeviceReportsSecondLoss(t *testing.T) {
	a := newFakeCode(topology.OpenCL(1), 1, fakeKernels)
	b := newFakeCode(topology.OpenCL(2), 1, fakeKernels)
	t.Cleanup(func() {
		require.NoError(t, a.Close())
		require.NoError(t, b.Close())
	})
	host, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, host.Close()) })
	e, err := exec.NewMulti([]gpu.Device{host, faultdev.New(a, 0, 0), faultdev.New(b, 0, 0)}, nil)
	require.NoError(t, err)
	g, _, _ := scaleGraph(1, 2, 4, true)
	place := placedOn(g, "scale")
	for k := range place {
		if g.KernelName(dag.KernelID(k)) == "scale1" {
			place[k] = 2
		}
	}
	p, err := exec.PlanPlaced(e, g, place)
	require.NoError(t, err)
	res, err := e.Execute(t.Context(), p)
	require.NotNil(t, res)
	defer res.Close()
	require.Error(t, err)
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
	assert.ErrorContains(t, err, "lost as well as")
	assert.ErrorContains(t, err, "opencl1")
	assert.ErrorContains(t, err, "opencl2")
}
