package nvml_test

import (
	"context"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	_ "github.com/streamdag/streamdag/gpu/cpu" // Acquire opens the CPU device
	"github.com/streamdag/streamdag/gpu/nvml"
	"github.com/streamdag/streamdag/gpu/nvml/nvmlmock"
	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"
)

// Acquire takes the same path on every host: on a CPU-only host it runs on
// the CPU device and says why; with NVML GPUs that no registered driver
// runs (no CUDA device yet, and no OpenCL driver in this binary) it takes
// a lease, gives it back and says so, and the startup records say
// "none". Nothing pretends to run on a GPU.
func TestAcquire(t *testing.T) {
	t.Run("cpu-only", func(t *testing.T) {
		b, _, err := openBackend(t.Context(), nil)
		require.NoError(t, err)
		defer b.CloseAndWait(t.Context())
		a, err := b.Acquire(t.Context(), gpu.WithStreams(2))
		require.NoError(t, err)
		defer a.Release()
		assert.Equal(t, topology.CPU, a.Device.ID())
		assert.Nil(t, a.Claim)
		assert.Contains(t, a.Why, "no GPU")
		assert.Equal(t, uint64(0), b.MetricsSnapshot().Admissions)
	})
	t.Run("dgxa100 mock", func(t *testing.T) {
		lib, err := nvmlmock.New("dgxa100")
		require.NoError(t, err)
		b, _, err := openBackend(t.Context(), lib)
		require.NoError(t, err)
		defer b.CloseAndWait(t.Context())
		a, err := b.Acquire(t.Context())
		require.NoError(t, err)
		defer a.Release()
		assert.Equal(t, topology.CPU, a.Device.ID())
		assert.Nil(t, a.Claim)
		assert.Equal(t, "gpu0 (Mock NVIDIA A100-SXM4-40GB) leased, but no registered driver runs it "+
			"(no CUDA device yet; no OpenCL driver lists a GPU with its UUID or PCI bus ID): running on the CPU device", a.Why)
		m := b.MetricsSnapshot()
		assert.Equal(t, uint64(1), m.Admissions)
		assert.Zero(t, m.Close.ActiveGPUPermits, "the permit went back")
		for _, l := range m.Leases {
			assert.False(t, l.Leased, "the lease went back")
		}
		require.Len(t, m.StartupRecords, 8)
		for _, r := range m.StartupRecords {
			assert.Equal(t, "none", r.Runtime, r.Device)
		}
	})
}

// The inventory of the dgxa100 mock becomes topology facts with NV12
// pairs and P2P OK, from which a topology routes every pair directly.
func TestInventoryFacts(t *testing.T) {
	lib, err := nvmlmock.New("dgxa100")
	require.NoError(t, err)
	inv := discover(t, t.Context(), nvml.WithLibrary(lib))
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

	cpuOnly := discover(t, t.Context()).Facts()
	assert.Nil(t, cpuOnly.Pairs)
}

// TestLeaseNeverLeasesLostGPU: GPUs NVML reports lost after Discover (a
// query answers ERROR_GPU_IS_LOST, or no GPU has the UUID any more) are
// never leased: NVML's health check re-checks each GPU by UUID before a
// claim hands it out, and the metrics say why. Once all are lost, Acquire
// runs on the CPU device and Why names them.
func TestLeaseNeverLeasesLostGPU(t *testing.T) {
	lib, err := nvmlmock.New("dgxa100")
	require.NoError(t, err)
	b, _, err := openBackend(t.Context(), lib)
	require.NoError(t, err)
	defer b.CloseAndWait(t.Context())
	require.Equal(t, 8, b.NumGPUs())

	gpu0 := lib.Devices[0].(*dgxa100.Device)
	gpu0.GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{}, gonvml.ERROR_GPU_IS_LOST }
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
	assert.Nil(t, a.Claim)
	assert.Contains(t, a.Why, "lease: no GPU left: all 8 GPUs of the pool are lost: gpu0 (")
	assert.Contains(t, a.Why, "; and 4 more")
	l, err = b.Claim(t.Context())
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
	if !assert.Nil(t, l) {
		l.Release()
	}
}

func TestLeaseCPUOnly(t *testing.T) {
	lib := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }}
	b, inv, err := openBackend(context.Background(), lib)
	require.NoError(t, err)
	assert.Equal(t, 0, b.NumGPUs())
	assert.Equal(t, "nvml: Init: ERROR_LIBRARY_NOT_FOUND", inv.NVML.Reason)
	_, err = b.Claim(context.Background())
	assert.ErrorIs(t, err, lease.ErrNoGPU)
	devs, err := b.Devices()
	require.NoError(t, err)
	assert.Empty(t, devs)
	a, err := b.Acquire(context.Background(), gpu.WithStreams(1)) // the CPU device is used as always
	require.NoError(t, err)
	assert.Equal(t, topology.CPU, a.Device.ID())
	assert.Equal(t, "no GPU: NVML unavailable (no NVIDIA driver library found, or it failed to start): nvml: Init: ERROR_LIBRARY_NOT_FOUND"+
		"; test-list: no device", a.Why, "the reason, and what the registered drivers found (route_test.go's lists nothing here)")
	a.Release()
	closed(t, b)
}

func TestLeaseMockDGX(t *testing.T) {
	b, inv, err := openBackend(context.Background(), dgxa100.New())
	require.NoError(t, err)
	assert.Len(t, inv.GPUs(), 8)
	require.NoError(t, err)
	assert.Equal(t, 8, b.NumGPUs())
	recs := b.StartupRecords()
	require.Len(t, recs, 8)
	assert.Equal(t, "gpu7", recs[7].Device)
	assert.Equal(t, "Mock NVIDIA A100-SXM4-40GB", recs[7].Name)
	var leases []*lease.Claim
	for range 8 {
		l, err := b.Claim(context.Background())
		require.NoError(t, err)
		leases = append(leases, l)
	}
	for _, l := range leases {
		l.Release()
	}
	closed(t, b)
}

// openBackend builds a lease backend, as opts say, over the GPUs Discover
// finds through lib (nil: the system library), with NVML's health check
// over the same library and NVML's status as the source.
func openBackend(ctx context.Context, lib gonvml.Interface, opts ...lease.Option) (*lease.Backend, nvml.Inventory, error) {
	var dopts []nvml.Option
	if lib != nil {
		dopts = append(dopts, nvml.WithLibrary(lib))
	}
	inv, err := nvml.Discover(ctx, dopts...)
	if err != nil {
		return nil, inv, err
	}
	b, err := lease.New(append([]lease.Option{lease.WithDevices(inv.Devices), lease.WithHealthCheck(nvml.HealthCheck(lib)),
		lease.WithSource(inv.NVML.String())}, opts...)...)
	return b, inv, err
}

// closed closes b and requires a clean close.
func closed(t *testing.T, b *lease.Backend) lease.CloseSnapshot {
	t.Helper()
	s, err := b.CloseAndWait(context.Background())
	require.NoError(t, err)
	return s
}
