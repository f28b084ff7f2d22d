package nvml

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// LibraryStatus says whether NVML answered during Discover.
type LibraryStatus struct {
	// Available is true when nvml Init succeeded (even if some later
	// queries failed; see Inventory.Notes).
	Available bool
	// Reason says why NVML is not available, e.g.
	// "nvml: Init: ERROR_LIBRARY_NOT_FOUND"; "" when Available.
	Reason string
	// Driver is the NVIDIA driver version, e.g. "550.54.15"; "" when
	// unknown.
	Driver string
}

// String returns "NVML available (driver 550.54.15)" or
// "NVML unavailable (…): REASON".
func (s LibraryStatus) String() string {
	if !s.Available {
		return "NVML unavailable (no NVIDIA driver library found, or it failed to start): " + s.Reason
	}
	if s.Driver == "" {
		return "NVML available (driver unknown)"
	}
	return "NVML available (driver " + s.Driver + ")"
}

// Inventory is what Discover learned about this host's devices.
type Inventory struct {
	// NVML says whether NVML could be used, and why not.
	NVML LibraryStatus
	// Devices holds the CPU device first, then one entry per GPU in NVML
	// index order, with ID topology.GPU(NVML index). A GPU whose handle
	// NVML would not give is left out, so GPU indices may be sparse.
	Devices []topology.DeviceFacts
	// Notes lists what could not be learned and why, one line each, e.g.
	// "gpu3: NUMA node: ERROR_NOT_SUPPORTED". Facts behind a note keep
	// their zero value (NUMANode: -1). Failures of pair queries are folded
	// into one note per query and error, with the first pair and a count.
	Notes []string
	// Links lists, per GPU in Devices order and then by link number, the
	// NVLink links that are up (nvmlDeviceGetNvLinkState) with their
	// remote PCI bus id (nvmlDeviceGetNvLinkRemotePciInfo_v2). Empty for
	// GPUs without NVLink.
	Links []NVLink
	// P2P holds one entry per ordered pair (From != To) of the GPUs in
	// Devices, row-major in Devices order: the P2P status for each caps
	// index and the PCIe common-ancestor level. Use Inventory.Pair to look
	// one up.
	P2P []P2PPair
	// MIG lists the MIG devices of GPUs that have MIG mode enabled.
	MIG []MIGDevice
	// Lost lists the GPUs NVML reported lost (ERROR_GPU_IS_LOST) while
	// they were read, in NVML index order. They are left out of Devices,
	// so a pool or backend built from Devices never leases them; a Note
	// says the same.
	Lost []gpu.LostError
}

// NVLink is one NVLink link that is up.
type NVLink struct {
	Device topology.DeviceID // the GPU the link belongs to
	Link   int               // link number, 0 <= Link < nvml.NVLINK_MAX_LINKS
	// RemotePCIBusID is the bus id of the other end, e.g.
	// "00000000:07:00.0": a GPU, or an NVSwitch; "" when NVML would not
	// say (see Notes).
	RemotePCIBusID string
	// Remote is the GPU at the other end when RemotePCIBusID is the bus id
	// of a GPU in Devices; RemoteIsGPU is false otherwise (an NVSwitch, a
	// CPU, or unknown).
	Remote      topology.DeviceID
	RemoteIsGPU bool
}

// p2pFromNVML is NVML's answer for one P2P capability of a GPU pair
// (nvmlGpuP2PStatus_t) as topology's status.
func p2pFromNVML(v gonvml.GpuP2PStatus) topology.P2PStatus {
	switch v {
	case gonvml.P2P_STATUS_OK:
		return topology.P2POK
	case gonvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED:
		return topology.P2PChipsetNotSupported
	case gonvml.P2P_STATUS_GPU_NOT_SUPPORTED:
		return topology.P2PGPUNotSupported
	case gonvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED:
		return topology.P2PTopologyNotSupported
	case gonvml.P2P_STATUS_DISABLED_BY_REGKEY:
		return topology.P2PDisabledByRegKey
	case gonvml.P2P_STATUS_NOT_SUPPORTED:
		return topology.P2PNotSupported
	default:
		return topology.P2PUnknown
	}
}

