package placement_test

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/placement"
	"github.com/streamdag/streamdag/topology"
)

// coordTopo: gpu0-gpu1 NV1, gpu0-gpu2 NV2, gpu1-gpu2 SYS.
const coordTopo = "\tGPU0\tGPU1\tGPU2\nGPU0\t X \tNV1\tNV2\nGPU1\tNV1\t X \tSYS\nGPU2\tNV2\tSYS\t X \n"

func coordTopology(t *testing.T) *topology.Topology {
	t.Helper()
	f, err := topology.ParseMatrix(strings.NewReader(coordTopo))
	require.NoError(t, err)
	v100, _ := topology.SpecByName("V100")
	topo, err := topology.New(f, topology.WithGPUSpec(v100))
	require.NoError(t, err)
	return topo
}

func newCoord(t *testing.T, opts []placement.Option, n int) *placement.Coordinator {
	t.Helper()
	c, err := placement.NewCoordinator(opts...)
	require.NoError(t, err)
	for i := range n {
		c.Register(placement.DeviceInfo{ID: topology.GPU(i), Name: fmt.Sprint("gpu", i), TotalMemoryBytes: 100, FreeMemoryBytes: int64(10 * (i + 1)),
			ComputeCapability: topology.ComputeCapability{Major: 8, Minor: i % 2}})
	}
	return c
}

func TestCoordinatorStrategies(t *testing.T) {
	g := topology.GPU
	c := newCoord(t, nil, 3)
	require.NoError(t, c.Assign("a", g(0)))
	id, err := c.Select(placement.SelectRequest{})
	require.NoError(t, err)
	assert.Equal(t, g(1), id, "least loaded, lowest ID on ties")

	c = newCoord(t, []placement.Option{placement.WithStrategy(placement.MemoryBased)}, 3)
	id, _ = c.Select(placement.SelectRequest{})
	assert.Equal(t, g(2), id)
	c = newCoord(t, []placement.Option{placement.WithStrategy(placement.ComputeCapability)}, 3)
	id, _ = c.Select(placement.SelectRequest{})
	assert.Equal(t, g(1), id, "8.1 beats 8.0; the tie with nothing else goes to the lowest ID")

	c = newCoord(t, []placement.Option{placement.WithStrategy(placement.RoundRobin)}, 3)
	var seq []topology.DeviceID
	for range 4 {
		id, _ := c.Select(placement.SelectRequest{})
		seq = append(seq, id)
	}
	assert.Equal(t, []topology.DeviceID{g(0), g(1), g(2), g(0)}, seq)

	c = newCoord(t, []placement.Option{placement.WithStrategy(placement.FirstAvailable), placement.WithMaxKernelsPerDevice(1)}, 2)
	require.NoError(t, c.Assign("a", g(0)))
	id, _ = c.Select(placement.SelectRequest{})
	assert.Equal(t, g(1), id, "first available skips the full device")
	require.NoError(t, c.Assign("b", g(1)))
	_, err = c.Select(placement.SelectRequest{})
	assert.ErrorIs(t, err, placement.ErrNoSuitableDevice)

	c = newCoord(t, []placement.Option{placement.WithPreferred(g(7))}, 2)
	_, err = c.Select(placement.SelectRequest{})
	assert.ErrorIs(t, err, placement.ErrNoSuitableDevice, "no fallback to device 0")
	_, err = newCoord(t, nil, 0).Select(placement.SelectRequest{})
	assert.ErrorIs(t, err, placement.ErrNoSuitableDevice)

	c = newCoord(t, []placement.Option{placement.WithStrategy(placement.TopologyAware), placement.WithTopology(coordTopology(t))}, 3)
	id, err = c.Select(placement.SelectRequest{Inputs: []topology.DeviceID{g(2)}, InputBytes: 1 << 30})
	require.NoError(t, err)
	assert.Equal(t, g(2), id, "data is already there")
	require.NoError(t, c.Assign("x", g(2)))
	id, _ = c.Select(placement.SelectRequest{Inputs: []topology.DeviceID{g(2), g(0)}, InputBytes: 1 << 30})
	assert.Equal(t, g(0), id, "gpu0 is NV2 from gpu2; gpu2 pays NV2 from gpu0 too and is loaded")
}

