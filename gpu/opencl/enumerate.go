package opencl

import (
	"context"
	"fmt"
	"slices"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cl"
	"github.com/streamdag/streamdag/topology"
)

// The driver is a gpu.Enumerator: a lease.Backend leases the devices it
// lists and opens a leased one with OpenDevice.
var _ gpu.Enumerator = driver{}

// Enumerate lists every available OpenCL device as a gpu.Found, in the
// order the driver's Open opens them (opencl0, opencl1, …): its facts as
// NewDevice's Info gives them, plus the UUID (cl_khr_device_uuid,
// written as NVML writes GPU UUIDs when the vendor is NVIDIA) and the PCI
// bus ID (cl_khr_pci_bus_info or cl_nv_device_attribute_query) when the
// device reports them, so a backend can tell which NVML GPU a device is.
// Type is "gpu", "cpu", "accelerator" or "custom" (from
// CL_DEVICE_TYPE). Key is the UUID when there is one, else "PLATFORM/NAME#N"
// (N counting the devices of that platform and name). It creates no
// context. Errors as Open's.
func (driver) Enumerate(context.Context) ([]gpu.Found, error) {
	_, fs, err := enumerate()
	return fs, err
}

// enumerate returns the available devices and what Enumerate says of
// each, index for index.
func enumerate() ([]Info, []gpu.Found, error) {
	avail, err := available()
	if err != nil {
		return nil, nil, err
	}
	out := make([]gpu.Found, len(avail))
	nth := map[string]int{}
	for i, d := range avail {
		f := gpu.Found{Type: foundType(d.d.Info().Type), Device: topology.DeviceFacts{ID: topology.OpenCL(i), Name: d.Name,
			Vendor: d.Vendor, MemoryBytes: d.GlobalMemBytes, NUMANode: -1, Cores: d.ComputeUnits}}
		f.Device.UUID = d.d.UUID()
		f.Device.PCIBusID = d.d.PCIBusID()
		name := d.Platform + "/" + d.Name
		f.Key = fmt.Sprintf("%s#%d", name, nth[name])
		nth[name]++
		if f.Device.UUID != "" {
			f.Key = f.Device.UUID
		}
		out[i] = f
	}
	return avail, out, nil
}

// OpenDevice opens the device f that Enumerate listed (found again by
// f.Key) with NewDevice, with cfg.Streams streams (0: DefaultStreams) and
// the ID f.Device.ID. Errors: f is not an OpenCL device, or no available
// device has its key any more; a non-empty cfg.Settings (the driver takes no
// settings); a bad stream count; NewDevice's.
func (driver) OpenDevice(_ context.Context, f gpu.Found, cfg gpu.Config) (gpu.Device, error) {
	if f.Device.ID.Kind != topology.KindOpenCL {
		return nil, fmt.Errorf("opencl: open device %v: not an OpenCL device", f.Device.ID)
	}
	if err := noSettings(fmt.Sprintf("open device %v", f.Device.ID), cfg); err != nil {
		return nil, err
	}
	streams := cfg.Streams
	if streams == 0 {
		streams = DefaultStreams
	}
	avail, fs, err := enumerate()
	if err != nil {
		return nil, fmt.Errorf("opencl: open device %v: %w", f.Device.ID, err)
	}
	i := slices.IndexFunc(fs, func(g gpu.Found) bool { return g.Key == f.Key })
	if i < 0 {
		return nil, fmt.Errorf("opencl: open device %v (%s): no available OpenCL device is %q any more", f.Device.ID, f.Device.Name, f.Key)
	}
	return NewDevice(avail[i], WithStreams(streams), WithIndex(f.Device.ID.Index))
}

// available returns the available devices of every platform, in
// Devices' order. Errors wrap ErrUnavailable or ErrNoPlatform.
func available() ([]Info, error) {
	ds, err := Devices()
	if err != nil {
		return nil, err
	}
	var avail []Info
	for _, d := range ds {
		if d.Available {
			avail = append(avail, d)
		}
	}
	if len(avail) == 0 {
		return nil, fmt.Errorf("%w: the platforms list %d devices, none available", ErrNoPlatform, len(ds))
	}
	return avail, nil
}

// foundType is the gpu.Found type of an OpenCL device type.
func foundType(t cl.DeviceType) string {
	switch {
	case t&cl.TypeGPU != 0:
		return "gpu"
	case t&cl.TypeCPU != 0:
		return "cpu"
	case t&cl.TypeAccelerator != 0:
		return "accelerator"
	default:
		return "custom"
	}
}
