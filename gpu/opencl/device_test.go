package opencl_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	osexec "os/exec"
	"runtime"
	"slices"
	"strconv"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cl"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cltest"
	"github.com/streamdag/streamdag/topology"
)

// newDevice opens device(t) as a gpu.CodeDevice with streams streams,
// closed (and checked) at cleanup.
func newDevice(t testing.TB, streams int) gpu.CodeDevice {
	t.Helper()
	d, err := opencl.NewDevice(device(t), opencl.WithStreams(streams))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, d.Close()) })
	return d
}

func codeStream(d gpu.Device, i int) gpu.CodeStream { return d.Stream(i).(gpu.CodeStream) }

func devProgram(t testing.TB, d gpu.CodeDevice) gpu.Program {
	t.Helper()
	p, err := d.Program("test", kernels, "")
	require.NoError(t, err)
	return p
}

func alloc(t testing.TB, d gpu.CodeDevice, n int64) gpu.Memory {
	t.Helper()
	m, err := d.Alloc(n)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, m.Release()) })
	return m
}

func mem(m gpu.Memory) gpu.KernelArg { return gpu.KernelArg{Mem: m} }
func scalar(v any) gpu.KernelArg     { return gpu.KernelArg{Scalar: v} }

// recordWait records an event on s and waits for it, returning its Wait.
func recordWait(t testing.TB, s gpu.Stream) error {
	t.Helper()
	return s.Record().Wait(t.Context())
}

func TestDriverOpen(t *testing.T) {
	device(t)
	set, err := gpu.Open(t.Context(), opencl.Kind, gpu.WithStreams(3))
	require.NoError(t, err)
	defer func() { assert.NoError(t, set.Close()) }()
	devs := set.Devices()
	require.NotEmpty(t, devs)
	for i, d := range devs {
		assert.Equal(t, topology.OpenCL(i), d.ID())
		assert.Equal(t, "opencl"+string(rune('0'+i)), d.ID().String())
		assert.Equal(t, "opencl", d.Kind())
		assert.Equal(t, 3, d.NumStreams())
		cd, ok := d.(gpu.CodeDevice)
		require.True(t, ok, "an OpenCL device is a gpu.CodeDevice")
		assert.Equal(t, "opencl", cd.Code())
		info := d.Info()
		assert.Equal(t, d.ID(), info.ID)
		assert.NotEmpty(t, info.Name)
		assert.NotEmpty(t, info.Vendor)
		assert.Positive(t, info.MemoryBytes)
		assert.Positive(t, info.Cores)
		for j := range d.NumStreams() {
			s, ok := d.Stream(j).(gpu.CodeStream)
			require.True(t, ok)
			assert.Equal(t, j, s.Index())
			assert.Equal(t, d.ID(), s.Device())
		}
		assert.Panics(t, func() { d.Stream(3) })
	}
	_, err = gpu.Open(t.Context(), opencl.Kind, gpu.WithStreams(opencl.MaxStreams+1))
	assert.ErrorContains(t, err, "opencl: open: 65 streams per device: want 1 to 64")
	_, err = gpu.Open(t.Context(), opencl.Kind, gpu.WithDriverSetting(setting(opencl.Kind)))
	assert.EqualError(t, err, "opencl: open: a driver setting opencl_test.setting: the OpenCL driver takes none")
	_, err = gpu.Open(t.Context(), opencl.Kind, gpu.WithDriverSetting(setting("sim")))
	assert.EqualError(t, err, `gpu: a setting of driver "sim" (opencl_test.setting) given to driver "opencl"`)
}

func TestNewDeviceBadInput(t *testing.T) {
	dev := device(t)
	for _, tc := range []struct {
		name string
		opts []opencl.Option
		want string
	}{
		{"no streams", []opencl.Option{opencl.WithStreams(0)}, "opencl: WithStreams(0): want 1 to 64 streams"},
		{"negative streams", []opencl.Option{opencl.WithStreams(-2)}, "opencl: WithStreams(-2): want 1 to 64 streams"},
		{"too many streams", []opencl.Option{opencl.WithStreams(opencl.MaxStreams + 1)}, "opencl: WithStreams(65): want 1 to 64 streams"},
		{"negative index", []opencl.Option{opencl.WithIndex(-1)}, "opencl: WithIndex(-1): the index must not be negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := opencl.NewDevice(dev, tc.opts...)
			assert.Nil(t, d)
			assert.EqualError(t, err, tc.want)
		})
	}
	d, err := opencl.NewDevice(dev, opencl.WithIndex(5), nil)
	require.NoError(t, err)
	assert.Equal(t, "opencl5", d.ID().String())
	assert.Equal(t, 1, d.NumStreams(), "without WithStreams")
	require.NoError(t, d.Close())
	d, err = opencl.NewDevice(dev, opencl.WithStreams(opencl.MaxStreams))
	require.NoError(t, err)
	assert.Equal(t, opencl.MaxStreams, d.NumStreams())
	require.NoError(t, d.Close())
}

// TestDeviceStreamsOverlap: two kernels on two streams run at the same
// time: each sees the other's flag while it spins.
func TestDeviceStreamsOverlap(t *testing.T) {
	d := newDevice(t, 2)
	if d.Info().Cores < 2 {
		t.Skipf("%s has %d compute unit: two kernels cannot overlap", d.ID(), d.Info().Cores)
	}
	p := devProgram(t, d)
	flags, result := alloc(t, d, 8), alloc(t, d, 8)
	s0, s1 := codeStream(d, 0), codeStream(d, 1)
	require.NoError(t, errOf(s0.Fill(flags, 0, 8, []byte{0, 0, 0, 0})))
	require.NoError(t, errOf(s0.Fill(result, 0, 8, []byte{0xff, 0xff, 0xff, 0xff})))
	require.NoError(t, s1.Wait(s0.Record()))
	var evs []gpu.Event
	for me, s := range []gpu.CodeStream{s0, s1} {
		require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "handshake", Global: []int{1},
			Args: []gpu.KernelArg{mem(flags), scalar(int32(me)), scalar(int32(1 - me)), scalar(int64(1 << 33)), mem(result)}})))
		evs = append(evs, s.Record())
	}
	for _, e := range evs {
		require.NoError(t, e.Wait(t.Context()))
	}
	got := make([]int32, 2)
	require.NoError(t, errOf(s1.CopyOut(cltest.BytesOf(got), result, 0)))
	require.NoError(t, recordWait(t, s1))
	assert.Equal(t, []int32{1, 1}, got, "each kernel saw the other's flag while it ran")
}