// AncestorLevel is the PCIe common-ancestor level of a GPU pair
// (nvmlDeviceGetTopologyCommonAncestor), in nvidia-smi topo -m's words.
type AncestorLevel uint8

// The levels, nearest first. AncestorUnknown means NVML was not asked or
// failed.
const (
	AncestorUnknown    AncestorLevel = iota
	AncestorInternal                 // same board (multi-GPU board)
	AncestorSingle                   // PIX: at most one PCIe bridge
	AncestorMultiple                 // PXB: several PCIe bridges, no host bridge
	AncestorHostBridge               // PHB: a PCIe host bridge
	AncestorNode                     // NODE: host bridges within one NUMA node
	AncestorSystem                   // SYS: across NUMA nodes (QPI/UPI, Infinity Fabric)
)

var ancestorNames = [...]string{"-", "BOARD", "PIX", "PXB", "PHB", "NODE", "SYS"}

// String returns "PIX", "PXB", "PHB", "NODE", "SYS", "BOARD" or "-".
func (a AncestorLevel) String() string {
	if int(a) < len(ancestorNames) {
		return ancestorNames[a]
	}
	return "-"
}

func ancestorFromNVML(l gonvml.GpuTopologyLevel) AncestorLevel {
	switch l {
	case gonvml.TOPOLOGY_INTERNAL:
		return AncestorInternal
	case gonvml.TOPOLOGY_SINGLE:
		return AncestorSingle
	case gonvml.TOPOLOGY_MULTIPLE:
		return AncestorMultiple
	case gonvml.TOPOLOGY_HOSTBRIDGE:
		return AncestorHostBridge
	case gonvml.TOPOLOGY_NODE:
		return AncestorNode
	case gonvml.TOPOLOGY_SYSTEM:
		return AncestorSystem
	default:
		return AncestorUnknown
	}
}

// P2PPair is what NVML says about one ordered pair of GPUs.
type P2PPair struct {
	From, To topology.DeviceID
	// Read, Write, NVLink and Atomics are the P2P statuses for the caps
	// indices P2P_CAPS_INDEX_READ, _WRITE, _NVLINK and _ATOMICS, in
	// topology's terms; topology.P2PNotReported means NVML was not asked
	// or failed (see Inventory.Notes).
	Read, Write, NVLink, Atomics topology.P2PStatus
	// Ancestor is the PCIe common-ancestor level.
	Ancestor AncestorLevel
	// NVLinks is the number of NVLink links joining the pair: links of
	// From whose remote is To, or, when there is none but NVLink P2P is
	// OK, the links of From that end at an NVSwitch (every pair of an
	// NVSwitch system reaches the other through all of them, as
	// nvidia-smi topo -m shows with "NV12" on a DGX A100). When NVML did
	// not report the NVLink P2P status (the query failed or was not
	// made), the count is estimated from the links that are up: the
	// smaller of From's and To's links that end at an NVSwitch both of
	// them reach, with NVLinksEstimated set and a note.
	NVLinks int
	// NVLinksEstimated is true when NVLinks is such an estimate rather
	// than what NVML's NVLink P2P status confirmed.
	NVLinksEstimated bool
}

// Label returns the pair's nvidia-smi topo -m label: "NV#" when NVLinks
// > 0, else the ancestor level ("PIX", …, "SYS", or "-" when unknown).
func (p P2PPair) Label() string {
	if p.NVLinks > 0 {
		return fmt.Sprintf("NV%d", p.NVLinks)
	}
	return p.Ancestor.String()
}

// Pair returns the entry of P2P for (from, to), and false when there is
// none (same device, a CPU, an unknown GPU, or pairs not queried). O(len(P2P)).
func (inv Inventory) Pair(from, to topology.DeviceID) (P2PPair, bool) {
	for _, p := range inv.P2P {
		if p.From == from && p.To == to {
			return p, true
		}
	}
	return P2PPair{}, false
}

