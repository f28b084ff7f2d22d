package opencl_test

import (
	"context"
	"encoding/binary"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"
)

// leaseBackend returns a backend that leases this machine's OpenCL
// devices, CPU ones (PoCL) included, closed at cleanup.
func leaseBackend(t *testing.T) *lease.Backend {
	t.Helper()
	device(t)
	b, err := lease.New(lease.WithDrivers(opencl.Kind), lease.WithLeaseTypes("gpu", "cpu"))
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := b.CloseAndWait(context.Background())
		assert.NoError(t, err)
	})
	require.Positive(t, b.NumGPUs(), "the backend leases the OpenCL devices: %v", b.Notes())
	return b
}

// scale runs x[i] *= by over n ints on d through its first stream and
// returns the result.
func scale(t *testing.T, d gpu.Device, x []int32, by int32) []int32 {
	t.Helper()
	cd, ok := d.(gpu.CodeDevice)
	require.True(t, ok, "%v is a gpu.CodeDevice", d.ID())
	p, err := cd.Program("lease", `__kernel void scale(__global int *x, int by) { x[get_global_id(0)] *= by; }`, "")
	require.NoError(t, err)
	raw := make([]byte, 4*len(x))
	for i, v := range x {
		binary.NativeEndian.PutUint32(raw[4*i:], uint32(v))
	}
	m, err := cd.Alloc(int64(len(raw)))
	require.NoError(t, err)
	defer m.Release()
	s := cd.Stream(0).(gpu.CodeStream)
	require.NoError(t, errOf(s.CopyIn(m, 0, raw)))
	require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "scale", Global: []int{len(x)},
		Args: []gpu.KernelArg{{Mem: m}, {Scalar: by}}, Label: "scale"})))
	require.NoError(t, errOf(s.CopyOut(raw, m, 0)))
	require.NoError(t, s.Record().Wait(t.Context()))
	out := make([]int32, len(x))
	for i := range out {
		out[i] = int32(binary.NativeEndian.Uint32(raw[4*i:]))
	}
	return out
}

// TestEnumerate: the driver lists every available device as Open opens
// them, with its type, vendor, memory and a key, creating no context.
func TestEnumerate(t *testing.T) {
	d := device(t)
	drv, err := gpu.Lookup(opencl.Kind)
	require.NoError(t, err)
	enum, ok := drv.(gpu.Enumerator)
	require.True(t, ok, "the OpenCL driver is a gpu.Enumerator")
	fs, err := enum.Enumerate(t.Context())
	require.NoError(t, err)
	require.NotEmpty(t, fs)
	info := d
	assert.Equal(t, topology.OpenCL(0), fs[0].Device.ID)
	assert.Equal(t, info.Name, fs[0].Device.Name)
	assert.Equal(t, info.Vendor, fs[0].Device.Vendor)
	assert.Equal(t, info.GlobalMemBytes, fs[0].Device.MemoryBytes)
	if strings.Contains(info.Type, "CPU") {
		assert.Equal(t, "cpu", fs[0].Type)
	}
	assert.NotEmpty(t, fs[0].Key)
	keys := map[string]bool{}
	for i, f := range fs {
		assert.Equal(t, topology.OpenCL(i), f.Device.ID)
		assert.False(t, keys[f.Key], "key %q given twice", f.Key)
		keys[f.Key] = true
	}
	cfg, err := gpu.NewConfig(gpu.WithDriverSetting(setting(opencl.Kind)))
	require.NoError(t, err)
	_, err = enum.OpenDevice(t.Context(), fs[0], cfg)
	assert.EqualError(t, err, "opencl: open device opencl0: a driver setting opencl_test.setting: the OpenCL driver takes none")
}

