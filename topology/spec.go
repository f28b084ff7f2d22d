package topology

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// GPUSpec holds the interconnect figures of one GPU model or generation,
// the inputs of the bandwidth model. Bandwidths are in bytes per second,
// per direction.
//
// Sources for the table (Specs):
//   - NVLink per-link rates: NVIDIA Tesla P100 whitepaper (2016; NVLink 1,
//     4 links, 160 GB/s bidirectional → 20 GB/s per link per direction);
//     NVIDIA Tesla V100 GPU Architecture whitepaper (2017; NVLink 2, 6
//     links, 300 GB/s → 25); NVIDIA A100 Tensor Core GPU Architecture
//     whitepaper (2020; NVLink 3, 12 links, 600 GB/s → 25); NVIDIA H100
//     Tensor Core GPU Architecture whitepaper (2022; NVLink 4, 18 links,
//     900 GB/s → 25); NVIDIA Blackwell Architecture Technical Brief (2024;
//     NVLink 5, 18 links, 1.8 TB/s → 50); NVIDIA Ampere GA102 GPU
//     Architecture whitepaper (2020; NVLink bridge, 4 x4 links, 112.5 GB/s
//     → 14.0625).
//   - PCIe: PCI-SIG base specifications 3.0/4.0/5.0: 8/16/32 GT/s per lane
//     with 128b/130b encoding, so an x16 link carries 15.75/31.5/63.0 GB/s
//     per direction (PCIeBps).
//   - PCIe P2P on GeForce boards: the driver reports GNS (GPU Not
//     Supported) for RTX 4090/5090 pairs (machines/rtx5090-2gpu-no-p2p.json).
type GPUSpec struct {
	// Name is the short model name used by --gpu and in output, e.g. "H100".
	Name string
	// ComputeCapability of the model; the key of SpecForComputeCapability.
	ComputeCapability ComputeCapability
	// NVLinkVersion is 1–5, or 0 when the model has no NVLink.
	NVLinkVersion int
	// NVLinkPerLinkBps is the rate of one NVLink, bytes/s per direction.
	NVLinkPerLinkBps float64
	// PCIeGen is the PCIe generation of the host link (3, 4, 5).
	PCIeGen int
	// PCIeLanes is the link width (16 for every model in Specs).
	PCIeLanes int
	// PCIeP2P is whether P2P over PCIe is expected to work when no P2P
	// status was reported (false on GeForce boards).
	PCIeP2P bool
}

// PCIeBps returns the bandwidth of the spec's PCIe link in bytes/s per
// direction: lanes × GT/s × 128/130 / 8 (Gen3+; Gen1/2 use 8b/10b). An
// unknown generation counts as Gen3; zero lanes count as 16.
func (s GPUSpec) PCIeBps() float64 {
	lanes := s.PCIeLanes
	if lanes <= 0 {
		lanes = 16
	}
	var gts, enc float64
	switch s.PCIeGen {
	case 1:
		gts, enc = 2.5e9, 8.0/10
	case 2:
		gts, enc = 5e9, 8.0/10
	case 4:
		gts, enc = 16e9, 128.0/130
	case 5:
		gts, enc = 32e9, 128.0/130
	case 6:
		// PAM4 with FLIT mode; 64 GT/s, about 242/256 efficiency.
		gts, enc = 64e9, 242.0/256
	default:
		gts, enc = 8e9, 128.0/130
	}
	return float64(lanes) * gts * enc / 8
}

// NVLinkBps returns n × NVLinkPerLinkBps (bytes/s per direction). For a
// model without NVLink it still uses NVLinkPerLinkBps when set, else the
// NVLink 3 rate (25 GB/s): the text said NV#, so some NVLink exists.
func (s GPUSpec) NVLinkBps(n int) float64 {
	r := s.NVLinkPerLinkBps
	if r <= 0 {
		r = 25e9
	}
	return float64(n) * r
}