func TestCoordinatorCustomSelector(t *testing.T) {
	choice := 5
	c := newCoord(t, []placement.Option{placement.WithSelector(func(s []placement.DeviceStatus, _ placement.SelectRequest) int {
		return choice
	})}, 2)
	_, err := c.Select(placement.SelectRequest{})
	assert.ErrorIs(t, err, placement.ErrInvalidSelection)
	choice = -1
	_, err = c.Select(placement.SelectRequest{})
	assert.ErrorIs(t, err, placement.ErrInvalidSelection)
	choice = 1
	id, err := c.Select(placement.SelectRequest{})
	require.NoError(t, err)
	assert.Equal(t, topology.GPU(1), id)

	// The selector may call back into the coordinator: no lock is held.
	var cc *placement.Coordinator
	cc = newCoord(t, []placement.Option{placement.WithSelector(func(s []placement.DeviceStatus, _ placement.SelectRequest) int {
		return len(cc.Status()) - 1
	})}, 3)
	id, err = cc.Select(placement.SelectRequest{})
	require.NoError(t, err)
	assert.Equal(t, topology.GPU(2), id)
}

// TestCoordinatorOptionErrors checks that NewCoordinator refuses bad
// options, naming them.
func TestCoordinatorOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  placement.Option
		want string
	}{
		{"custom without selector", placement.WithStrategy(placement.Custom), "placement: WithStrategy: custom: give the selector with WithSelector"},
		{"place-only strategy", placement.WithStrategy(placement.HEFT), "placement: WithStrategy: heft is not a strategy of Select"},
		{"nil selector", placement.WithSelector(nil), "placement: WithSelector: nil selector"},
		{"zero bound", placement.WithMaxKernelsPerDevice(0), "placement: WithMaxKernelsPerDevice(0): want at least 1"},
		{"no preferred", placement.WithPreferred(), "placement: WithPreferred: no device"},
		{"preferred twice", placement.WithPreferred(topology.GPU(1), topology.GPU(1)), "placement: WithPreferred: gpu1 given twice"},
		{"nil topology", placement.WithTopology(nil), "placement: WithTopology: nil topology"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := placement.NewCoordinator(tc.opt)
			assert.EqualError(t, err, tc.want)
			assert.Nil(t, c)
		})
	}
}

func TestCoordinatorAssignMovesAndStats(t *testing.T) {
	g := topology.GPU
	c := newCoord(t, nil, 2)
	require.NoError(t, c.Assign("k", g(0)))
	require.NoError(t, c.Assign("k", g(1)))
	assert.Empty(t, c.KernelsOn(g(0)), "re-assign moves the kernel")
	assert.Equal(t, []string{"k"}, c.KernelsOn(g(1)))
	assert.ErrorIs(t, c.Assign("k", g(9)), placement.ErrDeviceNotRegistered)
	s := c.Stats()
	assert.Equal(t, placement.CoordinatorStats{Devices: 2, Kernels: 1, TotalMemoryBytes: 200, FreeMemoryBytes: 30, KernelsAssigned: 2}, s)
	st, ok := c.DeviceStatus(g(1))
	require.True(t, ok)
	assert.InDelta(t, 1.0/64, st.Load, 1e-12)
	assert.True(t, st.Available)
	assert.InDelta(t, 0.8, st.Info.MemoryUtilization(), 1e-12)
	_, ok = c.DeviceStatus(g(5))
	assert.False(t, ok)
	assert.True(t, c.Remove("k"))
	assert.False(t, c.Remove("k"))
	_, ok = c.DeviceOf("k")
	assert.False(t, ok)
	require.NoError(t, c.UpdateFreeMemory(g(0), 55))
	assert.Equal(t, int64(55), c.Devices()[0].FreeMemoryBytes)
	assert.ErrorIs(t, c.UpdateFreeMemory(g(4), 1), placement.ErrDeviceNotRegistered)
	assert.Equal(t, "topology-aware", placement.TopologyAware.String())
}

func TestCoordinatorCanP2PFromTopology(t *testing.T) {
	g := topology.GPU
	c := newCoord(t, nil, 3)
	assert.False(t, c.CanP2P(g(0), g(1)), "no topology, no P2P")
	c.SetTopology(coordTopology(t))
	assert.True(t, c.CanP2P(g(0), g(1)))
	assert.False(t, c.CanP2P(g(1), g(2)), "SYS")
	assert.False(t, c.CanP2P(g(0), g(3)), "unregistered")
	c = newCoord(t, []placement.Option{placement.WithoutP2P(), placement.WithTopology(coordTopology(t))}, 3)
	assert.False(t, c.CanP2P(g(0), g(1)))
}