// TestDeviceCrossStreamDependency: a slow producer on stream 0, a
// consumer on stream 1 after Wait(Record()): the consumer always reads
// the producer's bytes, and the producer's next round waits for it.
func TestDeviceCrossStreamDependency(t *testing.T) {
	d := newDevice(t, 2)
	p := devProgram(t, d)
	const n = 256
	in, out := alloc(t, d, 4*n), alloc(t, d, 4*n)
	s0, s1 := codeStream(d, 0), codeStream(d, 1)
	const seed = 11
	rng := rand.New(rand.NewPCG(seed, seed))
	got := make([]int32, n)
	for round := range 20 {
		v := rng.Int32N(1 << 20)
		require.NoError(t, errOf(s0.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "produce", Global: []int{n},
			Args: []gpu.KernelArg{mem(in), scalar(v), scalar(int64(20000))}, Label: "produce"})))
		require.NoError(t, s1.Wait(s0.Record()))
		require.NoError(t, errOf(s1.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "consume", Global: []int{n},
			Args: []gpu.KernelArg{mem(in), mem(out)}, Label: "consume"})))
		require.NoError(t, errOf(s1.CopyOut(cltest.BytesOf(got), out, 0)))
		e1 := s1.Record()
		require.NoError(t, s0.Wait(e1))
		require.NoError(t, e1.Wait(t.Context()))
		for i, g := range got {
			require.Equal(t, 2*v+1, g, "seed %d round %d element %d", seed, round, i)
		}
	}
	require.NoError(t, recordWait(t, s0))
}

// gate is a CPU-device event that fires when open is closed.
func gate(t *testing.T) (gpu.Event, chan struct{}) {
	t.Helper()
	c, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	open := make(chan struct{})
	require.NoError(t, c.Stream(0).Launch(gpu.TaskFunc(func() { <-open })))
	return c.Stream(0).Record(), open
}

// TestDeviceWaitBridgesCPUEvent: an OpenCL stream waits on a CPU
// device's event; the copy in, kernel and copy out behind the wait run
// only once the CPU task has written the bytes, and CopyIn returns
// while the wait holds the queue (it does not block).
func TestDeviceWaitBridgesCPUEvent(t *testing.T) {
	d := newDevice(t, 1)
	p := devProgram(t, d)
	c, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close()) }()
	const n = 1024
	host := make([]int32, n)
	open := make(chan struct{})
	require.NoError(t, c.Stream(0).Launch(gpu.TaskFunc(func() {
		<-open
		for i := range host {
			host[i] = int32(i) * 3
		}
	})))
	ce := c.Stream(0).Record()
	in, out := alloc(t, d, 4*n), alloc(t, d, 4*n)
	s := codeStream(d, 0)
	require.NoError(t, s.Wait(ce))
	require.NoError(t, errOf(s.CopyIn(in, 0, cltest.BytesOf(host))))
	require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "consume", Global: []int{n}, Args: []gpu.KernelArg{mem(in), mem(out)}})))
	got := make([]int32, n)
	require.NoError(t, errOf(s.CopyOut(cltest.BytesOf(got), out, 0)))
	e := s.Record()
	assert.False(t, e.Done(), "the OpenCL event fired before the CPU event it waits on")
	close(open)
	require.NoError(t, e.Wait(t.Context()))
	for i, g := range got {
		require.Equal(t, int32(i)*6+1, g, "element %d", i)
	}
}

// TestCPUWaitsOnDeviceEvent: the reverse bridge: a CPU stream's task
// waits on an OpenCL event and then reads the bytes the device copied
// out; it sees the producer's values.
func TestCPUWaitsOnDeviceEvent(t *testing.T) {
	d := newDevice(t, 1)
	p := devProgram(t, d)
	c, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close()) }()
	ce, open := gate(t)
	const n = 512
	buf := alloc(t, d, 4*n)
	s := codeStream(d, 0)
	require.NoError(t, s.Wait(ce)) // hold the device until the CPU task is queued
	require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "produce", Global: []int{n},
		Args: []gpu.KernelArg{mem(buf), scalar(int32(77)), scalar(int64(1000))}})))
	got := make([]int32, n)
	require.NoError(t, errOf(s.CopyOut(cltest.BytesOf(got), buf, 0)))
	e := s.Record()
	var seen []int32
	var waitErr error
	require.NoError(t, c.Stream(0).Launch(gpu.TaskFunc(func() {
		waitErr = e.Wait(context.Background())
		seen = slices.Clone(got)
	})))
	close(open)
	require.NoError(t, c.Stream(0).Synchronize(t.Context()))
	require.NoError(t, waitErr)
	require.Len(t, seen, n)
	for i, g := range seen {
		require.Equal(t, int32(77), g, "element %d", i)
	}
}

// TestDeviceHostTaskOrdered: a host task between two kernels runs after
// the first kernel and the copy out before it, and the copy in and
// kernel after it see what it wrote.
func TestDeviceHostTaskOrdered(t *testing.T) {
	d := newDevice(t, 1)
	p := devProgram(t, d)
	const n = 256
	a, b, out := alloc(t, d, 4*n), alloc(t, d, 4*n), alloc(t, d, 4*n)
	s := codeStream(d, 0)
	mid := make([]int32, n)
	next := make([]int32, n)
	got := make([]int32, n)
	require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "produce", Global: []int{n},
		Args: []gpu.KernelArg{mem(a), scalar(int32(5)), scalar(int64(50000))}})))
	require.NoError(t, errOf(s.CopyOut(cltest.BytesOf(mid), a, 0)))
	var sawFirst bool
	require.NoError(t, s.Launch(gpu.TaskFunc(func() {
		sawFirst = !slices.ContainsFunc(mid, func(v int32) bool { return v != 5 })
		for i := range next {
			next[i] = mid[i] + int32(i)
		}
	})))
	require.NoError(t, errOf(s.CopyIn(b, 0, cltest.BytesOf(next))))
	require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "consume", Global: []int{n}, Args: []gpu.KernelArg{mem(b), mem(out)}})))
	require.NoError(t, errOf(s.CopyOut(cltest.BytesOf(got), out, 0)))
	require.NoError(t, recordWait(t, s))
	assert.True(t, sawFirst, "the host task ran after the first kernel and its copy out")
	for i, g := range got {
		require.Equal(t, (5+int32(i))*2+1, g, "element %d", i)
	}
	require.NoError(t, s.Synchronize(t.Context()))
}

