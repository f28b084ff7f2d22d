package nvml_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	mockgpus "github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu/nvml"
	"github.com/streamdag/streamdag/gpu/nvml/nvmlmock"
	"github.com/streamdag/streamdag/topology"
)

// loadTopology reads testdata/topologies/NAME.json (copies of
// shared/topologies) into an nvmlmock.TopoMatrix.
func loadTopology(t *testing.T, name string) nvmlmock.TopoMatrix {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "topologies", name+".json"))
	require.NoError(t, err)
	var f struct {
		Matrix      [][]string `json:"matrix"`
		NUMA        []int      `json:"numa"`
		CPUAffinity []string   `json:"cpu_affinity"`
		P2P         *struct {
			Matrix [][]string `json:"matrix"`
		} `json:"p2p"`
	}
	require.NoError(t, json.Unmarshal(raw, &f))
	topo := nvmlmock.TopoMatrix{Matrix: f.Matrix, NUMA: f.NUMA, CPUAffinity: f.CPUAffinity}
	if f.P2P != nil {
		topo.P2P = f.P2P.Matrix
	}
	return topo
}

func filled(t *testing.T, n int, topo nvmlmock.TopoMatrix) *server.Server {
	t.Helper()
	srv := dgxa100.NewWithGPUs(mockgpus.Multiple(n, mockgpus.A100_SXM4_40GB)...)
	require.NoError(t, nvmlmock.Fill(srv, topo))
	return srv
}

func id(i int) topology.DeviceID { return topology.GPU(i) }

func TestDiscoverDGXA100NVSwitch(t *testing.T) {
	srv, err := nvmlmock.New("dgxa100")
	require.NoError(t, err)
	inv := discover(t, context.Background(), nvml.WithLibrary(srv))
	assert.Empty(t, inv.Notes, "every call the inventory makes is filled")
	g := inv.GPUs()
	require.Len(t, g, 8)
	assert.Equal(t, "00000000:02:00.0", g[2].PCIBusID)
	assert.Equal(t, 1, g[2].NUMANode)
	assert.Equal(t, 32, len(g[2].CPUAffinity), "16-31,144-159")
	assert.Equal(t, 144, g[2].CPUAffinity[16])
	require.Len(t, inv.Links, 8*12, "12 NVLinks up per A100")
	for _, l := range inv.Links {
		assert.False(t, l.RemoteIsGPU, "every link ends at an NVSwitch")
		assert.Regexp(t, `^00000000:c[0-5]:00\.0$`, l.RemotePCIBusID)
	}
	require.Len(t, inv.P2P, 56)
	for _, p := range inv.P2P {
		assert.Equal(t, [4]topology.P2PStatus{topology.P2POK, topology.P2POK, topology.P2POK, topology.P2POK}, [4]topology.P2PStatus{p.Read, p.Write, p.NVLink, p.Atomics})
		assert.Equal(t, "NV12", p.Label(), "%v→%v", p.From, p.To)
	}
	for _, tc := range []struct {
		from, to int
		want     nvml.AncestorLevel
	}{{0, 1, nvml.AncestorMultiple}, {0, 2, nvml.AncestorNode}, {0, 4, nvml.AncestorSystem}, {7, 6, nvml.AncestorMultiple}} {
		p, ok := inv.Pair(id(tc.from), id(tc.to))
		require.True(t, ok)
		assert.Equal(t, tc.want, p.Ancestor, "gpu%d→gpu%d", tc.from, tc.to)
	}
	_, ok := inv.Pair(id(0), id(0))
	assert.False(t, ok)
	assert.Empty(t, inv.MIG)
}

