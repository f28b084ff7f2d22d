package cl

import (
	"encoding/binary"
	"fmt"
	"strings"
	"unsafe"
)

// Identity queries of the extensions that have them (cl_khr_device_uuid,
// cl_khr_pci_bus_info, cl_nv_device_attribute_query).
const (
	clDeviceUUIDKHR       = 0x106A
	clDevicePCIBusInfoKHR = 0x410F
	clDevicePCIBusIDNV    = 0x4008
	clDevicePCISlotIDNV   = 0x4009
	clDevicePCIDomainIDNV = 0x400A
)

// UUID reads cl_khr_device_uuid's UUID: "GPU-xxxxxxxx-…" as NVML writes
// it for an NVIDIA device, the bare 8-4-4-4-12 form otherwise; "" when
// the device lacks the extension or the query fails.
func (d Device) UUID() string {
	if !d.info.HasExtension("cl_khr_device_uuid") {
		return ""
	}
	b, err := infoBytes("clGetDeviceInfo", cl.getDeviceInfo, d.id, clDeviceUUIDKHR)
	if err != nil || len(b) != 16 {
		return ""
	}
	u := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	if strings.Contains(strings.ToUpper(d.info.Vendor), "NVIDIA") {
		u = "GPU-" + u
	}
	return u
}

// PCIBusID reads the device's PCI address (cl_khr_pci_bus_info, else
// cl_nv_device_attribute_query) as "DDDDDDDD:BB:DD.F" (NVML's form), or
// "" when the device does not report it.
func (d Device) PCIBusID() string {
	switch {
	case d.info.HasExtension("cl_khr_pci_bus_info"):
		b, err := infoBytes("clGetDeviceInfo", cl.getDeviceInfo, d.id, clDevicePCIBusInfoKHR)
		if err != nil || len(b) != 16 {
			return ""
		}
		u := func(i int) uint32 { return binary.NativeEndian.Uint32(b[4*i:]) }
		return fmt.Sprintf("%08X:%02X:%02X.%X", u(0), u(1), u(2), u(3))
	case d.info.HasExtension("cl_nv_device_attribute_query"):
		num := func(param uintptr) (uint64, bool) {
			v, err := infoUint("clGetDeviceInfo", cl.getDeviceInfo, d.id, param, unsafe.Sizeof(uint32(0)))
			return v, err == nil
		}
		bus, ok1 := num(clDevicePCIBusIDNV)
		slot, ok2 := num(clDevicePCISlotIDNV)
		if !ok1 || !ok2 {
			return ""
		}
		dom, _ := num(clDevicePCIDomainIDNV) // older drivers lack it: domain 0
		return fmt.Sprintf("%08X:%02X:%02X.%X", dom, bus, slot>>3, slot&7)
	}
	return ""
}
