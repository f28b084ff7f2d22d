// Package nvmlmock gives tests NVML mocks of real multi-GPU servers.
//
// It completes go-nvml's shipped mock servers (mock/dgxa100, mock/dgxh100)
// with the calls they leave nil — PCI bus id, NUMA node, CPU affinity,
// NVLink state and remote PCI info, P2P status and the PCIe common ancestor
// — from a real topology as `nvidia-smi topo -m` prints it. It lets tests
// run nvml.Discover, a lease backend over its GPUs and the devices command's
// output against an 8-GPU server on a host without a GPU. Nothing here talks
// to a GPU; it is test scaffolding, imported only by _test files (a test of
// the layering checks it), so no shipped binary links the mocks.
//
// Layer 1 (under gpu/nvml: the only place that may import go-nvml).
package nvmlmock

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// TopoMatrix is a mock host's GPU interconnect as `nvidia-smi topo -m`
// prints it, with the facts that matrix leaves out.
type TopoMatrix struct {
	// Matrix[i][j] is the topo -m label of GPUs i and j: "X" on the
	// diagonal, "NV#" (# NVLink links), "PIX", "PXB", "PHB", "NODE" or
	// "SYS". It must be square with one row per mock GPU.
	Matrix [][]string
	// PCIe, when set, gives the PCIe level ("PIX" … "SYS") of the pairs
	// that Matrix labels NV#, which topo -m hides. When nil, such a pair
	// is "NODE" when both GPUs have the same NUMA node, else "SYS" (an
	// estimate).
	PCIe [][]string
	// P2P, when set, is `nvidia-smi topo -p2p r` (and w): "X", "OK", "CNS",
	// "GNS", "TNS", "NS" or "U" per pair. When nil: NV# pairs are OK; PIX
	// and PXB pairs are OK for read and write; PHB, NODE and SYS pairs
	// are CNS (an estimate: the driver's answer depends on the chipset).
	P2P [][]string
	// NUMA is each GPU's NUMA node (-1 unknown); nil leaves them unknown.
	NUMA []int
	// CPUAffinity is each GPU's topo -m CPU Affinity ("48-63,176-191");
	// nil, or "" for one GPU, leaves it unknown.
	CPUAffinity []string
	// NVSwitches > 0 means the NVLink links of each GPU go to that many
	// NVSwitches (round robin), not to the peer GPUs: NV# then is the
	// GPU's link count, as topo -m shows on NVSwitch systems.
	NVSwitches int
}

func allPairs(n int, label string) [][]string {
	m := make([][]string, n)
	for i := range m {
		m[i] = make([]string, n)
		for j := range m[i] {
			m[i][j] = label
			if i == j {
				m[i][j] = "X"
			}
		}
	}
	return m
}

// DGXA100 is a DGX A100 (topology/machines/dgx-a100.json, from NCCL issue
// 1505): 8 A100-SXM4 at NV12 through 6 NVSwitches, two EPYC sockets in
// NPS4 mode. The PCIe levels behind the NVLinks follow that machine's
// `nvidia-smi topo -m` (topology/testdata/fuzz/FuzzParseMatrix/
// dgx-a100-10nic-tabs): the two GPUs of a NUMA
// node share a PCIe switch (PXB); other pairs are NODE within a socket
// (NUMA nodes 0-3, 4-7) and SYS across sockets.
func DGXA100() TopoMatrix {
	numa := []int{3, 3, 1, 1, 7, 7, 5, 5}
	pcie := allPairs(8, "")
	for i := range 8 {
		for j := range 8 {
			switch {
			case i == j:
				pcie[i][j] = "X"
			case numa[i] == numa[j]:
				pcie[i][j] = "PXB"
			case numa[i]/4 == numa[j]/4:
				pcie[i][j] = "NODE"
			default:
				pcie[i][j] = "SYS"
			}
		}
	}
	return TopoMatrix{
		Matrix: allPairs(8, "NV12"), PCIe: pcie, NUMA: numa, NVSwitches: 6,
		CPUAffinity: []string{"48-63,176-191", "48-63,176-191", "16-31,144-159", "16-31,144-159",
			"112-127,240-255", "112-127,240-255", "80-95,208-223", "80-95,208-223"},
	}
}