func TestDiscoverRealTopologies(t *testing.T) {
	t.Run("dgx1-v100 direct NVLinks", func(t *testing.T) {
		inv := discover(t, context.Background(), nvml.WithLibrary(filled(t, 8, loadTopology(t, "dgx1-v100"))))
		assert.Empty(t, inv.Notes)
		var g0 []nvml.NVLink
		for _, l := range inv.Links {
			if l.Device == id(0) {
				g0 = append(g0, l)
			}
		}
		require.Len(t, g0, 6, "NV1+NV1+NV2+NV2")
		assert.Equal(t, nvml.NVLink{Device: id(0), Link: 5, RemotePCIBusID: "00000000:04:00.0", Remote: id(4), RemoteIsGPU: true}, g0[5])
		p, _ := inv.Pair(id(0), id(3))
		assert.Equal(t, "NV2", p.Label())
		assert.Equal(t, 2, p.NVLinks)
		p, _ = inv.Pair(id(0), id(5))
		assert.Equal(t, "SYS", p.Label())
		assert.Equal(t, topology.P2PNotSupported, p.NVLink)
		assert.Equal(t, topology.P2PChipsetNotSupported, p.Read, "the fill's estimate for SYS")
	})
	t.Run("pcie 2 sockets", func(t *testing.T) {
		inv := discover(t, context.Background(), nvml.WithLibrary(filled(t, 8, loadTopology(t, "pcie-8gpu-2socket"))))
		assert.Empty(t, inv.Notes, "no NVLink is not a failure")
		assert.Empty(t, inv.Links)
		p, _ := inv.Pair(id(2), id(3))
		assert.Equal(t, nvml.AncestorSingle, p.Ancestor)
		assert.Equal(t, "PIX", p.Label())
		assert.Equal(t, topology.P2POK, p.Read)
		p, _ = inv.Pair(id(0), id(2))
		assert.Equal(t, "PXB", p.Label())
		p, _ = inv.Pair(id(3), id(4))
		assert.Equal(t, "SYS", p.Label())
	})
	t.Run("rtx5090 no p2p", func(t *testing.T) {
		inv := discover(t, context.Background(), nvml.WithLibrary(filled(t, 2, loadTopology(t, "rtx5090-2gpu-no-p2p"))))
		require.Len(t, inv.P2P, 2)
		p := inv.P2P[0]
		assert.Equal(t, "PHB", p.Label())
		assert.Equal(t, topology.P2PGPUNotSupported, p.Read)
		assert.Equal(t, "GNS", p.Write.String())
	})
	t.Run("a100 nvlink pairs", func(t *testing.T) {
		inv := discover(t, context.Background(), nvml.WithLibrary(filled(t, 8, loadTopology(t, "a100-pcie-8gpu-nvlink-pairs"))))
		p, _ := inv.Pair(id(6), id(7))
		assert.Equal(t, "NV12", p.Label())
		p, _ = inv.Pair(id(1), id(2))
		assert.Equal(t, "NODE", p.Label())
	})
}

func TestDiscoverNotSupportedOnOneCall(t *testing.T) {
	srv, err := nvmlmock.New("dgxh100")
	require.NoError(t, err)
	d3 := srv.Devices[3].(*server.Device)
	p2p := d3.GetP2PStatusFunc
	d3.GetP2PStatusFunc = func(o gonvml.Device, idx gonvml.GpuP2PCapsIndex) (gonvml.GpuP2PStatus, gonvml.Return) {
		if idx == gonvml.P2P_CAPS_INDEX_ATOMICS {
			return 0, gonvml.ERROR_NOT_SUPPORTED
		}
		return p2p(o, idx)
	}
	d5 := srv.Devices[5].(*server.Device)
	d5.GetNvLinkRemotePciInfoFunc = func(int) (gonvml.PciInfo, gonvml.Return) { return gonvml.PciInfo{}, gonvml.ERROR_NOT_SUPPORTED }
	inv := discover(t, context.Background(), nvml.WithLibrary(srv))
	assert.Contains(t, inv.Notes, "p2p: atomics status gpu3→gpu0 and 6 more pairs: ERROR_NOT_SUPPORTED")
	assert.Contains(t, inv.Notes, "gpu5: NVLink 0 remote PCI info: ERROR_NOT_SUPPORTED")
	assert.Len(t, inv.Notes, 1+18, "one per gpu5 link, one folded for the pairs")
	p, _ := inv.Pair(id(3), id(1))
	assert.Equal(t, topology.P2PNotReported, p.Atomics)
	assert.Equal(t, topology.P2POK, p.Read, "the other caps are still read")
	p, _ = inv.Pair(id(1), id(3))
	assert.Equal(t, topology.P2POK, p.Atomics)
	assert.Equal(t, "NV18", p.Label())
	p, _ = inv.Pair(id(5), id(0))
	assert.Equal(t, 0, p.NVLinks, "gpu5's links have no known remote end")
	assert.Equal(t, "SYS", p.Label(), "so the label falls back to the PCIe level")
	assert.Len(t, inv.Links, 8*18, "the links are still listed")
}