// MIGDevice is one MIG device (a GPU instance slice) of a GPU in MIG mode.
type MIGDevice struct {
	Parent      topology.DeviceID // the physical GPU
	Index       int               // MIG device index on the parent (nvmlDeviceGetMigDeviceHandleByIndex)
	UUID        string            // "MIG-…"; "" when NVML would not say
	MemoryBytes int64             // memory of the slice in bytes; 0 when unknown
}

// GPUs returns the GPU entries of Devices (all but the CPU device), in
// NVML index order. The slice aliases Devices.
func (inv Inventory) GPUs() []topology.DeviceFacts {
	for i, d := range inv.Devices {
		if d.ID.Kind == topology.KindGPU {
			return inv.Devices[i:]
		}
	}
	return nil
}

// Option configures Discover. An option given bad input returns an
// error, which Discover returns prefixed with "nvml: ".
type Option func(*discoverOptions) error

type discoverOptions struct {
	lib gonvml.Interface
}

// WithLibrary makes Discover use lib instead of the system NVML library
// (go-nvml's New()). Tests pass go-nvml's mocks (pkg/nvml/mock/dgxa100, …).
// Without the option Discover uses the system library. Errors: a nil lib.
func WithLibrary(lib gonvml.Interface) Option {
	return func(o *discoverOptions) error {
		if lib == nil {
			return errors.New("WithLibrary: nil library (leave the option out for the system library)")
		}
		o.lib = lib
		return nil
	}
}

// affinityCPUs is the CPU count passed to nvmlDeviceGetCpuAffinity: the
// size of the CPU mask NVML fills (4096 CPUs, 512 bytes), larger than any
// host this runs on.
const affinityCPUs = 4096

// Discover returns the host's devices: the CPU device (topology.CPUDevice)
// always, and the GPUs NVML reports. It fails only on a bad option (the
// first option's error; nil options are skipped), before asking NVML
// anything, and it never panics:
//
//   - If NVML's Init fails (no driver or library on this host, the
//     common case on CPU-only hosts) or panics, the result is CPU-only with
//     NVML.Reason naming the error, and no other NVML function is called
//     (calling one after a failed Init can kill the process).
//   - After a successful Init, Shutdown is called before Discover returns.
//   - A query that fails on one device (ERROR_NOT_SUPPORTED, any other
//     non-success, or a panic, as a go-nvml mock with a nil function
//     field raises) adds a Note and discovery goes on.
//   - ctx is checked before Init and between devices; once it is done,
//     Discover stops (the devices read so far are kept) and adds a Note.
//
// Per GPU it reads the UUID, name, total and free memory (bytes), PCI bus
// id, CUDA compute capability, NUMA node (nvmlDeviceGetNumaNodeId, only
// when the library exports it; else -1), CPU affinity, the NVLink links
// that are up with their remote PCI bus ids (Inventory.Links), and MIG
// devices when MIG mode is on (Inventory.MIG); then, for every ordered
// pair of GPUs, the P2P status per caps index and the common-ancestor
// level (Inventory.P2P). Calls that newer drivers added are made only when
// the library exports their symbol (a missing symbol gets a Note, never a
// call). Discover makes O(GPUs² + GPUs × NVLINK_MAX_LINKS) NVML calls and
// is safe for concurrent use (NVML reference-counts Init and Shutdown).
func Discover(ctx context.Context, opts ...Option) (inv Inventory, err error) {
	var o discoverOptions
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return Inventory{}, fmt.Errorf("nvml: %w", err)
		}
	}
	inv.Devices = []topology.DeviceFacts{topology.CPUDevice()}
	if err := ctx.Err(); err != nil {
		inv.NVML.Reason = "nvml: not queried: " + err.Error()
		return inv, nil
	}
	lib := o.lib
	if lib == nil {
		lib = gonvml.New()
	}
	if err := guard(func() gonvml.Return { return lib.Init() }); err != nil {
		inv.NVML.Reason = "nvml: Init: " + err.Error()
		return inv, nil
	}
	inv.NVML.Available = true
	defer func() {
		if err := guard(func() gonvml.Return { return lib.Shutdown() }); err != nil {
			inv.Notes = append(inv.Notes, "nvml: Shutdown: "+err.Error())
		}
	}()
	discoverGPUs(ctx, lib, &inv)
	return inv, nil
}

