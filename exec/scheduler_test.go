package exec_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
)

// runLog collects the scheduler's trace: one line per run it starts,
// "#3 s1[a b] s0[c] after #1 #2" (see exec.TraceScheduler).
type runLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *runLog) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, line)
}

// take returns the lines logged since the previous take.
func (l *runLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

// newCPUScheduler returns a scheduler over an executor of a CPU device
// with as many streams as the scheduler has slots, tracing its runs into
// the returned log. Cleanup closes the scheduler, then the device.
func newCPUScheduler(t *testing.T, slots int, opts ...exec.SchedulerOption) (*exec.Scheduler, *runLog) {
	t.Helper()
	dev, err := cpu.New(cpu.WithStreams(slots))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.Close()) })
	s, err := exec.NewScheduler(exec.MustNew(t, dev, exec.WithAllocator(leaktest.Allocator(t))), append([]exec.SchedulerOption{exec.WithMaxStreams(slots)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close(context.Background())) })
	log := &runLog{}
	exec.TraceScheduler(s, log.add)
	return s, log
}

// gated returns a task that waits for the returned gate to be closed.
func gated() (dag.KernelFunc, chan struct{}) {
	gate := make(chan struct{})
	return func(context.Context, dag.Launch) error { <-gate; return nil }, gate
}

func register(t *testing.T, s *exec.Scheduler, id exec.StreamID, task string, args ...exec.StreamID) {
	t.Helper()
	require.NoError(t, s.Register(id, task, nop, args...))
}

// settle waits until the work registered on stream so far has run.
func settle(t *testing.T, s *exec.Scheduler, stream exec.StreamID) {
	t.Helper()
	ev, err := s.Record(stream)
	require.NoError(t, err)
	require.NoError(t, ev.Wait(t.Context()))
}

func TestSchedulerStreamIDs(t *testing.T) {
	s, log := newCPUScheduler(t, 4)
	assert.Empty(t, s.StreamIDs())
	require.NoError(t, s.ExecuteStreams(0, 1, 2, 3))
	require.NoError(t, s.FlushAll())
	assert.Zero(t, s.Collect())
	assert.Empty(t, log.take(), "nothing queued: no run")
	assert.Empty(t, s.StreamIDs())

	register(t, s, 2, "t1")
	register(t, s, 0, "t2")
	register(t, s, 2, "t3")
	assert.Empty(t, log.take(), "registering queues")
	assert.Equal(t, []exec.StreamID{0, 2}, s.StreamIDs())
	register(t, s, 1, "t4")
	assert.Equal(t, []exec.StreamID{0, 1, 2}, s.StreamIDs(), "slot order, not first-use order")
	require.NoError(t, s.FlushAll())
	assert.Equal(t, []string{"#1 s0[t2] s1[t4] s2[t1 t3]"}, log.take(), "one run, each slot's tasks on its own stream")
}

// TestSchedulerOptionErrors checks that NewScheduler refuses bad options
// and a nil executor, naming them.
func TestSchedulerOptionErrors(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	defer dev.Close()
	ex := exec.MustNew(t, dev)
	for _, tc := range []struct {
		name string
		ex   *exec.Executor
		opt  exec.SchedulerOption
		want string
	}{
		{"zero slots", ex, exec.WithMaxStreams(0), "exec: WithMaxStreams(0): want at least 1 slot"},
		{"negative tasks", ex, exec.WithMaxTasks(-2), "exec: WithMaxTasks(-2): want at least 1 task"},
		{"unknown policy", ex, exec.WithPolicy(7), "exec: WithPolicy: unknown policy FlushPolicy(7)"},
		{"nil executor", nil, nil, "exec: NewScheduler: nil executor"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := exec.NewScheduler(tc.ex, tc.opt)
			assert.EqualError(t, err, tc.want)
			assert.Nil(t, s)
		})
	}
}

func TestSchedulerLogicalStreamsFoldOntoSlots(t *testing.T) {
	s, log := newCPUScheduler(t, 4)
	register(t, s, 1, "a")
	register(t, s, 5, "b")
	register(t, s, 9, "c")
	assert.Equal(t, []exec.StreamID{1}, s.StreamIDs(), "ids 1, 5 and 9 share slot 1")
	require.NoError(t, s.ExecuteStreams(5))
	assert.Equal(t, []string{"#1 s1[a b c]"}, log.take(),
		"executing one logical stream executes its slot's queue, in registration order")
	assert.Equal(t, 4, s.MaxStreams())
}

