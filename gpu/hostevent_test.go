package gpu_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
)

// TestHostEventZeroValue: the zero value is an event that has not fired
// (Done false, Wait gives up with ctx's error); Set fires it once, after
// which Done is true and Wait returns nil, even under a done ctx.
func TestHostEventZeroValue(t *testing.T) {
	var e gpu.HostEvent
	assert.False(t, e.Done())
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, e.Wait(ctx), context.Canceled)
	e.Set()
	e.Set()
	assert.True(t, e.Done())
	assert.NoError(t, e.Wait(ctx))

	set := new(gpu.HostEvent)
	set.Set()
	assert.True(t, set.Done(), "Set as the first call")
}

// TestHostEventConcurrent: waiters and pollers racing a Set on a zero
// HostEvent all see it fire.
func TestHostEventConcurrent(t *testing.T) {
	e := &gpu.HostEvent{}
	const n = 8
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = e.Done()
			errs[i] = e.Wait(t.Context())
		}()
	}
	e.Set()
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "waiter %d", i)
	}
	assert.True(t, e.Done())
}
