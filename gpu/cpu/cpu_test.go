package cpu_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/topology"
)

// newCPU returns a CPU device with n streams, closed when the test ends.
func newCPU(t testing.TB, n int) gpu.Device {
	t.Helper()
	d, err := cpu.New(cpu.WithStreams(n))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

func TestNewOptions(t *testing.T) {
	d, err := cpu.New()
	require.NoError(t, err)
	defer d.Close()
	assert.Equal(t, runtime.GOMAXPROCS(0), d.NumStreams(), "default stream count")
	assert.Equal(t, topology.CPU, d.ID())
	info := d.Info()
	assert.Equal(t, topology.CPU, info.ID)
	assert.Equal(t, runtime.NumCPU(), info.Cores)
	for i := range d.NumStreams() {
		s := d.Stream(i)
		assert.Equal(t, i, s.Index())
		assert.Equal(t, topology.CPU, s.Device())
	}

	for _, n := range []int{0, -3} {
		t.Run(fmt.Sprintf("streams=%d", n), func(t *testing.T) {
			d, err := cpu.New(cpu.WithStreams(n))
			require.Error(t, err)
			assert.Nil(t, d)
			assert.Contains(t, err.Error(), fmt.Sprintf("WithStreams(%d)", n))
		})
	}

	d3 := newCPU(t, 3)
	assert.Equal(t, 3, d3.NumStreams())
	assert.PanicsWithValue(t, "cpu: stream 3 out of range [0, 3)", func() { d3.Stream(3) })
	assert.Panics(t, func() { d3.Stream(-1) })
}

// appendTask appends its value to a shared slice; only one stream's worker
// touches the slice, so it needs no lock.
type appendTask struct {
	out *[]int
	v   int
}

func (a *appendTask) Run() { *a.out = append(*a.out, a.v) }

func TestStreamOrder(t *testing.T) {
	d := newCPU(t, 4)
	s := d.Stream(2)
	var got []int
	tasks := make([]appendTask, 1000)
	for i := range tasks {
		tasks[i] = appendTask{out: &got, v: i}
		if i%3 == 0 {
			require.NoError(t, s.Launch(&tasks[i]))
		} else {
			// Mix in batches of one and two.
			require.NoError(t, s.LaunchBatch([]gpu.Task{&tasks[i]}))
		}
	}
	require.NoError(t, s.Synchronize(context.Background()))
	require.Len(t, got, 1000)
	for i, v := range got {
		require.Equal(t, i, v, "task %d ran at position %d", v, i)
	}
}

func TestLaunchBatchOrderAndConcurrentLaunchers(t *testing.T) {
	d := newCPU(t, 1)
	s := d.Stream(0)
	const producers, perProducer = 8, 500
	// Each producer's own tasks must run in its own order.
	last := make([]int, producers)
	for i := range last {
		last[i] = -1
	}
	var bad atomic.Int64
	var wg sync.WaitGroup
	for p := range producers {
		wg.Go(func() {
			for i := 0; i < perProducer; i += 2 {
				mk := func(i int) gpu.Task {
					return gpu.TaskFunc(func() {
						if last[p] != i-1 {
							bad.Add(1)
						}
						last[p] = i
					})
				}
				assert.NoError(t, s.LaunchBatch([]gpu.Task{mk(i), mk(i + 1)}))
			}
		})
	}
	wg.Wait()
	require.NoError(t, s.Synchronize(context.Background()))
	assert.Zero(t, bad.Load(), "tasks of one producer ran out of order")
	for p := range producers {
		assert.Equal(t, perProducer-1, last[p])
	}
}

func TestCrossStreamRecordWait(t *testing.T) {
	d := newCPU(t, 2)
	a, b := d.Stream(0), d.Stream(1)
	ctx := context.Background()
	const rounds = 1000
	var box int // written on a, read on b: -race checks the happens-before
	seen := make([]int, 0, rounds)
	for i := range rounds {
		require.NoError(t, a.Launch(gpu.TaskFunc(func() {
			if i%7 == 0 {
				runtime.Gosched() // let b get ahead and park on the event
			}
			box = i + 1
		})))
		require.NoError(t, b.Wait(a.Record()))
		require.NoError(t, b.Launch(gpu.TaskFunc(func() { seen = append(seen, box) })))
		// a must not overwrite box before b read it.
		require.NoError(t, a.Wait(b.Record()))
	}
	require.NoError(t, b.Synchronize(ctx))
	require.Len(t, seen, rounds)
	for i, v := range seen {
		require.Equal(t, i+1, v, "round %d read a stale value", i)
	}
}

func TestEventSemantics(t *testing.T) {
	d := newCPU(t, 2)
	a, b := d.Stream(0), d.Stream(1)
	ctx := context.Background()

	idle := a.Record()
	assert.True(t, idle.Done(), "event recorded on an idle stream has fired")
	require.NoError(t, idle.Wait(ctx))

	release := make(chan struct{})
	require.NoError(t, a.Launch(gpu.TaskFunc(func() { <-release })))
	e := a.Record()
	assert.False(t, e.Done())

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	assert.ErrorIs(t, e.Wait(cctx), context.Canceled)
	assert.ErrorIs(t, a.Synchronize(cctx), context.Canceled)

	// A wait on the same stream is a no-op, so this does not deadlock.
	require.NoError(t, a.Wait(e))

	// b waits on a's event; an event recorded on b after the wait fires
	// only after e (waits count as queue entries, as in CUDA).
	require.NoError(t, b.Wait(e))
	eb := b.Record()
	assert.False(t, eb.Done())

	waitErr := make(chan error, 1)
	go func() { waitErr <- eb.Wait(ctx) }()
	close(release)
	require.NoError(t, <-waitErr)
	assert.True(t, e.Done())
	assert.True(t, eb.Done())
	require.NoError(t, e.Wait(cctx), "a fired event returns nil even with a done ctx")
}

func TestEventWaitDeadline(t *testing.T) {
	d := newCPU(t, 1)
	s := d.Stream(0)
	release := make(chan struct{})
	require.NoError(t, s.Launch(gpu.TaskFunc(func() { <-release })))
	e := s.Record()
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- e.Wait(ctx) }()
	cancel()
	assert.ErrorIs(t, <-errc, context.Canceled)
	close(release)
	require.NoError(t, e.Wait(context.Background()))
}

