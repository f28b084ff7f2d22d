package nvml

import (
	"context"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/streamdag/streamdag/gpu"
)

// OpenConfig configures Open. The zero value discovers the host's GPUs
// through the system NVML library and owns all of them.
type OpenConfig struct {
	// Library replaces the system NVML library (tests pass go-nvml's
	// mocks, or gpu/nvml/nvmlmock's filled ones); nil means go-nvml's
	// New().
	Library gonvml.Interface
	// Backend is passed to gpu.NewBackend; when its Devices is nil, the
	// discovered inventory's devices are used; when its HealthCheck is nil
	// and NVML answered, HealthCheck over the same library is used, so a
	// GPU NVML reports lost after discovery is never leased; when its
	// Source is "", the inventory's NVML status is used.
	Backend gpu.BackendConfig
}

// Open is what an executor calls to get its devices: it runs Discover
// (never failing: on a CPU-only host, or without the NVIDIA library, the
// inventory is the CPU device alone and says why) and then gpu.NewBackend
// over the discovered GPUs and, as cfg.Backend.Drivers says (nil: every
// registered gpu.Enumerator, such as gpu/opencl's when that package is
// imported), the devices the drivers list. A GPU an OpenCL driver lists
// too (the same UUID or PCI bus ID) is run through it by Acquire. On a
// host with no device to lease the backend owns none: NumGPUs is 0 and
// Claim returns gpu.ErrNoGPU at once, so the caller runs on the CPU
// device with no special case. The inventory returned is what
// Discover found, including its Notes; it is returned with the error too.
//
// Errors are gpu.NewBackend's (gpu.ErrBackendAlreadyLive while another
// backend of the process is live or draining); the backend is nil then.
// The caller must close the backend (CloseAndWait) when done.
func Open(ctx context.Context, cfg OpenConfig) (*gpu.Backend, Inventory, error) {
	lib := cfg.Library
	if lib == nil {
		lib = gonvml.New()
	}
	inv := Discover(ctx, WithLibrary(lib))
	bc := cfg.Backend
	if bc.Devices == nil {
		bc.Devices = inv.Devices
	}
	if bc.HealthCheck == nil && inv.NVML.Available {
		bc.HealthCheck = HealthCheck(lib)
	}
	if bc.Source == "" {
		bc.Source = inv.NVML.String()
	}
	b, err := gpu.NewBackend(bc)
	if err != nil {
		return nil, inv, err
	}
	return b, inv, nil
}