// DGXH100 is a DGX H100: 8 H100-SXM5 at NV18 (18 NVLink 4 links each)
// through NVSwitches, two sockets with GPUs 0-3 on NUMA node 0 and 4-7 on
// node 1. The repository holds no capture of this machine: the link
// count is NVIDIA's published DGX H100 figure, and NUMA nodes,
// affinity and PCIe levels (NODE within a socket, SYS across) are
// estimates.
func DGXH100() TopoMatrix {
	numa := []int{0, 0, 0, 0, 1, 1, 1, 1}
	aff := make([]string, 8)
	for i := range aff {
		aff[i] = "0-55,112-167"
		if i >= 4 {
			aff[i] = "56-111,168-223"
		}
	}
	return TopoMatrix{Matrix: allPairs(8, "NV18"), NUMA: numa, CPUAffinity: aff, NVSwitches: 4}
}

// Names lists the servers New knows.
var Names = []string{"dgxa100", "dgxh100"}

// New returns go-nvml's mock server of that name ("dgxa100", "dgxh100"),
// filled with its TopoMatrix. An unknown name returns an error listing the
// known ones.
func New(name string) (*server.Server, error) {
	var srv *server.Server
	var topo TopoMatrix
	switch name {
	case "dgxa100":
		srv, topo = dgxa100.New(), DGXA100()
	case "dgxh100":
		srv, topo = dgxh100.New(), DGXH100()
	default:
		return nil, fmt.Errorf("nvmlmock: unknown server %q (known: %s)", name, strings.Join(Names, ", "))
	}
	if err := Fill(srv, topo); err != nil {
		return nil, err
	}
	return srv, nil
}

// BusID returns the 8-digit-domain PCI bus id Fill gives mock GPU i
// ("00000000:07:00.0"), as NVML's PciInfo.BusId spells it.
func BusID(i int) string { return fmt.Sprintf("00000000:%02x:00.0", i) }

func switchBusID(s int) string { return fmt.Sprintf("00000000:%02x:00.0", 0xc0+s) }

// Fill sets, on every device of srv (which must be *server.Device, as the
// shipped servers hold), the functions the shipped mocks leave nil, from
// t. It replaces any that were set. A matrix of the wrong shape, an
// unknown label or a bad CPU range is an error naming row and column; srv
// is then left unchanged.
func Fill(srv *server.Server, t TopoMatrix) error {
	n := len(srv.Devices)
	devs := make([]*server.Device, n)
	for i, d := range srv.Devices {
		md, ok := d.(*server.Device)
		if !ok {
			return fmt.Errorf("nvmlmock: device %d is a %T, not a *server.Device", i, d)
		}
		devs[i] = md
	}
	nv, pcie, p2p, err := t.parse(n)
	if err != nil {
		return err
	}
	masks := make([][]uint64, n)
	for i := range t.CPUAffinity {
		if strings.TrimSpace(t.CPUAffinity[i]) == "" {
			continue // unknown
		}
		if masks[i], err = cpuMask(t.CPUAffinity[i]); err != nil {
			return fmt.Errorf("nvmlmock: CPU affinity of GPU %d: %w", i, err)
		}
	}
	index := map[nvml.Device]int{}
	for i, d := range srv.Devices {
		index[d] = i
	}
	for i, d := range devs {
		// NVLink links of GPU i and their remote ends.
		var remotes []string
		if t.NVSwitches > 0 {
			links := 0
			for j := range n {
				links = max(links, nv[i][j])
			}
			for l := range links {
				remotes = append(remotes, switchBusID(l%t.NVSwitches))
			}
		} else {
			for j := range n {
				for range nv[i][j] {
					remotes = append(remotes, BusID(j))
				}
			}
		}
		bus := BusID(i)
		d.PciBusID = bus[4:] // the mock's own 4-digit-domain spelling
		d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId, Bus: uint32(i)}
			setC(p.BusId[:], bus)
			setC(p.BusIdLegacy[:], bus[4:])
			return p, nvml.SUCCESS
		}
		numa := -1
		if t.NUMA != nil {
			numa = t.NUMA[i]
		}
		d.GetNumaNodeIdFunc = func() (int, nvml.Return) {
			if numa < 0 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return numa, nvml.SUCCESS
		}
		mask := masks[i]
		d.GetCpuAffinityFunc = func(cpus int) ([]uint, nvml.Return) {
			if mask == nil {
				return nil, nvml.ERROR_NOT_SUPPORTED
			}
			out := make([]uint, (cpus+63)/64)
			for w := range min(len(out), len(mask)) {
				out[w] = uint(mask[w])
			}
			return out, nvml.SUCCESS
		}
		d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			switch {
			case len(remotes) == 0:
				return 0, nvml.ERROR_NOT_SUPPORTED
			case link < 0 || link >= len(remotes):
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		d.GetNvLinkRemotePciInfoFunc = func(link int) (nvml.PciInfo, nvml.Return) {
			if link < 0 || link >= len(remotes) {
				return nvml.PciInfo{}, nvml.ERROR_INVALID_ARGUMENT
			}
			var p nvml.PciInfo
			setC(p.BusId[:], remotes[link])
			return p, nvml.SUCCESS
		}
		d.GetP2PStatusFunc = func(other nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			j, ok := index[other]
			if !ok || j == i {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			switch {
			case nv[i][j] > 0:
				return nvml.P2P_STATUS_OK, nvml.SUCCESS
			case idx == nvml.P2P_CAPS_INDEX_NVLINK || idx == nvml.P2P_CAPS_INDEX_ATOMICS:
				return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
			}
			return p2p[i][j], nvml.SUCCESS
		}
		d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			j, ok := index[other]
			if !ok {
				return 0, nvml.ERROR_INVALID_ARGUMENT
			}
			return pcie[i][j], nvml.SUCCESS
		}
	}
	return nil
}

