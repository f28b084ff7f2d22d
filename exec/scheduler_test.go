package exec_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
)

// recLog is the ordered log a recording backend appends to.
type recLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *recLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

// take returns the lines logged since the previous take.
func (l *recLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.lines
	l.lines = nil
	return out
}

// recTask is a task known by its name in the log; running it does nothing.
type recTask string

func (recTask) Run() {}

// recEvent is a fake event that fires only when the test says so.
type recEvent struct {
	name  string
	fired chan struct{}
	once  sync.Once
}

func (e *recEvent) Done() bool {
	select {
	case <-e.fired:
		return true
	default:
		return false
	}
}

func (e *recEvent) Wait(ctx context.Context) error {
	select {
	case <-e.fired:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (e *recEvent) fire() { e.once.Do(func() { close(e.fired) }) }

// recBackend is an exec.Backend that records every call, in order:
// "new s1", "enqueue s1 t3", "flush s1", "record s1 e2", "wait s0 e2".
// Streams are named by slot; events e1, e2, … in recording order.
type recBackend struct {
	log        *recLog
	concurrent bool
	tag        string // configuration new streams are created with
	newErr     error  // NewStream fails with it when set
	streams    map[int]*recStream
	events     map[string]*recEvent
}

func (b *recBackend) Concurrent() bool { return b.concurrent }

func (b *recBackend) NewStream(slot int) (exec.BackendStream, error) {
	if b.newErr != nil {
		b.log.add("new s%d failed", slot)
		return nil, b.newErr
	}
	b.log.add("new s%d", slot)
	st := &recStream{b: b, slot: slot, tag: b.tag}
	b.streams[slot] = st
	return st, nil
}

// event returns the event recorded under name.
func (b *recBackend) event(t *testing.T, name string) *recEvent {
	t.Helper()
	e, ok := b.events[name]
	require.True(t, ok, "no event %s", name)
	return e
}

type recStream struct {
	b        *recBackend
	slot     int
	tag      string
	isolate  bool
	flushErr error
}

func (s *recStream) Enqueue(t gpu.Task) { s.b.log.add("enqueue s%d %s", s.slot, t.(recTask)) }

func (s *recStream) Flush() error {
	s.b.log.add("flush s%d", s.slot)
	return s.flushErr
}

func (s *recStream) Record() gpu.Event {
	name := fmt.Sprintf("e%d", len(s.b.events)+1)
	e := &recEvent{name: name, fired: make(chan struct{})}
	s.b.events[name] = e
	s.b.log.add("record s%d %s", s.slot, name)
	return e
}

func (s *recStream) Wait(e gpu.Event) error {
	s.b.log.add("wait s%d %s", s.slot, e.(*recEvent).name)
	return nil
}

func (s *recStream) RequiresIsolation() bool { return s.isolate }

func newRecBackend(concurrent bool) *recBackend {
	return &recBackend{log: &recLog{}, concurrent: concurrent, streams: map[int]*recStream{}, events: map[string]*recEvent{}}
}

func newRecScheduler(concurrent bool, opts exec.SchedulerOptions) (*exec.Scheduler, *recBackend) {
	b := newRecBackend(concurrent)
	return exec.NewScheduler(b, nil, opts), b
}

func register(t *testing.T, s *exec.Scheduler, id exec.StreamID, task string, args ...exec.StreamID) {
	t.Helper()
	require.NoError(t, s.Register(id, recTask(task), args))
}

func slotsOf(streams []exec.BackendStream) []int {
	var out []int
	for _, st := range streams {
		out = append(out, st.(*recStream).slot)
	}
	return out
}

func TestSchedulerStreamsCreatedLazily(t *testing.T) {
	s, b := newRecScheduler(false, exec.SchedulerOptions{MaxStreams: 4})
	_, ok := s.Owner(2)
	assert.False(t, ok)
	assert.Empty(t, s.Streams())
	assert.Empty(t, s.StreamIDs())
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{0, 1, 2, 3}))
	require.NoError(t, s.FlushAll())
	assert.Zero(t, s.Collect())
	assert.Empty(t, b.log.take(), "nothing used: no stream created, nothing flushed")

	register(t, s, 2, "t1")
	assert.Equal(t, []string{"new s2"}, b.log.take())
	register(t, s, 0, "t2")
	register(t, s, 2, "t3")
	assert.Equal(t, []string{"new s0"}, b.log.take(), "a slot's stream is created once")

	for _, id := range []exec.StreamID{1, 3, 5, 7} {
		st, ok := s.Owner(id)
		assert.False(t, ok, "stream %d", id)
		assert.Nil(t, st)
	}
	st, ok := s.Owner(6) // slot 2
	require.True(t, ok)
	assert.Same(t, b.streams[2], st)
	assert.Equal(t, []int{0, 2}, slotsOf(s.Streams()))
	assert.Equal(t, []exec.StreamID{0, 2}, s.StreamIDs())
	assert.Empty(t, b.log.take(), "Owner, Streams and StreamIDs never create a stream")

	register(t, s, 1, "t4")
	assert.Equal(t, []string{"new s1"}, b.log.take())
	assert.Equal(t, []int{0, 1, 2}, slotsOf(s.Streams()), "slot order, not creation order")
	assert.Equal(t, []exec.StreamID{0, 1, 2}, s.StreamIDs())
}

