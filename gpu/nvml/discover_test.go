package nvml_test

import (
	"context"
	"reflect"
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/nvml"
	"github.com/streamdag/streamdag/topology"
)

func TestDiscoverMockServers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		server *dgxa100.Server // dgxh100.Server is the same type (server.Server)
		gpu    string
		memMiB int64
		cc     topology.ComputeCapability
	}{
		{"dgxa100", dgxa100.New(), "Mock NVIDIA A100-SXM4-40GB", 40960, topology.ComputeCapability{Major: 8, Minor: 0}},
		{"dgxh100", dgxh100.New(), "NVIDIA H100 80GB HBM3", 81920, topology.ComputeCapability{Major: 9, Minor: 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inv := discover(t, context.Background(), nvml.WithLibrary(tc.server))
			assert.True(t, inv.NVML.Available)
			assert.Empty(t, inv.NVML.Reason)
			assert.Equal(t, tc.server.DriverVersion, inv.NVML.Driver)
			assert.Equal(t, "NVML available (driver "+tc.server.DriverVersion+")", inv.NVML.String())
			require.Len(t, inv.Devices, 9, "cpu + 8 GPUs")
			assert.Equal(t, topology.CPU, inv.Devices[0].ID)
			gpus := inv.GPUs()
			require.Len(t, gpus, 8)
			uuids := map[string]bool{}
			for i, d := range gpus {
				md := tc.server.Devices[i].(*dgxa100.Device)
				assert.Equal(t, topology.GPU(i), d.ID)
				assert.Equal(t, tc.gpu, d.Name)
				assert.Equal(t, md.UUID, d.UUID)
				assert.True(t, strings.HasPrefix(d.UUID, "GPU-"), d.UUID)
				uuids[d.UUID] = true
				assert.Equal(t, tc.memMiB<<20, d.MemoryBytes)
				assert.Equal(t, int64(0), d.FreeMemoryBytes, "the mock reports 0 free")
				assert.Equal(t, tc.cc, d.ComputeCapability)
				assert.Equal(t, -1, d.NUMANode, "the mock has no GetNumaNodeId")
				assert.Nil(t, d.CPUAffinity, "the mock has no GetCpuAffinity")
				assert.Empty(t, d.PCIBusID, "the mock's PciInfo has no bus id")
			}
			assert.Len(t, uuids, 8, "UUIDs are distinct")
			// What the mocks lack is reported, not fatal: per GPU, the
			// empty bus id and the nil NUMA and affinity functions.
			// Per GPU also the nil NVLink state; per query the nil P2P
			// and common-ancestor functions, folded into one note each.
			assert.Len(t, inv.Notes, 8*4+5, "%q", inv.Notes)
			assert.Contains(t, inv.Notes, "p2p: common ancestor gpu0→gpu1 and 55 more pairs: panic: Device.GetTopologyCommonAncestorFunc: method is nil but Device.GetTopologyCommonAncestor was just called")
			assert.Len(t, inv.P2P, 8*7, "one entry per ordered pair, facts unknown")
			assert.Equal(t, topology.P2PNotReported, inv.P2P[0].Read)
			assert.Equal(t, "-", inv.P2P[0].Label())
			assert.Contains(t, inv.Notes, "gpu0: PCI bus id: empty")
			assert.Contains(t, inv.Notes, "gpu7: NUMA node: panic: Device.GetNumaNodeIdFunc: method is nil but Device.GetNumaNodeId was just called")
			assert.Contains(t, inv.Notes, "gpu7: CPU affinity: panic: Device.GetCpuAffinityFunc: method is nil but Device.GetCpuAffinity was just called")
			assert.Len(t, tc.server.ShutdownCalls(), 1, "Shutdown after a successful Init")
		})
	}
}

