package gpu

import (
	"context"
	"errors"
	"fmt"
)

// Acquired is the device a run executes on, from Backend.Acquire.
type Acquired struct {
	// Device runs the launches.
	Device Device
	// Lease is the GPU lease the run holds, or nil when it runs on the
	// CPU device.
	Lease *Lease
	// Why says, when Device is the CPU device, why no GPU is used.
	Why string

	set Set // what Device came from; closed by Release
}

// Release closes the device and releases the lease. It is idempotent.
func (a *Acquired) Release() {
	if a.set != nil {
		_ = a.set.Close()
		a.set, a.Device = nil, nil
	}
	a.Lease.Release()
}

// Acquire gives a run its device through the backend, the same way on
// every host: it claims a GPU lease (FIFO, waiting while every GPU is
// leased), and runs on that GPU. streamdag has no CUDA stream runtime
// yet, so a claimed lease is released at once and the run goes to the
// CPU device, saying so in Why; on a CPU-only host Claim answers ErrNoGPU
// at once (and, once every GPU is lost, with the reasons, which Why gives)
// and the run goes to the CPU device too. The CPU device is opened with
// Open(ctx, "cpu", cfg), so the driver of package gpu/cpu must be
// registered (import it). Errors: ErrBackendClosing, ctx.Err(), or the
// CPU driver's (an unregistered driver, a bad cfg.Streams).
func (b *Backend) Acquire(ctx context.Context, cfg Config) (*Acquired, error) {
	a := &Acquired{}
	lease, err := b.Claim(ctx)
	switch {
	case errors.Is(err, ErrGPULost):
		a.Why = err.Error()
	case errors.Is(err, ErrNoGPU):
		src := b.cfg.Source
		if src == "" {
			src = "devices not discovered (NewBackend)"
		}
		a.Why = "no GPU: " + src
	case err != nil:
		return nil, err
	default:
		a.Why = fmt.Sprintf("%s leased, but GPU execution is not implemented yet (no CUDA stream runtime): running on the CPU device", lease.Device().ID)
		lease.Release()
	}
	set, err := Open(ctx, "cpu", cfg)
	if err != nil {
		return nil, err
	}
	a.set, a.Device = set, set.Devices()[0]
	return a, nil
}
