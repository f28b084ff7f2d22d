package lease_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"
)

// enumDriver is a test Enumerator: it lists what found holds (set by a
// test; empty by default, so other tests' backends see no device) and
// opens a fakeDevice for a found one, or fails with openErr.
type enumDriver struct{}

var enum struct {
	mu       sync.Mutex
	found    []gpu.Found
	err      error // Enumerate's
	openErr  error
	closeErr error // every fakeDevice's Close
	opened   []topology.DeviceID
	streams  []int
	calls    int // Enumerate calls since setEnum
}

// setEnum makes the test Enumerator list found (or fail with err) until
// the test ends.
func setEnum(t *testing.T, err error, found ...gpu.Found) {
	t.Helper()
	enum.mu.Lock()
	enum.found, enum.err, enum.openErr, enum.closeErr, enum.opened, enum.streams, enum.calls = found, err, nil, nil, nil, nil, 0
	enum.mu.Unlock()
	t.Cleanup(func() {
		enum.mu.Lock()
		enum.found, enum.err, enum.openErr, enum.closeErr, enum.opened, enum.streams = nil, nil, nil, nil, nil, nil
		enum.mu.Unlock()
	})
}

func (enumDriver) Open(context.Context, gpu.Config) (gpu.Set, error) { return fakeSet{}, nil }

func (enumDriver) Enumerate(context.Context) ([]gpu.Found, error) {
	enum.mu.Lock()
	defer enum.mu.Unlock()
	enum.calls++
	return append([]gpu.Found(nil), enum.found...), enum.err
}

func (enumDriver) OpenDevice(_ context.Context, f gpu.Found, cfg gpu.Config) (gpu.Device, error) {
	enum.mu.Lock()
	defer enum.mu.Unlock()
	if enum.openErr != nil {
		return nil, enum.openErr
	}
	enum.opened = append(enum.opened, f.Device.ID)
	enum.streams = append(enum.streams, cfg.Streams)
	return &fakeDevice{info: f.Device}, nil
}

// fakeDevice is a device with no streams that counts its Closes and
// fails them with enum.closeErr.
type fakeDevice struct {
	info   topology.DeviceFacts
	closes atomic.Int32
}

func (d *fakeDevice) ID() topology.DeviceID      { return d.info.ID }
func (d *fakeDevice) Kind() string               { return "test-enum" }
func (d *fakeDevice) Info() topology.DeviceFacts { return d.info }
func (d *fakeDevice) NumStreams() int            { return 1 }
func (d *fakeDevice) Stream(int) gpu.Stream      { panic("fakeDevice has no streams") }
func (d *fakeDevice) Close() error {
	d.closes.Add(1)
	enum.mu.Lock()
	defer enum.mu.Unlock()
	return enum.closeErr
}

// plainDriver is a driver that lists no devices (no Enumerator).
type plainDriver struct{}

func (plainDriver) Open(context.Context, gpu.Config) (gpu.Set, error) { return fakeSet{}, nil }

type fakeSet struct{}

func (fakeSet) Devices() []gpu.Device { return nil }
func (fakeSet) Close() error          { return nil }

// The test drivers register once per process, as real drivers do in init,
// so the tests can run with -count > 1.
func init() {
	gpu.Register("test-enum", enumDriver{})
	gpu.Register("test-plain", plainDriver{})
}

const uuid0 = "GPU-4f3b2c1a-0d9e-4a7b-8c6d-5e4f3a2b1c0d"

// foundGPU is a GPU the test Enumerator lists as opencl<i>.
func foundGPU(i int, name, uuid, pci string) gpu.Found {
	return gpu.Found{Type: "gpu", Key: name,
		Device: topology.DeviceFacts{ID: topology.OpenCL(i), Name: name, Vendor: "Vendor " + name, UUID: uuid, PCIBusID: pci, MemoryBytes: 1 << 30, NUMANode: -1}}
}

// nvmlGPU is an NVML GPU as gpu/nvml's inventory gives it.
func nvmlGPU(i int, uuid, pci string) topology.DeviceFacts {
	return topology.DeviceFacts{ID: topology.GPU(i), Name: "NVIDIA test GPU", Vendor: "NVIDIA Corporation", UUID: uuid, PCIBusID: pci, NUMANode: -1}
}

