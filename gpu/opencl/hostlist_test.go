package opencl_test

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cl"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cltest"
)

type listFunc func(p gpu.Progress)

func (f listFunc) Run(p gpu.Progress) { f(p) }

// A list on an OpenCL stream runs on the stream's host worker once its
// gate fires; the commands it enqueues run on the device as it enqueues
// them (it can wait for them: the list holds nothing on the queue), its
// publishes are the stream's list count, and after Close it is refused.
func TestDeviceListRunsAndEnqueues(t *testing.T) {
	d := newDevice(t, 1)
	p := devProgram(t, d)
	const n = 64
	a := alloc(t, d, 4*n)
	s := codeStream(d, 0)
	ls, ok := s.(gpu.Lister)
	require.True(t, ok, "an OpenCL stream takes lists")
	got := make([]int32, n)
	gate := new(gpu.HostEvent)
	done := make(chan error, 1)
	c, first, err := ls.EnqueueList(gate, 3, listFunc(func(pr gpu.Progress) {
		next, err := pr.Publish(0)
		if err != nil || next != math.MaxUint64 {
			done <- err
			return
		}
		if _, err := s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "produce", Global: []int{n},
			Args: []gpu.KernelArg{mem(a), scalar(int32(7)), scalar(int64(100))}}); err != nil {
			done <- err
			return
		}
		if _, err := s.CopyOut(cltest.BytesOf(got), a, 0); err != nil {
			done <- err
			return
		}
		_, _ = pr.Publish(1)
		done <- s.Record().Wait(context.Background())
		_, _ = pr.Publish(2)
	}))
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c.WaitFor(cctx, first+1)
	assert.ErrorIs(t, err, context.Canceled, "the gate holds the list")
	gate.Set()
	require.NoError(t, <-done)
	_, err = c.WaitFor(t.Context(), first+3)
	require.NoError(t, err)
	for i, g := range got {
		require.Equal(t, int32(7), g, "element %d", i)
	}
	require.NoError(t, s.Synchronize(t.Context()))
	assert.Equal(t, uint64(0), first, "a list counts from 0 on a counter of its own")
	held := new(gpu.HostEvent)
	c2, _, err := ls.EnqueueList(held, 1, listFunc(func(gpu.Progress) {}))
	require.NoError(t, err)
	c3, _, err := ls.EnqueueList(nil, 1, listFunc(func(gpu.Progress) {}))
	require.NoError(t, err)
	_, err = c3.WaitFor(t.Context(), 1)
	require.NoError(t, err, "a list does not wait for the one queued before it")
	assert.Equal(t, uint64(0), c2.Load())
	held.Set()
	_, _, err = ls.EnqueueList(nil, 0, listFunc(func(gpu.Progress) {}))
	assert.ErrorContains(t, err, "empty list")
	require.NoError(t, d.Close())
	assert.Equal(t, uint64(1), c2.Load(), "Close waits for the lists")
	_, _, err = ls.EnqueueList(nil, 1, listFunc(func(gpu.Progress) {}))
	assert.ErrorIs(t, err, gpu.ErrClosed)
}

// A lost OpenCL device takes a list queued after its loss: EnqueueList
// succeeds, the list runs, its Publish answers the loss, and the counter
// reaches the list's end once it returns.
func TestLostDeviceTakesLists(t *testing.T) {
	d := newDevice(t, 1)
	loss := opencl.ReportForTest(d, &cl.CommandError{Device: "dev", Queue: 0, Seq: 1, Op: "launch k", Status: cl.OutOfResources})
	require.ErrorIs(t, loss, gpu.ErrDeviceLost)
	ls := codeStream(d, 0).(gpu.Lister)
	var errs [2]error
	c, first, err := ls.EnqueueList(nil, 2, listFunc(func(p gpu.Progress) {
		_, errs[0] = p.Publish(0)
		_, errs[1] = p.Publish(1)
	}))
	require.NoError(t, err, "a lost device takes lists")
	_, err = c.WaitFor(t.Context(), first+2)
	require.NoError(t, err)
	for i, err := range errs {
		assert.ErrorIs(t, err, gpu.ErrDeviceLost, "publish %d", i)
		assert.ErrorContains(t, err, "queue 0 command 1 (launch k) failed: CL_OUT_OF_RESOURCES", "publish %d: the device's loss", i)
	}
}