func TestSchedulerLogicalStreamsFoldOntoSlots(t *testing.T) {
	s, b := newRecScheduler(false, exec.SchedulerOptions{MaxStreams: 4})
	register(t, s, 1, "a")
	register(t, s, 5, "b")
	register(t, s, 9, "c")
	assert.Equal(t, []string{"new s1"}, b.log.take(), "ids 1, 5 and 9 share slot 1")
	assert.Equal(t, []exec.StreamID{1}, s.StreamIDs())
	o1, _ := s.Owner(1)
	o5, _ := s.Owner(5)
	assert.Same(t, o1, o5)

	require.NoError(t, s.ExecuteStreams([]exec.StreamID{5}))
	assert.Equal(t, []string{"enqueue s1 a", "enqueue s1 b", "enqueue s1 c", "flush s1"}, b.log.take(),
		"executing one logical stream executes its slot's queue, in registration order")
	assert.Equal(t, 4, s.Options().MaxStreams)
}

func TestSchedulerDefaults(t *testing.T) {
	s, _ := newRecScheduler(false, exec.SchedulerOptions{})
	assert.Equal(t, exec.SchedulerOptions{MaxStreams: 4, MaxTasks: 64, Strategy: exec.Sequential}, s.Options())
}

// On a single-queue backend, Register flushes the arg streams that live on
// another slot, in first-seen order, once each; the target's queue stays.
func TestSchedulerRegisterAlignsSingleQueueBackend(t *testing.T) {
	s, b := newRecScheduler(false, exec.SchedulerOptions{MaxStreams: 4})
	register(t, s, 1, "a1")
	register(t, s, 2, "a2")
	register(t, s, 0, "a0")
	b.log.take()

	// 5 is slot 1 again; 0 and 4 are the target's slot; 3 was never used.
	register(t, s, 0, "b0", 2, 5, 0, 4, 1, 3, 6)
	assert.Equal(t, []string{"enqueue s2 a2", "flush s2", "enqueue s1 a1", "flush s1"}, b.log.take(),
		"no wait on a single-queue backend, target not flushed, no stream created for slot 3")
	assert.Equal(t, []exec.StreamID{0, 1, 2}, s.StreamIDs())

	// Slots are compared, not ids: 4 and 8 live on the target's slot 0.
	register(t, s, 4, "c0", 8, 0, 4)
	assert.Empty(t, b.log.take())

	// Arg streams with empty queues are still flushed (Sequential).
	register(t, s, 0, "d0", 1)
	assert.Equal(t, []string{"flush s1"}, b.log.take())

	require.NoError(t, s.ExecuteStreams([]exec.StreamID{0}))
	assert.Equal(t, []string{"enqueue s0 a0", "enqueue s0 b0", "enqueue s0 c0", "enqueue s0 d0", "flush s0"}, b.log.take())

	// A target slot never used is created after the arg streams ran.
	register(t, s, 3, "a3", 2)
	assert.Equal(t, []string{"flush s2", "new s3"}, b.log.take())
}