// A wait on an event that is not of the stream's device is bridged: the
// tasks queued after it run only once it has fired, and see what was
// written before it fired (-race checks the happens-before). An event's
// own failure is not the stream's.
func TestBridgedWait(t *testing.T) {
	var counter gpu.Counter
	other := newCPU(t, 1)
	otherRelease := make(chan struct{})
	failing := &chanEvent{fire: make(chan struct{}), err: &gpu.CommandError{Stream: 1, Seq: 7, Label: "launch filter", Err: errors.New("out of resources")}}
	plain := &chanEvent{fire: make(chan struct{})}
	tests := []struct {
		name  string
		event func(t *testing.T) gpu.Event // the event, recorded before fire
		fire  func()                       // makes it fire, after writing box
	}{
		{"counter event published from a goroutine",
			func(*testing.T) gpu.Event { return counter.Event(1) },
			func() { counter.Publish(1) }},
		{"another CPU device's event",
			func(t *testing.T) gpu.Event {
				require.NoError(t, other.Stream(0).Launch(gpu.TaskFunc(func() { <-otherRelease })))
				return other.Stream(0).Record()
			},
			func() { close(otherRelease) }},
		{"foreign event",
			func(*testing.T) gpu.Event { return plain },
			func() { close(plain.fire) }},
		{"foreign event that reports a failure",
			func(*testing.T) gpu.Event { return failing },
			func() { close(failing.fire) }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d := newCPU(t, 2)
			s := d.Stream(1)
			var box, seen int
			e := tc.event(t)
			require.False(t, e.Done())
			require.NoError(t, s.Wait(e))
			require.NoError(t, s.Launch(gpu.TaskFunc(func() { seen = box })))
			after := s.Record()
			assert.False(t, after.Done(), "the task behind the bridged wait ran before the event fired")
			fired := make(chan struct{})
			go func() {
				defer close(fired)
				box = 42
				tc.fire()
			}()
			require.NoError(t, s.Synchronize(context.Background()), "the event's outcome is not the stream's")
			<-fired
			assert.True(t, e.Done())
			assert.Equal(t, 42, seen)
		})
	}
}

