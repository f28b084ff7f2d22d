package sim_test

import (
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/topology"
)

type listFunc func(p gpu.Progress)

func (f listFunc) Run(p gpu.Progress) { f(p) }

// runSteps queues a list of n steps on s that publishes each step as the
// device asks and stops at the device's error; it returns the steps run
// and the error.
func runSteps(t *testing.T, s gpu.Lister, n uint64) (ran uint64, lost error) {
	t.Helper()
	done := make(chan struct{})
	_, _, err := s.EnqueueList(nil, n, listFunc(func(p gpu.Progress) {
		defer close(done)
		next, err := p.Publish(0)
		for k := uint64(1); k <= n && err == nil; k++ {
			ran = k
			if k >= next {
				next, err = p.Publish(k)
			}
		}
		lost = err
	}))
	require.NoError(t, err)
	<-done
	return ran, lost
}

// A simulated GPU with a loss reports it at the launch that reaches its
// share of the launches queued on it, for good: later lists hear of it at
// their first publish, later tasks are refused with it; the other GPUs go
// on.
func TestWithLoss(t *testing.T) {
	set, err := sim.New(gpus(0, 1), sim.WithLoss(topology.GPU(1), 0.5))
	require.NoError(t, err)
	defer set.Close()
	g0, g1 := set.Devices()[0].Stream(0).(gpu.Lister), set.Devices()[1].Stream(0).(gpu.Lister)
	ran, lost := runSteps(t, g1, 10)
	assert.Equal(t, uint64(5), ran, "lost at the 5th of 10 launches")
	var le *gpu.LostError
	require.True(t, errors.As(lost, &le), "got %v", lost)
	assert.ErrorIs(t, lost, gpu.ErrDeviceLost)
	assert.Equal(t, topology.GPU(1), le.Device)
	ran, lost = runSteps(t, g1, 3)
	assert.Zero(t, ran, "a lost GPU's later list runs nothing")
	assert.ErrorIs(t, lost, gpu.ErrDeviceLost)
	assert.ErrorIs(t, g1.Launch(gpu.TaskFunc(func() {})), gpu.ErrDeviceLost, "a lost GPU refuses tasks")
	ran, lost = runSteps(t, g0, 10)
	assert.Equal(t, uint64(10), ran)
	assert.NoError(t, lost)
}

// WithLossAfter counts launches across lists; WithLoss(0) loses the GPU
// before its first launch.
func TestWithLossAfterAndAtZero(t *testing.T) {
	set, err := sim.New(gpus(0, 1), sim.WithLossAfter(topology.GPU(0), 7), sim.WithLoss(topology.GPU(1), 0))
	require.NoError(t, err)
	defer set.Close()
	g0, g1 := set.Devices()[0].Stream(0).(gpu.Lister), set.Devices()[1].Stream(0).(gpu.Lister)
	ran, lost := runSteps(t, g0, 4)
	assert.Equal(t, uint64(4), ran)
	assert.NoError(t, lost)
	ran, lost = runSteps(t, g0, 4)
	assert.Equal(t, uint64(3), ran, "the 7th launch in all")
	assert.ErrorIs(t, lost, gpu.ErrDeviceLost)
	ran, lost = runSteps(t, g1, 4)
	assert.Equal(t, uint64(0), ran)
	assert.ErrorIs(t, lost, gpu.ErrDeviceLost)
}

func TestLossOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  sim.Option
		want string
	}{
		{"fraction past 1", sim.WithLoss(topology.GPU(0), 1.5), "fraction must be in [0, 1]"},
		{"negative fraction", sim.WithLoss(topology.GPU(0), -0.1), "fraction must be in [0, 1]"},
		{"no launches", sim.WithLossAfter(topology.GPU(0), 0), "at least 1 launch"},
		{"unknown GPU", sim.WithLoss(topology.GPU(5), 0.5), "gpu5, which is not among the 1 GPUs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sim.New(gpus(0), tc.opt)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}

// A lost simulated GPU takes a list queued after its loss: EnqueueList
// succeeds, the list runs, every Publish answers the loss (the same
// *gpu.LostError), and the counter reaches the list's end once the list
// has published its steps on it and returned.
func TestLostGPUTakesLists(t *testing.T) {
	set, err := sim.New(gpus(0), sim.WithLossAfter(topology.GPU(0), 1))
	require.NoError(t, err)
	defer set.Close()
	s := set.Devices()[0].Stream(0).(gpu.Lister)
	ran, lost := runSteps(t, s, 2)
	require.Equal(t, uint64(1), ran, "lost at the first launch")
	require.ErrorIs(t, lost, gpu.ErrDeviceLost)
	var errs [2]error
	var nexts [2]uint64
	var count *gpu.Counter
	var first uint64
	done, gate := make(chan struct{}), new(gpu.HostEvent)
	count, first, err = s.EnqueueList(gate, 4, listFunc(func(p gpu.Progress) {
		defer close(done)
		nexts[0], errs[0] = p.Publish(0)
		nexts[1], errs[1] = p.Publish(4)
		count.Publish(first + 4) // the steps settled without running, on the counter itself
	}))
	require.NoError(t, err, "a lost GPU takes the list")
	gate.Set() // the list reads count and first
	<-done
	for i, err := range errs {
		var le *gpu.LostError
		require.ErrorAs(t, err, &le, "publish %d", i)
		assert.Equal(t, topology.GPU(0), le.Device, "publish %d", i)
		assert.Equal(t, lost, err, "publish %d: the same loss", i)
		assert.Equal(t, uint64(math.MaxUint64), nexts[i], "publish %d asks for no more", i)
	}
	_, err = count.WaitFor(t.Context(), first+4)
	require.NoError(t, err)
	assert.Equal(t, first+4, count.Load())
}