// On a concurrent backend, Register executes the arg streams, then the
// target's own queued work, then makes the target wait once per distinct
// arg slot on an event recorded there.
func TestSchedulerRegisterAlignsConcurrentBackend(t *testing.T) {
	s, b := newRecScheduler(true, exec.SchedulerOptions{MaxStreams: 4})
	register(t, s, 1, "a1")
	register(t, s, 2, "a2")
	register(t, s, 0, "a0")
	b.log.take()

	register(t, s, 0, "b0", 2, 1, 6, 0, 4, 3, 5)
	assert.Equal(t, []string{
		"enqueue s2 a2", "flush s2", "enqueue s1 a1", "flush s1",
		"enqueue s0 a0", "flush s0",
		"record s2 e1", "wait s0 e1", "record s1 e2", "wait s0 e2",
	}, b.log.take())

	// Target queue holds b0 now; the next aligned register runs it first.
	register(t, s, 4, "c0", 1)
	assert.Equal(t, []string{"flush s1", "enqueue s0 b0", "flush s0", "record s1 e3", "wait s0 e3"}, b.log.take())

	// Empty target queue: not flushed. Same-slot and unused args: nothing.
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{0}))
	assert.Equal(t, []string{"enqueue s0 c0", "flush s0"}, b.log.take())
	register(t, s, 0, "d0", 2)
	assert.Equal(t, []string{"flush s2", "record s2 e4", "wait s0 e4"}, b.log.take())
	register(t, s, 0, "e0", 0, 4, 3, 7)
	assert.Empty(t, b.log.take())

	// A target slot never used is created after the arg streams ran,
	// then waits.
	register(t, s, 3, "a3", 1)
	assert.Equal(t, []string{"flush s1", "new s3", "record s1 e5", "wait s3 e5"}, b.log.take())

	require.NoError(t, s.ExecuteStreams([]exec.StreamID{0, 3}))
	assert.Equal(t, []string{"enqueue s0 d0", "enqueue s0 e0", "flush s0", "enqueue s3 a3", "flush s3"}, b.log.take())
}

func TestSchedulerMaxTasksExecutesQueue(t *testing.T) {
	for _, strategy := range []exec.Strategy{exec.Sequential, exec.Interleave} {
		t.Run(fmt.Sprint(strategy), func(t *testing.T) {
			s, b := newRecScheduler(false, exec.SchedulerOptions{MaxStreams: 2, MaxTasks: 3, Strategy: strategy})
			register(t, s, 1, "t1")
			register(t, s, 3, "t2")
			assert.Equal(t, []string{"new s1"}, b.log.take())
			register(t, s, 1, "t3")
			assert.Equal(t, []string{"enqueue s1 t1", "enqueue s1 t2", "enqueue s1 t3", "flush s1"}, b.log.take(),
				"the queue executes exactly when it reaches MaxTasks")
			register(t, s, 1, "t4")
			register(t, s, 1, "t5")
			assert.Empty(t, b.log.take())
			register(t, s, 1, "t6")
			assert.Equal(t, []string{"enqueue s1 t4", "enqueue s1 t5", "enqueue s1 t6", "flush s1"}, b.log.take())
		})
	}

	t.Run("MaxTasks1", func(t *testing.T) {
		s, b := newRecScheduler(false, exec.SchedulerOptions{MaxTasks: 1})
		register(t, s, 0, "t1")
		register(t, s, 0, "t2")
		assert.Equal(t, []string{"new s0", "enqueue s0 t1", "flush s0", "enqueue s0 t2", "flush s0"}, b.log.take())
	})
}