func TestDiscoverFullFactsAndPerDeviceFailures(t *testing.T) {
	srv := dgxa100.New()
	for i, nd := range srv.Devices {
		md := nd.(*dgxa100.Device)
		md.MemoryInfo.Free = uint64(i) << 30
		md.GetPciInfoFunc = func() (gonvml.PciInfo, gonvml.Return) {
			var p gonvml.PciInfo
			for j, c := range md.PciBusID {
				p.BusId[j] = int8(c)
			}
			return p, gonvml.SUCCESS
		}
		md.GetNumaNodeIdFunc = func() (int, gonvml.Return) {
			if i == 3 {
				return 0, gonvml.ERROR_NOT_SUPPORTED
			}
			return i / 4, gonvml.SUCCESS
		}
		md.GetCpuAffinityFunc = func(n int) ([]uint, gonvml.Return) {
			assert.GreaterOrEqual(t, n, 64)
			if i < 4 {
				return []uint{0xf}, gonvml.SUCCESS // CPUs 0-3
			}
			return []uint{0, 0b101}, gonvml.SUCCESS // CPUs 64 and 66
		}
	}
	srv.Devices[6].(*dgxa100.Device).GetNameFunc = func() (string, gonvml.Return) { return "", gonvml.ERROR_UNKNOWN }
	srv.Devices[2].(*dgxa100.Device).GetMemoryInfoFunc = func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{}, gonvml.ERROR_GPU_IS_LOST }
	getHandle := srv.DeviceGetHandleByIndexFunc
	calls := 0
	srv.DeviceGetHandleByIndexFunc = func(i int) (gonvml.Device, gonvml.Return) {
		switch i {
		case 5:
			return nil, gonvml.ERROR_NO_PERMISSION
		case 0:
			if calls++; calls > 1 { // lost after the first discovery
				return nil, gonvml.ERROR_GPU_IS_LOST
			}
		}
		return getHandle(i)
	}

	inv := discover(t, context.Background(), nvml.WithLibrary(srv))
	assert.Equal(t, []string{
		"gpu2: lost: memory: ERROR_GPU_IS_LOST (device left out)",
		"gpu3: NUMA node: ERROR_NOT_SUPPORTED",
		"gpu5: handle: ERROR_NO_PERMISSION (device left out)",
		"gpu6: name: ERROR_UNKNOWN",
	}, inv.Notes[:4], "then the notes of the NVLink and P2P calls the mock leaves nil")
	gpus := inv.GPUs()
	require.Len(t, gpus, 6)
	var ids []string
	for _, d := range gpus {
		ids = append(ids, d.ID.String())
	}
	assert.Equal(t, []string{"gpu0", "gpu1", "gpu3", "gpu4", "gpu6", "gpu7"}, ids, "indices stay sparse; the lost gpu2 is left out")
	require.Len(t, inv.Lost, 1)
	lost := inv.Lost[0]
	assert.Equal(t, topology.GPU(2), lost.Device)
	assert.Equal(t, srv.Devices[2].(*dgxa100.Device).UUID, lost.UUID)
	assert.ErrorIs(t, &lost, gpu.ErrDeviceLost)
	assert.ErrorIs(t, &lost, gonvml.ERROR_GPU_IS_LOST)
	for _, p := range inv.P2P {
		assert.NotEqual(t, topology.GPU(2), p.From, "no pair of the lost GPU")
		assert.NotEqual(t, topology.GPU(2), p.To, "no pair of the lost GPU")
	}
	g1, g3, g6, g7 := gpus[1], gpus[2], gpus[4], gpus[5]
	again := discover(t, context.Background(), nvml.WithLibrary(srv))
	assert.Contains(t, again.Notes, "gpu0: handle: ERROR_GPU_IS_LOST (device left out)")
	require.Len(t, again.Lost, 2, "gpu0 (no handle) and gpu2")
	assert.Equal(t, topology.GPU(0), again.Lost[0].Device)
	assert.ErrorIs(t, &again.Lost[0], gonvml.ERROR_GPU_IS_LOST)
	assert.Equal(t, "0000:01:00.0", g1.PCIBusID)
	assert.Equal(t, 0, g1.NUMANode)
	assert.Equal(t, []int{0, 1, 2, 3}, g1.CPUAffinity)
	assert.Equal(t, int64(1)<<30, g1.FreeMemoryBytes)
	assert.Equal(t, -1, g3.NUMANode, "ERROR_NOT_SUPPORTED leaves it unknown")
	assert.Equal(t, "", g6.Name)
	assert.Equal(t, "0000:06:00.0", g6.PCIBusID, "other facts of gpu6 are still read")
	assert.Equal(t, 1, g7.NUMANode)
	assert.Equal(t, []int{64, 66}, g7.CPUAffinity)
	assert.Equal(t, int64(7)<<30, g7.FreeMemoryBytes)
}

func TestDiscoverStopsOnCancel(t *testing.T) {
	srv := dgxh100.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	md := srv.Devices[2].(*dgxa100.Device) // dgxh100 uses the same server.Device type
	getName := md.GetNameFunc
	md.GetNameFunc = func() (string, gonvml.Return) {
		cancel() // cancel while reading gpu2
		return getName()
	}
	inv := discover(t, ctx, nvml.WithLibrary(srv))
	assert.True(t, inv.NVML.Available)
	require.Len(t, inv.GPUs(), 3, "gpu0..gpu2 are kept")
	assert.Equal(t, "NVIDIA H100 80GB HBM3", inv.GPUs()[2].Name)
	assert.Contains(t, inv.Notes, "nvml: stopped before gpu3 of 8: context canceled")
	assert.Len(t, srv.ShutdownCalls(), 1)

	// Done before it starts: NVML is not touched at all.
	srv2 := dgxh100.New()
	inv = discover(t, ctx, nvml.WithLibrary(srv2))
	assert.False(t, inv.NVML.Available)
	assert.Equal(t, "nvml: not queried: context canceled", inv.NVML.Reason)
	assert.Len(t, inv.Devices, 1)
	assert.Empty(t, srv2.InitCalls())
}