var levels = map[string]nvml.GpuTopologyLevel{
	"X": nvml.TOPOLOGY_INTERNAL, "PIX": nvml.TOPOLOGY_SINGLE, "PXB": nvml.TOPOLOGY_MULTIPLE,
	"PHB": nvml.TOPOLOGY_HOSTBRIDGE, "NODE": nvml.TOPOLOGY_NODE, "SYS": nvml.TOPOLOGY_SYSTEM,
}

var statuses = map[string]nvml.GpuP2PStatus{
	"OK": nvml.P2P_STATUS_OK, "CNS": nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED, "GNS": nvml.P2P_STATUS_GPU_NOT_SUPPORTED,
	"TNS": nvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED, "NS": nvml.P2P_STATUS_NOT_SUPPORTED, "U": nvml.P2P_STATUS_UNKNOWN,
}

// parse checks t against n GPUs and returns per pair the NVLink count, the
// PCIe level and the read/write P2P status.
func (t TopoMatrix) parse(n int) (nv [][]int, pcie [][]nvml.GpuTopologyLevel, p2p [][]nvml.GpuP2PStatus, err error) {
	if err := t.check(n); err != nil {
		return nil, nil, nil, err
	}
	nv = make([][]int, n)
	pcie = make([][]nvml.GpuTopologyLevel, n)
	p2p = make([][]nvml.GpuP2PStatus, n)
	for i := range n {
		nv[i], pcie[i], p2p[i] = make([]int, n), make([]nvml.GpuTopologyLevel, n), make([]nvml.GpuP2PStatus, n)
		for j := range n {
			if nv[i][j], pcie[i][j], err = t.link(i, j); err != nil {
				return nil, nil, nil, err
			}
			if p2p[i][j], err = t.p2pStatus(i, j, nv[i][j], pcie[i][j]); err != nil {
				return nil, nil, nil, err
			}
		}
	}
	return nv, pcie, p2p, nil
}

// check returns an error naming the first mismatch when t's matrices
// (Matrix, and PCIe and P2P when given) are not n by n, its NUMA nodes
// or CPU affinities (when given) are not n, or NVSwitches is negative.
func (t TopoMatrix) check(n int) error {
	if err := square("matrix", t.Matrix, n); err != nil {
		return err
	}
	for what, m := range map[string][][]string{"PCIe matrix": t.PCIe, "P2P matrix": t.P2P} {
		if m != nil {
			if err := square(what, m, n); err != nil {
				return err
			}
		}
	}
	if t.NUMA != nil && len(t.NUMA) != n {
		return fmt.Errorf("nvmlmock: %d NUMA nodes, want %d", len(t.NUMA), n)
	}
	if t.CPUAffinity != nil && len(t.CPUAffinity) != n {
		return fmt.Errorf("nvmlmock: %d CPU affinities, want %d", len(t.CPUAffinity), n)
	}
	if t.NVSwitches < 0 {
		return fmt.Errorf("nvmlmock: %d NVSwitches", t.NVSwitches)
	}
	return nil
}

