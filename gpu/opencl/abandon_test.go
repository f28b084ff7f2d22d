package opencl_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cltest"
)

func init() { children["device-abandon"] = childAbandon }

// childAbandon launches a kernel that never ends, abandons the device and
// prints what later work and Close return (the stuck kernel's thread and
// the device's goroutines are left to the process's exit).
func childAbandon() int {
	ds, err := opencl.Devices()
	if err != nil || len(ds) == 0 {
		say("setup: %v", err)
		return 2
	}
	d, err := opencl.NewDevice(ds[0], opencl.WithCloseWait(100*time.Millisecond))
	if err != nil {
		say("setup: %v", err)
		return 2
	}
	p, err := d.Program("stuck", `__kernel void stuck(volatile __global const int *flag) { while (flag[0] == 0) {} }`, "")
	if err != nil {
		say("setup: %v", err)
		return 2
	}
	m, err := d.Alloc(4)
	if err != nil {
		say("setup: %v", err)
		return 2
	}
	s := d.Stream(0).(gpu.CodeStream)
	_ = errOf(s.Fill(m, 0, 4, []byte{0, 0, 0, 0}))
	_ = errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "stuck", Global: []int{1}, Args: []gpu.KernelArg{{Mem: m}}}))
	ev := s.Record()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	say("wait: %v", errors.Is(ev.Wait(ctx), context.DeadlineExceeded))
	d.(gpu.Abandoner).Abandon(errors.New("given up on it"))
	err = errOf(s.Fill(m, 0, 4, []byte{1, 0, 0, 0}))
	say("fill after: lost %v: %s", errors.Is(err, gpu.ErrDeviceLost), cltest.ErrString(err))
	_, err = d.Alloc(4)
	say("alloc after: lost %v", errors.Is(err, gpu.ErrDeviceLost))
	err = d.Close()
	say("close: lost %v: %s", errors.Is(err, gpu.ErrDeviceLost), cltest.ErrString(err))
	err = d.Close()
	say("close again: lost %v", errors.Is(err, gpu.ErrDeviceLost))
	return 0
}

// TestDeviceAbandon: once abandoned, a device whose kernel never ends
// refuses later work with an error wrapping gpu.ErrDeviceLost and the cause,
// and Close returns such an error after its close wait instead of
// waiting for the kernel (in a subprocess: the stuck thread is leaked).
func TestDeviceAbandon(t *testing.T) {
	out, err := runChild(t, "device-abandon")
	require.NoError(t, err, out)
	assert.Contains(t, out, "wait: true\n")
	assert.Contains(t, out, "fill after: lost true: opencl: opencl0: gpu: device lost: given up on it\n")
	assert.Contains(t, out, "alloc after: lost true\n")
	assert.Contains(t, out, "close: lost true: opencl: opencl0: close: commands still running 100ms after the device was abandoned, leaked: ")
	assert.Contains(t, out, "close again: lost true\n")
}

// WithCloseWait takes a positive wait.
func TestDeviceCloseWaitBadInput(t *testing.T) {
	_, err := opencl.NewDevice(device(t), opencl.WithCloseWait(0))
	assert.ErrorContains(t, err, "opencl: WithCloseWait(0s): the wait must be positive")
}
