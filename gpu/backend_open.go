package gpu

import (
	"context"
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// OpenConfig configures Open. The zero value discovers the host's GPUs
// through the system NVML library and owns all of them.
type OpenConfig struct {
	// NVML replaces the system NVML library (tests pass go-nvml's mocks,
	// or gpu/nvmlmock's filled ones); nil means nvml.New().
	NVML nvml.Interface
	// Backend is passed to NewBackend; when its Devices is nil, the
	// discovered inventory's devices are used, and when its HealthCheck
	// is nil and NVML answered, NVMLCheck over the same library is used,
	// so a GPU NVML reports lost after discovery is never leased.
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
	lib := cfg.NVML
	if lib == nil {
		lib = nvml.New()
	}
	inv := Discover(ctx, WithNVML(lib))
	bc := cfg.Backend
	if bc.Devices == nil {
		bc.Devices = inv.Devices
	}
	if bc.HealthCheck == nil && inv.NVML.Available {
		bc.HealthCheck = NVMLCheck(lib)
	}
	b, err := NewBackend(bc)
	if err != nil {
		return nil, err
	}
	b.inv = inv
	return b, nil
}

// Acquired is the device a run executes on, from Backend.Acquire.
type Acquired struct {
	// Device runs the launches.
	Device Device
	// Lease is the GPU lease the run holds, or nil when it runs on the
	// CPU device.
	Lease *Lease
	// Why says, when Device is the CPU device, why no GPU is used.
	Why string
}

// Release closes the device and releases the lease. It is idempotent.
func (a *Acquired) Release() {
	if a.Device != nil {
		_ = a.Device.Close()
		a.Device = nil
	}
	a.Lease.Release()
}

// Acquire gives a run its device through the backend, the same way on
// every host: it claims a GPU lease (FIFO, waiting while every GPU is
// leased), and runs on that GPU. streamdag has no CUDA stream runtime
// yet, so a claimed lease is released at once and the run goes to the
// CPU device, saying so in Why; on a CPU-only host Claim answers ErrNoGPU
// at once (and, once every GPU is lost, with the reasons, which Why gives)
// and the run goes to the CPU device too. opts configure the CPU
// device. Errors: ErrBackendClosing, ctx.Err(), or NewCPU's option errors.
func (b *Backend) Acquire(ctx context.Context, opts ...CPUOption) (*Acquired, error) {
	a := &Acquired{}
	lease, err := b.Claim(ctx)
	switch {
	case errors.Is(err, ErrGPULost):
		a.Why = err.Error()
	case errors.Is(err, ErrNoGPU):
		a.Why = "no GPU: " + b.inv.NVML.String()
	case err != nil:
		return nil, err
	default:
		a.Why = fmt.Sprintf("%s leased, but GPU execution is not implemented yet (no CUDA stream runtime): running on the CPU device", lease.Device().ID)
		lease.Release()
	}
	dev, err := NewCPU(opts...)
	if err != nil {
		return nil, err
	}
	a.Device = dev
	return a, nil
}