func TestSchedulerDefaults(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	defer dev.Close()
	s, err := exec.NewScheduler(exec.MustNew(t, dev))
	require.NoError(t, err)
	defer s.Close(context.Background())
	assert.Equal(t, []any{4, 64, exec.Sequential}, []any{s.MaxStreams(), s.MaxTasks(), s.Policy()})
	assert.Equal(t, "sequential", exec.Sequential.String())
	assert.Equal(t, "interleave", exec.Interleave.String())
}

// Register executes the arg streams that live on another slot (one run,
// first-seen order), then the target's own queued work, and makes the
// target's next run follow the arg streams' runs.
func TestSchedulerRegisterAligns(t *testing.T) {
	s, log := newCPUScheduler(t, 4)
	register(t, s, 1, "a1")
	register(t, s, 2, "a2")
	register(t, s, 0, "a0")
	assert.Empty(t, log.take())

	// 5 is slot 1 again, 6 slot 2; 0 and 4 are the target's slot; 3 was never used.
	register(t, s, 0, "b0", 2, 5, 0, 4, 1, 3, 6)
	assert.Equal(t, []string{"#1 s2[a2] s1[a1]", "#2 s0[a0]"}, log.take())
	assert.Equal(t, []exec.StreamID{0, 1, 2}, s.StreamIDs(), "slot 3 not used by being an argument")

	// Slots are compared, not ids: 4 and 8 live on the target's slot 0.
	register(t, s, 4, "c0", 8, 0, 4)
	assert.Empty(t, log.take())

	// An arg slot with nothing queued: nothing to run, but its last run
	// is followed; the target's queue runs first.
	register(t, s, 0, "d0", 1)
	assert.Equal(t, []string{"#3 s0[b0 c0] after #1 #2"}, log.take())
	require.NoError(t, s.ExecuteStreams(0))
	assert.Equal(t, []string{"#4 s0[d0] after #1 #3"}, log.take())

	// A target slot never used follows the arg streams too.
	register(t, s, 3, "a3", 2)
	require.NoError(t, s.ExecuteStreams(3))
	assert.Equal(t, []string{"#5 s3[a3] after #1"}, log.take())
}

func TestSchedulerMaxTasksExecutesQueue(t *testing.T) {
	for _, policy := range []exec.FlushPolicy{exec.Sequential, exec.Interleave} {
		t.Run(policy.String(), func(t *testing.T) {
			s, log := newCPUScheduler(t, 2, exec.WithMaxTasks(3), exec.WithPolicy(policy))
			register(t, s, 1, "t1")
			register(t, s, 3, "t2")
			assert.Empty(t, log.take())
			register(t, s, 1, "t3")
			assert.Equal(t, []string{"#1 s1[t1 t2 t3]"}, log.take(), "the queue executes exactly when it reaches MaxTasks")
			register(t, s, 1, "t4")
			register(t, s, 1, "t5")
			assert.Empty(t, log.take())
			register(t, s, 1, "t6")
			assert.Equal(t, []string{"#2 s1[t4 t5 t6] after #1"}, log.take())
		})
	}

	t.Run("MaxTasks1", func(t *testing.T) {
		s, log := newCPUScheduler(t, 4, exec.WithMaxTasks(1))
		register(t, s, 0, "t1")
		register(t, s, 0, "t2")
		assert.Equal(t, []string{"#1 s0[t1]", "#2 s0[t2] after #1"}, log.take())
	})
}

func TestSchedulerExecuteStreamsSequential(t *testing.T) {
	s, log := newCPUScheduler(t, 4)
	register(t, s, 2, "a2")
	register(t, s, 6, "b6")
	register(t, s, 0, "a0")
	ev, err := s.Record(1) // slot 1 used, nothing queued
	require.NoError(t, err)
	assert.True(t, ev.Done(), "no work on the stream: its event has fired")
	assert.Equal(t, []exec.StreamID{0, 1, 2}, s.StreamIDs())

	require.NoError(t, s.ExecuteStreams(6, 2, 0, 3, 1, 10, 4))
	assert.Equal(t, []string{"#1 s2[a2 b6] s0[a0]"}, log.take(),
		"first-seen slot order, each slot once, empty and unused slots ignored")

	require.NoError(t, s.ExecuteStreams(0))
	require.NoError(t, s.ExecuteStreams())
	require.NoError(t, s.ExecuteStreams(3, 7))
	assert.Empty(t, log.take(), "nothing queued: no run")
}

