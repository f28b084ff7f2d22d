package gpu_test

import (
	"testing"

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
