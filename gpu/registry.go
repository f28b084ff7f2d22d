package gpu

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/streamdag/streamdag/topology"
)

// Option configures how a driver opens its devices (Open, a lease
// backend's Acquire). An option given bad input returns an error, which
// the call returns prefixed with "gpu: ", opening nothing; nil options are
// skipped.
type Option func(*Config) error

// Config is what a driver is asked to open its devices with: the options
// of one call, applied in order (NewConfig). The zero value asks for the
// driver's defaults. A driver gets its own copy (Driver.Open,
// Enumerator.OpenDevice) and must not modify Settings' elements; a Config
// only read is safe for concurrent use.
type Config struct {
	// Streams is the number of streams asked for on each device opened
	// (WithStreams); 0 asks for the driver's default.
	Streams int
	// Settings are the driver settings given (WithDriverSetting), in the
	// order given; nil when none was. Open has already refused a setting
	// whose DriverKind is not the kind it opens, and a lease backend passes
	// none, so a driver sees only its own kind's.
	Settings []DriverSetting
}

// DriverSetting is a setting that only the driver of one kind takes: a
// driver package offers constructors of its own settings that return
// WithDriverSetting of one (sim.WithSimulation). Open refuses a setting
// whose DriverKind is not the kind it opens, naming both.
type DriverSetting interface {
	// DriverKind returns the kind of the driver that takes the setting.
	DriverKind() string
}

// WithStreams asks for n streams on each device opened (default: the
// driver's; the CPU device's is runtime.GOMAXPROCS(0)). A driver returns
// an error naming a count it cannot give. Errors: n < 1.
func WithStreams(n int) Option {
	return func(c *Config) error {
		if n < 1 {
			return fmt.Errorf("WithStreams(%d): want at least 1 stream", n)
		}
		c.Streams = n
		return nil
	}
}

// WithDriverSetting passes s to the driver of s.DriverKind(); driver
// packages wrap it in constructors of their own settings. Errors: a nil
// s, or one whose DriverKind is empty.
func WithDriverSetting(s DriverSetting) Option {
	return func(c *Config) error {
		if s == nil || s.DriverKind() == "" {
			return errors.New("WithDriverSetting: nil setting or no driver kind")
		}
		c.Settings = append(c.Settings, s)
		return nil
	}
}

// NewConfig applies opts in order and returns the Config they describe,
// or the first option's error prefixed with "gpu: ". It does not check
// which driver the driver settings are for (Open does).
func NewConfig(opts ...Option) (Config, error) {
	var c Config
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&c); err != nil {
			return Config{}, fmt.Errorf("gpu: %w", err)
		}
	}
	return c, nil
}

// forDriver returns an error naming kind and the first driver setting of
// c that is not of kind, nil when every setting is.
func forDriver(c Config, kind string) error {
	for _, s := range c.Settings {
		if k := s.DriverKind(); k != kind {
			return fmt.Errorf("gpu: a setting of driver %q (%T) given to driver %q", k, s, kind)
		}
	}
	return nil
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
	// Open opens the kind's devices as cfg says (its driver settings, if
	// any, are the kind's own: Open has refused others). The caller owns the
	// Set and must Close it. Errors name the kind and what was wrong;
	// nothing is left running after an error.
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

// Open opens the devices of the driver registered under kind, configured
// by opts. Errors: an option's error; no driver of that kind (the message
// lists the registered ones and says to import the kind's package); a
// driver setting of another kind ("gpu: a setting of driver "sim" (…)
// given to driver "cpu""); or the driver's own. Safe for concurrent use.
func Open(ctx context.Context, kind string, opts ...Option) (Set, error) {
	cfg, err := NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	d, err := Lookup(kind)
	if err != nil {
		return nil, err
	}
	if err := forDriver(cfg, kind); err != nil {
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
	// lease.WithLeaseTypes names).
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