// TestDeviceHostTaskPanic: a panicking host task is recovered; the next
// Synchronize returns it and later work runs.
func TestDeviceHostTaskPanic(t *testing.T) {
	d := newDevice(t, 1)
	s := d.Stream(0)
	ran := 0
	require.NoError(t, s.LaunchBatch([]gpu.Task{
		gpu.TaskFunc(func() { ran++ }),
		gpu.TaskFunc(func() { panic("boom") }),
		gpu.TaskFunc(func() { panic("again") }),
		gpu.TaskFunc(func() { ran++ }),
	}))
	err := s.Synchronize(t.Context())
	var pe *gpu.PanicError
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, "boom", pe.Value)
	assert.Equal(t, 1, pe.More)
	assert.Equal(t, d.ID(), pe.Device)
	assert.EqualError(t, pe, "gpu: opencl0 stream 0: task panicked: boom (and 1 more)")
	assert.Equal(t, 2, ran)
	assert.NoError(t, s.Synchronize(t.Context()), "the panic is forgotten")
	require.NoError(t, s.Launch(gpu.TaskFunc(func() { ran++ })))
	require.NoError(t, s.Synchronize(t.Context()))
	assert.Equal(t, 3, ran)
	require.NoError(t, s.LaunchBatch([]gpu.Task{
		gpu.TaskFunc(func() { runtime.Goexit() }),
		gpu.TaskFunc(func() { ran++ }),
	}))
	require.NoError(t, s.Launch(gpu.TaskFunc(func() { ran++ })))
	require.ErrorAs(t, s.Synchronize(t.Context()), &pe)
	assert.True(t, pe.Goexit)
	assert.Equal(t, 5, ran, "the tasks after the Goexit ran")
	assert.ErrorContains(t, s.Launch(nil), "nil task")
	assert.ErrorContains(t, s.LaunchBatch([]gpu.Task{gpu.TaskFunc(func() {}), nil}), "nil task at index 1 of 2")
}

// TestDeviceCopyRoundTrip: 1 MiB of seeded random bytes in on one
// stream and out on another; CopyIn and CopyOut return while the stream
// is held by an unfired CPU event, so they are asynchronous.
func TestDeviceCopyRoundTrip(t *testing.T) {
	d := newDevice(t, 2)
	const n, seed = 1 << 20, 3
	rng := rand.New(rand.NewPCG(seed, seed))
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	m := alloc(t, d, n)
	s0, s1 := codeStream(d, 0), codeStream(d, 1)
	ce, open := gate(t)
	require.NoError(t, s0.Wait(ce))
	require.NoError(t, errOf(s0.CopyIn(m, 0, src)))
	require.NoError(t, s1.Wait(s0.Record()))
	dst := make([]byte, n)
	require.NoError(t, errOf(s1.CopyOut(dst, m, 0)))
	e := s1.Record()
	assert.False(t, e.Done(), "the copies ran before the event they wait on")
	close(open)
	require.NoError(t, e.Wait(t.Context()))
	assert.True(t, bytesEqual(src, dst), "seed %d: the bytes came back changed", seed)

	// Copy and Fill on the device, read back in part.
	m2 := alloc(t, d, n)
	require.NoError(t, errOf(s0.Fill(m2, 0, n, []byte{0xab, 0xcd})))
	require.NoError(t, errOf(s0.Copy(m2, 4096, m, 8192, 4096)))
	part := make([]byte, 3*4096)
	require.NoError(t, errOf(s0.CopyOut(part, m2, 0)))
	require.NoError(t, recordWait(t, s0))
	assert.Equal(t, []byte{0xab, 0xcd}, part[:2])
	assert.True(t, bytesEqual(src[8192:12288], part[4096:8192]), "seed %d: the device copy", seed)
	assert.Equal(t, []byte{0xab, 0xcd}, part[8192:8194])
}

func bytesEqual(a, b []byte) bool { return string(a) == string(b) }

// TestDeviceBuildError: a compile error keeps the *BuildError with the
// compiler's log, naming the program.
func TestDeviceBuildError(t *testing.T) {
	d := newDevice(t, 1)
	_, err := d.Program("broken", "__kernel void k(__global int *p) { p[0] = undefined_name; }", "")
	var be *opencl.BuildError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, "broken", be.Program)
	assert.Equal(t, device(t).Name, be.Device)
	assert.Contains(t, be.Log, "undefined_name")
	assert.ErrorIs(t, be, cl.BuildProgramFailure, "Unwrap gives the failed call's status")
	assert.Contains(t, err.Error(), `build program "broken"`)
	assert.Contains(t, err.Error(), "opencl0")
	p1, err := d.Program("a", kernels, "")
	require.NoError(t, err)
	p2, err := d.Program("b", kernels, "")
	require.NoError(t, err)
	assert.Same(t, p1, p2, "the same source is built once")
	assert.Equal(t, "a", p2.Name())
}

// fakeMemory and fakeProgram are of no OpenCL device.
type fakeMemory struct{}

func (fakeMemory) Device() topology.DeviceID { return topology.GPU(9) }
func (fakeMemory) Bytes() int64              { return 4 }
func (fakeMemory) Release() error            { return nil }
func (fakeMemory) Zero() error               { return nil }

type fakeProgram struct{}

func (fakeProgram) Name() string { return "fake" }