func TestSchedulerExecuteStreamsInterleave(t *testing.T) {
	s, log := newCPUScheduler(t, 4, exec.WithPolicy(exec.Interleave))
	fill := func() {
		register(t, s, 1, "a1")
		register(t, s, 0, "a0")
		register(t, s, 2, "a2")
		register(t, s, 5, "b5")
		register(t, s, 6, "b6")
		register(t, s, 1, "c1")
	}
	fill()
	require.NoError(t, s.ExecuteStreams(1, 0, 3, 2, 5, 7))
	assert.Equal(t, []string{"#1 s1[a1 a0 a2 b5 b6 c1]"}, log.take(),
		"round-robin over the slots, all on the first slot's stream")

	// One slot only: its own queue on its own stream, after the run that
	// last held its tasks.
	register(t, s, 2, "d2")
	require.NoError(t, s.ExecuteStreams(2))
	assert.Equal(t, []string{"#2 s2[d2] after #1"}, log.take())

	fill()
	require.NoError(t, s.ExecuteStreams(2, 1, 0))
	assert.Equal(t, []string{"#3 s2[a2 a1 a0 b6 b5 c1] after #1 #2"}, log.take())
}

func TestSchedulerFlushAll(t *testing.T) {
	t.Run("Sequential", func(t *testing.T) {
		s, log := newCPUScheduler(t, 4)
		register(t, s, 3, "a3")
		register(t, s, 1, "a1")
		register(t, s, 0, "a0")
		register(t, s, 7, "b7")
		require.NoError(t, s.FlushAll())
		assert.Equal(t, []string{"#1 s0[a0] s1[a1] s3[a3 b7]"}, log.take(), "every slot's queue in slot order, one run")
		require.NoError(t, s.FlushAll())
		assert.Empty(t, log.take())
	})
	t.Run("Interleave", func(t *testing.T) {
		s, log := newCPUScheduler(t, 4, exec.WithPolicy(exec.Interleave))
		register(t, s, 3, "a3")
		register(t, s, 1, "a1")
		register(t, s, 1, "b1")
		require.NoError(t, s.FlushAll())
		assert.Equal(t, []string{"#1 s1[a1 a3 b1]"}, log.take())
	})
}

func TestSchedulerRecordAndWait(t *testing.T) {
	s, log := newCPUScheduler(t, 4)
	register(t, s, 1, "a1")
	e, err := s.Record(5)
	require.NoError(t, err)
	assert.Equal(t, []string{"#1 s1[a1]"}, log.take())

	register(t, s, 2, "a2")
	require.NoError(t, s.Wait(2, e))
	assert.Equal(t, []string{"#2 s2[a2]"}, log.take(), "the stream's queued work runs before the wait, which holds back only what follows")
	register(t, s, 2, "b2")
	require.NoError(t, s.ExecuteStreams(2))
	assert.Equal(t, []string{"#3 s2[b2] after #1 #2"}, log.take())

	// Any gpu.Event: the run does not start before it fires.
	ext := &fakeEvent{fired: make(chan struct{})} // fires when the test says so
	require.NoError(t, s.Wait(3, ext))
	var ran atomic.Bool
	require.NoError(t, s.Register(3, "x", func(context.Context, dag.Launch) error { ran.Store(true); return nil }))
	ev, err := s.Record(3)
	require.NoError(t, err)
	assert.Equal(t, []string{"#4 s3[x] +1 events"}, log.take())
	assert.False(t, ev.Done(), "the run waits for the event")
	assert.False(t, ran.Load())
	close(ext.fired)
	require.NoError(t, ev.Wait(t.Context()))
	assert.True(t, ran.Load())
}