// TestBackendLeasesFoundDevices: the pool holds Devices' GPUs, then the
// found devices of the leased types, each with its vendor and identity;
// a found device that is an NVML GPU (same UUID, or same PCI bus ID in
// another spelling) is that GPU's route, not a slot of its own; Acquire
// opens the leased device with its driver, Release closes it and then
// frees the lease.
// TestAcquireRefusesDriverSettings: the driver of a leased device is not
// known before the claim, so Acquire refuses a driver setting before it
// claims anything, naming it.
func TestAcquireRefusesDriverSettings(t *testing.T) {
	b, err := lease.New(lease.WithDrivers())
	require.NoError(t, err)
	defer closed(t, b)
	a, err := b.Acquire(t.Context(), gpu.WithDriverSetting(simSetting{}))
	assert.EqualError(t, err, "lease: Acquire: a driver setting of sim (lease_test.simSetting): the leased device's driver is not known in advance; give driver settings to gpu.Open")
	assert.Nil(t, a)
	a, err = b.Acquire(t.Context(), gpu.WithStreams(-2))
	assert.EqualError(t, err, "gpu: WithStreams(-2): want at least 1 stream")
	assert.Nil(t, a)
	assert.Zero(t, b.MetricsSnapshot().Admissions, "nothing claimed")
}

// simSetting is a driver setting of kind "sim".
type simSetting struct{}

func (simSetting) DriverKind() string { return "sim" }

func TestBackendLeasesFoundDevices(t *testing.T) {
	setEnum(t, nil,
		foundGPU(0, "routed by UUID", "4F3B2C1A-0D9E-4A7B-8C6D-5E4F3A2B1C0D", ""),
		foundGPU(1, "other vendor GPU", "", "0000:c1:00.0"),
		gpu.Found{Type: "cpu", Key: "pocl", Device: topology.DeviceFacts{ID: topology.OpenCL(2), Name: "cpu device", NUMANode: -1}},
		foundGPU(3, "routed by PCI", "", "0000:07:00.0"),
	)
	b, err := lease.New(lease.WithDrivers("test-enum"), lease.WithDevices([]topology.DeviceFacts{topology.CPUDevice(), nvmlGPU(0, uuid0, "00000000:01:00.0"), nvmlGPU(1, "", "00000000:07:00.0"), nvmlGPU(2, "", "")}))
	require.NoError(t, err)
	defer closed(t, b)

	assert.Equal(t, []string{"gpu0", "gpu1", "gpu2", "opencl1"}, b.Identity().Devices)
	var runtimes, vendors []string
	for _, r := range b.StartupRecords() {
		runtimes = append(runtimes, r.Runtime)
		vendors = append(vendors, r.Vendor)
	}
	assert.Equal(t, []string{"test-enum opencl0", "test-enum opencl3", "none", "test-enum"}, runtimes)
	assert.Equal(t, []string{"NVIDIA Corporation", "NVIDIA Corporation", "NVIDIA Corporation", "Vendor other vendor GPU"}, vendors)
	assert.Equal(t, []string{
		"test-enum: opencl0 (routed by UUID) is gpu0",
		"test-enum: opencl2 (cpu device) is a cpu device: not leased (lease.WithLeaseTypes [gpu])",
		"test-enum: opencl3 (routed by PCI) is gpu1",
	}, b.Notes())
	leases := b.MetricsSnapshot().Leases
	require.Len(t, leases, 4)
	assert.Equal(t, lease.SlotState{Slot: 3, Device: "opencl1", Index: 1, Name: "other vendor GPU", Vendor: "Vendor other vendor GPU"}, leases[3])

	// Release closes the device once, then frees the lease.
	a, err := b.Acquire(t.Context(), gpu.WithStreams(3))
	require.NoError(t, err)
	assert.Equal(t, topology.GPU(0), a.Claim.Device().ID)
	assert.Equal(t, topology.OpenCL(0), a.Device.ID())
	assert.Equal(t, "gpu0 (NVIDIA test GPU, NVIDIA Corporation) leased, run through test-enum as opencl0", a.Why)
	assert.Equal(t, int64(1), b.CloseSnapshot().ActiveGPUPermits)
	dev := a.Device.(*fakeDevice)
	assert.NoError(t, a.Release())
	assert.NoError(t, a.Release())
	assert.Equal(t, int32(1), dev.closes.Load(), "Release closes the device once")
	assert.Zero(t, b.CloseSnapshot().ActiveGPUPermits, "and frees the lease")

	// Hold gpu0 and gpu1: the next claim gets gpu2, which no driver runs,
	// so the run goes to the CPU device (this test binary has no driver
	// for it: an error) and the lease goes back.
	a0, err := b.Acquire(t.Context())
	require.NoError(t, err)
	defer a0.Release()
	a1, err := b.Acquire(t.Context())
	require.NoError(t, err)
	defer a1.Release()
	assert.Equal(t, topology.GPU(1), a1.Claim.Device().ID)
	assert.Equal(t, topology.OpenCL(3), a1.Device.ID())
	assert.Equal(t, "gpu1 (NVIDIA test GPU, NVIDIA Corporation) leased, run through test-enum as opencl3", a1.Why)
	_, err = b.Acquire(t.Context())
	require.ErrorContains(t, err, `gpu: no driver "cpu" registered`)
	assert.Equal(t, int64(2), b.CloseSnapshot().ActiveGPUPermits, "gpu2's lease went back")
	l2, err := b.Claim(t.Context())
	require.NoError(t, err)
	require.Equal(t, topology.GPU(2), l2.Device().ID)
	defer l2.Release()
	a3, err := b.Acquire(t.Context(), gpu.WithStreams(2))
	require.NoError(t, err)
	defer a3.Release()
	assert.Equal(t, topology.OpenCL(1), a3.Device.ID())
	assert.Equal(t, "opencl1 (other vendor GPU, Vendor other vendor GPU) leased", a3.Why)
	enum.mu.Lock()
	opened, streams := enum.opened, enum.streams
	enum.mu.Unlock()
	assert.Equal(t, []topology.DeviceID{topology.OpenCL(0), topology.OpenCL(0), topology.OpenCL(3), topology.OpenCL(1)}, opened)
	assert.Equal(t, []int{3, 0, 0, 2}, streams, "Acquire's config reaches the driver")
}