func TestDeviceLaunchBadInput(t *testing.T) {
	d := newDevice(t, 1)
	p := devProgram(t, d)
	s := codeStream(d, 0)
	buf := alloc(t, d, 4096)
	released, err := d.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, released.Release())
	require.NoError(t, released.Release(), "Release is idempotent")
	touch := func(args ...gpu.KernelArg) *gpu.KernelLaunch {
		return &gpu.KernelLaunch{Program: p, Entry: "touch", Global: []int{1}, Args: args, Label: "touch it"}
	}
	for _, tc := range []struct {
		name string
		k    *gpu.KernelLaunch
		want string
		is   error
	}{
		{"nil launch", nil, "opencl: opencl0 stream 0: launch: nil KernelLaunch", nil},
		{"program of no device", &gpu.KernelLaunch{Program: fakeProgram{}, Entry: "touch", Global: []int{1}}, "opencl: opencl0 stream 0: launch touch: program not built by this device (opencl_test.fakeProgram)", nil},
		{"unknown entry", &gpu.KernelLaunch{Program: p, Entry: "nope", Global: []int{1}, Label: "nope"}, "CL_INVALID_KERNEL_NAME", cl.InvalidKernelName},
		{"memory of another device", touch(gpu.KernelArg{Mem: fakeMemory{}}), "touch it: argument 0: memory of another device (gpu9)", nil},
		{"released memory", touch(mem(released)), "touch it: argument 0: memory released", gpu.ErrClosed},
		{"offset outside", touch(gpu.KernelArg{Mem: buf, Offset: 4096}), "touch it: argument 0: offset 4096 outside the 4096-byte memory", nil},
		{"negative offset", touch(gpu.KernelArg{Mem: buf, Offset: -128}), "touch it: argument 0: offset -128 outside the 4096-byte memory", nil},
		{"nil program", &gpu.KernelLaunch{Entry: "touch", Global: []int{1}, Args: []gpu.KernelArg{mem(buf)}}, "launch touch: program not built by this device (<nil>)", nil},
		{"unaligned offset", touch(gpu.KernelArg{Mem: buf, Offset: 4}), "touch it: argument 0: offset 4 is not a multiple of the device's", nil},
		{"scalar of type int", &gpu.KernelLaunch{Program: p, Entry: "produce", Global: []int{1}, Args: []gpu.KernelArg{mem(buf), scalar(7), scalar(int64(0))}},
			"launch produce: argument 1: scalar of type int: want int32, uint32, int64, uint64, float32 or float64", nil},
		{"zero argument", touch(gpu.KernelArg{}), "touch it: argument 0: neither memory nor a scalar", nil},
		{"bad shape", &gpu.KernelLaunch{Program: p, Entry: "touch", Global: []int{1, 1, 1, 1}, Args: []gpu.KernelArg{mem(buf)}}, "want 1 to 3 dimensions", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := errOf(s.LaunchKernel(tc.k))
			require.Error(t, err)
			assert.ErrorContains(t, err, tc.want)
			if tc.is != nil {
				assert.ErrorIs(t, err, tc.is)
			}
		})
	}
	assert.ErrorContains(t, errOf(s.CopyIn(fakeMemory{}, 0, []byte{1})), "copy in: memory of another device (gpu9)")
	assert.ErrorIs(t, errOf(s.CopyOut([]byte{1}, released, 0)), gpu.ErrClosed)
	assert.ErrorContains(t, errOf(s.CopyIn(buf, 4095, []byte{1, 2})), "range [4095, 4097) outside the 4096-byte buffer")
	assert.ErrorContains(t, s.Wait(nil), "opencl: opencl0 stream 0: wait on a nil event")
	require.NoError(t, recordWait(t, s), "bad input enqueued nothing that failed")
}

// TestDeviceArgumentOffset: an aligned offset binds a sub-buffer: the
// kernel touches the element at that byte offset only.
func TestDeviceArgumentOffset(t *testing.T) {
	d := newDevice(t, 1)
	p := devProgram(t, d)
	s := codeStream(d, 0)
	align := opencl.BaseAlignForTest(d)
	require.Positive(t, align)
	n := 3 * align / 4 // int32 elements over 3 alignments
	buf := alloc(t, d, 4*n)
	require.NoError(t, errOf(s.Fill(buf, 0, 4*n, []byte{0, 0, 0, 0})))
	for range 2 { // the second launch reuses the sub-buffer and the set argument
		require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "touch", Global: []int{1}, Args: []gpu.KernelArg{{Mem: buf, Offset: align}}})))
	}
	require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "touch", Global: []int{1}, Args: []gpu.KernelArg{mem(buf)}})))
	got := make([]int32, n)
	require.NoError(t, errOf(s.CopyOut(cltest.BytesOf(got), buf, 0)))
	require.NoError(t, recordWait(t, s))
	want := make([]int32, n)
	want[0], want[align/4] = 1, 2
	assert.Equal(t, want, got)
}

