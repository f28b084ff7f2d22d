package opencl

import (
	"slices"

	"github.com/streamdag/streamdag/gpu/opencl/internal/cl"
)

// Sentinel errors that Devices, Platforms, NewDevice and the driver's
// Open and Enumerate wrap (errors.Is).
var (
	// ErrUnavailable: no OpenCL library (libOpenCL.so.1) could be loaded
	// or it lacks an OpenCL 1.2 entry point; wrapped with the reason.
	ErrUnavailable = cl.ErrUnavailable
	// ErrNoPlatform: the library loaded but no platform (ICD) answered,
	// or (the driver's Open and Enumerate) the platforms list no
	// available device.
	ErrNoPlatform = cl.ErrNoPlatform
)

// BuildError is OpenCL C source that failed to build: a device's
// Program returns it, wrapped with the device's ID, so errors.As finds
// it and a caller can read the compiler's whole log.
type BuildError struct {
	Program string // the name given to Program
	Device  string // the OpenCL device's name
	Log     string // the compiler's whole build log
	err     *cl.BuildError
}

// Error names the program and device, the failed OpenCL call and its
// status, and quotes the first 8 lines of the log ("opencl: build
// program "p" on pthread-…: clBuildProgram: CL_BUILD_PROGRAM_FAILURE
// (-11): …").
func (e *BuildError) Error() string { return e.err.Error() }

// Unwrap returns the error of the failed OpenCL call (usually
// clBuildProgram's CL_BUILD_PROGRAM_FAILURE).
func (e *BuildError) Unwrap() error { return e.err.Err }

// Platform is one OpenCL platform (an installed ICD) and its devices.
type Platform struct {
	Name    string // CL_PLATFORM_NAME, "Portable Computing Language"
	Vendor  string // CL_PLATFORM_VENDOR
	Version string // CL_PLATFORM_VERSION, "OpenCL 3.0 PoCL 3.1+debian …"
	Devices []Info
}

// Info is one OpenCL device as Platforms, Devices and InfoOf give it:
// its description, and the handle NewDevice opens. It is a plain value:
// its fields are for reading, and NewDevice opens the device the handle
// names whatever they hold. The zero Info names no device (NewDevice
// refuses it).
type Info struct {
	Name          string // CL_DEVICE_NAME
	Vendor        string // CL_DEVICE_VENDOR
	Version       string // CL_DEVICE_VERSION, "OpenCL 3.0 …"
	DriverVersion string // CL_DRIVER_VERSION
	Platform      string // the platform's name
	// Type names the bits of CL_DEVICE_TYPE, joined by "|" in the order
	// CPU, GPU, accelerator, custom, default: "GPU", "CPU|default".
	Type           string
	ComputeUnits   int   // CL_DEVICE_MAX_COMPUTE_UNITS
	GlobalMemBytes int64 // CL_DEVICE_GLOBAL_MEM_SIZE: the device's memory budget
	MaxAllocBytes  int64 // CL_DEVICE_MAX_MEM_ALLOC_SIZE: the largest one allocation
	MaxWorkGroup   int   // CL_DEVICE_MAX_WORK_GROUP_SIZE, work-items
	// MaxWorkItems is CL_DEVICE_MAX_WORK_ITEM_SIZES: the largest local
	// size per dimension, one entry per dimension the device supports.
	// Shared by every copy of the Info: do not modify it.
	MaxWorkItems []int
	AddressBits  int // CL_DEVICE_ADDRESS_BITS: the width of the device's size_t, 32 or 64
	// BaseAlignBytes is CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: a kernel
	// argument at a non-zero offset into memory must be a multiple of it.
	BaseAlignBytes int64
	Available      bool // CL_DEVICE_AVAILABLE: the driver opens only available devices
	// Extensions are the names CL_DEVICE_EXTENSIONS lists, in its order
	// (e.g. "cl_khr_int64_base_atomics"); empty when the device lists
	// none. Shared by every copy of the Info: do not modify it.
	Extensions []string

	d cl.Device // the device's handle and the binding's description
}

// HasExtension reports whether the device lists the extension name
// (exact, case-sensitive, as in CL_DEVICE_EXTENSIONS).
func (i Info) HasExtension(name string) bool { return slices.Contains(i.Extensions, name) }

// Platforms lists the OpenCL platforms and their devices (of every
// type, available or not) in the order the ICD loader reports them,
// loading the OpenCL library on the first call. It returns an error
// wrapping ErrUnavailable when no OpenCL library loads, and one wrapping
// ErrNoPlatform when the library loads but no platform is installed. A
// platform whose device query fails is listed with no devices. It
// creates no context and is safe for concurrent use.
func Platforms() ([]Platform, error) {
	ps, err := cl.Platforms()
	if err != nil {
		return nil, err
	}
	out := make([]Platform, len(ps))
	for i, p := range ps {
		out[i] = Platform{Name: p.Name, Vendor: p.Vendor, Version: p.Version, Devices: make([]Info, len(p.Devices))}
		for j, d := range p.Devices {
			out[i].Devices[j] = describe(d)
		}
	}
	return out, nil
}

// Devices returns every device of every platform, in Platforms' order.
// Errors as Platforms'.
func Devices() ([]Info, error) {
	ds, err := cl.Devices()
	if err != nil {
		return nil, err
	}
	out := make([]Info, len(ds))
	for i, d := range ds {
		out[i] = describe(d)
	}
	return out, nil
}

// describe returns the Info of d.
func describe(d cl.Device) Info {
	i := d.Info()
	return Info{d: d, Name: i.Name, Vendor: i.Vendor, Version: i.Version, DriverVersion: i.DriverVersion,
		Platform: i.Platform, Type: i.Type.String(), ComputeUnits: i.ComputeUnits, GlobalMemBytes: i.GlobalMemBytes,
		MaxAllocBytes: i.MaxAllocBytes, MaxWorkGroup: i.MaxWorkGroup, MaxWorkItems: i.MaxWorkItems, AddressBits: i.AddressBits,
		BaseAlignBytes: i.BaseAlignBytes, Available: i.Available, Extensions: i.Extensions}
}