func TestBackendDriversConfig(t *testing.T) {
	setEnum(t, nil, foundGPU(0, "a", "", ""), gpu.Found{Type: "cpu", Key: "c", Device: topology.DeviceFacts{ID: topology.OpenCL(1), Name: "c", NUMANode: -1}})
	for _, tc := range []struct {
		name string
		cfg  []lease.Option
		err  string
	}{
		{"unknown driver", []lease.Option{lease.WithDrivers("nope")}, `lease: WithDrivers: gpu: no driver "nope" registered (registered: [`},
		{"not an enumerator", []lease.Option{lease.WithDrivers("test-plain")}, `lease: WithDrivers: driver "test-plain" lists no devices to lease (it does not implement gpu.Enumerator)`},
		{"unknown type", []lease.Option{lease.WithDrivers("test-enum"), lease.WithLeaseTypes("gpu", "fpga")},
			`lease: WithLeaseTypes: unknown device type "fpga" (want one of [gpu cpu accelerator custom])`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := lease.New(tc.cfg...)
			require.ErrorContains(t, err, tc.err)
			assert.Nil(t, b)
		})
	}
	t.Run("cpu type leased when named", func(t *testing.T) {
		b, err := lease.New(lease.WithDrivers("test-enum"), lease.WithLeaseTypes("cpu", "gpu"))
		require.NoError(t, err)
		defer closed(t, b)
		assert.Equal(t, []string{"opencl0", "opencl1"}, b.Identity().Devices)
		assert.Empty(t, b.Notes())
	})
	t.Run("listed twice", func(t *testing.T) {
		b, err := lease.New(lease.WithDrivers("test-enum", "test-enum"))
		require.NoError(t, err)
		defer closed(t, b)
		assert.Equal(t, []string{"opencl0"}, b.Identity().Devices)
		assert.Contains(t, b.Notes(), "test-enum: opencl0 (a) not leased: driver test-enum has a device with that ID")
	})
	t.Run("no drivers", func(t *testing.T) {
		enum.mu.Lock()
		before := enum.calls
		enum.mu.Unlock()
		b, err := lease.New(lease.WithDrivers())
		require.NoError(t, err)
		defer closed(t, b)
		assert.Zero(t, b.NumGPUs())
		assert.Empty(t, b.Notes())
		enum.mu.Lock()
		assert.Equal(t, before, enum.calls, "no enumerator asked")
		enum.mu.Unlock()
	})
	t.Run("nil: every enumerator", func(t *testing.T) {
		b, err := lease.New()
		require.NoError(t, err)
		defer closed(t, b)
		assert.Equal(t, []string{"opencl0"}, b.Identity().Devices)
	})
}

// A driver whose Enumerate fails adds no device and says why in Notes,
// which Acquire's reason for the CPU device includes.
func TestBackendEnumerateFails(t *testing.T) {
	setEnum(t, errors.New("no platform"))
	b, err := lease.New(lease.WithDrivers("test-enum"), lease.WithSource("NVML unavailable"))
	require.NoError(t, err)
	defer closed(t, b)
	assert.Zero(t, b.NumGPUs())
	assert.Equal(t, []string{"test-enum: no platform"}, b.Notes())
	_, err = b.Claim(t.Context())
	assert.ErrorIs(t, err, lease.ErrNoGPU)
}