// Wait queues nothing for an event that has fired, whatever its kind, and
// refuses a nil one.
func TestWaitFiredOrNil(t *testing.T) {
	d1 := newCPU(t, 1)
	d2 := newCPU(t, 1)
	var counter gpu.Counter
	counter.Publish(3)
	for _, tc := range []struct {
		name string
		e    gpu.Event
	}{
		{"fired foreign event", foreignEvent{}},
		{"reached counter event", counter.Event(3)},
		{"idle stream of another CPU device", d2.Stream(0).Record()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, d1.Stream(0).Wait(tc.e))
			assert.True(t, d1.Stream(0).Record().Done(), "nothing was queued")
		})
	}
	err := d1.Stream(0).Wait(nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nil event")
}

// Close does not wait for a bridged wait that never fires: the wait gives
// up, the tasks behind it run once each, and the stream's Synchronize says
// so with an error wrapping gpu.ErrClosed.
func TestCloseGivesUpBridgedWait(t *testing.T) {
	tests := []struct {
		name    string
		pending func(entered chan struct{}) gpu.Event
	}{
		{"counter event", func(entered chan struct{}) gpu.Event {
			close(entered) // a Counter cannot say when its waiter parks; Close gives it up either way
			return new(gpu.Counter).Event(1)
		}},
		{"foreign event blocked in Wait", func(entered chan struct{}) gpu.Event {
			return &blockingEvent{entered: entered}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := cpu.New(cpu.WithStreams(2))
			require.NoError(t, err)
			s := d.Stream(0)
			entered := make(chan struct{})
			e := tc.pending(entered)
			var ran atomic.Int64
			require.NoError(t, s.Wait(e))
			require.NoError(t, s.Launch(gpu.TaskFunc(func() { ran.Add(1) })))
			<-entered
			closed := make(chan error, 1)
			go func() { closed <- d.Close() }()
			select {
			case err := <-closed:
				require.NoError(t, err)
			case <-time.After(time.Minute): // a hang guard: a correct Close returns at once
				t.Fatal("Close hangs on a bridged wait")
			}
			assert.Equal(t, int64(1), ran.Load(), "the task behind the given-up wait ran once")
			err = s.Synchronize(context.Background())
			require.ErrorIs(t, err, gpu.ErrClosed)
			assert.Contains(t, err.Error(), "cpu: cpu stream 0: wait on ")
			assert.Contains(t, err.Error(), "given up at Close")
			require.NoError(t, s.Synchronize(context.Background()), "reported once")
			assert.ErrorIs(t, s.Wait(e), gpu.ErrClosed)
		})
	}
}

type foreignEvent struct{}

func (foreignEvent) Done() bool                     { return true }
func (foreignEvent) Wait(ctx context.Context) error { return nil }

// chanEvent fires when fire is closed; its Wait then returns err.
type chanEvent struct {
	fire chan struct{}
	err  error
}

func (e *chanEvent) Done() bool {
	select {
	case <-e.fire:
		return true
	default:
		return false
	}
}

func (e *chanEvent) Wait(ctx context.Context) error {
	select {
	case <-e.fire:
		return e.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// blockingEvent never fires; its Wait closes entered, then blocks until
// ctx is done.
type blockingEvent struct{ entered chan struct{} }

func (*blockingEvent) Done() bool { return false }

func (e *blockingEvent) Wait(ctx context.Context) error {
	close(e.entered)
	<-ctx.Done()
	return ctx.Err()
}

func TestSynchronizeReturnsPanic(t *testing.T) {
	d := newCPU(t, 1)
	s := d.Stream(0)
	ctx := context.Background()
	boom := errors.New("boom")
	var after atomic.Int64
	require.NoError(t, s.Launch(gpu.TaskFunc(func() { panic(boom) })))
	require.NoError(t, s.Launch(gpu.TaskFunc(func() { panic("second") })))
	require.NoError(t, s.Launch(gpu.TaskFunc(func() { after.Add(1) })))

	err := s.Synchronize(ctx)
	require.Error(t, err)
	var pe *gpu.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, boom, pe.Value, "the first panic is kept")
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, 1, pe.More)
	assert.Equal(t, 0, pe.Stream)
	assert.False(t, pe.Goexit)
	assert.Contains(t, string(pe.Stack), "TestSynchronizeReturnsPanic")
	assert.Equal(t, "gpu: cpu stream 0: task panicked: boom (and 1 more)", err.Error())
	assert.Equal(t, int64(1), after.Load(), "tasks after a panic still run")

	require.NoError(t, s.Synchronize(ctx), "the panic is reported once")
	require.NoError(t, s.Launch(gpu.TaskFunc(func() { after.Add(1) })))
	require.NoError(t, s.Synchronize(ctx))
	assert.Equal(t, int64(2), after.Load())
}

