package gpu

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/streamdag/streamdag/topology"
)

// Config says how a driver opens its devices. The zero value asks each
// driver for its defaults.
type Config struct {
	// Streams is the number of streams of each device opened; 0 means the
	// driver's default (the CPU device: runtime.GOMAXPROCS(0)). A driver
	// returns an error naming a count it cannot give.
	Streams int
	// GPUs are the GPUs a simulating driver models (sim: their IDs and
	// facts, e.g. topology.Topology.GPUs()); drivers of real devices
	// ignore it.
	GPUs []topology.DeviceFacts
	// Driver is settings of the driver's own type (each driver package
	// documents its type: sim takes []sim.Option), nil for the driver's
	// defaults. A driver rejects a type it does not know with an error
	// naming the type, so settings meant for one kind never pass silently
	// to another.
	Driver any
}

// Set is the devices one Open returned, closed together.
type Set interface {
	// Devices returns the devices, in the driver's order (at least one).
	Devices() []Device
	// Close drains and stops every device of the set; it is idempotent.
	Close() error
}

// Driver opens the devices of one kind. A package that implements a kind
// registers its driver in init (as database/sql drivers do), so importing
// the package (gpu/cpu, gpu/sim, …) makes the kind available to Open.
type Driver interface {
	// Open opens the kind's devices as cfg says. The caller owns the Set
	// and must Close it. Errors name the kind and what was wrong; nothing
	// is left running after an error.
	Open(ctx context.Context, cfg Config) (Set, error)
}

var (
	driversMu sync.RWMutex
	drivers   = map[string]Driver{}
)

// Register makes a driver available under kind ("cpu", "sim", …). It is
// meant for a driver package's init. It panics when kind is empty, d is
// nil, or kind is already registered (programmer error, as in
// database/sql). Safe for concurrent use.
func Register(kind string, d Driver) {
	if kind == "" || d == nil {
		panic("gpu: Register: empty kind or nil driver")
	}
	driversMu.Lock()
	defer driversMu.Unlock()
	if _, dup := drivers[kind]; dup {
		panic("gpu: Register called twice for driver " + kind)
	}
	drivers[kind] = d
}

// Drivers returns the registered kinds, sorted. Safe for concurrent use.
func Drivers() []string {
	driversMu.RLock()
	defer driversMu.RUnlock()
	kinds := make([]string, 0, len(drivers))
	for k := range drivers {
		kinds = append(kinds, k)
	}
	slices.Sort(kinds)
	return kinds
}

// Open opens the devices of the driver registered under kind. Errors: no
// driver of that kind (the message lists the registered ones and says to
// import the kind's package), or the driver's own. Safe for concurrent
// use.
func Open(ctx context.Context, kind string, cfg Config) (Set, error) {
	d, err := Lookup(kind)
	if err != nil {
		return nil, err
	}
	return d.Open(ctx, cfg)
}

// Lookup returns the driver registered under kind, for a caller that uses
// more of it than Open (a lease backend asks an Enumerator for its
// devices). Errors: no driver of that kind ("gpu: no driver "kind"
// registered", listing the registered kinds and the package to import).
// Safe for concurrent use.
func Lookup(kind string) (Driver, error) {
	driversMu.RLock()
	d, ok := drivers[kind]
	driversMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("gpu: no driver %q registered (registered: %v; import its package, e.g. gpu/%s)", kind, Drivers(), kind)
	}
	return d, nil
}

// Found is one device an Enumerator lists: its facts, its type and a key
// that finds it again.
type Found struct {
	// Device holds the facts: ID (the driver's ID for it, e.g. opencl1),
	// Name, Vendor, MemoryBytes, Cores, and UUID and PCIBusID when the
	// driver can read them ("" otherwise). A lease backend matches a
	// found device to an NVML GPU by UUID or PCI bus ID.
	Device topology.DeviceFacts
	// Type is what the device is: "gpu", "cpu", "accelerator" or
	// "custom" (an OpenCL device type; the types a lease backend's
	// Config.LeaseTypes names).
	Type string
	// Key identifies the device across Enumerate calls of the same
	// process: its UUID when it has one, else what the driver knows it
	// by (platform, name and position among devices of that name).
	Key string
}

// Enumerator is a Driver that can list its devices without opening them
// and open one of them. A lease backend (package lease) leases the
// devices its drivers' Enumerate lists and opens a leased one with
// OpenDevice. Safe for concurrent use.
type Enumerator interface {
	Driver
	// Enumerate lists the kind's usable devices in the driver's order,
	// starting nothing (no context, queue or goroutine). Errors say why
	// there is none (no library, no platform); a nil error with no device
	// is valid.
	Enumerate(ctx context.Context) ([]Found, error)
	// OpenDevice opens the device f (from Enumerate: found again by
	// f.Key) with cfg.Streams streams (0: the driver's default), with the
	// ID f.Device.ID. The caller owns the device and must Close it.
	// Errors: the device is no longer listed, a bad stream count, the
	// driver's own.
	OpenDevice(ctx context.Context, f Found, cfg Config) (Device, error)
}

// Enumerate lists the devices of the driver registered under kind
// (Enumerator.Enumerate), opening none. Errors: no driver of that kind,
// one that is no Enumerator, or the driver's own (no library, no
// platform). Safe for concurrent use.
func Enumerate(ctx context.Context, kind string) ([]Found, error) {
	d, err := Lookup(kind)
	if err != nil {
		return nil, err
	}
	e, ok := d.(Enumerator)
	if !ok {
		return nil, fmt.Errorf("gpu: enumerate: driver %q lists no devices (it does not implement gpu.Enumerator)", kind)
	}
	return e.Enumerate(ctx)
}