// Task failures come back through the run's report, attributed to the
// logical stream that registered the task, even when logical streams
// share a slot; a failed task does not stop the tasks after it.
func TestSchedulerErrorsAttributedToLogicalStream(t *testing.T) {
	boom := errors.New("boom")
	fail := func(context.Context, dag.Launch) error { return boom }
	s, _ := newCPUScheduler(t, 4)
	var ran atomic.Int32
	count := func(context.Context, dag.Launch) error { ran.Add(1); return nil }
	require.NoError(t, s.Register(1, "a1", fail))
	require.NoError(t, s.Register(5, "b5", count))
	settle(t, s, 1)
	require.Len(t, s.Errors(1), 1)
	assert.ErrorIs(t, s.Errors(1)[0], boom)
	assert.ErrorContains(t, s.Errors(1)[0], `a1 (stream 1, task 1)`)
	assert.Empty(t, s.Errors(5), "stream 5 shares the slot; its task succeeded")
	assert.Equal(t, int32(1), ran.Load(), "the task after a failed one ran")

	// Both logical streams with failures in one run: each gets its own.
	require.NoError(t, s.Register(5, "e5", fail))
	require.NoError(t, s.Register(1, "f1", func(context.Context, dag.Launch) error { panic("f1 fell over") }))
	require.NoError(t, s.Register(5, "g5", count))
	require.NoError(t, s.FlushAll())
	settle(t, s, 1)
	require.Len(t, s.Errors(1), 2)
	assert.ErrorContains(t, s.Errors(1)[1], "f1 fell over")
	require.Len(t, s.Errors(5), 1)
	assert.ErrorIs(t, s.Errors(5)[0], boom)
	assert.Empty(t, s.Errors(9))
	assert.Equal(t, int32(2), ran.Load())

	// Errors returns a copy.
	errs := s.Errors(1)
	errs[0] = nil
	assert.NotNil(t, s.Errors(1)[0])
}

// Interleaved tasks of other streams that fail on the first slot's
// stream are attributed to the streams that registered them.
func TestSchedulerInterleaveErrorsAttributed(t *testing.T) {
	boom := errors.New("boom")
	s, log := newCPUScheduler(t, 4, exec.WithPolicy(exec.Interleave))
	register(t, s, 0, "a0")
	require.NoError(t, s.Register(2, "a2", func(context.Context, dag.Launch) error { return boom }))
	register(t, s, 3, "a3")
	require.NoError(t, s.ExecuteStreams(0, 2, 3))
	assert.Equal(t, []string{"#1 s0[a0 a2 a3]"}, log.take())
	settle(t, s, 2)
	require.Len(t, s.Errors(2), 1)
	assert.ErrorIs(t, s.Errors(2)[0], boom)
	assert.Empty(t, s.Errors(0))
	assert.Empty(t, s.Errors(3))
}

func TestSchedulerClose(t *testing.T) {
	t.Run("Drains", func(t *testing.T) {
		s, log := newCPUScheduler(t, 2)
		var ran atomic.Int32
		for i := range 5 {
			require.NoError(t, s.Register(exec.StreamID(i), fmt.Sprint(i), func(context.Context, dag.Launch) error { ran.Add(1); return nil }))
		}
		freed := false
		require.NoError(t, s.FreeAfter([]exec.StreamID{0}, func() { freed = true }))
		require.NoError(t, s.Close(t.Context()))
		assert.Equal(t, int32(5), ran.Load(), "Close runs what is queued and waits for it")
		assert.True(t, freed, "and runs the deferred frees")
		assert.Equal(t, []string{"#1 s0[0 2 4]", "#2 s1[1 3]"}, log.take())
		require.NoError(t, s.Close(t.Context()), "idempotent")
		assert.ErrorIs(t, s.Register(0, "late", nop), exec.ErrSchedulerClosed)
		assert.ErrorIs(t, s.ExecuteStreams(0), exec.ErrSchedulerClosed)
		assert.ErrorIs(t, s.FlushAll(), exec.ErrSchedulerClosed)
		assert.ErrorIs(t, s.Wait(0, &fakeEvent{}), exec.ErrSchedulerClosed)
		assert.ErrorIs(t, s.FreeAfter(nil, func() {}), exec.ErrSchedulerClosed)
		_, err := s.Record(0)
		assert.ErrorIs(t, err, exec.ErrSchedulerClosed)
	})
	t.Run("DeadlineCancels", func(t *testing.T) {
		s, _ := newCPUScheduler(t, 2)
		require.NoError(t, s.Wait(1, &fakeEvent{fired: make(chan struct{})})) // never fires
		var ran atomic.Bool
		require.NoError(t, s.Register(1, "never", func(context.Context, dag.Launch) error { ran.Store(true); return nil }))
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		require.ErrorIs(t, s.Close(ctx), context.Canceled)
		assert.False(t, ran.Load())
		require.Len(t, s.Errors(1), 1, "the cancelled task is the stream's error")
		assert.ErrorIs(t, s.Errors(1)[0], context.Canceled)
	})
}