func discoverGPUs(ctx context.Context, lib gonvml.Interface, inv *Inventory) {
	note := func(format string, args ...any) {
		inv.Notes = append(inv.Notes, fmt.Sprintf(format, args...))
	}
	if err := guard(func() (r gonvml.Return) { inv.NVML.Driver, r = lib.SystemGetDriverVersion(); return }); err != nil {
		inv.NVML.Driver = ""
		note("nvml: driver version: %v", err)
	}
	var count int
	if err := guard(func() (r gonvml.Return) { count, r = lib.DeviceGetCount(); return }); err != nil {
		note("nvml: device count: %v", err)
		return
	}
	// nvmlDeviceGetNumaNodeId is recent (driver 545+); calling a symbol the
	// library lacks would crash, so ask first.
	numaErr := lookup(lib, "nvmlDeviceGetNumaNodeId")
	syms := map[string]error{}
	for _, name := range []string{symNvLinkState, symNvLinkRemote, symMigMode, symMigHandle, symP2P, symAncestor} {
		if syms[name] = lookup(lib, name); syms[name] != nil {
			note("nvml: %s: %v (not called)", name, syms[name])
		}
	}
	var handles []gonvml.Device
	for i := range count {
		if err := ctx.Err(); err != nil {
			note("nvml: stopped before gpu%d of %d: %v", i, count, err)
			return
		}
		var h gonvml.Device
		if err := guard(func() (r gonvml.Return) { h, r = lib.DeviceGetHandleByIndex(i); return }); err != nil {
			note("gpu%d: handle: %v (device left out)", i, err)
			if errors.Is(err, gonvml.ERROR_GPU_IS_LOST) {
				inv.Lost = append(inv.Lost, gpu.LostError{Device: topology.GPU(i), Err: fmt.Errorf("handle: %w", err)})
			}
			continue
		}
		if h == nil {
			note("gpu%d: handle: nil (device left out)", i)
			continue
		}
		d, lost := readGPU(i, h, numaErr, note)
		if lost != nil {
			note("gpu%d: lost: %v (device left out)", i, lost)
			inv.Lost = append(inv.Lost, gpu.LostError{Device: d.ID, UUID: d.UUID, Err: lost})
			continue
		}
		inv.Devices = append(inv.Devices, d)
		handles = append(handles, h)
	}
	gpus := inv.Devices[1:]
	for k, h := range handles {
		if err := ctx.Err(); err != nil {
			note("nvml: stopped before the links of %v: %v", gpus[k].ID, err)
			return
		}
		readLinks(gpus[k].ID, h, syms, inv, note)
		readMIG(gpus[k].ID, h, syms, inv, note)
	}
	resolveLinks(inv)
	readPairs(ctx, gpus, handles, syms, inv, note)
}

// Symbols asked of the library before their calls are made.
const (
	symNvLinkState  = "nvmlDeviceGetNvLinkState"
	symNvLinkRemote = "nvmlDeviceGetNvLinkRemotePciInfo_v2"
	symMigMode      = "nvmlDeviceGetMigMode"
	symMigHandle    = "nvmlDeviceGetMigDeviceHandleByIndex"
	symP2P          = "nvmlDeviceGetP2PStatus"
	symAncestor     = "nvmlDeviceGetTopologyCommonAncestor"
)

// lookup returns nil when lib exports the symbol name, else an error.
func lookup(lib gonvml.Interface, name string) error {
	return guard(func() gonvml.Return {
		if err := lib.Extensions().LookupSymbol(name); err != nil {
			return gonvml.ERROR_FUNCTION_NOT_FOUND
		}
		return gonvml.SUCCESS
	})
}

