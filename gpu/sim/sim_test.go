package sim_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/topology"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func gpus(indices ...int) []topology.DeviceFacts {
	out := make([]topology.DeviceFacts, len(indices))
	for i, n := range indices {
		out[i] = topology.DeviceFacts{ID: topology.GPU(n), Name: "test GPU", MemoryBytes: 1 << 30}
	}
	return out
}

func TestNewErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		gpus []topology.DeviceFacts
		opts []sim.Option
		want string
	}{
		{"no GPUs", nil, nil, "sim: New: no GPUs to simulate"},
		{"CPU given", []topology.DeviceFacts{topology.CPUDevice()}, nil, "sim: New: cpu is not a distinct GPU"},
		{"twice", gpus(1, 1), nil, "sim: New: gpu1 is not a distinct GPU"},
		{"no streams", gpus(0), []sim.Option{sim.WithStreams(0)}, "sim: WithStreams(0): want 1 to 1024 streams per device"},
		{"negative streams", gpus(0), []sim.Option{sim.WithStreams(-1)}, "sim: WithStreams(-1): want 1 to 1024 streams per device"},
		{"too many streams per device", gpus(0), []sim.Option{sim.WithStreams(1025)}, "sim: WithStreams(1025): want 1 to 1024 streams per device"},
		{"too many streams in all", gpus(0, 1), []sim.Option{sim.WithStreams(513)}, "sim: New: 513 streams per device × 2 GPUs: want 1 to 1024 streams in all"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sim.New(tc.gpus, tc.opts...)
			assert.EqualError(t, err, tc.want)
			assert.Nil(t, s)
		})
	}
}

// Without WithStreams each simulated GPU has one stream; a later
// WithStreams replaces an earlier one.
func TestNewStreams(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts []sim.Option
		want int
	}{
		{"default", nil, 1},
		{"two", []sim.Option{sim.WithStreams(2)}, 2},
		{"last wins", []sim.Option{sim.WithStreams(5), sim.WithStreams(3)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := sim.New(gpus(0, 1), tc.opts...)
			require.NoError(t, err)
			defer func() { require.NoError(t, s.Close()) }()
			for _, d := range s.Devices() {
				assert.Equal(t, tc.want, d.NumStreams(), d.ID())
			}
		})
	}
}

// Each simulated GPU has its own streams, IDs and facts; an event recorded
// on one GPU orders a stream of another.
func TestDevicesAndCrossDeviceWait(t *testing.T) {
	s, err := sim.New(gpus(0, 3), sim.WithStreams(2))
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	devs := s.Devices()
	require.Len(t, devs, 2)
	for i, want := range []topology.DeviceID{topology.GPU(0), topology.GPU(3)} {
		d := devs[i]
		assert.Equal(t, want, d.ID())
		assert.Equal(t, want, d.Info().ID)
		require.Equal(t, 2, d.NumStreams())
		for j := range 2 {
			assert.Equal(t, want, d.Stream(j).Device())
			assert.Equal(t, j, d.Stream(j).Index())
		}
		assert.Panics(t, func() { d.Stream(2) })
	}

	release := make(chan struct{})
	var seen []int
	a, b := devs[0].Stream(1), devs[1].Stream(0)
	require.NoError(t, a.Launch(gpu.TaskFunc(func() { <-release; seen = append(seen, 1) })))
	e := a.Record()
	require.NoError(t, b.Wait(e))
	require.NoError(t, b.Launch(gpu.TaskFunc(func() { seen = append(seen, 2) })))
	assert.False(t, e.Done(), "the producer is held")
	close(release)
	require.NoError(t, b.Synchronize(context.Background()))
	assert.Equal(t, []int{1, 2}, seen)
	require.NoError(t, devs[0].Close(), "closing one GPU waits for its work")
}

func TestDriver(t *testing.T) {
	assert.Contains(t, gpu.Drivers(), sim.Kind)
	for _, tc := range []struct {
		name    string
		opts    []gpu.Option
		simOpts []sim.Option
		want    int
	}{
		{"default", nil, nil, 1},
		{"three", []gpu.Option{gpu.WithStreams(3)}, nil, 3},
		{"the setting's", nil, []sim.Option{sim.WithStreams(2)}, 2},
		{"gpu.WithStreams overrides the setting's", []gpu.Option{gpu.WithStreams(3)}, []sim.Option{sim.WithStreams(2)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := gpu.Open(t.Context(), sim.Kind, append(tc.opts, sim.WithSimulation(gpus(0, 1, 2), tc.simOpts...))...)
			require.NoError(t, err)
			defer func() { require.NoError(t, set.Close()) }()
			require.Len(t, set.Devices(), 3)
			for _, d := range set.Devices() {
				assert.Equal(t, tc.want, d.NumStreams())
				assert.Equal(t, sim.Kind, d.Kind(), "a simulated GPU is of the driver's kind")
			}
		})
	}
	set, err := gpu.Open(t.Context(), sim.Kind)
	assert.EqualError(t, err, "sim: open: no GPUs to simulate (give sim.WithSimulation)")
	assert.Nil(t, set, "no typed nil in the interface")
	set, err = gpu.Open(t.Context(), sim.Kind, sim.WithSimulation(nil))
	assert.EqualError(t, err, "sim: New: no GPUs to simulate")
	assert.Nil(t, set, "no typed nil in the interface")
}

// gpu.Open of sim.Kind takes sim.WithSimulation as the driver's setting: a
// loss given there makes that GPU report its loss, as New's option does.
func TestDriverSettings(t *testing.T) {
	set, err := gpu.Open(t.Context(), sim.Kind, sim.WithSimulation(gpus(0, 1), sim.WithLoss(topology.GPU(1), 0.5)))
	require.NoError(t, err)
	defer func() { require.NoError(t, set.Close()) }()
	ran, lost := runSteps(t, set.Devices()[1].Stream(0).(gpu.Lister), 10)
	assert.Equal(t, uint64(5), ran, "lost at the 5th of 10 launches")
	assert.ErrorIs(t, lost, gpu.ErrDeviceLost)
	ran, lost = runSteps(t, set.Devices()[0].Stream(0).(gpu.Lister), 10)
	assert.Equal(t, uint64(10), ran)
	assert.NoError(t, lost)
}

func TestDriverSettingsErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  gpu.Option
		want string
	}{
		{"a setting of another driver", gpu.WithDriverSetting(setting("cpu")), `gpu: a setting of driver "cpu" (sim_test.setting) given to driver "sim"`},
		{"a setting of another type", gpu.WithDriverSetting(setting(sim.Kind)), "sim: open: a driver setting sim_test.setting: want sim.WithSimulation"},
		{"loss of an unknown GPU", sim.WithSimulation(gpus(0, 1), sim.WithLoss(topology.GPU(5), 0.5)), "sim: New: a loss of gpu5, which is not among the 2 GPUs"},
		{"bad fraction", sim.WithSimulation(gpus(0, 1), sim.WithLoss(topology.GPU(0), 2)), "sim: WithLoss(gpu0, 2): the fraction must be in [0, 1]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := gpu.Open(t.Context(), sim.Kind, tc.opt)
			assert.EqualError(t, err, tc.want)
			assert.Nil(t, set, "no typed nil in the interface")
		})
	}
}

// setting is a driver setting of the kind it names.
type setting string

func (s setting) DriverKind() string { return string(s) }
