package gpu

import (
	"context"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// OpenConfig configures Open. The zero value discovers the host's GPUs
// through the system NVML library and owns all of them.
type OpenConfig struct {
	// NVML replaces the system NVML library (tests pass go-nvml's mocks,
	// or gpu/nvmlmock's filled ones); nil means nvml.New().
	NVML nvml.Interface
	// Backend is passed to NewBackend; when its Devices is nil, the
	// discovered inventory's devices are used.
	Backend BackendConfig
}

// Open is what an executor calls to get its GPUs: it runs Discover (never
// failing: on a CPU-only host, or without the NVIDIA library, the
// inventory is the CPU device alone and says why) and then NewBackend
// over the discovered GPUs. On a CPU-only host the backend owns zero GPUs:
// NumGPUs is 0 and Claim returns ErrNoGPU at once, so the caller runs on
// the CPU device (NewCPU) with no special case. Backend.Inventory returns
// what Discover found, including its Notes.
//
// Errors are NewBackend's (ErrBackendAlreadyLive while another backend of
// the process is live or draining). The caller must close the backend
// (CloseAndWait) when done.
func Open(ctx context.Context, cfg OpenConfig) (*Backend, error) {
	inv := Discover(ctx, WithNVML(cfg.NVML))
	bc := cfg.Backend
	if bc.Devices == nil {
		bc.Devices = inv.Devices
	}
	b, err := NewBackend(bc)
	if err != nil {
		return nil, err
	}
	b.inv = inv
	return b, nil
}