// Specs is the table of known models, in the order SpecByName tries them.
// Callers must not modify it.
var Specs = []GPUSpec{
	{Name: "P100", ComputeCapability: ComputeCapability{6, 0}, NVLinkVersion: 1, NVLinkPerLinkBps: 20e9, PCIeGen: 3, PCIeLanes: 16, PCIeP2P: true},
	{Name: "V100", ComputeCapability: ComputeCapability{7, 0}, NVLinkVersion: 2, NVLinkPerLinkBps: 25e9, PCIeGen: 3, PCIeLanes: 16, PCIeP2P: true},
	{Name: "T4", ComputeCapability: ComputeCapability{7, 5}, PCIeGen: 3, PCIeLanes: 16, PCIeP2P: true},
	{Name: "A100", ComputeCapability: ComputeCapability{8, 0}, NVLinkVersion: 3, NVLinkPerLinkBps: 25e9, PCIeGen: 4, PCIeLanes: 16, PCIeP2P: true},
	{Name: "A800", ComputeCapability: ComputeCapability{8, 0}, NVLinkVersion: 3, NVLinkPerLinkBps: 25e9, PCIeGen: 4, PCIeLanes: 16, PCIeP2P: true},
	{Name: "A40", ComputeCapability: ComputeCapability{8, 6}, NVLinkVersion: 3, NVLinkPerLinkBps: 14.0625e9, PCIeGen: 4, PCIeLanes: 16, PCIeP2P: true},
	{Name: "A6000", ComputeCapability: ComputeCapability{8, 6}, NVLinkVersion: 3, NVLinkPerLinkBps: 14.0625e9, PCIeGen: 4, PCIeLanes: 16, PCIeP2P: true},
	{Name: "A10", ComputeCapability: ComputeCapability{8, 6}, PCIeGen: 4, PCIeLanes: 16, PCIeP2P: true},
	{Name: "RTX3090", ComputeCapability: ComputeCapability{8, 6}, NVLinkVersion: 3, NVLinkPerLinkBps: 14.0625e9, PCIeGen: 4, PCIeLanes: 16},
	{Name: "L40", ComputeCapability: ComputeCapability{8, 9}, PCIeGen: 4, PCIeLanes: 16, PCIeP2P: true},
	{Name: "L4", ComputeCapability: ComputeCapability{8, 9}, PCIeGen: 4, PCIeLanes: 16, PCIeP2P: true},
	{Name: "RTX4090", ComputeCapability: ComputeCapability{8, 9}, PCIeGen: 4, PCIeLanes: 16},
	{Name: "H100", ComputeCapability: ComputeCapability{9, 0}, NVLinkVersion: 4, NVLinkPerLinkBps: 25e9, PCIeGen: 5, PCIeLanes: 16, PCIeP2P: true},
	{Name: "H200", ComputeCapability: ComputeCapability{9, 0}, NVLinkVersion: 4, NVLinkPerLinkBps: 25e9, PCIeGen: 5, PCIeLanes: 16, PCIeP2P: true},
	{Name: "H800", ComputeCapability: ComputeCapability{9, 0}, NVLinkVersion: 4, NVLinkPerLinkBps: 25e9, PCIeGen: 5, PCIeLanes: 16, PCIeP2P: true},
	{Name: "B200", ComputeCapability: ComputeCapability{10, 0}, NVLinkVersion: 5, NVLinkPerLinkBps: 50e9, PCIeGen: 5, PCIeLanes: 16, PCIeP2P: true},
	{Name: "B100", ComputeCapability: ComputeCapability{10, 0}, NVLinkVersion: 5, NVLinkPerLinkBps: 50e9, PCIeGen: 5, PCIeLanes: 16, PCIeP2P: true},
	{Name: "RTX5090", ComputeCapability: ComputeCapability{12, 0}, PCIeGen: 5, PCIeLanes: 16},
}

// DefaultSpec is the spec used when nothing names the GPU model (the text
// of `nvidia-smi topo -m` does not): the A100 (NVLink 3, 25 GB/s per link
// per direction; PCIe Gen4 x16, 31.5 GB/s), the most common data-centre
// GPU of the example machines. Output that uses it says so.
var DefaultSpec = Specs[slices.IndexFunc(Specs, func(s GPUSpec) bool { return s.Name == "A100" })]