func TestSchedulerFreeAfter(t *testing.T) {
	t.Run("NoReaders", func(t *testing.T) {
		s, log := newCPUScheduler(t, 4)
		freed := 0
		require.NoError(t, s.FreeAfter(nil, func() { freed++ }))
		assert.Equal(t, 1, freed, "no reader: freed at once")
		require.NoError(t, s.FreeAfter([]exec.StreamID{2, 3}, func() { freed++ }))
		assert.Equal(t, 2, freed, "readers on streams never used: freed at once")
		assert.Empty(t, log.take())
		assert.Zero(t, s.Collect())
		assert.Equal(t, 2, freed)
	})

	t.Run("WaitsForReaders", func(t *testing.T) {
		s, log := newCPUScheduler(t, 4)
		f0, g0 := gated()
		f1, g1 := gated()
		require.NoError(t, s.Register(0, "a0", f0))
		require.NoError(t, s.ExecuteStreams(0))
		require.NoError(t, s.Register(1, "a1", f1))
		register(t, s, 5, "b5")
		freed := 0
		require.NoError(t, s.FreeAfter([]exec.StreamID{1, 0, 4, 5, 3}, func() { freed++ }))
		assert.Equal(t, []string{"#1 s0[a0]", "#2 s1[a1 b5]"}, log.take(), "the readers' queues executed; unused slot 3 ignored")
		assert.Zero(t, freed)
		assert.Equal(t, 1, s.Collect())

		close(g0)
		settle(t, s, 0)
		assert.Equal(t, 1, s.Collect())
		require.NoError(t, s.FlushAll())
		assert.Zero(t, freed, "one reader has not finished: the shared buffer stays")

		close(g1)
		settle(t, s, 1)
		assert.Zero(t, freed, "frees run only from Collect, FlushAll or Close")
		assert.Zero(t, s.Collect())
		assert.Equal(t, 1, freed)
		assert.Zero(t, s.Collect())
		require.NoError(t, s.FlushAll())
		assert.Equal(t, 1, freed, "freed once")
	})

	t.Run("ViaFlushAllInOrder", func(t *testing.T) {
		s, _ := newCPUScheduler(t, 4)
		f0, g0 := gated()
		f2, g2 := gated()
		require.NoError(t, s.Register(0, "a0", f0))
		require.NoError(t, s.Register(2, "a2", f2))
		var order []string
		require.NoError(t, s.FreeAfter([]exec.StreamID{0}, func() { order = append(order, "x") }))
		require.NoError(t, s.FreeAfter([]exec.StreamID{2}, func() { order = append(order, "y") }))
		require.NoError(t, s.FreeAfter([]exec.StreamID{0, 2}, func() { order = append(order, "z") }))
		close(g2)
		settle(t, s, 2)
		require.NoError(t, s.FlushAll())
		assert.Equal(t, []string{"y"}, order)
		close(g0)
		settle(t, s, 0)
		require.NoError(t, s.FlushAll())
		assert.Equal(t, []string{"y", "x", "z"}, order, "ready frees run in the order they were deferred")
		assert.Zero(t, s.Collect())
	})

	t.Run("FreeMayCallScheduler", func(t *testing.T) {
		s, _ := newCPUScheduler(t, 4)
		register(t, s, 0, "a0")
		freed := false
		require.NoError(t, s.FreeAfter([]exec.StreamID{0}, func() {
			assert.Zero(t, s.Collect())
			assert.Equal(t, []exec.StreamID{0}, s.StreamIDs())
			freed = true
		}))
		settle(t, s, 0)
		done := make(chan struct{})
		go func() {
			defer close(done)
			s.Collect()
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("a free calling the scheduler deadlocked")
		}
		assert.True(t, freed)
	})
}