func TestGoexitInTask(t *testing.T) {
	d := newCPU(t, 2)
	s := d.Stream(1)
	var ran []int
	require.NoError(t, s.LaunchBatch([]gpu.Task{
		gpu.TaskFunc(func() { ran = append(ran, 1) }),
		gpu.TaskFunc(func() { runtime.Goexit() }),
		gpu.TaskFunc(func() { ran = append(ran, 3) }),
	}))
	err := s.Synchronize(context.Background())
	var pe *gpu.PanicError
	require.ErrorAs(t, err, &pe)
	assert.True(t, pe.Goexit)
	assert.Equal(t, 1, pe.Stream)
	assert.Equal(t, []int{1, 3}, ran, "the batch goes on after the Goexit")
	// The stream still works after its worker was replaced.
	require.NoError(t, s.Launch(gpu.TaskFunc(func() { ran = append(ran, 4) })))
	require.NoError(t, s.Synchronize(context.Background()))
	assert.Equal(t, []int{1, 3, 4}, ran)
}

func TestCloseDrainsAndRefuses(t *testing.T) {
	d, err := cpu.New(cpu.WithStreams(3))
	require.NoError(t, err)
	var n atomic.Int64
	release := make(chan struct{})
	require.NoError(t, d.Stream(0).Launch(gpu.TaskFunc(func() { <-release })))
	for i := range 300 {
		require.NoError(t, d.Stream(i%3).Launch(gpu.TaskFunc(func() { n.Add(1) })))
	}
	// Stream 1 waits on stream 0, which is blocked until release.
	require.NoError(t, d.Stream(1).Wait(d.Stream(0).Record()))
	require.NoError(t, d.Stream(1).Launch(gpu.TaskFunc(func() { n.Add(1) })))

	closed := make(chan error, 2)
	go func() { closed <- d.Close() }()
	go func() { closed <- d.Close() }()
	close(release)
	require.NoError(t, <-closed)
	require.NoError(t, <-closed)
	assert.Equal(t, int64(301), n.Load(), "Close ran every queued task")

	require.NoError(t, d.Close(), "Close is idempotent")
	for i := range 3 {
		s := d.Stream(i)
		assert.ErrorIs(t, s.Launch(gpu.TaskFunc(func() { n.Add(1) })), gpu.ErrClosed)
		assert.ErrorIs(t, s.LaunchBatch([]gpu.Task{gpu.TaskFunc(func() {})}), gpu.ErrClosed)
		assert.ErrorIs(t, s.Wait(d.Stream((i+1)%3).Record()), gpu.ErrClosed)
		assert.True(t, s.Record().Done())
		assert.NoError(t, s.Synchronize(context.Background()))
	}
	assert.Equal(t, int64(301), n.Load())
}

func TestNilTask(t *testing.T) {
	d := newCPU(t, 1)
	s := d.Stream(0)
	assert.Error(t, s.Launch(nil))
	var ran atomic.Bool
	err := s.LaunchBatch([]gpu.Task{gpu.TaskFunc(func() { ran.Store(true) }), nil})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "index 1 of a batch of 2")
	require.NoError(t, s.Synchronize(context.Background()))
	assert.False(t, ran.Load(), "a rejected batch queues nothing")
}

func TestTaskLaunchesFromTask(t *testing.T) {
	// A task may queue more work on its own or another stream.
	d := newCPU(t, 2)
	a, b := d.Stream(0), d.Stream(1)
	var got []int
	require.NoError(t, a.LaunchBatch([]gpu.Task{
		gpu.TaskFunc(func() {
			got = append(got, 1)
			assert.NoError(t, a.Launch(gpu.TaskFunc(func() { got = append(got, 3) })))
			assert.NoError(t, b.Wait(a.Record()))
		}),
		gpu.TaskFunc(func() { got = append(got, 2) }),
	}))
	require.NoError(t, a.Synchronize(context.Background()))
	require.NoError(t, a.Synchronize(context.Background()))
	assert.Equal(t, []int{1, 2, 3}, got)
}

