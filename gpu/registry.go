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
	GPUs []topology.Device
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
	driversMu.RLock()
	d, ok := drivers[kind]
	driversMu.RUnlock()
	if !ok {
		return nil, fmt.Errorf("gpu: no driver %q registered (registered: %v; import its package, e.g. gpu/%s)", kind, Drivers(), kind)
	}
	return d.Open(ctx, cfg)
}