func TestCoordinatorUnregisterSpreads(t *testing.T) {
	g := topology.GPU
	c := newCoord(t, nil, 3)
	require.NoError(t, c.Assign("a", g(0)))
	require.NoError(t, c.Assign("b", g(0)))
	res, err := c.Unregister(g(0))
	require.NoError(t, err)
	assert.Equal(t, []placement.MigrationPlan{{Kernel: "a", Source: g(0), Target: g(1)}, {Kernel: "b", Source: g(0), Target: g(2)}}, res.Migrations,
		"the seed sent both to gpu1")
	assert.Empty(t, res.Orphaned)
	assert.Len(t, c.Devices(), 2, "the device is gone")
	_, err = c.Unregister(g(0))
	assert.ErrorIs(t, err, placement.ErrDeviceNotRegistered)
	id, _ := c.Select(placement.SelectRequest{})
	assert.NotEqual(t, g(0), id)

	// Never target an unregistered device; orphan what does not fit.
	c = newCoord(t, []placement.Option{placement.WithMaxKernelsPerDevice(1)}, 3)
	require.NoError(t, c.Assign("a", g(0)))
	require.NoError(t, c.Assign("b", g(0)))
	require.NoError(t, c.Assign("c", g(0)))
	_, err = c.Unregister(g(2))
	require.NoError(t, err)
	res, err = c.Unregister(g(0))
	require.NoError(t, err)
	assert.Equal(t, []placement.MigrationPlan{{Kernel: "a", Source: g(0), Target: g(1)}}, res.Migrations)
	assert.Equal(t, []string{"b", "c"}, res.Orphaned)
	assert.Equal(t, 1, c.Stats().Kernels)

	// With a topology, ties go to the cheapest transfer (gpu2 is NV2 from gpu0, gpu1 NV1).
	c = newCoord(t, []placement.Option{placement.WithTopology(coordTopology(t))}, 3)
	require.NoError(t, c.Assign("a", g(0)))
	res, _ = c.Unregister(g(0))
	assert.Equal(t, g(2), res.Migrations[0].Target)
}

func TestCoordinatorMigration(t *testing.T) {
	g := topology.GPU
	c := newCoord(t, []placement.Option{placement.WithTopology(coordTopology(t))}, 3)
	_, err := c.RequestMigration("k", g(1), 0)
	assert.ErrorIs(t, err, placement.ErrKernelNotFound)
	require.NoError(t, c.Assign("k", g(0)))
	_, err = c.RequestMigration("k", g(0), 0)
	assert.ErrorIs(t, err, placement.ErrSameDevice)
	_, err = c.RequestMigration("k", g(5), 0)
	assert.ErrorIs(t, err, placement.ErrDeviceNotRegistered)
	req, err := c.RequestMigration("k", g(2), 1<<20)
	require.NoError(t, err)
	assert.Equal(t, topology.RouteDirect, req.Route.Kind)
	assert.Positive(t, req.EstimatedCost)
	require.NoError(t, c.CompleteMigration(req))
	assert.Equal(t, []string{"k"}, c.KernelsOn(g(2)))
	// Completing twice is stale and changes nothing: counts cannot underflow.
	assert.ErrorIs(t, c.CompleteMigration(req), placement.ErrStaleMigration)
	assert.Empty(t, c.KernelsOn(g(0)))
	c.Remove("k")
	assert.ErrorIs(t, c.CompleteMigration(req), placement.ErrKernelNotFound)
	assert.Equal(t, uint64(1), c.Stats().Migrations)
}

func TestCoordinatorK2K(t *testing.T) {
	g := topology.GPU
	c := newCoord(t, []placement.Option{placement.WithTopology(coordTopology(t))}, 3)
	require.NoError(t, c.Assign("src", g(0)))
	id, err := c.SelectForK2K("src")
	require.NoError(t, err)
	assert.Equal(t, g(2), id, "NV2 beats NV1")
	for i := range 40 {
		require.NoError(t, c.Assign(fmt.Sprint("load", i), g(2)))
	}
	id, _ = c.SelectForK2K("src")
	assert.Equal(t, g(1), id, "gpu2 is loaded: 50/(0.725) < 25/(0.1)")
	id, err = c.SelectForK2K("unknown")
	require.NoError(t, err)
	assert.Equal(t, g(1), id, "falls back to Select: least loaded (gpu1 holds none)")
}

func TestCoordinatorConcurrent(t *testing.T) {
	c := newCoord(t, []placement.Option{placement.WithStrategy(placement.RoundRobin), placement.WithTopology(coordTopology(t))}, 3)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := range 200 {
				k := fmt.Sprint(w, "-", i)
				id, err := c.Select(placement.SelectRequest{})
				if err != nil {
					continue
				}
				_ = c.Assign(k, id)
				_ = c.Status()
				_, _ = c.SelectForK2K(k)
				if i%3 == 0 {
					c.Remove(k)
				}
			}
		})
	}
	wg.Wait()
	s := c.Stats()
	total := 0
	for _, st := range c.Status() {
		total += len(st.Kernels)
	}
	assert.Equal(t, s.Kernels, total)
}