func TestSchedulerExecuteStreamsSequential(t *testing.T) {
	s, b := newRecScheduler(false, exec.SchedulerOptions{MaxStreams: 4})
	register(t, s, 2, "a2")
	register(t, s, 6, "b6")
	register(t, s, 0, "a0")
	_, _, err := s.StreamAndFailures(1) // slot 1 initialized, queue empty
	require.NoError(t, err)
	b.log.take()

	require.NoError(t, s.ExecuteStreams([]exec.StreamID{6, 2, 0, 3, 1, 10, 4}))
	assert.Equal(t, []string{
		"enqueue s2 a2", "enqueue s2 b6", "flush s2",
		"enqueue s0 a0", "flush s0",
		"flush s1",
	}, b.log.take(), "first-seen slot order, each slot once, unused slot 3 ignored, empty queue still flushed")

	require.NoError(t, s.ExecuteStreams([]exec.StreamID{0}))
	assert.Equal(t, []string{"flush s0"}, b.log.take(), "an empty initialized queue is flushed")
	require.NoError(t, s.ExecuteStreams(nil))
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{3, 7}))
	assert.Empty(t, b.log.take(), "unknown streams: no stream created, nothing flushed")
}

func TestSchedulerExecuteStreamsInterleave(t *testing.T) {
	s, b := newRecScheduler(false, exec.SchedulerOptions{MaxStreams: 4, Strategy: exec.Interleave})
	fill := func() {
		register(t, s, 1, "a1")
		register(t, s, 0, "a0")
		register(t, s, 2, "a2")
		register(t, s, 5, "b5")
		register(t, s, 6, "b6")
		register(t, s, 1, "c1")
	}
	fill()
	_, _, err := s.StreamAndFailures(3) // initialized, empty
	require.NoError(t, err)
	b.log.take()

	require.NoError(t, s.ExecuteStreams([]exec.StreamID{1, 0, 3, 2, 5, 7}))
	assert.Equal(t, []string{
		"flush s0", "flush s3", "flush s2",
		"enqueue s1 a1", "enqueue s1 a0", "enqueue s1 a2",
		"enqueue s1 b5", "enqueue s1 b6",
		"enqueue s1 c1",
		"flush s1",
	}, b.log.take(), "every stream but the first flushed, then round-robin onto the first")

	// One stream only: its own queue onto itself.
	register(t, s, 2, "d2")
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{2}))
	assert.Equal(t, []string{"enqueue s2 d2", "flush s2"}, b.log.take())

	// While a stream requires isolation: Sequential.
	fill()
	b.streams[2].isolate = true
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{1, 0, 2}))
	assert.Equal(t, []string{
		"enqueue s1 a1", "enqueue s1 b5", "enqueue s1 c1", "flush s1",
		"enqueue s0 a0", "flush s0",
		"enqueue s2 a2", "enqueue s2 b6", "flush s2",
	}, b.log.take())
	// Isolation on a stream not executed does not matter.
	register(t, s, 1, "e1")
	register(t, s, 0, "e0")
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{0, 1}))
	assert.Equal(t, []string{"flush s1", "enqueue s0 e0", "enqueue s0 e1", "flush s0"}, b.log.take())
	// Isolation over: interleaved again.
	fill()
	b.streams[2].isolate = false
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{2, 1, 0}))
	assert.Equal(t, []string{
		"flush s1", "flush s0",
		"enqueue s2 a2", "enqueue s2 a1", "enqueue s2 a0",
		"enqueue s2 b6", "enqueue s2 b5",
		"enqueue s2 c1",
		"flush s2",
	}, b.log.take())
}

// Interleaving moves tasks onto another stream, which keeps each stream's
// order only on a single-queue backend: a concurrent backend runs
// Sequential.
func TestSchedulerInterleaveIsSequentialOnConcurrentBackend(t *testing.T) {
	s, b := newRecScheduler(true, exec.SchedulerOptions{MaxStreams: 4, Strategy: exec.Interleave})
	register(t, s, 1, "a1")
	register(t, s, 0, "a0")
	register(t, s, 1, "b1")
	b.log.take()
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{1, 0}))
	assert.Equal(t, []string{"enqueue s1 a1", "enqueue s1 b1", "flush s1", "enqueue s0 a0", "flush s0"}, b.log.take())
}

