package gpu_test

import (
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/nvmlmock"
	"github.com/streamdag/streamdag/topology"
)

// Acquire takes the same path on every host: on a CPU-only host it runs on
// the CPU device and says why; with GPUs it takes (and, lacking a CUDA
// runtime, returns) a lease and says so. Nothing pretends to run on a GPU.
func TestAcquire(t *testing.T) {
	t.Run("cpu-only", func(t *testing.T) {
		b, err := gpu.Open(t.Context(), gpu.OpenConfig{})
		require.NoError(t, err)
		defer b.CloseAndWait(t.Context())
		a, err := b.Acquire(t.Context(), gpu.WithStreams(2))
		require.NoError(t, err)
		defer a.Release()
		assert.Equal(t, topology.CPU, a.Device.ID())
		assert.Nil(t, a.Lease)
		assert.Contains(t, a.Why, "no GPU")
		assert.Equal(t, uint64(0), b.MetricsSnapshot().Admissions)
	})
	t.Run("dgxa100 mock", func(t *testing.T) {
		lib, err := nvmlmock.New("dgxa100")
		require.NoError(t, err)
		b, err := gpu.Open(t.Context(), gpu.OpenConfig{NVML: lib})
		require.NoError(t, err)
		defer b.CloseAndWait(t.Context())
		a, err := b.Acquire(t.Context())
		require.NoError(t, err)
		defer a.Release()
		assert.Equal(t, topology.CPU, a.Device.ID())
		assert.Contains(t, a.Why, "gpu0 leased, but GPU execution is not implemented yet")
		m := b.MetricsSnapshot()
		assert.Equal(t, uint64(1), m.Admissions)
		for _, l := range m.Leases {
			assert.False(t, l.Leased, "the lease went back")
		}
	})
}

// The inventory of the dgxa100 mock becomes topology facts with NV12
// pairs and P2P OK, from which a topology routes every pair directly.
func TestInventoryFacts(t *testing.T) {
	lib, err := nvmlmock.New("dgxa100")
	require.NoError(t, err)
	inv := gpu.Discover(t.Context(), gpu.WithNVML(lib))
	f := inv.Facts()
	require.Len(t, f.GPUs, 8)
	require.Len(t, f.Pairs, 8)
	p := f.Pairs[0][5]
	assert.Equal(t, topology.LinkNVLink, p.Kind)
	assert.Equal(t, 12, p.NVLinks)
	assert.Equal(t, topology.P2POK, p.P2P.Read)
	topo, err := topology.New(f)
	require.NoError(t, err)
	r, err := topo.Route(1<<20, topology.GPU(0), topology.GPU(5))
	require.NoError(t, err)
	assert.Equal(t, topology.RouteDirect, r.Kind)

	cpuOnly := gpu.Discover(t.Context(), gpu.WithNVML(nil)).Facts()
	assert.Nil(t, cpuOnly.Pairs)
}

// TestOpenNeverLeasesLostGPU: GPUs NVML reports lost after Open (a query
// answers ERROR_GPU_IS_LOST, or no GPU has the UUID any more) are never
// leased: Open re-checks each GPU by UUID before a claim hands it out, and
// the metrics say why. Once all are lost, Acquire runs on the CPU device
// and Why names them.
func TestOpenNeverLeasesLostGPU(t *testing.T) {
	lib, err := nvmlmock.New("dgxa100")
	require.NoError(t, err)
	b, err := gpu.Open(t.Context(), gpu.OpenConfig{NVML: lib})
	require.NoError(t, err)
	defer b.CloseAndWait(t.Context())
	require.Equal(t, 8, b.NumGPUs())

	gpu0 := lib.Devices[0].(*dgxa100.Device)
	gpu0.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{}, nvml.ERROR_GPU_IS_LOST }
	gpu1 := lib.Devices[1].(*dgxa100.Device)
	uuid1 := gpu1.UUID
	gpu1.UUID = "GPU-replaced" // gpu1 fell off the bus; NVML no longer knows its UUID
	l, err := b.Claim(t.Context())
	require.NoError(t, err)
	assert.Equal(t, topology.GPU(2), l.Device().ID)
	l.Release()
	leases := b.MetricsSnapshot().Leases
	assert.Equal(t, "gpu: gpu0 ("+gpu0.UUID+") is lost: nvml: memory info: ERROR_GPU_IS_LOST", leases[0].Lost)
	assert.Equal(t, "gpu: gpu1 ("+uuid1+") is lost: nvml: no GPU has this UUID: ERROR_INVALID_ARGUMENT", leases[1].Lost)
	for _, e := range leases[2:] {
		assert.Empty(t, e.Lost, e.Device)
	}

	for _, d := range lib.Devices {
		d.(*dgxa100.Device).GetMemoryInfoFunc = gpu0.GetMemoryInfoFunc
	}
	a, err := b.Acquire(t.Context())
	require.NoError(t, err)
	defer a.Release()
	assert.Equal(t, topology.CPU, a.Device.ID())
	assert.Nil(t, a.Lease)
	assert.Contains(t, a.Why, "gpu: no GPU left: all 8 GPUs of the pool are lost: gpu0 (")
	assert.Contains(t, a.Why, "; and 4 more")
	l, err = b.Claim(t.Context())
	assert.ErrorIs(t, err, gpu.ErrGPULost)
	if !assert.Nil(t, l) {
		l.Release()
	}
}