func TestDeviceAllocBudget(t *testing.T) {
	d := newDevice(t, 1)
	total := d.Info().MemoryBytes
	m := alloc(t, d, 1<<20)
	assert.Equal(t, int64(1<<20), m.Bytes())
	assert.Equal(t, d.ID(), m.Device())
	_, err := d.Alloc(total)
	assert.EqualError(t, err, "opencl: opencl0: alloc "+itoa(total)+" bytes: 1048576 of its "+itoa(total)+" bytes are in use")
	_, err = d.Alloc(-1)
	assert.EqualError(t, err, "opencl: opencl0: alloc -1 bytes: the size must not be negative")
	empty := alloc(t, d, 0)
	assert.Zero(t, empty.Bytes())
	require.NoError(t, m.Release())
	m2, err := d.Alloc(1 << 20)
	require.NoError(t, err, "a released allocation returns its bytes")
	require.NoError(t, m2.Release())
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// TestDeviceClose: Close waits for work in flight, is idempotent, and
// refuses new work with gpu.ErrClosed; Record after Close returns a
// fired event; the leak check in TestMain sees every goroutine gone.
func TestDeviceClose(t *testing.T) {
	d, err := opencl.NewDevice(device(t), opencl.WithStreams(2))
	require.NoError(t, err)
	p, err := d.Program("test", kernels, "")
	require.NoError(t, err)
	buf, err := d.Alloc(4 * 256)
	require.NoError(t, err)
	s := codeStream(d, 0)
	ce, open := gate(t)
	require.NoError(t, s.Wait(ce))
	require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "produce", Global: []int{256},
		Args: []gpu.KernelArg{mem(buf), scalar(int32(9)), scalar(int64(1000))}})))
	got := make([]int32, 256)
	require.NoError(t, errOf(s.CopyOut(cltest.BytesOf(got), buf, 0)))
	ran := false
	require.NoError(t, codeStream(d, 1).Launch(gpu.TaskFunc(func() { ran = true })))
	e := s.Record()
	close(open)
	require.NoError(t, d.Close())
	require.NoError(t, d.Close(), "Close is idempotent")
	assert.True(t, e.Done(), "Close waited for the work")
	assert.True(t, ran, "Close waited for the host task")
	assert.Equal(t, int32(9), got[255])
	require.NoError(t, e.Wait(t.Context()))
	after := s.Record()
	assert.True(t, after.Done())
	assert.NoError(t, after.Wait(t.Context()))
	assert.ErrorIs(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "touch", Global: []int{1}, Args: []gpu.KernelArg{mem(buf)}})), gpu.ErrClosed)
	assert.ErrorIs(t, errOf(s.CopyIn(buf, 0, []byte{1})), gpu.ErrClosed)
	assert.ErrorIs(t, s.Launch(gpu.TaskFunc(func() {})), gpu.ErrClosed)
	assert.ErrorIs(t, s.Wait(e), gpu.ErrClosed)
	_, err = d.Alloc(4)
	assert.ErrorIs(t, err, gpu.ErrClosed)
	_, err = d.Program("test", kernels, "")
	assert.ErrorIs(t, err, gpu.ErrClosed)
	assert.NoError(t, s.Synchronize(t.Context()))
}

// failingEvent is a host event that has fired with a failure of another
// device.
type failingEvent struct{ err error }

func (failingEvent) Done() bool                   { return true }
func (e failingEvent) Wait(context.Context) error { return e.err }
func (e failingEvent) String() string             { return "failing event" }

var _ gpu.Event = failingEvent{}

// TestDeviceWaitCarriesFailures: a bridged event's failure is reported by
// the next event of the waiting stream, and by the event of a stream
// that waited on that one; each failure once per stream.
func TestDeviceWaitCarriesFailures(t *testing.T) {
	d := newDevice(t, 2)
	s0, s1 := codeStream(d, 0), codeStream(d, 1)
	root := &gpu.CommandError{Device: topology.GPU(1), Stream: 2, Seq: 3, Label: "launch far", Err: errors.New("far away")}
	require.NoError(t, s0.Wait(failingEvent{root}))
	e0 := s0.Record()
	require.NoError(t, s1.Wait(e0))
	e1 := s1.Record()
	for name, e := range map[string]gpu.Event{"waiting stream": e0, "stream waiting on it": e1} {
		err := e.Wait(t.Context())
		var ce *gpu.CommandError
		require.ErrorAs(t, err, &ce, name)
		assert.Same(t, root, ce, name)
	}
	assert.NoError(t, recordWait(t, s0), "reported once")
	assert.NoError(t, recordWait(t, s1), "reported once")

	// A fired event whose marker the stream has already released (a later
	// Record sweeps it) still passes its failures on.
	require.NoError(t, s0.Wait(failingEvent{root}))
	e0 = s0.Record()
	require.Error(t, e0.Wait(t.Context()))
	require.NoError(t, recordWait(t, s0))
	require.NoError(t, s1.Wait(e0))
	var ce *gpu.CommandError
	require.ErrorAs(t, recordWait(t, s1), &ce)
	assert.Same(t, root, ce)
	require.NoError(t, s1.Wait(s0.Record()), "a clean event")
	assert.NoError(t, recordWait(t, s1))

	// Neither Synchronize nor a host task takes the failures from the
	// next event.
	require.NoError(t, s0.Wait(failingEvent{root}))
	require.NoError(t, s0.Synchronize(t.Context()))
	require.NoError(t, s0.Launch(gpu.TaskFunc(func() {})))
	require.NoError(t, s0.Synchronize(t.Context()))
	require.ErrorAs(t, recordWait(t, s0), &ce)
	assert.Same(t, root, ce)
}

// TestDeviceWaitBridgesOtherDevice: a stream of one OpenCL device waits
// on an event of another; the data moves through host memory.
func TestDeviceWaitBridgesOtherDevice(t *testing.T) {
	a, b := newDevice(t, 1), newDevice(t, 1)
	pa, pb := devProgram(t, a), devProgram(t, b)
	const n = 1024
	bufA, in, out := alloc(t, a, 4*n), alloc(t, b, 4*n), alloc(t, b, 4*n)
	sa, sb := codeStream(a, 0), codeStream(b, 0)
	const seed = 5
	rng := rand.New(rand.NewPCG(seed, seed))
	host, got := make([]int32, n), make([]int32, n)
	for round := range 5 {
		v := rng.Int32N(1 << 20)
		require.NoError(t, errOf(sa.LaunchKernel(&gpu.KernelLaunch{Program: pa, Entry: "produce", Global: []int{n},
			Args: []gpu.KernelArg{mem(bufA), scalar(v), scalar(int64(20000))}})))
		require.NoError(t, errOf(sa.CopyOut(cltest.BytesOf(host), bufA, 0)))
		require.NoError(t, sb.Wait(sa.Record()))
		require.NoError(t, errOf(sb.CopyIn(in, 0, cltest.BytesOf(host))))
		require.NoError(t, errOf(sb.LaunchKernel(&gpu.KernelLaunch{Program: pb, Entry: "consume", Global: []int{n}, Args: []gpu.KernelArg{mem(in), mem(out)}})))
		require.NoError(t, errOf(sb.CopyOut(cltest.BytesOf(got), out, 0)))
		eb := sb.Record()
		require.NoError(t, sa.Wait(eb)) // the next round's copy out must not overwrite host before the copy in
		require.NoError(t, eb.Wait(t.Context()))
		for i, g := range got {
			require.Equal(t, 2*v+1, g, "seed %d round %d element %d", seed, round, i)
		}
	}
}

