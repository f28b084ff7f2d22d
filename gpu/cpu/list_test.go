package cpu_test

import (
	"context"
	"errors"
	"math"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
)

// listFunc is a gpu.List of a function.
type listFunc func(p gpu.Progress)

func (f listFunc) Run(p gpu.Progress) { f(p) }

// A list takes n sequence numbers: it starts after its gate and after the
// work queued before it, its publishes move the stream's count, events
// recorded after it fire once it is whole, and another stream's wait on a
// point inside it is satisfied by the publish that reaches it.
func TestListSequenceAndProgress(t *testing.T) {
	d := newCPU(t, 2)
	s0, s1 := d.Stream(0).(gpu.Lister), d.Stream(1).(gpu.Lister)
	var order []string
	require.NoError(t, s0.Launch(gpu.TaskFunc(func() { order = append(order, "task") })))
	gate := new(gpu.HostEvent)
	mid := make(chan struct{})
	release := make(chan struct{})
	c0, first, err := s0.EnqueueList(gate, 4, listFunc(func(p gpu.Progress) {
		order = append(order, "list")
		next, err := p.Publish(0)
		assert.Equal(t, uint64(math.MaxUint64), next, "the CPU device asks for no extra publishes")
		assert.NoError(t, err)
		_, _ = p.Publish(2)
		close(mid)
		<-release
	}))
	require.NoError(t, err)
	assert.Equal(t, uint64(1), first, "one task queued before the list")
	after := s0.Record()
	// Stream 1 waits for the list's second step.
	seen := make(chan uint64, 1)
	_, _, err = s1.EnqueueList(nil, 1, listFunc(func(gpu.Progress) {
		n, err := c0.WaitFor(context.Background(), first+2)
		assert.NoError(t, err)
		seen <- n
	}))
	require.NoError(t, err)
	cctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err = c0.WaitFor(cctx, first+1)
	assert.ErrorIs(t, err, context.Canceled, "the gate holds the list")
	gate.Set()
	<-mid
	assert.GreaterOrEqual(t, <-seen, first+2)
	assert.Equal(t, first+2, c0.Load(), "the list's publish is the stream's count")
	assert.False(t, after.Done(), "an event after the list waits for all of it")
	close(release)
	require.NoError(t, after.Wait(t.Context()))
	assert.Equal(t, first+4, c0.Load())
	require.NoError(t, s0.Synchronize(t.Context()))
	assert.Equal(t, []string{"task", "list"}, order)
}

// A list whose work ends its goroutine (runtime.Goexit) is run again on a
// new worker, with the same Progress, and resumes; a panic escaping a list
// is Synchronize's error and the list counts as complete.
func TestListGoexitResumesAndPanicReports(t *testing.T) {
	d := newCPU(t, 1)
	s := d.Stream(0).(gpu.Lister)
	calls, step := 0, 0
	var progs []gpu.Progress
	c, _, err := s.EnqueueList(nil, 3, listFunc(func(p gpu.Progress) {
		calls++
		progs = append(progs, p)
		for step < 3 {
			step++
			_, _ = p.Publish(uint64(step))
			if step == 2 && calls == 1 {
				runtime.Goexit()
			}
		}
	}))
	require.NoError(t, err)
	_, _, err = s.EnqueueList(nil, 2, listFunc(func(gpu.Progress) { panic("boom") }))
	require.NoError(t, err)
	err = s.Synchronize(t.Context())
	var pe *gpu.PanicError
	require.True(t, errors.As(err, &pe), "got %v", err)
	assert.Equal(t, "boom", pe.Value)
	assert.Equal(t, 2, calls, "Run called again after Goexit")
	assert.Equal(t, 3, step)
	assert.Same(t, progs[0], progs[1], "the same Progress on the second call")
	assert.Equal(t, uint64(5), c.Load())
}

// EnqueueList refuses an empty or nil list, and after Close.
func TestListRefused(t *testing.T) {
	d := newCPU(t, 1)
	s := d.Stream(0).(gpu.Lister)
	_, _, err := s.EnqueueList(nil, 0, listFunc(func(gpu.Progress) {}))
	assert.ErrorContains(t, err, "empty list")
	_, _, err = s.EnqueueList(nil, 1, nil)
	assert.ErrorContains(t, err, "nil")
	require.NoError(t, d.Close())
	_, _, err = s.EnqueueList(nil, 1, listFunc(func(gpu.Progress) {}))
	assert.ErrorIs(t, err, gpu.ErrClosed)
}

// A list held by a gate that never fires runs once Close gives up on it.
func TestListGateGivenUpAtClose(t *testing.T) {
	d := newCPU(t, 1)
	s := d.Stream(0).(gpu.Lister)
	ran := false
	_, _, err := s.EnqueueList(new(gpu.HostEvent), 1, listFunc(func(gpu.Progress) { ran = true }))
	require.NoError(t, err)
	require.NoError(t, d.Close())
	assert.True(t, ran)
}