// TestBackendAcquireOpenCL: Acquire on a backend that leases the OpenCL
// devices gives the leased device opened by the OpenCL driver (with the
// streams asked for), which runs a kernel; Release closes it and frees
// the lease. Without LeaseTypes a CPU OpenCL device is not leased, and
// Notes say so.
func TestBackendAcquireOpenCL(t *testing.T) {
	b := leaseBackend(t)
	recs := b.StartupRecords()
	assert.Equal(t, "opencl0", recs[0].Device)
	assert.Equal(t, opencl.Kind, recs[0].Runtime)
	assert.Equal(t, device(t).Vendor, recs[0].Vendor)

	a, err := b.Acquire(t.Context(), gpu.WithStreams(2))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, a.Release()) }) // before the backend's close waits for it
	require.NotNil(t, a.Claim)
	assert.Equal(t, topology.OpenCL(0), a.Claim.Device().ID)
	assert.Equal(t, topology.OpenCL(0), a.Device.ID())
	assert.Equal(t, opencl.Kind, a.Device.Kind())
	assert.Equal(t, 2, a.Device.NumStreams())
	assert.Contains(t, a.Why, "opencl0 ("+device(t).Name)
	assert.True(t, b.MetricsSnapshot().Leases[0].Leased)
	assert.Equal(t, []int32{3, 6, 9, 12, 15}, scale(t, a.Device, []int32{1, 2, 3, 4, 5}, 3))

	require.NoError(t, a.Release())
	assert.ErrorIs(t, a.Device.Stream(0).Launch(gpu.TaskFunc(func() {})), gpu.ErrClosed, "Release closes the device")
	assert.False(t, b.MetricsSnapshot().Leases[0].Leased, "and frees the lease")
	assert.Zero(t, b.CloseSnapshot().ActiveGPUPermits)
	assert.NoError(t, a.Release(), "idempotent")
}

func TestBackendCPUOpenCLNotLeasedByDefault(t *testing.T) {
	if !strings.Contains(device(t).Type, "CPU") {
		t.Skip("the first OpenCL device is no CPU device")
	}
	b, err := lease.New(lease.WithDrivers(opencl.Kind))
	require.NoError(t, err)
	defer func() {
		_, err := b.CloseAndWait(context.Background())
		assert.NoError(t, err)
	}()
	assert.NotContains(t, b.Identity().Devices, "opencl0")
	assert.Contains(t, b.Notes(), "opencl: opencl0 ("+device(t).Name+") is a cpu device: not leased (lease.WithLeaseTypes [gpu])")
}

// TestBackendAcquireOpenCLFIFO: while one run holds the only lease of an
// OpenCL device, the next claimer parks; when the first releases it the
// second gets the device, opened afresh, and runs its kernel on it.
func TestBackendAcquireOpenCLFIFO(t *testing.T) {
	b := leaseBackend(t)
	n := b.NumGPUs()
	var held []*lease.Acquired
	for range n {
		a, err := b.Acquire(t.Context(), gpu.WithStreams(1))
		require.NoError(t, err)
		t.Cleanup(func() { assert.NoError(t, a.Release()) }) // before the backend's close waits for it
		require.NotNil(t, a.Claim)
		held = append(held, a)
	}
	type result struct {
		a   *lease.Acquired
		err error
	}
	got := make(chan result, 1)
	go func() {
		a, err := b.Acquire(t.Context(), gpu.WithStreams(1))
		got <- result{a, err}
	}()
	for b.MetricsSnapshot().PendingClaimers == 0 {
		runtime.Gosched() // until the second claimer has parked
	}
	select {
	case r := <-got:
		t.Fatalf("the second claimer got %v while every device was leased", r)
	default:
	}
	first := held[0]
	require.NoError(t, first.Release())
	r := <-got
	require.NoError(t, r.err)
	t.Cleanup(func() { assert.NoError(t, r.a.Release()) })
	assert.Equal(t, first.Claim.Device().ID, r.a.Claim.Device().ID, "the freed device goes to the parked claimer")
	assert.Equal(t, []int32{-2, -4}, scale(t, r.a.Device, []int32{1, 2}, -2))
	assert.Equal(t, uint64(n+1), b.MetricsSnapshot().Admissions)
}

// An OpenCL lease the driver cannot open (more streams than a device
// has) goes back, and the run goes to the CPU device, saying why.
func TestBackendAcquireOpenCLOpenFails(t *testing.T) {
	b := leaseBackend(t)
	a, err := b.Acquire(t.Context(), gpu.WithStreams(opencl.MaxStreams+1))
	require.NoError(t, err)
	defer a.Release()
	assert.Equal(t, topology.CPU, a.Device.ID())
	assert.Nil(t, a.Claim)
	assert.Contains(t, a.Why, "opencl0 ("+device(t).Name+") leased, but driver opencl could not open it: ")
	assert.Contains(t, a.Why, "opencl: WithStreams(65): want 1 to 64 streams: running on the CPU device")
	assert.Zero(t, b.CloseSnapshot().ActiveGPUPermits, "the lease went back")
}

// setting is a driver setting of the kind it names.
type setting string

func (s setting) DriverKind() string { return string(s) }
