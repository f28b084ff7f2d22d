package topology

import (
	"strconv"
	"strings"
	"time"
)

// LinkKind is how the hardware connects two GPUs, in the words of
// `nvidia-smi topo -m` (its legend, quoted on each constant). The zero
// value is LinkNone.
type LinkKind uint8

const (
	// LinkNone means no connection is known: copies between the pair go
	// through host memory. Topologies built from an inventory that does
	// not describe a pair use it.
	LinkNone LinkKind = iota
	// LinkSelf is a device with itself ("X = Self").
	LinkSelf
	// LinkNVLink is "NV# = Connection traversing a bonded set of # NVLinks";
	// the count is held beside the kind (Pair.NVLinks, Link.NVLinks).
	LinkNVLink
	// LinkPIX is "Connection traversing at most a single PCIe bridge".
	LinkPIX
	// LinkPXB is "Connection traversing multiple PCIe bridges (without
	// traversing the PCIe Host Bridge)".
	LinkPXB
	// LinkPHB is "Connection traversing PCIe as well as a PCIe Host Bridge
	// (typically the CPU)". The link between a GPU and host memory uses it
	// too.
	LinkPHB
	// LinkNODE is "Connection traversing PCIe as well as the interconnect
	// between PCIe Host Bridges within a NUMA node".
	LinkNODE
	// LinkSYS is "Connection traversing PCIe as well as the SMP interconnect
	// between NUMA nodes (e.g., QPI/UPI)". Older drivers print SOC for it.
	LinkSYS
)

// String returns the label nvidia-smi prints ("X", "NV", "PIX", "PXB",
// "PHB", "NODE", "SYS"), "none" for LinkNone; use Pair.Label for "NV2".
func (k LinkKind) String() string {
	switch k {
	case LinkNone:
		return "none"
	case LinkSelf:
		return "X"
	case LinkNVLink:
		return "NV"
	case LinkPIX:
		return "PIX"
	case LinkPXB:
		return "PXB"
	case LinkPHB:
		return "PHB"
	case LinkNODE:
		return "NODE"
	case LinkSYS:
		return "SYS"
	default:
		return "linkkind(" + strconv.Itoa(int(k)) + ")"
	}
}

// maxNVLinks bounds the NVLink count of one pair (NV#). The largest count
// in shipped products is 18 (H100/B200); the bound leaves room and keeps
// bandwidth arithmetic far from overflow.
const maxNVLinks = 64

// ParseLinkLabel parses one cell of `nvidia-smi topo -m`: "X", "NV#" (# in
// 1..64, no sign or leading zero), "PIX", "PXB", "PHB", "NODE", "SYS", or
// "SOC" (which older drivers print for SYS). It returns the kind and, for
// NV#, the link count. Any other text returns an error wrapping
// ErrUnknownLabel.
func ParseLinkLabel(s string) (kind LinkKind, nvlinks int, err error) {
	switch s {
	case "X":
		return LinkSelf, 0, nil
	case "PIX":
		return LinkPIX, 0, nil
	case "PXB":
		return LinkPXB, 0, nil
	case "PHB":
		return LinkPHB, 0, nil
	case "NODE":
		return LinkNODE, 0, nil
	case "SYS", "SOC":
		return LinkSYS, 0, nil
	}
	if rest, ok := strings.CutPrefix(s, "NV"); ok && rest != "" && rest[0] != '0' {
		if n, err := strconv.Atoi(rest); err == nil && n > 0 && n <= maxNVLinks && strconv.Itoa(n) == rest {
			return LinkNVLink, n, nil
		}
	}
	return LinkNone, 0, errLabel(s)
}

func errLabel(s string) error {
	return &labelError{s}
}

type labelError struct{ s string }

func (e *labelError) Error() string { return "topology: unknown label " + strconv.Quote(e.s) }
func (e *labelError) Unwrap() error { return ErrUnknownLabel }