// readLinks appends the NVLink links of GPU id that are up. It stops at
// the first link NVML says does not exist (ERROR_INVALID_ARGUMENT, or
// ERROR_NOT_SUPPORTED: a GPU without NVLink, which is not noted).
func readLinks(id topology.DeviceID, h gonvml.Device, syms map[string]error, inv *Inventory, note func(string, ...any)) {
	if syms[symNvLinkState] != nil {
		return
	}
	for link := range gonvml.NVLINK_MAX_LINKS {
		var st gonvml.EnableState
		err := guard(func() (r gonvml.Return) { st, r = h.GetNvLinkState(link); return })
		if errors.Is(err, gonvml.ERROR_INVALID_ARGUMENT) || errors.Is(err, gonvml.ERROR_NOT_SUPPORTED) {
			return
		}
		if err != nil {
			note("%v: NVLink %d state: %v", id, link, err)
			return
		}
		if st != gonvml.FEATURE_ENABLED {
			continue
		}
		l := NVLink{Device: id, Link: link}
		if syms[symNvLinkRemote] == nil {
			var pci gonvml.PciInfo
			if err := guard(func() (r gonvml.Return) { pci, r = h.GetNvLinkRemotePciInfo(link); return }); err != nil {
				note("%v: NVLink %d remote PCI info: %v", id, link, err)
			} else {
				l.RemotePCIBusID = cString(pci.BusId[:])
			}
		}
		inv.Links = append(inv.Links, l)
	}
}

// resolveLinks fills NVLink.Remote from the GPUs' bus ids.
func resolveLinks(inv *Inventory) {
	byBus := map[string]topology.DeviceID{}
	for _, d := range inv.GPUs() {
		if d.PCIBusID != "" {
			byBus[normBusID(d.PCIBusID)] = d.ID
		}
	}
	for i := range inv.Links {
		if id, ok := byBus[normBusID(inv.Links[i].RemotePCIBusID)]; ok && inv.Links[i].RemotePCIBusID != "" {
			inv.Links[i].Remote, inv.Links[i].RemoteIsGPU = id, true
		}
	}
}

// normBusID makes "0000:07:00.0" and "00000000:07:00.0" compare equal
// (NVML's BusId has an 8-digit domain, BusIdLegacy a 4-digit one).
func normBusID(s string) string {
	s = strings.ToLower(s)
	dom, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	if t := strings.TrimLeft(dom, "0"); t != "" {
		return t + ":" + rest
	}
	return "0:" + rest
}

// readMIG appends the MIG devices of GPU id when its MIG mode is on.
func readMIG(id topology.DeviceID, h gonvml.Device, syms map[string]error, inv *Inventory, note func(string, ...any)) {
	if syms[symMigMode] != nil {
		return
	}
	var cur int
	err := guard(func() (r gonvml.Return) { cur, _, r = h.GetMigMode(); return })
	if errors.Is(err, gonvml.ERROR_NOT_SUPPORTED) {
		return // not a MIG-capable GPU
	}
	if err != nil {
		note("%v: MIG mode: %v", id, err)
		return
	}
	if cur != gonvml.DEVICE_MIG_ENABLE {
		return
	}
	if syms[symMigHandle] != nil {
		note("%v: MIG mode on, but MIG devices cannot be listed", id)
		return
	}
	var n int
	if err := guard(func() (r gonvml.Return) { n, r = h.GetMaxMigDeviceCount(); return }); err != nil {
		note("%v: MIG device count: %v", id, err)
		return
	}
	for k := range min(max(n, 0), 64) {
		var mh gonvml.Device
		err := guard(func() (r gonvml.Return) { mh, r = h.GetMigDeviceHandleByIndex(k); return })
		if errors.Is(err, gonvml.ERROR_NOT_FOUND) || errors.Is(err, gonvml.ERROR_INVALID_ARGUMENT) {
			continue // an empty MIG slot
		}
		if err != nil || mh == nil {
			note("%v: MIG device %d: %v", id, k, err)
			continue
		}
		m := MIGDevice{Parent: id, Index: k}
		if err := guard(func() (r gonvml.Return) { m.UUID, r = mh.GetUUID(); return }); err != nil {
			m.UUID = ""
			note("%v: MIG device %d UUID: %v", id, k, err)
		}
		var mem gonvml.Memory
		if err := guard(func() (r gonvml.Return) { mem, r = mh.GetMemoryInfo(); return }); err != nil {
			note("%v: MIG device %d memory: %v", id, k, err)
		} else {
			m.MemoryBytes = clampInt64(mem.Total)
		}
		inv.MIG = append(inv.MIG, m)
	}
}

