package lease

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/streamdag/streamdag/gpu"
)

// Acquired is the device a run executes on, from Backend.Acquire.
type Acquired struct {
	// Device runs the launches: the leased device opened by its driver
	// (an OpenCL device is a CodeDevice), or the CPU device.
	Device gpu.Device
	// Claim is the lease the run holds while it uses Device, or nil when
	// it runs on the CPU device.
	Claim *Claim
	// Why says what the run runs on: the leased device and how it is
	// driven, or, on the CPU device, why no leased device is used.
	Why string

	once  sync.Once
	close func() error // closes Device
}

// Release closes the device (waiting for the work queued on it) and then
// releases the lease, so the next claimer gets a device no run still
// uses. It returns the device's Close error (work that failed on the
// device, say); the lease is released either way. It is idempotent:
// later calls do nothing and return nil. Safe for concurrent use; it must
// not be called from a task of the device.
func (a *Acquired) Release() error {
	var err error
	a.once.Do(func() {
		if a.close != nil {
			err = a.close()
		}
		a.Claim.Release()
	})
	return err
}

// Acquire gives a run its device through the backend, the same way on
// every host. It claims a lease (Claim: FIFO, waiting while every device
// of the pool is leased) and opens the leased device with the driver
// that found it (a gpu.Enumerator of WithDrivers), with opts: an
// OpenCL device, or an NVML GPU that an OpenCL driver lists too (the
// same UUID or PCI bus ID). The Acquired holds the lease until Release.
//
// The run goes to the CPU device, with Why saying so and why, and no
// lease held, when: the backend has no device (Claim's ErrNoGPU, at
// once; with the reasons once every device is lost); the leased device
// is an NVML GPU no registered driver runs (streamdag has no CUDA
// driver, and no OpenCL driver lists it); or its driver fails to open it
// (the error is in Why). The CPU device is opened with gpu.Open(ctx,
// "cpu", opts...), so the driver of package gpu/cpu must be registered
// (import it) for those cases. The same opts reach whichever driver opens
// the device, so they hold no driver setting (gpu.WithDriverSetting): a
// driver's own settings go to gpu.Open.
//
// Errors, before anything is claimed: an option's error, a driver setting
// ("lease: Acquire: a driver setting of sim: …"). Then ErrBackendClosing,
// ctx.Err() (no lease is held after either), or the CPU driver's (an
// unregistered driver, a stream count it cannot give).
func (b *Backend) Acquire(ctx context.Context, opts ...gpu.Option) (*Acquired, error) {
	cfg, err := gpu.NewConfig(opts...)
	if err != nil {
		return nil, err
	}
	if s := cfg.Settings; len(s) > 0 {
		return nil, fmt.Errorf("lease: Acquire: a driver setting of %s (%T): the leased device's driver is not known in advance; give driver settings to gpu.Open", s[0].DriverKind(), s[0])
	}
	a := &Acquired{}
	cl, err := b.Claim(ctx)
	switch {
	case errors.Is(err, gpu.ErrDeviceLost):
		a.Why = err.Error()
	case errors.Is(err, ErrNoGPU):
		src := b.cfg.source
		if src == "" {
			src = "devices not discovered (lease.New)"
		}
		a.Why = "no GPU: " + src
		if len(b.notes) > 0 {
			a.Why += "; " + strings.Join(b.notes, "; ")
		}
	case err != nil:
		return nil, err
	default:
		d := cl.Device()
		r, ok := b.routes[d.ID]
		if !ok {
			a.Why = fmt.Sprintf("%s (%s) leased, but no registered driver runs it (no CUDA device yet; no OpenCL driver lists a GPU with its UUID or PCI bus ID): running on the CPU device", d.ID, d.Name)
			cl.Release()
			break
		}
		dev, err := callOpenDevice(ctx, r, cfg)
		if err != nil {
			cl.Release()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			a.Why = fmt.Sprintf("%s (%s) leased, but driver %s could not open it: %v: running on the CPU device", d.ID, d.Name, r.kind, err)
			break
		}
		a.Device, a.Claim, a.close = dev, cl, dev.Close
		a.Why = fmt.Sprintf("%s (%s) leased", d.ID, d.Name)
		if d.Vendor != "" {
			a.Why = fmt.Sprintf("%s (%s, %s) leased", d.ID, d.Name, d.Vendor)
		}
		if dev.ID() != d.ID {
			a.Why += fmt.Sprintf(", run through %s as %s", r.kind, dev.ID())
		}
		return a, nil
	}
	set, err := gpu.Open(ctx, "cpu", opts...)
	if err != nil {
		return nil, err
	}
	a.Device, a.close = set.Devices()[0], set.Close
	return a, nil
}

// callOpenDevice opens r's device, turning a panic of the driver into an
// error.
func callOpenDevice(ctx context.Context, r route, cfg gpu.Config) (d gpu.Device, err error) {
	defer func() {
		if p := recover(); p != nil {
			d, err = nil, fmt.Errorf("open device: panic: %v", p)
		}
	}()
	d, err = r.drv.OpenDevice(ctx, r.found, cfg)
	if err == nil && d == nil {
		err = errors.New("open device: the driver returned no device")
	}
	return d, err
}
