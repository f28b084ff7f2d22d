package topology_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gonum.org/v1/gonum/graph/path"

	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/topology"
)

const mib64 = 64 << 20

func load(t *testing.T, name string, opts ...topology.Option) *topology.Topology {
	t.Helper()
	f := parseFile(t, testdata.TopologyFile(t, name))
	topo, err := topology.New(f, opts...)
	require.NoError(t, err)
	return topo
}

func v100(t *testing.T) topology.GPUSpec {
	s, ok := topology.SpecByName("V100")
	require.True(t, ok)
	return s
}

func TestDGX1BandwidthOrder(t *testing.T) {
	topo := load(t, "dgx1-v100.topo-m.txt", topology.WithGPUSpec(v100(t)))
	nv2, _ := topo.Link(topology.GPU(0), topology.GPU(3))
	nv1, _ := topo.Link(topology.GPU(0), topology.GPU(1))
	sys, _ := topo.Link(topology.GPU(0), topology.GPU(5))
	assert.InDelta(t, 50e9, nv2.BandwidthBps, 1, "2 × 25 GB/s (NVLink 2)")
	assert.InDelta(t, 25e9, nv1.BandwidthBps, 1)
	assert.False(t, sys.Direct, "SYS pairs have no P2P by estimate")
	assert.True(t, sys.Estimated)
	assert.Equal(t, time.Duration(0), sys.Latency)

	cost := func(a, b int) time.Duration {
		d, err := topo.TransferCost(mib64, topology.GPU(a), topology.GPU(b))
		require.NoError(t, err)
		return d
	}
	assert.Less(t, cost(0, 3), cost(0, 1), "NV2 faster than NV1")
	assert.Less(t, cost(0, 1), cost(0, 5), "NV1 faster than SYS")

	// The SYS pair goes through one GPU over NVLink: faster than the host.
	r, err := topo.Route(mib64, topology.GPU(0), topology.GPU(5))
	require.NoError(t, err)
	assert.Equal(t, topology.RouteViaGPU, r.Kind)
	require.Len(t, r.Path, 3)
	assert.Equal(t, topology.GPU(0), r.Path[0])
	assert.Equal(t, topology.GPU(5), r.Path[2])
	host := mustCost(t, topo, mib64, topology.GPU(0), topology.CPU) + mustCost(t, topo, mib64, topology.CPU, topology.GPU(5))
	assert.Less(t, r.Cost, host)
	// Store-and-forward: cost = both hops.
	assert.Equal(t, r.Hops[0].HopCost(mib64)+r.Hops[1].HopCost(mib64), r.Cost)

	// Exact figures: 64 MiB over NV2 at 50 GB/s is 1.342 ms + 2 µs.
	assert.Equal(t, 2*time.Microsecond+1342177*time.Nanosecond, cost(0, 3))
	s, origin, ok := topo.GPUSpec(topology.GPU(3))
	require.True(t, ok)
	assert.Equal(t, "V100", s.Name)
	assert.Equal(t, topology.SpecFromOption, origin)
}

func mustCost(t *testing.T, topo *topology.Topology, n int64, a, b topology.DeviceID) time.Duration {
	t.Helper()
	d, err := topo.TransferCost(n, a, b)
	require.NoError(t, err)
	return d
}