// readPairs fills Inventory.P2P. Failures are folded: one note per query
// and error text, naming the first pair and counting the others.
func readPairs(ctx context.Context, gpus []topology.DeviceFacts, handles []gonvml.Device, syms map[string]error, inv *Inventory, note func(string, ...any)) {
	type fold struct {
		first string
		n     int
	}
	var order []string
	folds := map[string]*fold{}
	fail := func(what string, from, to topology.DeviceID, err error) {
		key := what + ": " + err.Error()
		f := folds[key]
		if f == nil {
			f = &fold{first: fmt.Sprintf("%v→%v", from, to)}
			folds[key] = f
			order = append(order, key)
		}
		f.n++
	}
	defer func() {
		for _, key := range order {
			what, err, _ := strings.Cut(key, ": ")
			f := folds[key]
			if f.n == 1 {
				note("p2p: %s %s: %s", what, f.first, err)
			} else {
				note("p2p: %s %s and %d more pairs: %s", what, f.first, f.n-1, err)
			}
		}
	}()
	caps := []struct {
		name string
		idx  gonvml.GpuP2PCapsIndex
		set  func(*P2PPair, topology.P2PStatus)
	}{
		{"read", gonvml.P2P_CAPS_INDEX_READ, func(p *P2PPair, s topology.P2PStatus) { p.Read = s }},
		{"write", gonvml.P2P_CAPS_INDEX_WRITE, func(p *P2PPair, s topology.P2PStatus) { p.Write = s }},
		{"NVLink", gonvml.P2P_CAPS_INDEX_NVLINK, func(p *P2PPair, s topology.P2PStatus) { p.NVLink = s }},
		{"atomics", gonvml.P2P_CAPS_INDEX_ATOMICS, func(p *P2PPair, s topology.P2PStatus) { p.Atomics = s }},
	}
	for i, hi := range handles {
		if err := ctx.Err(); err != nil {
			note("nvml: stopped before the pairs of %v: %v", gpus[i].ID, err)
			return
		}
		for j, hj := range handles {
			if i == j {
				continue
			}
			p := P2PPair{From: gpus[i].ID, To: gpus[j].ID}
			if syms[symP2P] == nil {
				for _, c := range caps {
					var st gonvml.GpuP2PStatus
					if err := guard(func() (r gonvml.Return) { st, r = hi.GetP2PStatus(hj, c.idx); return }); err != nil {
						fail(c.name+" status", p.From, p.To, err)
					} else {
						c.set(&p, p2pFromNVML(st))
					}
				}
			}
			if syms[symAncestor] == nil {
				var lvl gonvml.GpuTopologyLevel
				if err := guard(func() (r gonvml.Return) { lvl, r = hi.GetTopologyCommonAncestor(hj); return }); err != nil {
					fail("common ancestor", p.From, p.To, err)
				} else {
					p.Ancestor = ancestorFromNVML(lvl)
				}
			}
			p.NVLinks, p.NVLinksEstimated = pairLinks(inv.Links, p)
			if p.NVLinksEstimated {
				fail("NVLink count", p.From, p.To, fmt.Errorf("NV%d estimated from the NVSwitch links both GPUs reach (NVLink P2P status not reported)", p.NVLinks))
			}
			inv.P2P = append(inv.P2P, p)
		}
	}
}