func TestSchedulerFlushAll(t *testing.T) {
	t.Run("Sequential", func(t *testing.T) {
		s, b := newRecScheduler(false, exec.SchedulerOptions{MaxStreams: 4})
		register(t, s, 3, "a3")
		register(t, s, 1, "a1")
		register(t, s, 0, "a0")
		register(t, s, 7, "b7")
		b.log.take()
		require.NoError(t, s.FlushAll())
		assert.Equal(t, []string{
			"enqueue s0 a0", "flush s0", "enqueue s1 a1", "flush s1", "enqueue s3 a3", "enqueue s3 b7", "flush s3",
			"flush s0", "flush s1", "flush s3",
		}, b.log.take(), "every initialized slot executed in slot order, then every stream flushed")
		require.NoError(t, s.FlushAll())
		assert.Equal(t, []string{"flush s0", "flush s1", "flush s3", "flush s0", "flush s1", "flush s3"}, b.log.take())
	})
	t.Run("Interleave", func(t *testing.T) {
		s, b := newRecScheduler(false, exec.SchedulerOptions{MaxStreams: 4, Strategy: exec.Interleave})
		register(t, s, 3, "a3")
		register(t, s, 1, "a1")
		register(t, s, 1, "b1")
		b.log.take()
		require.NoError(t, s.FlushAll())
		assert.Equal(t, []string{
			"flush s3", "enqueue s1 a1", "enqueue s1 a3", "enqueue s1 b1", "flush s1",
			"flush s1", "flush s3",
		}, b.log.take())
	})
}

func TestSchedulerRecordAndWait(t *testing.T) {
	s, b := newRecScheduler(true, exec.SchedulerOptions{MaxStreams: 4})
	register(t, s, 1, "a1")
	b.log.take()
	e, err := s.Record(5)
	require.NoError(t, err)
	assert.Equal(t, []string{"enqueue s1 a1", "flush s1", "record s1 e1"}, b.log.take())

	register(t, s, 2, "a2")
	require.NoError(t, s.Wait(2, e))
	assert.Equal(t, []string{"new s2", "enqueue s2 a2", "flush s2", "wait s2 e1"}, b.log.take(),
		"the stream's queued work runs before the wait, which holds back only what follows")
}

// Changing the backend's configuration affects only streams created
// afterwards.
func TestSchedulerBackendConfigAffectsOnlyNewStreams(t *testing.T) {
	t.Run("Recording", func(t *testing.T) {
		s, b := newRecScheduler(false, exec.SchedulerOptions{MaxStreams: 4})
		b.tag = "old"
		register(t, s, 0, "a0")
		s.Backend().(*recBackend).tag = "new"
		register(t, s, 1, "a1")
		register(t, s, 4, "b0")
		assert.Equal(t, "old", b.streams[0].tag)
		assert.Equal(t, "new", b.streams[1].tag)
	})
	t.Run("DeviceBackend", func(t *testing.T) {
		dev, err := cpu.New(cpu.WithStreams(2))
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, dev.Close()) })
		s := exec.NewScheduler(exec.NewDeviceBackend(dev), nil, exec.SchedulerOptions{MaxStreams: 2})
		staging := func(st exec.BackendStream) int {
			return reflect.ValueOf(st).Elem().FieldByName("staged").Cap()
		}
		s0, _, err := s.StreamAndFailures(0)
		require.NoError(t, err)
		assert.Equal(t, 64, staging(s0))
		s.Backend().(*exec.DeviceBackend).StagingCap = 5
		s1, _, err := s.StreamAndFailures(1)
		require.NoError(t, err)
		assert.Equal(t, 5, staging(s1))
		assert.Equal(t, 64, staging(s0), "a stream already created keeps its configuration")
		s0again, _, err := s.StreamAndFailures(2)
		require.NoError(t, err)
		assert.Same(t, s0, s0again)
	})
}

