package cl

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"unsafe"
)

// OpenCL info parameter names (cl.h).
const (
	clPlatformVersion = 0x0901
	clPlatformName    = 0x0902
	clPlatformVendor  = 0x0903

	clDeviceType             = 0x1000
	clDeviceMaxComputeUnits  = 0x1002
	clDeviceMaxWorkGroupSize = 0x1004
	clDeviceMaxWorkItemSizes = 0x1005
	clDeviceAddressBits      = 0x100D
	clDeviceMaxMemAllocSize  = 0x1010
	clDeviceMemBaseAddrAlign = 0x1019
	clDeviceGlobalMemSize    = 0x101F
	clDeviceAvailable        = 0x1027
	clDeviceName             = 0x102B
	clDeviceVendor           = 0x102C
	clDriverVersion          = 0x102D
	clDeviceVersion          = 0x102F
	clDeviceExtensions       = 0x1030

	clDeviceTypeAll = 0xFFFFFFFF
)

// DeviceType is an OpenCL device type bit set (cl_device_type).
type DeviceType uint64

// The device types (CL_DEVICE_TYPE_*).
const (
	TypeDefault     DeviceType = 1 << 0
	TypeCPU         DeviceType = 1 << 1
	TypeGPU         DeviceType = 1 << 2
	TypeAccelerator DeviceType = 1 << 3
	TypeCustom      DeviceType = 1 << 4
)