// TestBackendAcquireFIFO: claimers of one leased device are served in
// the order they parked; each gets the device opened afresh, and a
// claimer whose ctx ends while parked leaves without a lease.
func TestBackendAcquireFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		setEnum(t, nil, foundGPU(0, "only", "", ""))
		b, err := lease.New(lease.WithDrivers("test-enum"))
		require.NoError(t, err)
		defer closed(t, b)
		first, err := b.Acquire(t.Context())
		require.NoError(t, err)

		var order []string
		var mu sync.Mutex
		var wg sync.WaitGroup
		cctx, cancel := context.WithCancel(t.Context())
		for _, name := range []string{"B", "cancelled", "C"} {
			ctx := t.Context()
			if name == "cancelled" {
				ctx = cctx
			}
			wg.Go(func() {
				a, err := b.Acquire(ctx)
				if name == "cancelled" {
					assert.ErrorIs(t, err, context.Canceled)
					assert.Nil(t, a)
					return
				}
				if !assert.NoError(t, err, name) {
					return
				}
				mu.Lock()
				order = append(order, name)
				mu.Unlock()
				a.Release()
			})
			synctest.Wait() // parked, in this order
		}
		assert.Equal(t, 3, b.MetricsSnapshot().PendingClaimers)
		cancel()
		synctest.Wait()
		assert.Equal(t, 2, b.MetricsSnapshot().PendingClaimers)
		first.Release()
		wg.Wait()
		assert.Equal(t, []string{"B", "C"}, order)
		assert.Zero(t, b.CloseSnapshot().ActiveGPUPermits)
		assert.Equal(t, uint64(3), b.MetricsSnapshot().Admissions)
	})
}

// TestBackendAcquireCloseWaitsForRelease: a run that holds an acquired
// device holds its GPU permit, so CloseAndWait times out until the run
// releases it (closing the device), and no new Acquire is admitted
// meanwhile.
func TestBackendAcquireCloseWaitsForRelease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		setEnum(t, nil, foundGPU(0, "only", "", ""))
		b, err := lease.New(lease.WithDrivers("test-enum"))
		require.NoError(t, err)
		a, err := b.Acquire(t.Context())
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		s, err := b.CloseAndWait(ctx)
		require.ErrorIs(t, err, lease.ErrBackendCloseTimeout)
		assert.Equal(t, int64(1), s.ActiveGPUPermits)
		assert.Equal(t, "gpu_permits", s.Phase)
		_, err = b.Acquire(t.Context())
		assert.ErrorIs(t, err, lease.ErrBackendClosing)
		dev := a.Device.(*fakeDevice)
		a.Release()
		assert.Equal(t, int32(1), dev.closes.Load())
		s = closed(t, b)
		assert.Equal(t, 1, s.CleanupLateSuccessCount, "the phase the deadline caught completed later")
	})
}

// A device whose Close fails: Release returns that error, still frees the
// lease, and a second Release does nothing.
func TestBackendAcquireReleaseReturnsCloseError(t *testing.T) {
	setEnum(t, nil, foundGPU(0, "only", "", ""))
	boom := errors.New("test-enum: close opencl0: a kernel failed")
	enum.mu.Lock()
	enum.closeErr = boom
	enum.mu.Unlock()
	b, err := lease.New(lease.WithDrivers("test-enum"))
	require.NoError(t, err)
	a, err := b.Acquire(t.Context())
	require.NoError(t, err)
	require.NotNil(t, a.Claim)
	assert.ErrorIs(t, a.Release(), boom)
	assert.Zero(t, b.CloseSnapshot().ActiveGPUPermits, "the lease is freed although the close failed")
	assert.NoError(t, a.Release(), "a second Release does nothing")
	assert.Equal(t, int32(1), a.Device.(*fakeDevice).closes.Load())
	closed(t, b)
}

// A driver that fails to open the leased device: the lease goes back and
// the run goes to the CPU device (here: no CPU driver in this binary).
func TestBackendAcquireOpenFails(t *testing.T) {
	setEnum(t, nil, foundGPU(0, "only", "", ""))
	enum.mu.Lock()
	enum.openErr = errors.New("device busy")
	enum.mu.Unlock()
	b, err := lease.New(lease.WithDrivers("test-enum"))
	require.NoError(t, err)
	defer closed(t, b)
	_, err = b.Acquire(t.Context())
	require.ErrorContains(t, err, `gpu: no driver "cpu" registered`)
	assert.Zero(t, b.CloseSnapshot().ActiveGPUPermits, "the lease went back")
	assert.Equal(t, uint64(1), b.MetricsSnapshot().Admissions)
}

// Acquire opens the CPU device through the registry: without package
// gpu/cpu imported (as in this test binary) it fails with an error naming
// the missing driver, and hands no lease out.
func TestAcquireNeedsCPUDriver(t *testing.T) {
	b, err := lease.New(lease.WithDevices(gpus(0)))
	require.NoError(t, err)
	defer closed(t, b)
	_, err = b.Acquire(t.Context())
	require.Error(t, err)
	assert.Contains(t, err.Error(), `gpu: no driver "cpu" registered`)
	for _, l := range b.MetricsSnapshot().Leases {
		assert.False(t, l.Leased, "the lease went back")
	}
}