// pairLinks counts the NVLink links joining p and says whether the count
// is an estimate (see P2PPair.NVLinks). O(len(links)²) at worst.
func pairLinks(links []NVLink, p P2PPair) (n int, estimated bool) {
	direct := 0
	var from, to []string // remote bus ids of the links that end at an NVSwitch
	for _, l := range links {
		switch {
		case l.Device == p.From && l.RemoteIsGPU && l.Remote == p.To:
			direct++
		case l.RemoteIsGPU || l.RemotePCIBusID == "":
		case l.Device == p.From:
			from = append(from, normBusID(l.RemotePCIBusID))
		case l.Device == p.To:
			to = append(to, normBusID(l.RemotePCIBusID))
		}
	}
	switch {
	case direct > 0:
		return direct, false
	case p.NVLink == topology.P2POK:
		return len(from), false
	case p.NVLink == topology.P2PNotReported:
		n := min(countIn(from, to), countIn(to, from))
		return n, n > 0
	}
	return 0, false // NVML says NVLink P2P does not work for the pair
}

// countIn counts the entries of a that also occur in b.
func countIn(a, b []string) int {
	n := 0
	for _, x := range a {
		if slices.Contains(b, x) {
			n++
		}
	}
	return n
}

// Vendor is the Vendor of every GPU Discover lists: NVML knows only
// NVIDIA's GPUs, and this is how NVIDIA's drivers name their vendor.
const Vendor = "NVIDIA Corporation"

// readGPU reads the facts of GPU i. numaErr is non-nil when
// nvmlDeviceGetNumaNodeId must not be called. lost is non-nil when a
// query answered ERROR_GPU_IS_LOST ("memory: ERROR_GPU_IS_LOST"); the
// queries that did not are then not noted.
func readGPU(i int, h gonvml.Device, numaErr error, note func(string, ...any)) (d topology.DeviceFacts, lost error) {
	d = topology.DeviceFacts{ID: topology.GPU(i), Vendor: Vendor, NUMANode: -1}
	var notes []string
	fail := func(what string, err any) {
		if e, ok := err.(error); ok && errors.Is(e, gonvml.ERROR_GPU_IS_LOST) && lost == nil {
			lost = fmt.Errorf("%s: %w", what, e)
		}
		notes = append(notes, fmt.Sprintf("gpu%d: %s: %v", i, what, err))
	}
	defer func() {
		if lost == nil {
			for _, n := range notes {
				note("%s", n)
			}
		}
	}()
	if err := guard(func() (r gonvml.Return) { d.UUID, r = h.GetUUID(); return }); err != nil {
		d.UUID = ""
		fail("UUID", err)
	}
	if err := guard(func() (r gonvml.Return) { d.Name, r = h.GetName(); return }); err != nil {
		d.Name = ""
		fail("name", err)
	}
	var mem gonvml.Memory
	if err := guard(func() (r gonvml.Return) { mem, r = h.GetMemoryInfo(); return }); err != nil {
		fail("memory", err)
	} else {
		d.MemoryBytes = clampInt64(mem.Total)
		d.FreeMemoryBytes = clampInt64(mem.Free)
	}
	var pci gonvml.PciInfo
	if err := guard(func() (r gonvml.Return) { pci, r = h.GetPciInfo(); return }); err != nil {
		fail("PCI bus id", err)
	} else if d.PCIBusID = cString(pci.BusId[:]); d.PCIBusID == "" {
		fail("PCI bus id", "empty")
	}
	var major, minor int
	if err := guard(func() (r gonvml.Return) { major, minor, r = h.GetCudaComputeCapability(); return }); err != nil {
		fail("compute capability", err)
	} else {
		d.ComputeCapability = topology.ComputeCapability{Major: major, Minor: minor}
	}
	if numaErr != nil {
		fail("NUMA node", numaErr)
	} else if err := guard(func() (r gonvml.Return) { d.NUMANode, r = h.GetNumaNodeId(); return }); err != nil || d.NUMANode < 0 {
		if err == nil {
			err = fmt.Errorf("NVML returned %d", d.NUMANode)
		}
		d.NUMANode = -1
		fail("NUMA node", err)
	}
	var mask []uint
	if err := guard(func() (r gonvml.Return) { mask, r = h.GetCpuAffinity(affinityCPUs); return }); err != nil {
		fail("CPU affinity", err)
	} else if d.CPUAffinity = maskCPUs(mask); d.CPUAffinity == nil {
		fail("CPU affinity", "empty mask")
	}
	return d, lost
}