// Errors stay with the logical stream whose work was in the failed flush,
// even when logical streams share a slot.
func TestSchedulerErrorsAttributedToLogicalStream(t *testing.T) {
	boom := errors.New("boom")
	s, b := newRecScheduler(false, exec.SchedulerOptions{MaxStreams: 4})
	register(t, s, 1, "a1")
	register(t, s, 5, "b5")
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{1}))
	b.log.take()

	register(t, s, 1, "c1")
	b.streams[1].flushErr = boom
	err := s.ExecuteStreams([]exec.StreamID{5})
	require.ErrorIs(t, err, boom)
	assert.Equal(t, []string{"enqueue s1 c1", "flush s1"}, b.log.take())
	require.Len(t, s.Errors(1), 1)
	assert.ErrorIs(t, s.Errors(1)[0], boom)
	assert.Empty(t, s.Errors(5), "stream 5 shares the slot but had no work in the failed flush")

	b.streams[1].flushErr = nil
	register(t, s, 5, "d5")
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{1}))
	assert.Empty(t, s.Errors(5))
	assert.Len(t, s.Errors(1), 1)

	// Both logical streams in one failed flush: both get it, once.
	register(t, s, 5, "e5")
	register(t, s, 1, "f1")
	register(t, s, 5, "g5")
	b.streams[1].flushErr = boom
	require.ErrorIs(t, s.FlushAll(), boom)
	assert.Len(t, s.Errors(1), 2)
	require.Len(t, s.Errors(5), 1)
	assert.ErrorIs(t, s.Errors(5)[0], boom)
	assert.Empty(t, s.Errors(9))

	// Errors returns a copy.
	errs := s.Errors(1)
	errs[0] = nil
	assert.NotNil(t, s.Errors(1)[0])
}

// Interleaved tasks of other streams that fail in the first stream's flush
// are attributed to the streams that registered them.
func TestSchedulerInterleaveErrorsAttributed(t *testing.T) {
	boom := errors.New("boom")
	s, b := newRecScheduler(false, exec.SchedulerOptions{MaxStreams: 4, Strategy: exec.Interleave})
	register(t, s, 0, "a0")
	register(t, s, 2, "a2")
	_, _, err := s.StreamAndFailures(3)
	require.NoError(t, err)
	b.streams[0].flushErr = boom
	require.ErrorIs(t, s.ExecuteStreams([]exec.StreamID{0, 2, 3}), boom)
	assert.Len(t, s.Errors(0), 1)
	assert.Len(t, s.Errors(2), 1)
	assert.Empty(t, s.Errors(3))
}

func TestSchedulerStreamCreationErrorAttributed(t *testing.T) {
	for _, concurrent := range []bool{false, true} {
		t.Run(fmt.Sprintf("concurrent=%v", concurrent), func(t *testing.T) {
			noStream := errors.New("no stream")
			s, b := newRecScheduler(concurrent, exec.SchedulerOptions{MaxStreams: 4})
			register(t, s, 1, "a1")
			b.log.take()
			b.newErr = noStream
			err := s.Register(3, recTask("a3"), []exec.StreamID{1})
			require.ErrorIs(t, err, noStream)
			assert.Equal(t, []string{"enqueue s1 a1", "flush s1", "new s3 failed"}, b.log.take(),
				"one creation attempt, nothing waited on")
			require.Len(t, s.Errors(3), 1)
			assert.ErrorIs(t, s.Errors(3)[0], noStream)
			assert.Empty(t, s.Errors(7))
			assert.Empty(t, s.Errors(1))
			_, ok := s.Owner(3)
			assert.False(t, ok)

			b.newErr = nil
			register(t, s, 7, "a7")
			assert.Equal(t, []string{"new s3"}, b.log.take(), "a later use retries")
			assert.Empty(t, s.Errors(7))
		})
	}
}

func TestSchedulerStreamAndFailures(t *testing.T) {
	store := failgraph.New(nil)
	b := newRecBackend(false)
	s := exec.NewScheduler(b, store, exec.SchedulerOptions{MaxStreams: 4})
	st, got, err := s.StreamAndFailures(7)
	require.NoError(t, err)
	assert.Same(t, store, got)
	assert.Same(t, b.streams[3], st)
	assert.Equal(t, []string{"new s3"}, b.log.take())
	o, ok := s.Owner(3)
	require.True(t, ok)
	assert.Same(t, st, o)
	_, got, err = s.StreamAndFailures(3)
	require.NoError(t, err)
	assert.Same(t, store, got)
	assert.Empty(t, b.log.take())

	// A nil store: the scheduler makes one, always the same.
	s2 := exec.NewScheduler(newRecBackend(false), nil, exec.SchedulerOptions{})
	_, st1, err := s2.StreamAndFailures(0)
	require.NoError(t, err)
	require.NotNil(t, st1)
	_, st2, err := s2.StreamAndFailures(1)
	require.NoError(t, err)
	assert.Same(t, st1, st2)

	// Creation fails: the store still comes back, with the error.
	b.newErr = errors.New("no stream")
	st, got, err = s.StreamAndFailures(1)
	require.ErrorIs(t, err, b.newErr)
	assert.Nil(t, st)
	assert.Same(t, store, got)
}