// callCounts returns, for every method of m named XxxCalls, how many calls
// the mock recorded.
func callCounts(m any) map[string]int {
	out := map[string]int{}
	v := reflect.ValueOf(m)
	for i := range v.NumMethod() {
		name := v.Type().Method(i).Name
		if !strings.HasSuffix(name, "Calls") || v.Method(i).Type().NumIn() != 0 {
			continue
		}
		if n := v.Method(i).Call(nil)[0].Len(); n > 0 {
			out[strings.TrimSuffix(name, "Calls")] = n
		}
	}
	return out
}

func TestDiscoverInitFailureCallsNothingElse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		init   func() gonvml.Return
		reason string
	}{
		{"library not found", func() gonvml.Return { return gonvml.ERROR_LIBRARY_NOT_FOUND }, "nvml: Init: ERROR_LIBRARY_NOT_FOUND"},
		{"driver not loaded", func() gonvml.Return { return gonvml.ERROR_DRIVER_NOT_LOADED }, "nvml: Init: ERROR_DRIVER_NOT_LOADED"},
		{"init panics", func() gonvml.Return { panic("no symbol nvmlInit_v2") }, "nvml: Init: panic: no symbol nvmlInit_v2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Every function but Init is nil, so any other call would panic
			// (and be recovered into a Note); the recorded calls show that
			// none was made at all.
			lib := &mock.Interface{InitFunc: tc.init}
			inv := discover(t, context.Background(), nvml.WithLibrary(lib))
			assert.Equal(t, map[string]int{"Init": 1}, callCounts(lib))
			assert.False(t, inv.NVML.Available)
			assert.Equal(t, tc.reason, inv.NVML.Reason)
			assert.Equal(t, "NVML unavailable (no NVIDIA driver library found, or it failed to start): "+tc.reason, inv.NVML.String())
			assert.Empty(t, inv.NVML.Driver)
			assert.Empty(t, inv.Notes)
			require.Len(t, inv.Devices, 1)
			assert.Equal(t, topology.CPUDevice().Name, inv.Devices[0].Name)
			assert.Empty(t, inv.GPUs())
		})
	}
}

func TestDiscoverBareMockNeverPanics(t *testing.T) {
	// Init succeeds but nothing else is implemented: everything is a Note.
	lib := &mock.Interface{InitFunc: func() gonvml.Return { return gonvml.SUCCESS }}
	inv := discover(t, context.Background(), nvml.WithLibrary(lib))
	assert.True(t, inv.NVML.Available)
	assert.Len(t, inv.Devices, 1)
	require.Len(t, inv.Notes, 3, "%q", inv.Notes)
	assert.True(t, strings.HasPrefix(inv.Notes[0], "nvml: driver version: panic: "), inv.Notes[0])
	assert.True(t, strings.HasPrefix(inv.Notes[1], "nvml: device count: panic: "), inv.Notes[1])
	assert.True(t, strings.HasPrefix(inv.Notes[2], "nvml: Shutdown: panic: "), inv.Notes[2])
}

func TestDiscoverHostDefault(t *testing.T) {
	// The real NVML of this host, through nvml.New(). On a host without
	// the NVIDIA library it must say so and return the CPU only; on a GPU
	// host it must list the GPUs. Either way it must not crash.
	inv := discover(t, context.Background())
	require.NotEmpty(t, inv.Devices)
	assert.Equal(t, topology.CPU, inv.Devices[0].ID)
	if inv.NVML.Available {
		t.Logf("NVML available on this host: %v, %d GPU(s), notes %q", inv.NVML, len(inv.GPUs()), inv.Notes)
		assert.Empty(t, inv.NVML.Reason)
		for _, d := range inv.GPUs() {
			assert.NotEmpty(t, d.UUID)
			assert.Positive(t, d.MemoryBytes)
			t.Logf("%v: %s, %d MiB, cc %v, bus %s, NUMA %d, %d CPUs near", d.ID, d.Name, d.MemoryBytes>>20, d.ComputeCapability, d.PCIBusID, d.NUMANode, len(d.CPUAffinity))
		}
		return
	}
	t.Logf("NVML not available on this host: %s", inv.NVML.Reason)
	assert.True(t, strings.HasPrefix(inv.NVML.Reason, "nvml: Init: "), inv.NVML.Reason)
	assert.Len(t, inv.Devices, 1)
	assert.Empty(t, inv.Notes)
}

// discover is nvml.Discover for options that must be valid.
func discover(t testing.TB, ctx context.Context, opts ...nvml.Option) nvml.Inventory {
	t.Helper()
	inv, err := nvml.Discover(ctx, opts...)
	require.NoError(t, err)
	return inv
}

// TestDiscoverOptionErrors checks that a nil library fails Discover
// before NVML is asked, naming the option.
func TestDiscoverOptionErrors(t *testing.T) {
	inv, err := nvml.Discover(t.Context(), nvml.WithLibrary(nil))
	require.EqualError(t, err, "nvml: WithLibrary: nil library (leave the option out for the system library)")
	assert.Empty(t, inv.Devices)
}