// A producer registered on stream 0 and a consumer registered on stream 1
// with argStreams [0] (or a logical id on slot 0): the consumer always sees
// the write. Plain memory, so -race checks the happens-before edge.
func TestSchedulerDeviceCrossStreamReadSeesWrite(t *testing.T) {
	for _, policy := range []exec.FlushPolicy{exec.Sequential, exec.Interleave} {
		s, _ := newCPUScheduler(t, 3, exec.WithPolicy(policy))
		for i := range 300 {
			var x, y int
			prod := exec.StreamID(0)
			if i%2 == 1 {
				prod = 3 // slot 0 too
			}
			require.NoError(t, s.Register(prod, "prod", func(context.Context, dag.Launch) error {
				runtime.Gosched()
				x = i + 1
				return nil
			}))
			require.NoError(t, s.Register(1, "cons", func(context.Context, dag.Launch) error { y = x * 2; return nil }, prod))
			settle(t, s, 1)
			require.Equal(t, (i+1)*2, y, "policy %v iteration %d", policy, i)
		}
		require.NoError(t, s.FlushAll())
		assert.Empty(t, s.Errors(0))
		assert.Empty(t, s.Errors(1))
	}
}

// A later run of a stream never overtakes an earlier one, even when the
// earlier one ran the stream's task on another slot's stream (Interleave).
func TestSchedulerDeviceInterleaveKeepsStreamOrder(t *testing.T) {
	s, log := newCPUScheduler(t, 3, exec.WithPolicy(exec.Interleave))
	gate := make(chan struct{})
	var first atomic.Bool
	register(t, s, 0, "z")
	require.NoError(t, s.Register(2, "first", func(context.Context, dag.Launch) error {
		<-gate
		first.Store(true)
		return nil
	}))
	require.NoError(t, s.ExecuteStreams(0, 2))
	var overtook atomic.Bool
	require.NoError(t, s.Register(2, "second", func(context.Context, dag.Launch) error {
		overtook.Store(!first.Load())
		return nil
	}))
	ev, err := s.Record(2)
	require.NoError(t, err)
	assert.Equal(t, []string{"#1 s0[z first]", "#2 s2[second] after #1"}, log.take())
	close(gate)
	require.NoError(t, ev.Wait(t.Context()))
	assert.True(t, first.Load())
	assert.False(t, overtook.Load(), "a task overtook an earlier task of its own stream")
}

// A buffer read on another stream is not freed until that stream's reads
// ran.
func TestSchedulerDeviceFreeAfterSharedBuffer(t *testing.T) {
	s, _ := newCPUScheduler(t, 2)
	buf := []int{0}
	read := -1
	reader, gate := gated()
	require.NoError(t, s.Register(0, "write", func(context.Context, dag.Launch) error { buf[0] = 42; return nil }))
	require.NoError(t, s.Register(1, "read", func(ctx context.Context, l dag.Launch) error {
		if err := reader(ctx, l); err != nil {
			return err
		}
		read = buf[0]
		return nil
	}, 0))
	var isFreed atomic.Bool
	require.NoError(t, s.FreeAfter([]exec.StreamID{0, 1}, func() {
		buf = nil
		isFreed.Store(true)
	}))
	settle(t, s, 0)
	assert.Equal(t, 1, s.Collect(), "the reader on stream 1 has not run")
	require.NoError(t, s.FlushAll())
	assert.False(t, isFreed.Load())

	close(gate)
	settle(t, s, 1)
	assert.Zero(t, s.Collect())
	assert.True(t, isFreed.Load())
	assert.Equal(t, 42, read)
	assert.Nil(t, buf)
}

// TestSchedulerStreamsProperty runs seeded random programs of tasks on
// logical streams folded onto slots, each task registered with random
// argument streams, on a CPU executor. See runSchedulerProgram.
func TestSchedulerStreamsProperty(t *testing.T) {
	for _, policy := range []exec.FlushPolicy{exec.Sequential, exec.Interleave} {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("policy=%v/seed=%d", policy, seed), func(t *testing.T) {
				dev, err := cpu.New(cpu.WithStreams(3))
				require.NoError(t, err)
				t.Cleanup(func() { require.NoError(t, dev.Close()) })
				runSchedulerProgram(t, exec.MustNew(t, dev), policy, seed)
			})
		}
	}
}