func TestSchedulerFreeAfter(t *testing.T) {
	t.Run("NoReaders", func(t *testing.T) {
		s, b := newRecScheduler(true, exec.SchedulerOptions{MaxStreams: 4})
		freed := 0
		require.NoError(t, s.FreeAfter(nil, func() { freed++ }))
		assert.Equal(t, 1, freed, "no reader: freed at once")
		require.NoError(t, s.FreeAfter([]exec.StreamID{2, 3}, func() { freed++ }))
		assert.Equal(t, 2, freed, "readers on streams never used: freed at once")
		assert.Empty(t, b.log.take(), "no stream created")
		assert.Zero(t, s.Collect())
		assert.Equal(t, 2, freed)
	})

	t.Run("WaitsForReaders", func(t *testing.T) {
		s, b := newRecScheduler(true, exec.SchedulerOptions{MaxStreams: 4})
		register(t, s, 0, "a0")
		register(t, s, 1, "a1")
		register(t, s, 5, "b5")
		b.log.take()
		freed := 0
		require.NoError(t, s.FreeAfter([]exec.StreamID{1, 0, 4, 5, 3}, func() { freed++ }))
		assert.Equal(t, []string{
			"enqueue s1 a1", "enqueue s1 b5", "flush s1", "record s1 e1",
			"enqueue s0 a0", "flush s0", "record s0 e2",
		}, b.log.take(), "each reader slot executed and recorded once; unused slot 3 ignored")
		assert.Zero(t, freed)
		assert.Equal(t, 1, s.Collect())

		b.event(t, "e2").fire()
		assert.Equal(t, 1, s.Collect())
		require.NoError(t, s.FlushAll())
		assert.Zero(t, freed, "one reader has not finished: the shared buffer stays")

		b.event(t, "e1").fire()
		assert.Zero(t, freed, "frees run only from Collect or FlushAll")
		assert.Zero(t, s.Collect())
		assert.Equal(t, 1, freed)
		assert.Zero(t, s.Collect())
		require.NoError(t, s.FlushAll())
		assert.Equal(t, 1, freed, "freed once")
	})

	t.Run("ViaFlushAllInOrder", func(t *testing.T) {
		s, b := newRecScheduler(true, exec.SchedulerOptions{MaxStreams: 4})
		register(t, s, 0, "a0")
		register(t, s, 2, "a2")
		var order []string
		require.NoError(t, s.FreeAfter([]exec.StreamID{0}, func() { order = append(order, "x") }))
		require.NoError(t, s.FreeAfter([]exec.StreamID{2}, func() { order = append(order, "y") }))
		require.NoError(t, s.FreeAfter([]exec.StreamID{0, 2}, func() { order = append(order, "z") }))
		b.log.take()
		b.event(t, "e2").fire() // stream 2's first record
		require.NoError(t, s.FlushAll())
		assert.Equal(t, []string{"y"}, order)
		for _, e := range b.events {
			e.fire()
		}
		require.NoError(t, s.FlushAll())
		assert.Equal(t, []string{"y", "x", "z"}, order, "ready frees run in the order they were deferred")
		assert.Zero(t, s.Collect())
	})

	t.Run("FreeMayCallScheduler", func(t *testing.T) {
		s, b := newRecScheduler(true, exec.SchedulerOptions{MaxStreams: 4})
		register(t, s, 0, "a0")
		freed := false
		require.NoError(t, s.FreeAfter([]exec.StreamID{0}, func() {
			assert.Zero(t, s.Collect())
			_, ok := s.Owner(0)
			assert.True(t, ok)
			freed = true
		}))
		b.event(t, "e1").fire()
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
	dev, err := cpu.New(cpu.WithStreams(3))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.Close()) })
	for _, strategy := range []exec.Strategy{exec.Sequential, exec.Interleave} {
		s := exec.NewScheduler(exec.NewDeviceBackend(dev), nil, exec.SchedulerOptions{MaxStreams: 3, Strategy: strategy})
		for i := range 500 {
			var x, y int
			prod := exec.StreamID(0)
			if i%2 == 1 {
				prod = 3 // slot 0 too
			}
			require.NoError(t, s.Register(prod, gpu.TaskFunc(func() {
				runtime.Gosched()
				x = i + 1
			}), nil))
			require.NoError(t, s.Register(1, gpu.TaskFunc(func() { y = x * 2 }), []exec.StreamID{prod}))
			ev, err := s.Record(1)
			require.NoError(t, err)
			require.NoError(t, ev.Wait(t.Context()))
			require.Equal(t, (i+1)*2, y, "strategy %v iteration %d", strategy, i)
		}
		require.NoError(t, s.FlushAll())
		assert.Empty(t, s.Errors(0))
		assert.Empty(t, s.Errors(1))
	}
}