// P2PStatus is the answer nvidia-smi (`topo -p2p`) or NVML
// (nvmlDeviceGetP2PStatus) gives for one capability of one ordered GPU
// pair. The zero value, P2PNotReported, means no source said anything.
type P2PStatus uint8

const (
	// P2PNotReported: no source reported this capability.
	P2PNotReported P2PStatus = iota
	// P2POK is "OK = Status Ok".
	P2POK
	// P2PChipsetNotSupported is "CNS = Chipset not supported".
	P2PChipsetNotSupported
	// P2PGPUNotSupported is "GNS = GPU Not Supported" (GeForce RTX 4090 and
	// 5090 pairs, for instance).
	P2PGPUNotSupported
	// P2PTopologyNotSupported is "TNS = Topology Not Supported".
	P2PTopologyNotSupported
	// P2PNotSupported is "NS = Not Supported".
	P2PNotSupported
	// P2PDisabledByRegKey is NVML's NVML_P2P_STATUS_DISABLED_BY_REGKEY;
	// nvidia-smi does not print it.
	P2PDisabledByRegKey
	// P2PUnknown is "U = Unknown": a source reported that it does not know.
	P2PUnknown
)

var p2pLabels = [...]string{"-", "OK", "CNS", "GNS", "TNS", "NS", "DIS", "U"}

// String returns the nvidia-smi label ("OK", "CNS", "GNS", "TNS", "NS",
// "U"), "DIS" for P2PDisabledByRegKey and "-" for P2PNotReported.
func (s P2PStatus) String() string {
	if int(s) < len(p2pLabels) {
		return p2pLabels[s]
	}
	return "p2pstatus(" + strconv.Itoa(int(s)) + ")"
}

// ParseP2PStatus parses one off-diagonal cell of `nvidia-smi topo -p2p`:
// "OK", "CNS", "GNS", "TNS", "NS", "U" (and "DIS"). Other text returns an
// error wrapping ErrUnknownLabel.
func ParseP2PStatus(s string) (P2PStatus, error) {
	for i, l := range p2pLabels {
		if i > 0 && l == s {
			return P2PStatus(i), nil
		}
	}
	return P2PNotReported, errLabel(s)
}

// P2PCap names one capability that `nvidia-smi topo -p2p <cap>` queries:
// r (read), w (write), n (NVLink), a (atomics).
type P2PCap uint8

const (
	// P2PRead is `-p2p r`: can the row GPU read the column GPU's memory.
	P2PRead P2PCap = iota
	// P2PWrite is `-p2p w`.
	P2PWrite
	// P2PNVLinkCap is `-p2p n`: P2P over NVLink.
	P2PNVLinkCap
	// P2PAtomics is `-p2p a`.
	P2PAtomics
)

// ParseP2PCap parses "r", "w", "n", "a" (nvidia-smi's flags) or "read",
// "write", "nvlink", "atomics", in any case. Anything else is an error
// wrapping ErrUnknownLabel that quotes s.
func ParseP2PCap(s string) (P2PCap, error) {
	switch strings.ToLower(s) {
	case "r", "read":
		return P2PRead, nil
	case "w", "write":
		return P2PWrite, nil
	case "n", "nvlink":
		return P2PNVLinkCap, nil
	case "a", "atomics":
		return P2PAtomics, nil
	}
	return 0, errLabel(s)
}

// P2P holds the peer-to-peer facts of one ordered pair (src, dst): each
// capability of src's access to dst's memory. It is a separate fact from
// the link kind: a SYS pair can have P2P and a PHB pair can lack it.
type P2P struct {
	Read, Write, NVLink, Atomics P2PStatus
}

// Set sets the status of capability c.
func (p *P2P) Set(c P2PCap, s P2PStatus) {
	switch c {
	case P2PRead:
		p.Read = s
	case P2PWrite:
		p.Write = s
	case P2PNVLinkCap:
		p.NVLink = s
	case P2PAtomics:
		p.Atomics = s
	}
}

