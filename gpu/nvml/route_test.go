package nvml_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/nvml"
	"github.com/streamdag/streamdag/gpu/nvml/nvmlmock"
	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"
)

// listDriver is a test gpu.Enumerator (kind "test-list") that lists what
// listed holds and opens a device with no streams for a listed one.
type listDriver struct{}

var listed struct {
	mu    sync.Mutex
	found []gpu.Found
}

func (listDriver) Open(context.Context, gpu.Config) (gpu.Set, error) { return nil, nil }

func (listDriver) Enumerate(context.Context) ([]gpu.Found, error) {
	listed.mu.Lock()
	defer listed.mu.Unlock()
	return append([]gpu.Found(nil), listed.found...), nil
}

func (listDriver) OpenDevice(_ context.Context, f gpu.Found, _ gpu.Config) (gpu.Device, error) {
	return listedDevice{f.Device}, nil
}

type listedDevice struct{ info topology.DeviceFacts }

func (d listedDevice) ID() topology.DeviceID      { return d.info.ID }
func (d listedDevice) Kind() string               { return "test-list" }
func (d listedDevice) Info() topology.DeviceFacts { return d.info }
func (d listedDevice) NumStreams() int            { return 1 }
func (d listedDevice) Stream(int) gpu.Stream      { panic("no streams") }
func (d listedDevice) Close() error               { return nil }

func init() { gpu.Register("test-list", listDriver{}) }

// TestLeaseRoutesGPUsThroughListedDevices: a lease backend built over
// the NVML GPUs and the devices the drivers list. A listed device with an
// NVML GPU's UUID is how that GPU runs; another listed GPU (of
// another vendor, with a UUID NVML does not know) gets its own slot, and
// the NVML health check leaves it alone (it is not NVML's), so it is
// leased like any other.
func TestLeaseRoutesGPUsThroughListedDevices(t *testing.T) {
	lib, err := nvmlmock.New("dgxa100")
	require.NoError(t, err)
	inv := discover(t, t.Context(), nvml.WithLibrary(lib))
	gpus := inv.GPUs()
	require.Len(t, gpus, 8)
	listed.mu.Lock()
	listed.found = []gpu.Found{
		{Type: "gpu", Key: "a", Device: topology.DeviceFacts{ID: topology.OpenCL(0), Name: "NVIDIA A100 (OpenCL)", Vendor: "NVIDIA Corporation", UUID: gpus[0].UUID, NUMANode: -1}},
		{Type: "gpu", Key: "b", Device: topology.DeviceFacts{ID: topology.OpenCL(1), Name: "other GPU", Vendor: "Other", UUID: "9a8b7c6d-5e4f-3a2b-1c0d-9e8f7a6b5c4d", NUMANode: -1}},
	}
	listed.mu.Unlock()
	t.Cleanup(func() { listed.mu.Lock(); listed.found = nil; listed.mu.Unlock() })

	b, _, err := openBackend(t.Context(), lib, lease.WithDrivers("test-list"))
	require.NoError(t, err)
	defer closed(t, b)
	require.Equal(t, 9, b.NumGPUs())
	recs := b.StartupRecords()
	assert.Equal(t, "test-list opencl0", recs[0].Runtime)
	assert.Equal(t, "none", recs[1].Runtime)
	assert.Equal(t, "opencl1", recs[8].Device)
	assert.Equal(t, "test-list", recs[8].Runtime)

	a, err := b.Acquire(t.Context())
	require.NoError(t, err)
	defer a.Release()
	assert.Equal(t, topology.GPU(0), a.Claim.Device().ID)
	assert.Equal(t, topology.OpenCL(0), a.Device.ID())
	assert.Equal(t, "gpu0 (Mock NVIDIA A100-SXM4-40GB, NVIDIA Corporation) leased, run through test-list as opencl0", a.Why)

	var held []*lease.Claim
	defer func() { // before the backend's close waits for them
		for _, l := range held {
			l.Release()
		}
	}()
	for range 7 { // gpu1 … gpu7
		l, err := b.Claim(t.Context())
		require.NoError(t, err)
		held = append(held, l)
	}
	other := listed.found[1].Device
	require.NoError(t, nvml.HealthCheck(lib)(other), "the NVML check does not judge a device NVML does not own")
	last, err := b.Claim(t.Context())
	require.NoError(t, err)
	assert.Equal(t, topology.OpenCL(1), last.Device().ID, "the other vendor's GPU is leased, not retired")
	held = append(held, last)
	for _, e := range b.MetricsSnapshot().Leases {
		assert.Empty(t, e.Lost, e.Device)
	}
}