func TestRTX5090NoP2PGoesThroughHost(t *testing.T) {
	f := parseFile(t, testdata.TopologyFile(t, "rtx5090-2gpu-no-p2p.topo-m.txt"))
	fh, err := os.Open(testdata.TopologyFile(t, "rtx5090-2gpu-no-p2p.topo-p2p.txt"))
	require.NoError(t, err)
	defer fh.Close()
	m, err := topology.ParseP2P(fh)
	require.NoError(t, err)
	require.NoError(t, f.ApplyP2P(m, topology.P2PRead))
	// Even on an A100 spec (PCIe P2P allowed), the reported GNS wins.
	topo, err := topology.New(f)
	require.NoError(t, err)
	_, origin, _ := topo.GPUSpec(topology.GPU(0))
	assert.Equal(t, topology.SpecDefault, origin)
	assert.False(t, topo.CanP2P(topology.GPU(0), topology.GPU(1)))
	l, ok := topo.Link(topology.GPU(0), topology.GPU(1))
	require.True(t, ok)
	assert.False(t, l.Direct)
	assert.False(t, l.Estimated)
	assert.Equal(t, "PHB", l.Label())
	r, err := topo.Route(mib64, topology.GPU(0), topology.GPU(1))
	require.NoError(t, err)
	assert.Equal(t, topology.RouteViaHost, r.Kind)
	assert.Equal(t, []topology.DeviceID{topology.GPU(0), topology.CPU, topology.GPU(1)}, r.Path)

	// Without the p2p file, the RTX 5090 spec alone rules PCIe P2P out.
	f2 := parseFile(t, testdata.TopologyFile(t, "rtx5090-2gpu-no-p2p.topo-m.txt"))
	spec, ok := topology.SpecByName("GeForce RTX 5090")
	require.True(t, ok)
	topo2, err := topology.New(f2, topology.WithGPUSpec(spec))
	require.NoError(t, err)
	assert.False(t, topo2.CanP2P(topology.GPU(0), topology.GPU(1)))
	l2, _ := topo2.Link(topology.GPU(0), topology.GPU(1))
	assert.True(t, l2.Estimated)
	// PCIe Gen5 x16 to the host: 63 GB/s each way.
	h, _ := topo2.Link(topology.GPU(0), topology.CPU)
	assert.InDelta(t, 63.0e9, h.BandwidthBps, 1e8)
}

func TestPCIeLevels(t *testing.T) {
	topo := load(t, "pcie-8gpu-2socket.topo-m.txt") // default spec: A100, Gen4
	bw := func(a, b int) float64 {
		l, _ := topo.Link(topology.GPU(a), topology.GPU(b))
		return l.BandwidthBps
	}
	assert.InDelta(t, 31.5e9, bw(0, 1), 1e8, "PIX: full Gen4 x16")
	assert.InDelta(t, 31.5e9, bw(0, 2), 1e8, "PXB")
	assert.Zero(t, bw(0, 4), "SYS: no P2P by estimate")
	assert.Less(t, mustCost(t, topo, mib64, topology.GPU(0), topology.GPU(1)), mustCost(t, topo, mib64, topology.GPU(0), topology.GPU(2)), "PIX latency below PXB")
	r, err := topo.Route(mib64, topology.GPU(0), topology.GPU(4))
	require.NoError(t, err)
	assert.Equal(t, topology.RouteViaHost, r.Kind)

	a100 := load(t, "a100-pcie-8gpu-nvlink-pairs.topo-m.txt")
	l, _ := a100.Link(topology.GPU(0), topology.GPU(1))
	assert.InDelta(t, 300e9, l.BandwidthBps, 1, "NV12 × 25 GB/s")
	l, _ = a100.Link(topology.GPU(0), topology.GPU(2))
	assert.InDelta(t, 31.5e9*0.5, l.BandwidthBps, 1e8, "NODE: half of PCIe")
	// 0→3 over NODE directly beats 0→1 (NV12) then 1→3 (NODE) store-and-forward.
	r, err = a100.Route(mib64, topology.GPU(0), topology.GPU(3))
	require.NoError(t, err)
	assert.Equal(t, topology.RouteDirect, r.Kind)
	assert.InDelta(t, 15.75e9, r.BandwidthBps(), 1e7)
}