// normName upper-cases s and drops everything but letters and digits:
// "NVIDIA A100-SXM4-40GB" → "NVIDIAA100SXM440GB".
func normName(s string) string {
	var b strings.Builder
	for _, r := range strings.ToUpper(s) {
		if (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// SpecByName finds the spec whose Name occurs in name, ignoring case,
// spaces and punctuation, so "h100", "NVIDIA H100 80GB HBM3", "GeForce RTX
// 5090" and "Tesla V100-SXM2-16GB" all match. Longer names are tried first
// ("A100" before "A10"). It reports false when none matches.
func SpecByName(name string) (GPUSpec, bool) {
	n := normName(name)
	if n == "" {
		return GPUSpec{}, false
	}
	order := slices.Clone(Specs)
	slices.SortStableFunc(order, func(a, b GPUSpec) int { return len(b.Name) - len(a.Name) })
	for _, s := range order {
		if strings.Contains(n, s.Name) {
			return s, true
		}
	}
	return GPUSpec{}, false
}

// SpecForComputeCapability returns the first spec of Specs with compute
// capability cc (6.0 P100, 7.0 V100, 7.5 T4, 8.0 A100, 8.6 A40/GA102, 8.9
// L40, 9.0 H100, 10.0 B200, 12.0 RTX 5090), or false when none has it.
func SpecForComputeCapability(cc ComputeCapability) (GPUSpec, bool) {
	for _, s := range Specs {
		if s.ComputeCapability == cc {
			return s, true
		}
	}
	return GPUSpec{}, false
}

// SpecOrigin says where the spec of a GPU in a Topology came from.
type SpecOrigin uint8

const (
	// SpecDefault: nothing named the model; DefaultSpec was used.
	SpecDefault SpecOrigin = iota
	// SpecFromOption: WithGPUSpec (the CLI's --gpu flag) chose it.
	SpecFromOption
	// SpecFromName: the device's Name matched (SpecByName).
	SpecFromName
	// SpecFromComputeCapability: the device's compute capability matched.
	SpecFromComputeCapability
)

// String returns "default", "option", "name" or "compute capability".
func (o SpecOrigin) String() string {
	switch o {
	case SpecDefault:
		return "default"
	case SpecFromOption:
		return "option"
	case SpecFromName:
		return "name"
	case SpecFromComputeCapability:
		return "compute capability"
	}
	return fmt.Sprintf("specorigin(%d)", int(o))
}

// Latency figures of the model: the fixed cost of one copy over one hop.
// They are estimates of the order p2pBandwidthLatencyTest (CUDA samples)
// prints on such machines: a couple of microseconds over NVLink, more
// across each PCIe level, and a device↔host copy near 5 µs.
const (
	nvlinkLatency = 2 * time.Microsecond
	pixLatency    = 4 * time.Microsecond
	pxbLatency    = 5 * time.Microsecond
	phbLatency    = 6 * time.Microsecond
	nodeLatency   = 8 * time.Microsecond
	sysLatency    = 12 * time.Microsecond
	hostLatency   = 5 * time.Microsecond
)

// pcieFactor is the share of the PCIe rate a P2P copy gets across each
// level: full under one switch (PIX) or a switch tree (PXB), 0.8 through
// the host bridge (PHB), half across host bridges within a NUMA node
// (NODE) and a quarter across the inter-socket link (SYS); P2P across
// QPI/UPI is notoriously slow, which is why a staged copy through the host
// often beats it.
func pcieFactor(k LinkKind) float64 {
	switch k {
	case LinkPIX, LinkPXB:
		return 1
	case LinkPHB:
		return 0.8
	case LinkNODE:
		return 0.5
	default:
		return 0.25
	}
}

func kindLatency(k LinkKind) time.Duration {
	switch k {
	case LinkNVLink:
		return nvlinkLatency
	case LinkPIX:
		return pixLatency
	case LinkPXB:
		return pxbLatency
	case LinkPHB:
		return phbLatency
	case LinkNODE:
		return nodeLatency
	default:
		return sysLatency
	}
}