// Interleave on a device (concurrent) backend must not move a stream's
// task onto another stream: work registered later on the stream would
// overtake it.
func TestSchedulerDeviceInterleaveKeepsStreamOrder(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(3))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.Close()) })
	s := exec.NewScheduler(exec.NewDeviceBackend(dev), nil, exec.SchedulerOptions{MaxStreams: 3, Strategy: exec.Interleave})

	gate := make(chan struct{})
	var mu sync.Mutex
	var order []string
	note := func(s string) {
		mu.Lock()
		defer mu.Unlock()
		order = append(order, s)
	}
	require.NoError(t, s.Register(0, gpu.TaskFunc(func() {}), nil))
	require.NoError(t, s.Register(2, gpu.TaskFunc(func() { <-gate; note("first") }), nil))
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{0, 2}))
	second := make(chan struct{})
	require.NoError(t, s.Register(2, gpu.TaskFunc(func() { note("second"); close(second) }), nil))
	require.NoError(t, s.ExecuteStreams([]exec.StreamID{2}))
	select {
	case <-second:
		t.Error("a task overtook an earlier task of its own stream")
	case <-time.After(50 * time.Millisecond):
	}
	close(gate)
	<-second
	require.NoError(t, s.FlushAll())
	for _, st := range []exec.StreamID{0, 1, 2} {
		if _, ok := s.Owner(st); !ok {
			continue
		}
		ev, err := s.Record(st)
		require.NoError(t, err)
		require.NoError(t, ev.Wait(t.Context()))
	}
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"first", "second"}, order)
}

// A buffer read on another stream is not freed until that stream's reads
// ran, on a real device.
func TestSchedulerDeviceFreeAfterSharedBuffer(t *testing.T) {
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, dev.Close()) })
	s := exec.NewScheduler(exec.NewDeviceBackend(dev), nil, exec.SchedulerOptions{MaxStreams: 2})

	buf := []int{0}
	gate := make(chan struct{})
	read := -1
	require.NoError(t, s.Register(0, gpu.TaskFunc(func() { buf[0] = 42 }), nil))
	require.NoError(t, s.Register(1, gpu.TaskFunc(func() { <-gate; read = buf[0] }), []exec.StreamID{0}))
	var freed sync.WaitGroup
	freed.Add(1)
	var isFreed bool
	var freeMu sync.Mutex
	require.NoError(t, s.FreeAfter([]exec.StreamID{0, 1}, func() {
		freeMu.Lock()
		defer freeMu.Unlock()
		buf = nil
		isFreed = true
		freed.Done()
	}))
	time.Sleep(20 * time.Millisecond)
	assert.Equal(t, 1, s.Collect(), "the reader on stream 1 has not run")
	require.NoError(t, s.FlushAll())
	freeMu.Lock()
	assert.False(t, isFreed)
	freeMu.Unlock()

	close(gate)
	deadline := time.Now().Add(10 * time.Second)
	for s.Collect() != 0 {
		require.True(t, time.Now().Before(deadline), "free never ran")
		time.Sleep(time.Millisecond)
	}
	freed.Wait()
	assert.Equal(t, 42, read)
	assert.Nil(t, buf)
}