func TestRouteBasics(t *testing.T) {
	topo := load(t, "dgx-a100.topo-m.txt")
	r, err := topo.Route(100, topology.GPU(2), topology.GPU(2))
	require.NoError(t, err)
	assert.Equal(t, topology.RouteSame, r.Kind)
	assert.Zero(t, r.Cost)
	assert.Zero(t, r.BandwidthBps())
	r, err = topo.Route(mib64, topology.CPU, topology.GPU(7))
	require.NoError(t, err)
	assert.Equal(t, topology.RouteDirect, r.Kind)
	assert.Equal(t, []topology.DeviceID{topology.CPU, topology.GPU(7)}, r.Path)
	r, err = topo.Route(0, topology.GPU(0), topology.GPU(1))
	require.NoError(t, err)
	assert.Equal(t, 2*time.Microsecond, r.Cost, "zero bytes cost the latency")
	_, err = topo.Route(1, topology.GPU(0), topology.GPU(8))
	assert.ErrorIs(t, err, topology.ErrUnknownDevice)
	assert.EqualError(t, err, "topology: unknown device gpu8 (route gpu0→gpu8)")
	_, err = topo.TransferCost(-1, topology.GPU(0), topology.GPU(1))
	assert.Error(t, err)
	d, err := topo.TransferCost(1<<62, topology.GPU(0), topology.CPU)
	require.NoError(t, err)
	assert.Positive(t, d, "huge sizes do not overflow")
	assert.False(t, topo.CanP2P(topology.GPU(0), topology.GPU(0)))
	assert.False(t, topo.CanP2P(topology.CPU, topology.GPU(0)))
	assert.True(t, topo.CanP2P(topology.GPU(0), topology.GPU(7)))
	assert.Len(t, topo.Devices(), 9)
	assert.Equal(t, topology.CPU, topo.Devices()[0].ID)
	assert.Equal(t, 3, topo.GPUs()[0].NUMANode)
	_, ok := topo.Link(topology.GPU(0), topology.GPU(9))
	assert.False(t, ok)
	self, ok := topo.Link(topology.CPU, topology.CPU)
	assert.True(t, ok)
	assert.Equal(t, topology.LinkSelf, self.Kind)
}

// TestGraphMatchesRoute checks that gonum's Dijkstra over Graph never
// beats Route by more than what paths of three or more hops can give, and
// agrees with it on every example machine for 64 MiB.
func TestGraphMatchesRoute(t *testing.T) {
	for _, name := range []string{"dgx1-v100.topo-m.txt", "dgx-a100.topo-m.txt", "pcie-8gpu-2socket.topo-m.txt", "a100-pcie-8gpu-nvlink-pairs.topo-m.txt", "rtx5090-2gpu-no-p2p.topo-m.txt"} {
		t.Run(name, func(t *testing.T) {
			topo := load(t, name)
			g := topo.Graph(mib64)
			assert.Equal(t, len(topo.Devices()), g.Nodes().Len())
			all := path.DijkstraAllPaths(g)
			for _, a := range topo.Devices() {
				for _, b := range topo.Devices() {
					if a.ID == b.ID {
						continue
					}
					r, err := topo.Route(mib64, a.ID, b.ID)
					require.NoError(t, err)
					p, w, _ := all.Between(topology.NodeID(a.ID), topology.NodeID(b.ID))
					require.NotEmpty(t, p)
					assert.LessOrEqual(t, w, r.Cost.Seconds()+1e-9, "%s→%s", a.ID, b.ID)
					if len(p) <= 3 {
						assert.InDelta(t, r.Cost.Seconds(), w, 1e-8, "%s→%s", a.ID, b.ID)
					}
					assert.Equal(t, a.ID, topology.DeviceOfNode(p[0].ID()))
				}
			}
		})
	}
}

