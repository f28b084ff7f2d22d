package exec_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
)

// TestSchedulerOpenCLStreams runs the scheduler's random programs (see
// runSchedulerProgram) on an executor over a CPU device and a real OpenCL
// device: the scheduler's tasks are host code, so the engine places them
// on the device that runs Go functions whatever else the executor has,
// and keeps every stream's order there.
func TestSchedulerOpenCLStreams(t *testing.T) {
	ocl := openCLDevice(t, 3)
	for _, policy := range []exec.FlushPolicy{exec.Sequential, exec.Interleave} {
		for seed := uint64(1); seed <= 2; seed++ {
			t.Run(fmt.Sprintf("policy=%v/seed=%d", policy, seed), func(t *testing.T) {
				runSchedulerProgram(t, cpuAnd(t, 3, ocl), policy, seed)
			})
		}
	}
}

// TestSchedulerOpenCLOnlyExecutor: on an executor of an OpenCL device
// alone nothing runs host tasks, so a run cannot be planned: the call that
// executes it says so, the error is attributed to every logical stream
// with a task in the run (once each), the tasks are dropped and never run,
// and the scheduler goes on.
func TestSchedulerOpenCLOnlyExecutor(t *testing.T) {
	s, err := exec.NewScheduler(exec.MustNew(t, openCLDevice(t, 2)), exec.WithMaxStreams(2))
	require.NoError(t, err)
	ran := false
	task := func(context.Context, dag.Launch) error { ran = true; return nil }
	require.NoError(t, s.Register(0, "a0", task))
	require.NoError(t, s.Register(2, "b2", task))
	require.NoError(t, s.Register(1, "a1", task))
	err = s.ExecuteStreams(0, 1)
	require.Error(t, err)
	assert.ErrorContains(t, err, "exec: run of streams [0 2 1]")
	for _, id := range []exec.StreamID{0, 2, 1} {
		require.Len(t, s.Errors(id), 1, "stream %d", id)
	}
	assert.Empty(t, s.Errors(3))
	require.NoError(t, s.ExecuteStreams(0, 1), "the failed tasks were dropped")
	ev, err := s.Record(0)
	require.NoError(t, err)
	var _ gpu.Event = ev
	assert.True(t, ev.Done(), "no run: the stream's event has fired")
	require.NoError(t, s.Close(t.Context()))
	assert.False(t, ran)
}
