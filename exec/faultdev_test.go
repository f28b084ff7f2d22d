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

// A code device lost in an earlier run (faultdev) takes the later runs'
// lists, whose first publish answers the loss: each later run reports the
// device lost, runs none of its launches there, and gives the CPU
// device's answer.
func TestCodeDeviceListsQueuedAfterTheLoss(t *testing.T) {
	const n, w = 4, 8
	for _, cd := range codeDevs() {
		t.Run(cd.name, func(t *testing.T) {
			dev := cd.make(t, 2)
			g, total, want := scaleGraph(1, n, w, true)
			place := placedOn(g, "scale")
			fd := faultdev.New(dev, 2, 1)
			e := cpuAnd(t, 2, fd)
			for run := range 3 {
				p, err := exec.PlanPlaced(e, g, place)
				require.NoError(t, err)
				res, err := e.Execute(t.Context(), p)
				require.NoError(t, err, "run %d", run)
				require.True(t, fd.Lost(), "run %d", run)
				require.NoError(t, res.Err(), "run %d", run)
				assert.Equal(t, want, uint64Of(t, res, total), "run %d", run)
				require.NotNil(t, res.Report.Lost, "run %d", run)
				assert.Equal(t, dev.ID(), *res.Report.Lost, "run %d", run)
				lost := 0
				for _, l := range res.Report.Launches() {
					if l.Status == exec.StatusLost {
						lost++
					}
					if run > 0 {
						assert.False(t, l.Device == dev.ID() && l.Status == exec.StatusOK, "run %d: %s ran on the lost device", run, l.Kernel)
					}
				}
				assert.Positive(t, lost, "run %d: launches lost with the device", run)
				res.Close()
			}
		})
	}
}

// The fake code device's and faultdev's CommandEvent: none for command 0,
// for a command never returned, or before a Record after the command;
// then the event recorded after it, which fires once the command has run.
// faultdev gives the wrapped stream's event until its loss, none after,
// and its streams still take lists, whose publishes answer the loss.
func TestCommandEventFakeAndFaultdev(t *testing.T) {
	d := newFakeCode(topology.OpenCL(7), 1, fakeKernels)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	fd := faultdev.New(d, 1, 0) // lost at its second command
	m, err := d.Alloc(8)
	require.NoError(t, err)
	defer m.Release()
	for _, s := range []gpu.CodeStream{d.Stream(0).(gpu.CodeStream), fd.Stream(0).(gpu.CodeStream)} {
		seq, err := s.Fill(m, 0, 8, []byte{1})
		require.NoError(t, err)
		for _, at := range []uint64{0, seq, seq + 1} {
			_, ok := s.CommandEvent(at)
			assert.False(t, ok, "command %d: no Record after it yet", at)
		}
		e := s.Record()
		ev, ok := s.CommandEvent(seq)
		require.True(t, ok)
		assert.Same(t, e, ev, "the event recorded after the command")
		require.NoError(t, ev.Wait(t.Context()))
		_, ok = s.CommandEvent(seq + 1)
		assert.False(t, ok, "a command never returned")
	}
	assert.False(t, fd.Lost())
	_, err = fd.Stream(0).(gpu.CodeStream).Fill(m, 0, 8, []byte{2})
	require.ErrorIs(t, err, gpu.ErrDeviceLost)
	_, ok := fd.Stream(0).(gpu.CodeStream).CommandEvent(1)
	assert.False(t, ok, "none after the loss")
	done := make(chan error, 1)
	_, _, err = fd.Stream(0).(gpu.Lister).EnqueueList(nil, 1, listFunc(func(p gpu.Progress) {
		_, err := p.Publish(0)
		done <- err
	}))
	require.NoError(t, err, "a lost device takes lists")
	assert.ErrorIs(t, <-done, gpu.ErrDeviceLost, "and answers their publishes with the loss")
}

// listFunc is a gpu.List of a function.
type listFunc func(p gpu.Progress)

func (f listFunc) Run(p gpu.Progress) { f(p) }