// runSchedulerProgram: every task must find done every task registered
// before it on its own slot and on its argument streams' slots, and run
// on its slot's stream under Sequential; an event recorded on a stream
// fires only after every task registered on it so far; and a stream told
// to Wait on another's event runs what follows after that stream's work.
func runSchedulerProgram(t *testing.T, ex *exec.Executor, policy exec.FlushPolicy, seed uint64) {
	const (
		slots   = 3
		logical = 6
		tasks   = 200
	)
	rng := rand.New(rand.NewPCG(seed, seed))
	s, err := exec.NewScheduler(ex, exec.WithMaxStreams(slots), exec.WithMaxTasks(8), exec.WithPolicy(policy))
	require.NoError(t, err)
	done := make([]atomic.Bool, tasks)
	var bad atomic.Int64           // 1 + the first task that ran too early
	var wrong atomic.Int64         // 1 + the first task that ran on another stream
	bySlot := make([][]int, slots) // task indices registered per slot, in order
	for k := range tasks {
		stream := exec.StreamID(rng.IntN(logical))
		var args []exec.StreamID
		for range rng.IntN(3) {
			args = append(args, exec.StreamID(rng.IntN(logical)))
		}
		var before []int // tasks k must find done
		before = append(before, bySlot[int(stream)%slots]...)
		for _, a := range args {
			before = append(before, bySlot[int(a)%slots]...)
		}
		require.NoError(t, s.Register(stream, fmt.Sprint("t", k), func(_ context.Context, l dag.Launch) error {
			for _, j := range before {
				if !done[j].Load() {
					bad.CompareAndSwap(0, int64(k)+1)
				}
			}
			if policy == exec.Sequential && l.Stream() != int(stream)%slots {
				wrong.CompareAndSwap(0, int64(k)+1)
			}
			done[k].Store(true)
			return nil
		}, args...), "seed %d task %d", seed, k)
		bySlot[int(stream)%slots] = append(bySlot[int(stream)%slots], k)

		switch rng.IntN(10) {
		case 0: // an event covers everything registered on its stream so far
			ev, err := s.Record(stream)
			require.NoError(t, err)
			require.NoError(t, ev.Wait(t.Context()), "seed %d", seed)
			assert.True(t, ev.Done())
			for _, j := range bySlot[int(stream)%slots] {
				require.True(t, done[j].Load(), "seed %d: task %d on stream %d not done when its event fired", seed, j, stream)
			}
		case 1: // a cross-stream Wait orders what follows on the waiter
			other := exec.StreamID(rng.IntN(logical))
			ev, err := s.Record(other)
			require.NoError(t, err)
			require.NoError(t, s.Wait(stream, ev))
			bySlot[int(stream)%slots] = append(bySlot[int(stream)%slots], bySlot[int(other)%slots]...)
		}
	}
	require.NoError(t, s.Close(t.Context()))
	for k := range done {
		require.True(t, done[k].Load(), "seed %d: task %d never ran", seed, k)
	}
	require.Zero(t, bad.Load(), "seed %d: task %d ran before a task it must follow", seed, bad.Load()-1)
	require.Zero(t, wrong.Load(), "seed %d: task %d ran on another stream than its slot's", seed, wrong.Load()-1)
	for id := range exec.StreamID(logical) {
		assert.Empty(t, s.Errors(id), "seed %d stream %d", seed, id)
	}
}

func TestSchedulerBadInput(t *testing.T) {
	s, log := newCPUScheduler(t, 2)
	assert.EqualError(t, s.Register(3, "t", nil), `exec: register "t" on stream 3: nil task function`)
	assert.EqualError(t, s.Wait(1, nil), "exec: wait on stream 1: nil event")
	require.NoError(t, s.FlushAll())
	assert.Empty(t, log.take(), "nothing was queued")
	ev, err := s.Record(1)
	require.NoError(t, err)
	assert.True(t, ev.Done(), "nothing to wait for")
}