func init() {
	children["device-failed"] = childDeviceFailed
	children["device-fault"] = childDeviceFault
	children["device-no-platform"] = childNoPlatform
}

// childDevice opens the first OpenCL device with 2 streams and builds
// the test kernels plus one that stores far out of bounds.
func childDevice() (gpu.CodeDevice, gpu.Program, gpu.Memory, error) {
	ds, err := opencl.Devices()
	if err != nil {
		return nil, nil, nil, err
	}
	d, err := opencl.NewDevice(ds[0], opencl.WithStreams(2))
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := d.Program("child", kernels+`
__kernel void wild(__global int *p) { p[(long)1 << 40] = 1; }
`, "")
	if err != nil {
		return nil, nil, nil, err
	}
	m, err := d.Alloc(4)
	if err != nil {
		return nil, nil, nil, err
	}
	// Settle the memory's zero fill (stream 1 waits for it), so that the
	// children's streams number their commands the same in every run.
	s := d.Stream(1).(gpu.CodeStream)
	if err := errOf(s.Fill(m, 0, 4, []byte{0, 0, 0, 0})); err != nil {
		return nil, nil, nil, err
	}
	return d, p, m, s.Record().Wait(context.Background())
}

func say(format string, args ...any) { fmt.Fprintf(os.Stdout, format+"\n", args...) }

// childDeviceFailed makes the device fail a launch (a failed OpenCL
// status in its queue's wait list) and prints what the events after it report,
// on its stream and on a stream that waited on it, and whether the
// device still takes work.
func childDeviceFailed() int {
	d, p, m, err := childDevice()
	if err != nil {
		say("setup: %v", err)
		return 2
	}
	s0, s1 := codeStream(d, 0), codeStream(d, 1)
	fail, err := opencl.HoldForTest(s0)
	if err != nil {
		say("hold: %v", err)
		return 2
	}
	seq, err := s0.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "touch", Global: []int{1}, Args: []gpu.KernelArg{{Mem: m}}, Label: "launch my-touch"})
	if err != nil {
		say("launch: %v", err)
		return 2
	}
	e0 := s0.Record()
	if err := s1.Wait(e0); err != nil {
		say("wait: %v", err)
		return 2
	}
	e1 := s1.Record()
	if err := fail(-1); err != nil {
		say("fail: %v", err)
		return 2
	}
	for i, e := range []gpu.Event{e0, e1} {
		err := e.Wait(context.Background())
		var ce *gpu.CommandError
		var oe *cl.CommandError
		if errors.As(err, &ce) && errors.As(err, &oe) {
			say("event %d: command error: device %s stream %d label %q status %s", i, ce.Device, ce.Stream, ce.Label, oe.Status)
			say("event %d: the launch's seq: %v", i, ce.Seq == seq && seq != 0)
		}
		say("event %d: lost %v", i, errors.Is(err, gpu.ErrDeviceLost) && errors.Is(err, gpu.ErrDeviceLost))
		say("event %d: %s", i, cltest.ErrString(err))
	}
	say("next event: %s", cltest.ErrString(s0.Record().Wait(context.Background())))
	err = errOf(s0.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "touch", Global: []int{1}, Args: []gpu.KernelArg{{Mem: m}}}))
	say("later launch: lost %v: %s", errors.Is(err, gpu.ErrDeviceLost), cltest.ErrString(err))
	_, err = d.Alloc(4)
	say("later alloc: lost %v", errors.Is(err, gpu.ErrDeviceLost))
	_ = m.Release()
	say("close: %s", cltest.ErrString(d.Close()))
	return 0
}

// TestDeviceFailedLaunchReported: a launch the device fails after the
// fact is reported by the next event of its stream as a
// *gpu.CommandError with the launch's label and the sequence number
// LaunchKernel returned (and by an event of a stream that waited on it),
// once; the device goes on taking work.
func TestDeviceFailedLaunchReported(t *testing.T) {
	out, err := runChild(t, "device-failed")
	require.NoError(t, err, out)
	assert.Contains(t, out, `event 0: command error: device opencl0 stream 0 label "launch my-touch" status `, out)
	assert.Contains(t, out, `event 1: command error: device opencl0 stream 0 label "launch my-touch" status `, out)
	assert.Contains(t, out, "event 0: the launch's seq: true\n", "the CommandError names the sequence number LaunchKernel returned")
	assert.Contains(t, out, "event 1: the launch's seq: true\n")
	assert.Contains(t, out, "event 0: lost false\n")
	assert.Contains(t, out, "gpu: opencl0 stream 0 command 2 (launch my-touch) failed: ")
	assert.Contains(t, out, "next event: no error\n")
	assert.Contains(t, out, "later launch: lost false: no error\n")
	assert.Contains(t, out, "close: no error\n")
	t.Log(out)
}

// TestDeviceLost: a command the device reports failed with
// CL_OUT_OF_RESOURCES (how GPU drivers report a faulted kernel; PoCL
// cannot be made to, so the report is injected where the waiter's
// failures enter the device) loses the device: the error matches
// gpu.ErrDeviceLost and gpu.ErrDeviceLost, and so does every later launch,
// copy, host task, allocation and recorded event.
func TestDeviceLost(t *testing.T) {
	d := newDevice(t, 2)
	p := devProgram(t, d)
	buf := alloc(t, d, 4)
	s := codeStream(d, 1)
	before := s.Record()
	err := opencl.ReportForTest(d, &cl.CommandError{Device: "dev", Queue: 1, Seq: 4, Op: "launch k", Status: cl.OutOfResources})
	var ce *gpu.CommandError
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, gpu.CommandError{Device: d.ID(), Stream: 1, Seq: 4, Label: "launch k", Err: ce.Err}, *ce)
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
	assert.ErrorIs(t, err, cl.OutOfResources)
	for name, err := range map[string]error{
		"launch":    errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "touch", Global: []int{1}, Args: []gpu.KernelArg{mem(buf)}})),
		"copy in":   errOf(s.CopyIn(buf, 0, []byte{1})),
		"host task": s.Launch(gpu.TaskFunc(func() {})),
		"record":    s.Record().Wait(t.Context()),
		"alloc":     func() error { _, err := d.Alloc(4); return err }(),
		"sync":      s.Synchronize(t.Context()),
	} {
		assert.ErrorIs(t, err, gpu.ErrDeviceLost, name)
		assert.ErrorContains(t, err, "opencl: opencl0: gpu: device lost: opencl: dev: queue 1 command 4 (launch k) failed: CL_OUT_OF_RESOURCES (-5)", name)
	}
	assert.NoError(t, before.Wait(t.Context()), "an event recorded before still fires")
	other := opencl.ReportForTest(d, &cl.CommandError{Device: "dev", Queue: 0, Seq: 9, Op: "fill", Status: -1})
	assert.NotErrorIs(t, other, gpu.ErrDeviceLost, "an ordinary failure is not a loss")
}

