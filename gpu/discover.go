package gpu

import (
	"context"
	"fmt"
	"math/bits"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/streamdag/streamdag/topology"
)

// NVMLStatus says whether NVML answered during Discover.
type NVMLStatus struct {
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
// "NVML not available: REASON".
func (s NVMLStatus) String() string {
	if !s.Available {
		return "NVML not available: " + s.Reason
	}
	if s.Driver == "" {
		return "NVML available (driver unknown)"
	}
	return "NVML available (driver " + s.Driver + ")"
}

// Inventory is what Discover learned about this host's devices.
type Inventory struct {
	// NVML says whether NVML could be used, and why not.
	NVML NVMLStatus
	// Devices holds the CPU device first, then one entry per GPU in NVML
	// index order, with ID topology.GPU(NVML index). A GPU whose handle
	// NVML would not give is left out, so GPU indices may be sparse.
	Devices []topology.Device
	// Notes lists what could not be learned and why, one line each, e.g.
	// "gpu3: NUMA node: ERROR_NOT_SUPPORTED". Facts behind a note keep
	// their zero value (NUMANode: -1).
	Notes []string
}

// GPUs returns the GPU entries of Devices (all but the CPU device), in
// NVML index order. The slice aliases Devices.
func (inv Inventory) GPUs() []topology.Device {
	for i, d := range inv.Devices {
		if d.ID.Kind == topology.KindGPU {
			return inv.Devices[i:]
		}
	}
	return nil
}

// DiscoverOption configures Discover.
type DiscoverOption func(*discoverOptions)

type discoverOptions struct {
	lib nvml.Interface
}

// WithNVML makes Discover use lib instead of the system NVML library
// (nvml.New()). Tests pass go-nvml's mocks (pkg/nvml/mock/dgxa100, …).
// A nil lib means the default.
func WithNVML(lib nvml.Interface) DiscoverOption {
	return func(o *discoverOptions) { o.lib = lib }
}

// affinityCPUs is the CPU count passed to nvmlDeviceGetCpuAffinity: the
// size of the CPU mask NVML fills (4096 CPUs, 512 bytes), larger than any
// host this runs on.
const affinityCPUs = 4096

// Discover returns the host's devices: the CPU device (topology.CPUDevice)
// always, and the GPUs NVML reports. It never fails and never panics:
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
// when the library exports it; else -1) and CPU affinity. Discover makes
// O(GPUs) NVML calls and is safe for concurrent use (NVML reference-counts
// Init and Shutdown).
func Discover(ctx context.Context, opts ...DiscoverOption) (inv Inventory) {
	var o discoverOptions
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	inv.Devices = []topology.Device{topology.CPUDevice()}
	if err := ctx.Err(); err != nil {
		inv.NVML.Reason = "nvml: not queried: " + err.Error()
		return inv
	}
	lib := o.lib
	if lib == nil {
		lib = nvml.New()
	}
	if err := guard(func() nvml.Return { return lib.Init() }); err != nil {
		inv.NVML.Reason = "nvml: Init: " + err.Error()
		return inv
	}
	inv.NVML.Available = true
	defer func() {
		if err := guard(func() nvml.Return { return lib.Shutdown() }); err != nil {
			inv.Notes = append(inv.Notes, "nvml: Shutdown: "+err.Error())
		}
	}()
	discoverGPUs(ctx, lib, &inv)
	return inv
}

func discoverGPUs(ctx context.Context, lib nvml.Interface, inv *Inventory) {
	note := func(format string, args ...any) {
		inv.Notes = append(inv.Notes, fmt.Sprintf(format, args...))
	}
	if err := guard(func() (r nvml.Return) { inv.NVML.Driver, r = lib.SystemGetDriverVersion(); return }); err != nil {
		inv.NVML.Driver = ""
		note("nvml: driver version: %v", err)
	}
	var count int
	if err := guard(func() (r nvml.Return) { count, r = lib.DeviceGetCount(); return }); err != nil {
		note("nvml: device count: %v", err)
		return
	}
	// nvmlDeviceGetNumaNodeId is recent (driver 545+); calling a symbol the
	// library lacks would crash, so ask first.
	numaErr := guard(func() nvml.Return {
		if err := lib.Extensions().LookupSymbol("nvmlDeviceGetNumaNodeId"); err != nil {
			return nvml.ERROR_FUNCTION_NOT_FOUND
		}
		return nvml.SUCCESS
	})
	for i := range count {
		if err := ctx.Err(); err != nil {
			note("nvml: stopped before gpu%d of %d: %v", i, count, err)
			return
		}
		var h nvml.Device
		if err := guard(func() (r nvml.Return) { h, r = lib.DeviceGetHandleByIndex(i); return }); err != nil {
			note("gpu%d: handle: %v (device left out)", i, err)
			continue
		}
		if h == nil {
			note("gpu%d: handle: nil (device left out)", i)
			continue
		}
		inv.Devices = append(inv.Devices, readGPU(i, h, numaErr, note))
	}
}

// readGPU reads the facts of GPU i. numaErr is non-nil when
// nvmlDeviceGetNumaNodeId must not be called.
func readGPU(i int, h nvml.Device, numaErr error, note func(string, ...any)) topology.Device {
	d := topology.Device{ID: topology.GPU(i), NUMANode: -1}
	fail := func(what string, err any) { note("gpu%d: %s: %v", i, what, err) }
	if err := guard(func() (r nvml.Return) { d.UUID, r = h.GetUUID(); return }); err != nil {
		d.UUID = ""
		fail("UUID", err)
	}
	if err := guard(func() (r nvml.Return) { d.Name, r = h.GetName(); return }); err != nil {
		d.Name = ""
		fail("name", err)
	}
	var mem nvml.Memory
	if err := guard(func() (r nvml.Return) { mem, r = h.GetMemoryInfo(); return }); err != nil {
		fail("memory", err)
	} else {
		d.MemoryBytes = clampInt64(mem.Total)
		d.FreeMemoryBytes = clampInt64(mem.Free)
	}
	var pci nvml.PciInfo
	if err := guard(func() (r nvml.Return) { pci, r = h.GetPciInfo(); return }); err != nil {
		fail("PCI bus id", err)
	} else if d.PCIBusID = cString(pci.BusId[:]); d.PCIBusID == "" {
		fail("PCI bus id", "empty")
	}
	var major, minor int
	if err := guard(func() (r nvml.Return) { major, minor, r = h.GetCudaComputeCapability(); return }); err != nil {
		fail("compute capability", err)
	} else {
		d.ComputeCapability = topology.ComputeCapability{Major: major, Minor: minor}
	}
	if numaErr != nil {
		fail("NUMA node", numaErr)
	} else if err := guard(func() (r nvml.Return) { d.NUMANode, r = h.GetNumaNodeId(); return }); err != nil || d.NUMANode < 0 {
		if err == nil {
			err = fmt.Errorf("NVML returned %d", d.NUMANode)
		}
		d.NUMANode = -1
		fail("NUMA node", err)
	}
	var mask []uint
	if err := guard(func() (r nvml.Return) { mask, r = h.GetCpuAffinity(affinityCPUs); return }); err != nil {
		fail("CPU affinity", err)
	} else if d.CPUAffinity = maskCPUs(mask); d.CPUAffinity == nil {
		fail("CPU affinity", "empty mask")
	}
	return d
}

// guard calls f and turns a non-success Return into an error (the Return
// itself, whose text is NVML's, e.g. "ERROR_NOT_SUPPORTED") and a panic into
// an error "panic: VALUE".
func guard(f func() nvml.Return) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	if r := f(); r != nvml.SUCCESS {
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