func TestNewErrors(t *testing.T) {
	gpus := []topology.DeviceFacts{{ID: topology.GPU(0), NUMANode: -1}, {ID: topology.GPU(1), NUMANode: -1}}
	pairs := func(a, b topology.Pair) [][]topology.Pair {
		return [][]topology.Pair{{{Kind: topology.LinkSelf}, a}, {b, {Kind: topology.LinkSelf}}}
	}
	nv2 := topology.Pair{Kind: topology.LinkNVLink, NVLinks: 2}
	tests := []struct {
		name  string
		facts topology.Facts
	}{
		{"cpu as gpu", topology.Facts{GPUs: []topology.DeviceFacts{{ID: topology.CPU}}}},
		{"duplicate", topology.Facts{GPUs: []topology.DeviceFacts{{ID: topology.GPU(1)}, {ID: topology.GPU(1)}}}},
		{"shape", topology.Facts{GPUs: gpus, Pairs: [][]topology.Pair{{}}}},
		{"row shape", topology.Facts{GPUs: gpus, Pairs: [][]topology.Pair{{}, {}}}},
		{"asymmetric", topology.Facts{GPUs: gpus, Pairs: pairs(nv2, topology.Pair{Kind: topology.LinkSYS})}},
		{"nv count", topology.Facts{GPUs: gpus, Pairs: pairs(topology.Pair{Kind: topology.LinkNVLink}, topology.Pair{Kind: topology.LinkNVLink})}},
		{"nv count on pcie", topology.Facts{GPUs: gpus, Pairs: pairs(topology.Pair{Kind: topology.LinkPIX, NVLinks: 1}, topology.Pair{Kind: topology.LinkPIX, NVLinks: 1})}},
		{"self off diagonal", topology.Facts{GPUs: gpus, Pairs: pairs(topology.Pair{Kind: topology.LinkSelf}, topology.Pair{Kind: topology.LinkSelf})}},
		{"bad kind", topology.Facts{GPUs: gpus, Pairs: pairs(topology.Pair{Kind: 42}, topology.Pair{Kind: 42})}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := topology.New(tt.facts)
			assert.Error(t, err)
		})
	}
	_, err := topology.New(topology.Facts{GPUs: gpus, Pairs: pairs(nv2, topology.Pair{Kind: topology.LinkSYS})})
	assert.ErrorIs(t, err, topology.ErrAsymmetric)
}

// TestGPUSpecOptionErrors checks that WithGPUSpec refuses a spec it
// cannot use, naming the option.
func TestGPUSpecOptionErrors(t *testing.T) {
	for _, tt := range []struct {
		name string
		spec topology.GPUSpec
		want string
	}{
		{"no name", topology.GPUSpec{PCIeGen: 4}, "topology: WithGPUSpec: the spec has no name"},
		{"negative lanes", topology.GPUSpec{Name: "X", PCIeLanes: -16}, "topology: WithGPUSpec: spec X has a negative NVLink or PCIe figure"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := topology.New(topology.Facts{}, topology.WithGPUSpec(tt.spec))
			assert.EqualError(t, err, tt.want)
		})
	}
}

// TestFromInventory builds a topology from inventory-style facts: names
// and compute capabilities pick the spec, no pairs means through the host.
func TestFromInventory(t *testing.T) {
	gpus := []topology.DeviceFacts{
		{ID: topology.GPU(0), Name: "NVIDIA H100 80GB HBM3", ComputeCapability: topology.ComputeCapability{Major: 9}, NUMANode: 0},
		{ID: topology.GPU(2), Name: "Tesla V100-SXM2-16GB", NUMANode: 1},
		{ID: topology.GPU(3), Name: "mystery", NUMANode: -1},
	}
	topo, err := topology.New(topology.Facts{GPUs: gpus, Host: topology.CPUDevice()})
	require.NoError(t, err)
	for id, want := range map[topology.DeviceID]struct {
		name   string
		origin topology.SpecOrigin
	}{topology.GPU(0): {"H100", topology.SpecFromComputeCapability}, topology.GPU(2): {"V100", topology.SpecFromName}, topology.GPU(3): {"A100", topology.SpecDefault}} {
		s, o, ok := topo.GPUSpec(id)
		require.True(t, ok)
		assert.Equal(t, want.name, s.Name, id)
		assert.Equal(t, want.origin, o, id)
	}
	_, _, ok := topo.GPUSpec(topology.GPU(1))
	assert.False(t, ok, "sparse indices")
	l, _ := topo.Link(topology.GPU(0), topology.GPU(2))
	assert.Equal(t, topology.LinkNone, l.Kind)
	assert.False(t, l.Direct)
	r, err := topo.Route(1<<20, topology.GPU(0), topology.GPU(2))
	require.NoError(t, err)
	assert.Equal(t, topology.RouteViaHost, r.Kind)
	assert.NotEqual(t, "host CPU", topo.Host().Name+"x")

	// A reported P2P with no known path is usable at the slowest PCIe level.
	pairs := [][]topology.Pair{{{}, {P2P: topology.P2P{Read: topology.P2POK}}}, {{P2P: topology.P2P{Read: topology.P2POK}}, {}}}
	topo, err = topology.New(topology.Facts{GPUs: gpus[:2], Pairs: pairs})
	require.NoError(t, err)
	assert.True(t, topo.CanP2P(topology.GPU(0), topology.GPU(2)))
}

