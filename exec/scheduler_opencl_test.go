package exec_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
)

// TestSchedulerOpenCLStreams runs the multi-stream scheduler on an
// OpenCL device's streams (NewDeviceBackend: the device's command
// queues, host tasks ordered with them): seeded random programs of host
// tasks on logical streams folded onto the streams' slots, each task
// registered with random argument streams. Every task must find done
// every task registered before it on its own slot and on its argument
// streams' slots; an event recorded on a stream fires only after every
// task registered on it so far; and a stream told to Wait on another's
// event runs what follows after that stream's work.
func TestSchedulerOpenCLStreams(t *testing.T) {
	dev := openCLDevice(t, 3)
	for _, strategy := range []exec.Strategy{exec.Sequential, exec.Interleave} {
		for seed := uint64(1); seed <= 4; seed++ {
			t.Run(fmt.Sprintf("strategy=%d/seed=%d", strategy, seed), func(t *testing.T) {
				runSchedulerProgram(t, dev, strategy, seed)
			})
		}
	}
}

func runSchedulerProgram(t *testing.T, dev gpu.Device, strategy exec.Strategy, seed uint64) {
	const (
		slots   = 3
		logical = 6
		tasks   = 200
	)
	rng := rand.New(rand.NewPCG(seed, seed))
	s := exec.NewScheduler(exec.NewDeviceBackend(dev), nil, exec.SchedulerOptions{MaxStreams: slots, MaxTasks: 8, Strategy: strategy})
	done := make([]atomic.Bool, tasks)
	var bad atomic.Int64           // 1 + the first task that ran too early
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
		require.NoError(t, s.Register(stream, gpu.TaskFunc(func() {
			for _, j := range before {
				if !done[j].Load() {
					bad.CompareAndSwap(0, int64(k)+1)
				}
			}
			done[k].Store(true)
		}), args), "seed %d task %d", seed, k)
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
	require.NoError(t, s.FlushAll())
	for _, id := range s.StreamIDs() {
		ev, err := s.Record(id)
		require.NoError(t, err)
		require.NoError(t, ev.Wait(t.Context()))
	}
	for k := range done {
		require.True(t, done[k].Load(), "seed %d: task %d never ran", seed, k)
	}
	require.Zero(t, bad.Load(), "seed %d: task %d ran before a task it must follow", seed, bad.Load()-1)
	for id := range exec.StreamID(logical) {
		assert.Empty(t, s.Errors(id), "seed %d stream %d", seed, id)
	}
}

// TestSchedulerOpenCLTasksBesideDeviceWork: the scheduler's streams are
// the device's, so its host tasks and device work share one order: a
// task fills a host buffer, a copy, a kernel and a copy back enqueued on
// the same device stream after it see the filled bytes, and a task
// registered on another stream with that stream as its argument sees
// the kernel's result.
func TestSchedulerOpenCLTasksBesideDeviceWork(t *testing.T) {
	dev := openCLDevice(t, 2)
	prog, err := dev.Program("sched", `__kernel void inc(__global int *x) { x[get_global_id(0)] += 1; }`, "")
	require.NoError(t, err)
	const n = 64
	m, err := dev.Alloc(4 * n)
	require.NoError(t, err)
	defer m.Release()
	s := exec.NewScheduler(exec.NewDeviceBackend(dev), nil, exec.SchedulerOptions{MaxStreams: 2})
	for round := range 20 {
		in, out := make([]byte, 4*n), make([]byte, 4*n)
		require.NoError(t, s.Register(0, gpu.TaskFunc(func() {
			for i := range n {
				binary.NativeEndian.PutUint32(in[4*i:], uint32(round*n+i))
			}
		}), nil))
		require.NoError(t, s.ExecuteStreams([]exec.StreamID{0}))
		cs := dev.Stream(0).(gpu.CodeStream)
		require.NoError(t, errOf(cs.CopyIn(m, 0, in)))
		require.NoError(t, errOf(cs.LaunchKernel(&gpu.KernelLaunch{Program: prog, Entry: "inc", Global: []int{n}, Args: []gpu.KernelArg{{Mem: m}}, Label: "inc"})))
		require.NoError(t, errOf(cs.CopyOut(out, m, 0)))
		var got []uint32
		require.NoError(t, s.Register(1, gpu.TaskFunc(func() {
			for i := range n {
				got = append(got, binary.NativeEndian.Uint32(out[4*i:]))
			}
		}), []exec.StreamID{0}))
		ev, err := s.Record(1)
		require.NoError(t, err)
		require.NoError(t, ev.Wait(t.Context()))
		want := make([]uint32, n)
		for i := range want {
			want[i] = uint32(round*n + i + 1)
		}
		require.Equal(t, want, got, "round %d", round)
	}
	require.NoError(t, s.FlushAll())
}
