package topology

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
)

// Kind is the kind of a device: the host CPU or a GPU.
type Kind uint8

const (
	// KindCPU is the host CPU device. Every host has exactly one, "cpu".
	KindCPU Kind = iota
	// KindGPU is a GPU, "gpu0", "gpu1", … in inventory order.
	KindGPU
	// KindOpenCL is an OpenCL device, "opencl0", "opencl1", … in the
	// order the OpenCL platforms list them (a device of any type: a GPU
	// of any vendor, or a CPU through PoCL).
	KindOpenCL
)

// String returns "cpu", "gpu" or "opencl".
func (k Kind) String() string {
	switch k {
	case KindCPU:
		return "cpu"
	case KindGPU:
		return "gpu"
	case KindOpenCL:
		return "opencl"
	default:
		return "kind(" + strconv.Itoa(int(k)) + ")"
	}
}

// DeviceID names one device: the host CPU ("cpu") or a GPU by its
// inventory index ("gpu0", "gpu1", …; indices may be sparse when a device
// is hidden or lost). The zero value is the CPU device. DeviceID is
// comparable and usable as a map key.
type DeviceID struct {
	Kind  Kind // KindCPU, a GPU or an OpenCL device
	Index int  // GPU inventory index; always 0 for the CPU device
}

// CPU is the ID of the host CPU device.
var CPU = DeviceID{Kind: KindCPU}

// GPU returns the ID of the GPU with inventory index i.
func GPU(i int) DeviceID { return DeviceID{Kind: KindGPU, Index: i} }

// OpenCL returns the ID of the OpenCL device with index i.
func OpenCL(i int) DeviceID { return DeviceID{Kind: KindOpenCL, Index: i} }

// String returns "cpu", "gpuN" or "openclN".
func (id DeviceID) String() string {
	if id.Kind == KindCPU {
		return "cpu"
	}
	return id.Kind.String() + strconv.Itoa(id.Index)
}

// ParseDeviceID parses "cpu", "gpuN" or "openclN" (N a non-negative
// decimal integer). Any other text returns an error naming it.
func ParseDeviceID(s string) (DeviceID, error) {
	if s == "cpu" {
		return CPU, nil
	}
	for _, k := range []Kind{KindGPU, KindOpenCL} {
		if rest, ok := strings.CutPrefix(s, k.String()); ok && rest != "" {
			n, err := strconv.Atoi(rest)
			if err == nil && n >= 0 && strconv.Itoa(n) == rest {
				return DeviceID{Kind: k, Index: n}, nil
			}
		}
	}
	return DeviceID{}, fmt.Errorf("topology: unknown device %q (want \"cpu\", \"gpuN\" or \"openclN\")", s)
}

// ComputeCapability is a CUDA compute capability such as 8.0 (A100) or
// 9.0 (H100). The zero value means "not a GPU" or "unknown".
type ComputeCapability struct {
	Major, Minor int
}

// String returns "major.minor", or "" for the zero value.
func (c ComputeCapability) String() string {
	if c == (ComputeCapability{}) {
		return ""
	}
	return strconv.Itoa(c.Major) + "." + strconv.Itoa(c.Minor)
}

// DeviceFacts holds the facts known about one device. Fields that could not be
// learned keep their zero value, except NUMANode, which is -1 when unknown.
type DeviceFacts struct {
	ID                DeviceID          // the device this describes
	Name              string            // marketing name, e.g. "NVIDIA A100-SXM4-40GB", or the CPU model
	Vendor            string            // the vendor as the device's driver names it ("NVIDIA Corporation"); "" when unknown
	UUID              string            // GPU UUID as NVML prints it; "" for the CPU
	MemoryBytes       int64             // total device memory in bytes (host RAM for the CPU)
	FreeMemoryBytes   int64             // free memory in bytes when the facts were read; 0 if unknown
	ComputeCapability ComputeCapability // zero for the CPU
	PCIBusID          string            // e.g. "00000000:07:00.0"; "" for the CPU
	NUMANode          int               // NUMA node, or -1 when unknown
	CPUAffinity       []int             // logical CPUs close to the device; nil when unknown
	Cores             int               // logical CPUs for the CPU device; SM count for a GPU when known, else 0
}

// CPUDevice describes the host CPU device: its model name from
// /proc/cpuinfo ("host CPU" when it names none, as on arm64), its memory
// from /proc/meminfo and its logical CPU count
// from runtime.NumCPU. Facts that cannot be read (on a non-Linux host) keep
// their zero value; NUMANode is 0 on Linux hosts and -1 elsewhere. It never
// fails.
func CPUDevice() DeviceFacts {
	d := DeviceFacts{ID: CPU, Name: "host CPU", NUMANode: -1, Cores: runtime.NumCPU()}
	if runtime.GOOS == "linux" {
		// Not tied to "model name": arm64 kernels (Grace, Graviton) leave
		// it out of /proc/cpuinfo.
		d.NUMANode = 0
	}
	if name := procField("/proc/cpuinfo", "model name"); name != "" {
		d.Name = name
	}
	if mem := procField("/proc/meminfo", "MemTotal"); mem != "" {
		// "24607484 kB"
		if f := strings.Fields(mem); len(f) == 2 && f[1] == "kB" {
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				d.MemoryBytes = kb * 1024
			}
		}
	}
	if mem := procField("/proc/meminfo", "MemAvailable"); mem != "" {
		if f := strings.Fields(mem); len(f) == 2 && f[1] == "kB" {
			if kb, err := strconv.ParseInt(f[0], 10, 64); err == nil {
				d.FreeMemoryBytes = kb * 1024
			}
		}
	}
	return d
}

// procField returns the value of the first "key: value" line of a /proc
// file, or "" when the file or key is missing.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}