func TestSpecs(t *testing.T) {
	for name, want := range map[string]string{
		"NVIDIA A100-SXM4-40GB": "A100", "NVIDIA A10": "A10", "Tesla P100-SXM2-16GB": "P100", "NVIDIA H100 80GB HBM3": "H100",
		"NVIDIA B200": "B200", "NVIDIA GeForce RTX 5090": "RTX5090", "rtx 4090": "RTX4090", "NVIDIA L40S": "L40", "Tesla T4": "T4",
		"NVIDIA RTX A6000": "A6000", "h100": "H100",
	} {
		s, ok := topology.SpecByName(name)
		require.True(t, ok, name)
		assert.Equal(t, want, s.Name, name)
	}
	_, ok := topology.SpecByName("Radeon")
	assert.False(t, ok)
	_, ok = topology.SpecByName("")
	assert.False(t, ok)
	for cc, want := range map[topology.ComputeCapability]string{{6, 0}: "P100", {7, 0}: "V100", {8, 0}: "A100", {8, 6}: "A40", {9, 0}: "H100", {10, 0}: "B200", {12, 0}: "RTX5090"} {
		s, ok := topology.SpecForComputeCapability(cc)
		require.True(t, ok)
		assert.Equal(t, want, s.Name)
	}
	// Per-link rates per direction (design.md's table).
	rate := func(n string) float64 { s, _ := topology.SpecByName(n); return s.NVLinkPerLinkBps }
	assert.Equal(t, []float64{20e9, 25e9, 25e9, 25e9, 50e9, 14.0625e9}, []float64{rate("P100"), rate("V100"), rate("A100"), rate("H100"), rate("B200"), rate("A40")})
	for gen, want := range map[int]float64{3: 15.75e9, 4: 31.5e9, 5: 63e9} {
		assert.InDelta(t, want, topology.GPUSpec{PCIeGen: gen, PCIeLanes: 16}.PCIeBps(), 1e8, "gen %d", gen)
	}
	assert.InDelta(t, 15.75e9, topology.GPUSpec{}.PCIeBps(), 1e7)
	assert.Equal(t, "A100", topology.DefaultSpec.Name)
	assert.Equal(t, "compute capability", topology.SpecFromComputeCapability.String())
}

// TestSelfLinkIsFree: a device's link with itself costs nothing, for any
// size, as Link documents (GPU and CPU alike).
func TestSelfLinkIsFree(t *testing.T) {
	topo := load(t, "dgx1-v100.topo-m.txt")
	for _, tc := range []struct {
		name string
		id   topology.DeviceID
	}{{"gpu", topology.GPU(3)}, {"cpu", topology.CPU}} {
		t.Run(tc.name, func(t *testing.T) {
			l, ok := topo.Link(tc.id, tc.id)
			require.True(t, ok)
			require.Equal(t, topology.LinkSelf, l.Kind)
			for _, n := range []int64{0, 1, 1 << 20, 1 << 62} {
				assert.Zero(t, l.HopCost(n), "%d bytes", n)
			}
		})
	}
	l, ok := topo.Link(topology.GPU(0), topology.GPU(3))
	require.True(t, ok)
	assert.Equal(t, l.Latency, l.HopCost(0), "zero bytes cost the latency alone")
}