// childDeviceFault launches a kernel that stores a terabyte past its
// buffer through the device.
func childDeviceFault() int {
	d, p, m, err := childDevice()
	if err != nil {
		say("setup: %v", err)
		return 2
	}
	s := codeStream(d, 0)
	ce, open := childGate()
	_ = s.Wait(ce)
	if err := errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "wild", Global: []int{1}, Args: []gpu.KernelArg{{Mem: m}}, Label: "launch wild"})); err != nil {
		say("launch: %v", err)
		return 2
	}
	say("launched")
	close(open)
	err = s.Record().Wait(context.Background())
	say("survived: %s", cltest.ErrString(err))
	_ = d.Close()
	return 0
}

// childGate is gate without a test: a CPU event that fires when open is
// closed (the CPU device is left to the process's exit).
func childGate() (gpu.Event, chan struct{}) {
	c, _ := cpu.New(cpu.WithStreams(1))
	open := make(chan struct{})
	_ = c.Stream(0).Launch(gpu.TaskFunc(func() { <-open }))
	return c.Stream(0).Record(), open
}

// TestDeviceFaultInSubprocess: a faulting kernel launched through the
// device kills its process (contained in a subprocess) or is reported as
// failed; it never passes as a success.
func TestDeviceFaultInSubprocess(t *testing.T) {
	out, err := runChild(t, "device-fault")
	require.Contains(t, out, "launched\n", "the child got as far as the launch: %s", out)
	if err == nil {
		assert.NotContains(t, out, "survived: no error", "a faulting kernel reported success")
		return
	}
	var ee *osexec.ExitError
	require.ErrorAs(t, err, &ee, out)
	assert.NotContains(t, out, "survived", "the process died in the fault")
}

// childNoPlatform opens the driver where the ICD loader finds no
// platform (OCL_ICD_VENDORS names an empty directory).
func childNoPlatform() int {
	set, err := gpu.Open(context.Background(), opencl.Kind)
	if err == nil {
		_ = set.Close()
	}
	say("no platform: %v", errors.Is(err, opencl.ErrNoPlatform))
	say("error: %s", cltest.ErrString(err))
	return 0
}

// TestDriverNoPlatform: with no OpenCL platform installed, gpu.Open of
// the opencl kind is an error wrapping ErrNoPlatform.
func TestDriverNoPlatform(t *testing.T) {
	out, err := runChild(t, "device-no-platform", "OCL_ICD_VENDORS="+t.TempDir())
	require.NoError(t, err, out)
	assert.Contains(t, out, "no platform: true\n", out)
	assert.Contains(t, out, "error: opencl: open: opencl: no platform", out)
}