// TestManyStreamsStress runs a random-ish DAG of waits across streams and
// checks every consumer sees its producer's write.
func TestManyStreamsStress(t *testing.T) {
	const streams, rounds = 6, 300
	d := newCPU(t, streams)
	vals := make([]int, streams) // vals[i] written only on stream i
	var bad atomic.Int64
	for r := range rounds {
		src := r % streams
		dst := (r*5 + 1) % streams
		if src == dst {
			continue
		}
		want := r
		require.NoError(t, d.Stream(src).Launch(gpu.TaskFunc(func() { vals[src] = want })))
		require.NoError(t, d.Stream(dst).Wait(d.Stream(src).Record()))
		require.NoError(t, d.Stream(dst).Launch(gpu.TaskFunc(func() {
			if vals[src] < want {
				bad.Add(1)
			}
		})))
		// The next writer of vals[src] must come after this read.
		require.NoError(t, d.Stream(src).Wait(d.Stream(dst).Record()))
	}
	for i := range streams {
		require.NoError(t, d.Stream(i).Synchronize(context.Background()))
	}
	assert.Zero(t, bad.Load())
}

type nopTask struct{ n int }

func (t *nopTask) Run() { t.n++ }

func TestLaunchDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own")
	}
	d := newCPU(t, 1)
	s := d.Stream(0)
	task := &nopTask{}
	ctx := context.Background()
	// Grow both of the stream's swapped queue slices.
	for range 4 {
		for range 4096 {
			require.NoError(t, s.Launch(task))
		}
		require.NoError(t, s.Synchronize(ctx))
	}
	allocs := testing.AllocsPerRun(1000, func() { _ = s.Launch(task) })
	require.NoError(t, s.Synchronize(ctx))
	assert.Zero(t, allocs, "allocations per Launch")

	ev := s.Record()
	allocs = testing.AllocsPerRun(1000, func() {
		_ = s.Launch(task)
		_ = s.Wait(ev) // fired: queues nothing
		_ = ev.Done()
	})
	require.NoError(t, s.Synchronize(ctx))
	assert.Zero(t, allocs, "allocations per Launch + satisfied Wait + Done")
}

func TestDriver(t *testing.T) {
	assert.Contains(t, gpu.Drivers(), cpu.Kind)
	for _, tc := range []struct {
		name string
		opts []gpu.Option
		want int
	}{
		{"default", nil, runtime.GOMAXPROCS(0)},
		{"three", []gpu.Option{gpu.WithStreams(3)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			set, err := gpu.Open(t.Context(), cpu.Kind, tc.opts...)
			require.NoError(t, err)
			require.Len(t, set.Devices(), 1)
			d := set.Devices()[0]
			assert.Equal(t, topology.CPU, d.ID())
			assert.Equal(t, cpu.Kind, d.Kind())
			assert.Equal(t, tc.want, d.NumStreams())
			require.NoError(t, set.Close())
			assert.ErrorIs(t, d.Stream(0).Launch(gpu.TaskFunc(func() {})), gpu.ErrClosed, "the set's Close closes the device")
		})
	}
	set, err := gpu.Open(t.Context(), cpu.Kind, gpu.WithStreams(-1))
	assert.EqualError(t, err, "gpu: WithStreams(-1): want at least 1 stream")
	assert.Nil(t, set)
	set, err = gpu.Open(t.Context(), cpu.Kind, gpu.WithStreams(2000))
	assert.EqualError(t, err, "cpu: WithStreams(2000): a CPU device has 1 to 1024 streams")
	assert.Nil(t, set)
	set, err = gpu.Open(t.Context(), cpu.Kind, gpu.WithDriverSetting(setting("sim")))
	assert.EqualError(t, err, `gpu: a setting of driver "sim" (cpu_test.setting) given to driver "cpu"`)
	assert.Nil(t, set)
	drv, err := gpu.Lookup(cpu.Kind)
	require.NoError(t, err)
	cfg, err := gpu.NewConfig(gpu.WithDriverSetting(setting(cpu.Kind)))
	require.NoError(t, err)
	set, err = drv.Open(t.Context(), cfg)
	assert.EqualError(t, err, "cpu: open: a driver setting cpu_test.setting: the CPU driver takes none")
	assert.Nil(t, set)
}

// setting is a driver setting of the kind it names.
type setting string

func (s setting) DriverKind() string { return string(s) }