// square returns an error naming matrix what and its first bad row when
// m is not n rows of n columns.
func square(what string, m [][]string, n int) error {
	if len(m) != n {
		return fmt.Errorf("nvmlmock: %s has %d rows, want %d (one per GPU)", what, len(m), n)
	}
	for i, row := range m {
		if len(row) != n {
			return fmt.Errorf("nvmlmock: %s row %d has %d columns, want %d", what, i, len(row), n)
		}
	}
	return nil
}

// link returns the NVLink count (0: none) and PCIe level of GPU i to GPU
// j, from t.Matrix checked by check: "X" on the diagonal only, "NV<k>"
// with 1 <= k <= nvml.NVLINK_MAX_LINKS, or a PCIe level. The level of an
// NVLink pair comes from t.PCIe when given, else NODE when both GPUs
// share a known NUMA node, else SYS. A bad label gives an error naming
// its row and column.
func (t TopoMatrix) link(i, j int) (nv int, lvl nvml.GpuTopologyLevel, err error) {
	lab := strings.TrimSpace(t.Matrix[i][j])
	if (i == j) != (lab == "X") {
		return 0, 0, fmt.Errorf("nvmlmock: matrix row %d column %d: %q (X only on the diagonal)", i, j, lab)
	}
	if c, ok := strings.CutPrefix(lab, "NV"); ok {
		k, err := strconv.Atoi(c)
		if err != nil || k < 1 || k > nvml.NVLINK_MAX_LINKS {
			return 0, 0, fmt.Errorf("nvmlmock: matrix row %d column %d: bad NVLink label %q", i, j, lab)
		}
		nv = k
		switch {
		case t.PCIe != nil:
			lab = strings.TrimSpace(t.PCIe[i][j])
		case t.NUMA != nil && t.NUMA[i] == t.NUMA[j] && t.NUMA[i] >= 0:
			lab = "NODE"
		default:
			lab = "SYS"
		}
	}
	lvl, ok := levels[lab]
	if !ok {
		return 0, 0, fmt.Errorf("nvmlmock: row %d column %d: unknown PCIe level %q", i, j, lab)
	}
	return nv, lvl, nil
}

// p2pStatus returns the read/write P2P status of GPU i to GPU j, whose
// NVLink count is nv and PCIe level lvl: zero on the diagonal, else from
// t.P2P when given (an unknown status gives an error naming its row and
// column), else OK over NVLink or a PCIe switch (PIX, PXB) and
// CHIPSET_NOT_SUPPORTED otherwise.
func (t TopoMatrix) p2pStatus(i, j, nv int, lvl nvml.GpuTopologyLevel) (nvml.GpuP2PStatus, error) {
	switch {
	case i == j:
		return 0, nil
	case t.P2P != nil:
		s, ok := statuses[strings.TrimSpace(t.P2P[i][j])]
		if !ok {
			return 0, fmt.Errorf("nvmlmock: P2P matrix row %d column %d: unknown status %q", i, j, t.P2P[i][j])
		}
		return s, nil
	case nv > 0 || lvl == nvml.TOPOLOGY_SINGLE || lvl == nvml.TOPOLOGY_MULTIPLE:
		return nvml.P2P_STATUS_OK, nil
	}
	return nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED, nil
}

// cpuMask parses "0-13,28-41" into a 64-bit-word CPU mask.
func cpuMask(s string) ([]uint64, error) {
	var mask []uint64
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(strings.TrimSpace(part), "-")
		a, err1 := strconv.Atoi(lo)
		b := a
		var err2 error
		if isRange {
			b, err2 = strconv.Atoi(hi)
		}
		if err1 != nil || err2 != nil || a < 0 || b < a || b >= 1<<16 {
			return nil, fmt.Errorf("bad CPU range %q in %q", part, s)
		}
		for c := a; c <= b; c++ {
			for len(mask) <= c/64 {
				mask = append(mask, 0)
			}
			mask[c/64] |= 1 << (c % 64)
		}
	}
	return mask, nil
}

func setC(dst []int8, s string) {
	for k := 0; k < len(s) && k < len(dst)-1; k++ {
		dst[k] = int8(s[k])
	}
}