// TestDeviceCopyOutsideGoHeap: CopyIn and CopyOut of memory the Go heap
// does not own (an anonymous mapping, as a memory-mapped file gives)
// work: pinning ignores it.
func TestDeviceCopyOutsideGoHeap(t *testing.T) {
	d := newDevice(t, 1)
	const n = 1 << 16
	mapped, err := syscall.Mmap(-1, 0, 2*n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	require.NoError(t, err)
	defer func() { assert.NoError(t, syscall.Munmap(mapped)) }()
	src, dst := mapped[:n], mapped[n:]
	for i := range src {
		src[i] = byte(i * 7)
	}
	m := alloc(t, d, n)
	s := codeStream(d, 0)
	require.NoError(t, errOf(s.CopyIn(m, 0, src)))
	require.NoError(t, errOf(s.CopyOut(dst, m, 0)))
	require.NoError(t, recordWait(t, s))
	assert.True(t, bytesEqual(src, dst))
}

const randomKernels = `
__kernel void addk(__global int *p, int k) { p[get_global_id(0)] += k; }
__kernel void inc(__global const int *src, __global int *dst) { size_t i = get_global_id(0); dst[i] = src[i] + 1; }
`

// TestDeviceRandomProgramsMatchOracle runs seeded random programs of
// kernels, device copies, fills and host tasks over a few buffers on
// three streams, with the waits an executor would insert (a reader waits
// for the last writer on another stream, a writer for the readers since),
// and compares every buffer with a sequential oracle; host tasks of a
// stream run in queue order. Without the waits it fails.
func TestDeviceRandomProgramsMatchOracle(t *testing.T) {
	d := newDevice(t, 3)
	p, err := d.Program("random", randomKernels, "")
	require.NoError(t, err)
	const nbuf, n, ops = 4, 64, 150
	bufs := make([]gpu.Memory, nbuf)
	for i := range bufs {
		bufs[i] = alloc(t, d, 4*n)
	}
	for _, seed := range []uint64{1, 2, 3, 4} {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			oracle := make([][]int32, nbuf)
			type access struct {
				s  int
				ev gpu.Event
			}
			writer := make([]access, nbuf)
			readers := make([]map[int]gpu.Event, nbuf)
			for b := range bufs {
				oracle[b] = make([]int32, n)
				readers[b] = map[int]gpu.Event{}
				require.NoError(t, errOf(codeStream(d, 0).Fill(bufs[b], 0, 4*n, []byte{0, 0, 0, 0})))
			}
			writer0 := codeStream(d, 0).Record()
			for b := range writer {
				writer[b] = access{0, writer0}
			}
			dep := func(s int, b int, write bool) {
				st := d.Stream(s)
				if w := writer[b]; w.s != s {
					require.NoError(t, st.Wait(w.ev))
				}
				if write {
					for rs, ev := range readers[b] {
						if rs != s {
							require.NoError(t, st.Wait(ev))
						}
					}
				}
			}
			done := func(s int, ev gpu.Event, reads []int, writes []int) {
				for _, b := range reads {
					readers[b][s] = ev
				}
				for _, b := range writes {
					writer[b] = access{s, ev}
					clear(readers[b])
				}
			}
			var order [3][]int
			var want [3][]int
			for op := range ops {
				s := rng.IntN(3)
				cs := codeStream(d, s)
				a, b := rng.IntN(nbuf), rng.IntN(nbuf)
				for b == a {
					b = rng.IntN(nbuf)
				}
				var reads, writes []int
				switch kind := rng.IntN(5); kind {
				case 0, 1: // addk on a
					k := rng.Int32N(100)
					dep(s, a, true)
					require.NoError(t, errOf(cs.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "addk", Global: []int{n},
						Args: []gpu.KernelArg{mem(bufs[a]), scalar(k)}, Label: fmt.Sprintf("op %d addk", op)})))
					for i := range oracle[a] {
						oracle[a][i] += k
					}
					writes = []int{a}
				case 2: // b = a + 1
					dep(s, a, false)
					dep(s, b, true)
					require.NoError(t, errOf(cs.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "inc", Global: []int{n},
						Args: []gpu.KernelArg{mem(bufs[a]), mem(bufs[b])}, Label: fmt.Sprintf("op %d inc", op)})))
					for i := range oracle[b] {
						oracle[b][i] = oracle[a][i] + 1
					}
					reads, writes = []int{a}, []int{b}
				case 3: // copy half of a into b
					dep(s, a, false)
					dep(s, b, true)
					require.NoError(t, errOf(cs.Copy(bufs[b], 0, bufs[a], 4*n/2, 4*n/2)))
					copy(oracle[b][:n/2], oracle[a][n/2:])
					reads, writes = []int{a}, []int{b}
				case 4: // a host task, then a fill of a
					require.NoError(t, cs.Launch(gpu.TaskFunc(func() { order[s] = append(order[s], op) })))
					want[s] = append(want[s], op)
					v := rng.Int32N(1000)
					dep(s, a, true)
					require.NoError(t, errOf(cs.Fill(bufs[a], 0, 4*n, cltest.BytesOf([]int32{v}))))
					for i := range oracle[a] {
						oracle[a][i] = v
					}
					writes = []int{a}
				}
				done(s, d.Stream(s).Record(), reads, writes)
			}
			s0 := codeStream(d, 0)
			for s := 1; s < 3; s++ {
				require.NoError(t, s0.Wait(d.Stream(s).Record()))
			}
			got := make([][]int32, nbuf)
			for b := range bufs {
				got[b] = make([]int32, n)
				require.NoError(t, errOf(s0.CopyOut(cltest.BytesOf(got[b]), bufs[b], 0)))
			}
			require.NoError(t, recordWait(t, s0), "seed %d", seed)
			for s := range 3 {
				require.NoError(t, d.Stream(s).Synchronize(t.Context()))
				assert.Equal(t, want[s], order[s], "seed %d stream %d: host tasks in queue order", seed, s)
			}
			for b := range bufs {
				require.Equal(t, oracle[b], got[b], "seed %d buffer %d", seed, b)
			}
		})
	}
}

// TestDeviceConcurrentUse: goroutines launch, record and wait on shared
// streams at once; each adds to its own buffer, and every sum is right.
func TestDeviceConcurrentUse(t *testing.T) {
	d := newDevice(t, 2)
	p, err := d.Program("random", randomKernels, "")
	require.NoError(t, err)
	const workers, n, rounds = 4, 32, 50
	bufs := make([]gpu.Memory, workers)
	for w := range bufs {
		bufs[w] = alloc(t, d, 4*n)
		require.NoError(t, errOf(codeStream(d, 0).Fill(bufs[w], 0, 4*n, []byte{0, 0, 0, 0})))
	}
	start := d.Stream(0).Record()
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			s := codeStream(d, w%2)
			err := s.Wait(start)
			for r := 0; r < rounds && err == nil; r++ {
				err = errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "addk", Global: []int{n},
					Args: []gpu.KernelArg{mem(bufs[w]), scalar(int32(w + 1))}}))
				if err == nil && r%10 == 0 {
					err = s.Record().Wait(context.Background())
				}
			}
			if err == nil {
				got := make([]int32, n)
				if err = errOf(s.CopyOut(cltest.BytesOf(got), bufs[w], 0)); err == nil {
					err = s.Record().Wait(context.Background())
				}
				if err == nil && got[n-1] != int32(rounds*(w+1)) {
					err = fmt.Errorf("worker %d: sum %d, want %d", w, got[n-1], rounds*(w+1))
				}
			}
			errs <- err
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
}

// TestDeviceExtensions: Info.Extensions holds the names
// CL_DEVICE_EXTENSIONS lists (one name each, no blanks), HasExtension
// finds exactly those, and InfoOf gives an opened device's description
// and refuses a device of another kind.
func TestDeviceExtensions(t *testing.T) {
	info := device(t)
	require.NotEmpty(t, info.Extensions, "%s lists no extension", info.Name)
	for _, e := range info.Extensions {
		assert.Regexp(t, `^cl_[A-Za-z0-9_]+$`, e)
		assert.True(t, info.HasExtension(e), e)
	}
	assert.False(t, info.HasExtension("cl_no_such_extension"))
	assert.False(t, info.HasExtension(""))
	assert.Equal(t, len(info.Extensions), len(slices.Compact(slices.Sorted(slices.Values(info.Extensions)))), "no name twice: %v", info.Extensions)

	d := newDevice(t, 1)
	got, ok := opencl.InfoOf(d)
	require.True(t, ok)
	assert.Equal(t, info.Name, got.Name)
	assert.Equal(t, info.Extensions, got.Extensions)

	c, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	defer func() { assert.NoError(t, c.Close()) }()
	_, ok = opencl.InfoOf(c)
	assert.False(t, ok, "the CPU device is no OpenCL device")
}