func TestDiscoverMissingSymbol(t *testing.T) {
	srv, err := nvmlmock.New("dgxa100")
	require.NoError(t, err)
	srv.LookupSymbolFunc = func(name string) error {
		switch name {
		case "nvmlDeviceGetP2PStatus", "nvmlDeviceGetNvLinkState", "nvmlDeviceGetNumaNodeId":
			return errors.New("undefined symbol: " + name)
		}
		return nil
	}
	inv := discover(t, context.Background(), nvml.WithLibrary(srv))
	assert.Contains(t, inv.Notes, "nvml: nvmlDeviceGetP2PStatus: ERROR_FUNCTION_NOT_FOUND (not called)")
	assert.Contains(t, inv.Notes, "nvml: nvmlDeviceGetNvLinkState: ERROR_FUNCTION_NOT_FOUND (not called)")
	assert.Contains(t, inv.Notes, "gpu0: NUMA node: ERROR_FUNCTION_NOT_FOUND")
	for i, d := range srv.Devices {
		md := d.(*server.Device)
		assert.Empty(t, md.GetP2PStatusCalls(), "gpu%d", i)
		assert.Empty(t, md.GetNvLinkStateCalls(), "gpu%d", i)
		assert.Empty(t, md.GetNumaNodeIdCalls(), "gpu%d", i)
	}
	assert.Empty(t, inv.Links)
	require.Len(t, inv.P2P, 56)
	assert.Equal(t, topology.P2PNotReported, inv.P2P[0].Read)
	assert.Equal(t, nvml.AncestorMultiple, inv.P2P[0].Ancestor, "what is there is still read")
}

func TestDiscoverMIG(t *testing.T) {
	srv, err := nvmlmock.New("dgxa100")
	require.NoError(t, err)
	d0 := srv.Devices[0].(*server.Device)
	d0.MigMode = gonvml.DEVICE_MIG_ENABLE
	d0.GetMaxMigDeviceCountFunc = func() (int, gonvml.Return) { return 7, gonvml.SUCCESS }
	d0.GetMigDeviceHandleByIndexFunc = func(k int) (gonvml.Device, gonvml.Return) {
		if k >= 2 {
			return nil, gonvml.ERROR_NOT_FOUND
		}
		return &mock.Device{
			GetUUIDFunc:       func() (string, gonvml.Return) { return "MIG-" + string(rune('a'+k)), gonvml.SUCCESS },
			GetMemoryInfoFunc: func() (gonvml.Memory, gonvml.Return) { return gonvml.Memory{Total: 5 << 30}, gonvml.SUCCESS },
		}, gonvml.SUCCESS
	}
	// gpu1 has MIG on but the mock cannot list its devices: a note.
	srv.Devices[1].(*server.Device).MigMode = gonvml.DEVICE_MIG_ENABLE
	// gpu2 is not MIG-capable: no note.
	srv.Devices[2].(*server.Device).GetMigModeFunc = func() (int, int, gonvml.Return) { return 0, 0, gonvml.ERROR_NOT_SUPPORTED }
	inv := discover(t, context.Background(), nvml.WithLibrary(srv))
	assert.Equal(t, []nvml.MIGDevice{
		{Parent: id(0), Index: 0, UUID: "MIG-a", MemoryBytes: 5 << 30},
		{Parent: id(0), Index: 1, UUID: "MIG-b", MemoryBytes: 5 << 30},
	}, inv.MIG)
	require.Len(t, inv.Notes, 1, "%q", inv.Notes)
	assert.Contains(t, inv.Notes[0], "gpu1: MIG device count: panic: ")
}

func TestNVMLMockFillErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		topo nvmlmock.TopoMatrix
		want string
	}{
		{"rows", nvmlmock.TopoMatrix{Matrix: [][]string{{"X"}}}, "nvmlmock: matrix has 1 rows, want 2 (one per GPU)"},
		{"diagonal", nvmlmock.TopoMatrix{Matrix: [][]string{{"X", "PIX"}, {"PIX", "PIX"}}}, `nvmlmock: matrix row 1 column 1: "PIX" (X only on the diagonal)`},
		{"label", nvmlmock.TopoMatrix{Matrix: [][]string{{"X", "QPI"}, {"PIX", "X"}}}, `nvmlmock: row 0 column 1: unknown PCIe level "QPI"`},
		{"nvlink", nvmlmock.TopoMatrix{Matrix: [][]string{{"X", "NV99"}, {"NV1", "X"}}}, `nvmlmock: matrix row 0 column 1: bad NVLink label "NV99"`},
		{"cpus", nvmlmock.TopoMatrix{Matrix: [][]string{{"X", "SYS"}, {"SYS", "X"}}, CPUAffinity: []string{"0-3", "9-2"}}, `nvmlmock: CPU affinity of GPU 1: bad CPU range "9-2" in "9-2"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := dgxa100.NewWithGPUs(mockgpus.Multiple(2, mockgpus.A100_SXM4_40GB)...)
			assert.EqualError(t, nvmlmock.Fill(srv, tc.topo), tc.want)
			assert.Nil(t, srv.Devices[0].(*server.Device).GetP2PStatusFunc, "left unchanged")
		})
	}
	_, err := nvmlmock.New("dgx9000")
	assert.EqualError(t, err, `nvmlmock: unknown server "dgx9000" (known: dgxa100, dgxh100)`)
}

// TestDiscoverNVSwitchPairQueriesFail: on NVSwitch machines whose pair
// queries (P2P status, common ancestor) fail, the NVLinks that are up are
// kept as an estimated NV# with a note, so topology routes copies over
// NVLink rather than through the host. A pair whose NVLink P2P status
// NVML does report as unsupported stays without NVLink.
func TestDiscoverNVSwitchPairQueriesFail(t *testing.T) {
	for _, tc := range []struct {
		server string
		want   int
	}{{"dgxa100", 12}, {"dgxh100", 18}} {
		t.Run(tc.server, func(t *testing.T) {
			srv, err := nvmlmock.New(tc.server)
			require.NoError(t, err)
			for _, d := range srv.Devices {
				md := d.(*server.Device)
				md.GetP2PStatusFunc = func(gonvml.Device, gonvml.GpuP2PCapsIndex) (gonvml.GpuP2PStatus, gonvml.Return) {
					return 0, gonvml.ERROR_UNKNOWN
				}
				md.GetTopologyCommonAncestorFunc = func(gonvml.Device) (gonvml.GpuTopologyLevel, gonvml.Return) {
					return 0, gonvml.ERROR_UNKNOWN
				}
			}
			inv := discover(t, context.Background(), nvml.WithLibrary(srv))
			require.Len(t, inv.P2P, 56)
			for _, p := range inv.P2P {
				assert.Equal(t, topology.P2PNotReported, p.NVLink)
				assert.Equal(t, fmt.Sprintf("NV%d", tc.want), p.Label(), "%v→%v", p.From, p.To)
				assert.True(t, p.NVLinksEstimated)
			}
			assert.Contains(t, inv.Notes, fmt.Sprintf("p2p: NVLink count gpu0→gpu1 and 55 more pairs: NV%d estimated from the NVSwitch links both GPUs reach (NVLink P2P status not reported)", tc.want))
			topo, err := topology.New(inv.Facts())
			require.NoError(t, err)
			l, ok := topo.Link(id(0), id(5))
			require.True(t, ok)
			assert.Equal(t, topology.LinkNVLink, l.Kind)
			assert.Equal(t, tc.want, l.NVLinks)
			assert.True(t, l.Direct)
			assert.True(t, l.Estimated, "P2P was not reported")
			r, err := topo.Route(1<<20, id(0), id(5))
			require.NoError(t, err)
			assert.Equal(t, topology.RouteDirect, r.Kind, "over NVLink, not via the host")
		})
	}
	t.Run("NVLink P2P reported unsupported", func(t *testing.T) {
		srv, err := nvmlmock.New("dgxa100")
		require.NoError(t, err)
		for _, d := range srv.Devices {
			md := d.(*server.Device)
			md.GetP2PStatusFunc = func(gonvml.Device, gonvml.GpuP2PCapsIndex) (gonvml.GpuP2PStatus, gonvml.Return) {
				return gonvml.P2P_STATUS_NOT_SUPPORTED, gonvml.SUCCESS
			}
		}
		inv := discover(t, context.Background(), nvml.WithLibrary(srv))
		p, ok := inv.Pair(id(0), id(5))
		require.True(t, ok)
		assert.Zero(t, p.NVLinks, "NVML said no: no estimate")
		assert.False(t, p.NVLinksEstimated)
		assert.Equal(t, "SYS", p.Label())
	})
}
