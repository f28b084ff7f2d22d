package lease

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// The device types of gpu.Found.Type.
var foundTypes = []string{"gpu", "cpu", "accelerator", "custom"}

// discovered is what New learned from the drivers of
// WithDrivers.
type discovered struct {
	profiles []DeviceProfile // the found devices that get a slot, slot order
	routes   map[topology.DeviceID]route
	notes    []string
}

// discover asks cfg's drivers for their devices (cfg is validated; gpus
// are the profiles of WithDevices' GPUs). Errors: an unknown driver, or
// one that is no gpu.Enumerator. What a driver gets
// wrong (an error, a device whose ID another device has, a negative
// index or memory) leaves its devices out and becomes a note.
func discover(cfg *settings, gpus []DeviceProfile) (discovered, error) {
	out := discovered{routes: map[topology.DeviceID]route{}}
	kinds := cfg.drivers
	if kinds == nil {
		kinds = enumeratorKinds()
	}
	types := cfg.leaseTypes
	if types == nil {
		types = []string{"gpu"}
	}
	seen := map[topology.DeviceID]string{}
	for _, p := range gpus {
		seen[p.Device.ID] = "lease.WithDevices"
	}
	for _, kind := range kinds {
		drv, err := enumerator(kind)
		if err != nil {
			return out, fmt.Errorf("lease: WithDrivers: %w", err)
		}
		fs, err := callEnumerate(drv)
		if err != nil {
			out.notes = append(out.notes, fmt.Sprintf("%s: %v", kind, err))
			continue
		}
		if len(fs) == 0 {
			out.notes = append(out.notes, kind+": no device")
		}
		for _, f := range fs {
			d := f.Device
			if gi := slices.IndexFunc(gpus, func(p DeviceProfile) bool { return sameDevice(p.Device, d) }); gi >= 0 {
				g := gpus[gi].Device.ID
				if _, dup := out.routes[g]; !dup {
					out.routes[g] = route{kind: kind, drv: drv, found: f}
					out.notes = append(out.notes, fmt.Sprintf("%s: %s (%s) is %s", kind, d.ID, d.Name, g))
				}
				continue
			}
			switch {
			case d.ID.Kind == topology.KindCPU:
				out.notes = append(out.notes, fmt.Sprintf("%s: %s (%s) is the CPU device: not leased", kind, d.ID, d.Name))
				continue
			case !slices.Contains(types, f.Type):
				out.notes = append(out.notes, fmt.Sprintf("%s: %s (%s) is a %s device: not leased (lease.WithLeaseTypes %v)", kind, d.ID, d.Name, f.Type, types))
				continue
			}
			if by, dup := seen[d.ID]; dup {
				out.notes = append(out.notes, fmt.Sprintf("%s: %s (%s) not leased: %s has a device with that ID", kind, d.ID, d.Name, by))
				continue
			}
			seen[d.ID] = "driver " + kind
			if d.ID.Index < 0 || d.MemoryBytes < 0 {
				out.notes = append(out.notes, fmt.Sprintf("%s: %s (%s) not leased: negative index or memory", kind, d.ID, d.Name))
				continue
			}
			d.CPUAffinity = append([]int(nil), d.CPUAffinity...)
			out.profiles = append(out.profiles, DeviceProfile{Device: d, Streams: cfg.streams})
			out.routes[d.ID] = route{kind: kind, drv: drv, found: f}
		}
	}
	return out, nil
}

// enumerator returns the driver registered under kind as a
// gpu.Enumerator. Errors: gpu.Lookup's (no driver of that kind), or one
// that does not implement gpu.Enumerator.
func enumerator(kind string) (gpu.Enumerator, error) {
	d, err := gpu.Lookup(kind)
	if err != nil {
		return nil, err
	}
	e, ok := d.(gpu.Enumerator)
	if !ok {
		return nil, fmt.Errorf("driver %q lists no devices to lease (it does not implement gpu.Enumerator)", kind)
	}
	return e, nil
}

// enumeratorKinds returns the kinds of the registered gpu.Enumerators,
// sorted.
func enumeratorKinds() []string {
	var out []string
	for _, k := range gpu.Drivers() {
		if _, err := enumerator(k); err == nil {
			out = append(out, k)
		}
	}
	return out
}

// callEnumerate runs drv.Enumerate, turning a panic into an error.
func callEnumerate(drv gpu.Enumerator) (fs []gpu.Found, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("enumerate: panic: %v", r)
		}
	}()
	return drv.Enumerate(context.Background())
}

// sameDevice reports whether a and b are one device: the same UUID, or
// the same PCI bus ID (each compared when both know it).
func sameDevice(a, b topology.DeviceFacts) bool {
	if u, v := normUUID(a.UUID), normUUID(b.UUID); u != "" && u == v {
		return true
	}
	p, q := normPCI(a.PCIBusID), normPCI(b.PCIBusID)
	return p != "" && p == q
}

// normUUID returns the 32 lower-case hex digits of a UUID written with or
// without NVML's "GPU-" prefix and dashes, or "" when u is not one.
func normUUID(u string) string {
	u = strings.ToLower(strings.TrimPrefix(strings.TrimPrefix(u, "GPU-"), "gpu-"))
	u = strings.ReplaceAll(u, "-", "")
	if len(u) != 32 || strings.Trim(u, "0123456789abcdef") != "" || strings.Trim(u, "0") == "" {
		return ""
	}
	return u
}

// normPCI returns a PCI address "domain:bus:device.function" (the domain
// optional, as NVML and OpenCL drivers write it) in one canonical form,
// or "" when p is not one.
func normPCI(p string) string {
	parts := strings.Split(p, ":")
	if len(parts) == 2 {
		parts = append([]string{"0"}, parts...)
	}
	if len(parts) != 3 {
		return ""
	}
	dev, fn, ok := strings.Cut(parts[2], ".")
	if !ok {
		return ""
	}
	var n [4]uint64
	for i, s := range []string{parts[0], parts[1], dev, fn} {
		v, err := strconv.ParseUint(s, 16, 32)
		if err != nil {
			return ""
		}
		n[i] = v
	}
	return fmt.Sprintf("%x:%x:%x.%x", n[0], n[1], n[2], n[3])
}

// runtimeOf is the default startup record's Runtime of device id.
func (b *Backend) runtimeOf(id topology.DeviceID) string {
	r, ok := b.routes[id]
	switch {
	case !ok:
		return "none"
	case r.found.Device.ID == id:
		return r.kind
	default:
		return r.kind + " " + r.found.Device.ID.String()
	}
}

// Notes says what New learned from the drivers of WithDrivers: a
// driver that found no device and why, a found device that is one of
// Devices' GPUs, one that is not leased and why. It works at any time.
func (b *Backend) Notes() []string { return slices.Clone(b.notes) }