// String returns the set bits' names joined by "|": "GPU", "CPU|default".
func (t DeviceType) String() string {
	var parts []string
	for _, b := range []struct {
		bit  DeviceType
		name string
	}{{TypeCPU, "CPU"}, {TypeGPU, "GPU"}, {TypeAccelerator, "accelerator"}, {TypeCustom, "custom"}, {TypeDefault, "default"}} {
		if t&b.bit != 0 {
			parts = append(parts, b.name)
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("type(%#x)", uint64(t))
	}
	return strings.Join(parts, "|")
}

// Platform is one OpenCL platform (an installed ICD) and its devices.
type Platform struct {
	Name    string // CL_PLATFORM_NAME, "Portable Computing Language"
	Vendor  string // CL_PLATFORM_VENDOR
	Version string // CL_PLATFORM_VERSION, "OpenCL 3.0 PoCL 3.1+debian …"
	Devices []Device
}

// DeviceInfo describes one OpenCL device; it is a plain value.
type DeviceInfo struct {
	Name           string // CL_DEVICE_NAME
	Vendor         string // CL_DEVICE_VENDOR
	Version        string // CL_DEVICE_VERSION, "OpenCL 3.0 …"
	DriverVersion  string // CL_DRIVER_VERSION
	Platform       string // the platform's name
	Type           DeviceType
	ComputeUnits   int   // CL_DEVICE_MAX_COMPUTE_UNITS
	GlobalMemBytes int64 // CL_DEVICE_GLOBAL_MEM_SIZE
	MaxAllocBytes  int64 // CL_DEVICE_MAX_MEM_ALLOC_SIZE: the largest one buffer
	MaxWorkGroup   int   // CL_DEVICE_MAX_WORK_GROUP_SIZE, work-items
	// MaxWorkItems is CL_DEVICE_MAX_WORK_ITEM_SIZES: the largest local
	// size per dimension, one entry per dimension the device supports
	// (CL_DEVICE_MAX_WORK_ITEM_DIMENSIONS). Shared by every copy of the
	// DeviceInfo: do not modify it.
	MaxWorkItems   []int
	AddressBits    int   // CL_DEVICE_ADDRESS_BITS: the width of the device's size_t, 32 or 64
	BaseAlignBytes int64 // CL_DEVICE_MEM_BASE_ADDR_ALIGN in bytes: a sub-buffer's origin must be a multiple of it
	Available      bool  // CL_DEVICE_AVAILABLE
	// Extensions are the names CL_DEVICE_EXTENSIONS lists, in its order
	// (e.g. "cl_khr_int64_base_atomics"); empty when the device lists
	// none. The slice is shared by every copy of the DeviceInfo: do not
	// modify it.
	Extensions []string
}

// HasExtension reports whether the device lists the extension name
// (exact, case-sensitive, as in CL_DEVICE_EXTENSIONS).
func (i DeviceInfo) HasExtension(name string) bool { return slices.Contains(i.Extensions, name) }

// Device is one OpenCL device as Platforms found it: an opaque handle plus
// its description. The zero Device is invalid (Open refuses it).
type Device struct {
	id   uintptr
	info DeviceInfo
}

// Info returns the device's description.
func (d Device) Info() DeviceInfo { return d.info }

// IsZero reports whether d is the zero Device, which names no device.
func (d Device) IsZero() bool { return d.id == 0 }

// String returns the device's name.
func (d Device) String() string { return d.info.Name }

// Platforms lists the OpenCL platforms and their devices (of every type)
// in the order the ICD loader reports them. It returns an error wrapping
// ErrUnavailable when no OpenCL library loads, and one wrapping
// ErrNoPlatform when the library loads but no platform is installed
// (CL_PLATFORM_NOT_FOUND_KHR). A platform whose device query fails is
// listed with no devices. It is safe for concurrent use.
func Platforms() ([]Platform, error) {
	if err := load(); err != nil {
		return nil, err
	}
	var n uint32
	if err := check("clGetPlatformIDs", syscall(cl.getPlatformIDs, 0, 0, uintptr(unsafe.Pointer(&n)))); err != nil {
		if errors.Is(err, PlatformNotFoundKHR) {
			return nil, fmt.Errorf("%w: %w", ErrNoPlatform, err)
		}
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("%w: clGetPlatformIDs found none", ErrNoPlatform)
	}
	ids := make([]uintptr, n)
	if err := check("clGetPlatformIDs", syscall(cl.getPlatformIDs, uintptr(n), uintptr(unsafe.Pointer(&ids[0])), 0)); err != nil {
		return nil, err
	}
	out := make([]Platform, 0, n)
	for _, pid := range ids {
		var p Platform
		var err error
		if p.Name, err = infoString("clGetPlatformInfo", cl.getPlatformInfo, pid, clPlatformName); err != nil {
			return nil, err
		}
		if p.Vendor, err = infoString("clGetPlatformInfo", cl.getPlatformInfo, pid, clPlatformVendor); err != nil {
			return nil, err
		}
		if p.Version, err = infoString("clGetPlatformInfo", cl.getPlatformInfo, pid, clPlatformVersion); err != nil {
			return nil, err
		}
		p.Devices, _ = devices(pid, p.Name)
		out = append(out, p)
	}
	return out, nil
}

// Devices returns every device of every platform, in Platforms' order.
func Devices() ([]Device, error) {
	ps, err := Platforms()
	if err != nil {
		return nil, err
	}
	var ds []Device
	for _, p := range ps {
		ds = append(ds, p.Devices...)
	}
	return ds, nil
}

func devices(pid uintptr, platform string) ([]Device, error) {
	var n uint32
	if err := check("clGetDeviceIDs", syscall(cl.getDeviceIDs, pid, clDeviceTypeAll, 0, 0, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	ids := make([]uintptr, n)
	if err := check("clGetDeviceIDs", syscall(cl.getDeviceIDs, pid, clDeviceTypeAll, uintptr(n), uintptr(unsafe.Pointer(&ids[0])), 0)); err != nil {
		return nil, err
	}
	out := make([]Device, 0, n)
	for _, id := range ids {
		d, err := describe(id, platform)
		if err != nil {
			return out, err
		}
		out = append(out, d)
	}
	return out, nil
}

func describe(id uintptr, platform string) (Device, error) {
	const call = "clGetDeviceInfo"
	d := Device{id: id, info: DeviceInfo{Platform: platform}}
	var errs []error
	str := func(param uintptr) string {
		s, err := infoString(call, cl.getDeviceInfo, id, param)
		errs = append(errs, err)
		return s
	}
	num := func(param, size uintptr) uint64 {
		v, err := infoUint(call, cl.getDeviceInfo, id, param, size)
		errs = append(errs, err)
		return v
	}
	d.info.Name = str(clDeviceName)
	d.info.Vendor = str(clDeviceVendor)
	d.info.Version = str(clDeviceVersion)
	d.info.DriverVersion = str(clDriverVersion)
	d.info.Type = DeviceType(num(clDeviceType, 8))
	d.info.ComputeUnits = int(num(clDeviceMaxComputeUnits, 4))
	d.info.GlobalMemBytes = int64(num(clDeviceGlobalMemSize, 8))
	d.info.MaxAllocBytes = int64(num(clDeviceMaxMemAllocSize, 8))
	d.info.MaxWorkGroup = int(num(clDeviceMaxWorkGroupSize, unsafe.Sizeof(uintptr(0))))
	d.info.BaseAlignBytes = int64(num(clDeviceMemBaseAddrAlign, 4) / 8)
	d.info.AddressBits = int(num(clDeviceAddressBits, 4))
	sizes, err := infoBytes(call, cl.getDeviceInfo, id, clDeviceMaxWorkItemSizes)
	errs = append(errs, err)
	for w := unsafe.Sizeof(uintptr(0)); uintptr(len(sizes)) >= w; sizes = sizes[w:] {
		d.info.MaxWorkItems = append(d.info.MaxWorkItems, int(min(*(*uintptr)(unsafe.Pointer(&sizes[0])), math.MaxInt)))
	}
	d.info.Available = num(clDeviceAvailable, 4) != 0
	d.info.Extensions = strings.Fields(str(clDeviceExtensions))
	return d, errors.Join(errs...)
}