// Reported reports whether Read or Write was reported by some source.
func (p P2P) Reported() bool { return p.Read != P2PNotReported || p.Write != P2PNotReported }

// Usable reports whether a copy src→dst may use P2P according to the
// reported facts: every reported one of Read and Write is OK and at least
// one was reported. Without reports it returns false; Topology.CanP2P adds
// an estimate for that case.
func (p P2P) Usable() bool {
	if !p.Reported() {
		return false
	}
	return (p.Read == P2PNotReported || p.Read == P2POK) && (p.Write == P2PNotReported || p.Write == P2POK)
}

// String returns "read=OK write=- nvlink=- atomics=-".
func (p P2P) String() string {
	return "read=" + p.Read.String() + " write=" + p.Write.String() + " nvlink=" + p.NVLink.String() + " atomics=" + p.Atomics.String()
}

// Pair is what a source (nvidia-smi text, JSON, the inventory) says about
// the connection from one GPU to another: the plain facts Topology is built
// from. The zero value is "nothing known" (LinkNone, no P2P report).
type Pair struct {
	Kind    LinkKind // the connection's kind; LinkNone when unknown
	NVLinks int      // bonded NVLinks when Kind is LinkNVLink, else 0
	P2P     P2P      // src's access to dst
}

// Label returns the nvidia-smi label: "NV2", "PIX", …, "X"; "none" for
// LinkNone.
func (p Pair) Label() string {
	if p.Kind == LinkNVLink {
		return "NV" + strconv.Itoa(p.NVLinks)
	}
	return p.Kind.String()
}

// Link is one modelled hop from Src to Dst inside a Topology: a GPU pair
// (either direction) or a GPU and the host CPU's memory.
type Link struct {
	Src, Dst DeviceID // the hop's ends
	Kind     LinkKind // the connection's kind (LinkNVLink, LinkPIX, …)
	NVLinks  int      // bonded NVLinks when Kind is LinkNVLink
	P2P      P2P      // the reported facts for Src's access to Dst (GPU pairs only)
	// Direct reports whether data can move Src→Dst in one hop: always for
	// a GPU–host link; for a GPU pair, P2P as reported, or estimated when
	// nothing was reported (see Topology.CanP2P).
	Direct bool
	// Estimated is true when Direct for a GPU pair is an estimate rather
	// than a reported P2P status.
	Estimated bool
	// BandwidthBps is the modelled bandwidth of the hop in bytes per
	// second, per direction; 0 when Direct is false.
	BandwidthBps float64
	// Latency is the modelled fixed cost of one copy over the hop; 0 when
	// Direct is false.
	Latency time.Duration
}

// Label returns the nvidia-smi style label of the link ("NV2", "SYS", …).
func (l Link) Label() string { return Pair{Kind: l.Kind, NVLinks: l.NVLinks}.Label() }

// HopCost is the modelled time to move bytes over the hop: Latency +
// bytes / BandwidthBps, rounded to the nanosecond, saturating at the
// largest time.Duration. A self link (Kind LinkSelf: nothing moves) costs
// zero for any size; zero or negative bytes cost Latency. It is
// meaningless for other links when Direct is false.
func (l Link) HopCost(bytes int64) time.Duration {
	if l.Kind == LinkSelf {
		return 0
	}
	if bytes <= 0 {
		return l.Latency
	}
	return addDur(l.Latency, secondsDur(float64(bytes)/l.BandwidthBps))
}

func secondsDur(s float64) time.Duration {
	ns := s * 1e9
	if ns != ns || ns >= 9.2e18 { // NaN or beyond time.Duration
		return time.Duration(1<<63 - 1)
	}
	if ns < 0 {
		return 0
	}
	return time.Duration(ns + 0.5)
}

func addDur(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return time.Duration(1<<63 - 1)
}