// HealthCheck returns a health check for a lease pool
// (lease.WithHealthCheck, for the Devices of an Inventory that Discover
// made while NVML answered) that asks NVML, by UUID, whether a GPU is
// still there: it initialises NVML, looks the GPU up
// (nvmlDeviceGetHandleByUUID), reads its memory info, and shuts NVML down
// again (NVML reference-counts Init, so a process that keeps NVML
// initialised pays little). A nil lib means the system library (go-nvml's
// New()). The GPU is gone, with a *gpu.LostError saying why, when the
// lookup finds no GPU of that UUID (ERROR_NOT_FOUND, or
// ERROR_INVALID_ARGUMENT, as go-nvml's mock servers answer) or either call
// answers ERROR_GPU_IS_LOST. Anything else is no proof of loss and gives
// nil: a GPU without a UUID, NVML failing to start (no other NVML call is
// then made), another error, a panic in the library. A device that is not
// an NVML GPU (an OpenCL device the backend leases, whatever its UUID) is
// not NVML's to judge: nil, with no NVML call. Safe for concurrent use.
func HealthCheck(lib gonvml.Interface) func(d topology.DeviceFacts) error {
	return func(d topology.DeviceFacts) error {
		if d.ID.Kind != topology.KindGPU || d.UUID == "" {
			return nil
		}
		l := lib
		if l == nil {
			l = gonvml.New()
		}
		if guard(func() gonvml.Return { return l.Init() }) != nil {
			return nil
		}
		defer func() { _ = guard(func() gonvml.Return { return l.Shutdown() }) }()
		lost := func(what string, err error) error {
			return &gpu.LostError{Device: d.ID, UUID: d.UUID, Err: fmt.Errorf("nvml: %s: %w", what, err)}
		}
		var h gonvml.Device
		err := guard(func() (r gonvml.Return) { h, r = l.DeviceGetHandleByUUID(d.UUID); return })
		switch {
		case errors.Is(err, gonvml.ERROR_NOT_FOUND), errors.Is(err, gonvml.ERROR_INVALID_ARGUMENT):
			return lost("no GPU has this UUID", err)
		case errors.Is(err, gonvml.ERROR_GPU_IS_LOST):
			return lost("handle by UUID", err)
		case err != nil || h == nil:
			return nil
		}
		if err := guard(func() (r gonvml.Return) { _, r = h.GetMemoryInfo(); return }); errors.Is(err, gonvml.ERROR_GPU_IS_LOST) {
			return lost("memory info", err)
		}
		return nil
	}
}

// guard calls f and turns a non-success Return into an error (the Return
// itself, whose text is NVML's, e.g. "ERROR_NOT_SUPPORTED") and a panic into
// an error "panic: VALUE".
func guard(f func() gonvml.Return) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	if r := f(); r != gonvml.SUCCESS {
		return r
	}
	return nil
}

// cString returns the text of a NUL-terminated C char array.
func cString(b []int8) string {
	out := make([]byte, 0, len(b))
	for _, c := range b {
		if c == 0 {
			break
		}
		out = append(out, byte(c))
	}
	return string(out)
}

// maskCPUs returns the CPUs set in an NVML CPU mask (bit j of word w is
// CPU w*UintSize+j), or nil when none is set.
func maskCPUs(mask []uint) []int {
	var cpus []int
	for w, word := range mask {
		for word != 0 {
			j := bits.TrailingZeros(word)
			cpus = append(cpus, w*bits.UintSize+j)
			word &^= 1 << j
		}
	}
	return cpus
}

func clampInt64(v uint64) int64 {
	if v > 1<<63-1 {
		return 1<<63 - 1
	}
	return int64(v)
}
