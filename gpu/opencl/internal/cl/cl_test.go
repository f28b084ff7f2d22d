package cl_test

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	osexec "os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu/opencl/internal/cl"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cltest"
)

// device returns this machine's first OpenCL device, or skips the test
// with the reason (fails it when CI is set: CI installs PoCL).
func device(t testing.TB) cl.Device {
	t.Helper()
	ds, err := cl.Devices()
	return cltest.First(t, ds, err)
}

// open opens a context on device(t), closed (and checked) at cleanup.
func open(t testing.TB) *cl.Context {
	t.Helper()
	c, err := cl.Open(device(t))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, c.Close()) })
	return c
}

func newQueue(t testing.TB, c *cl.Context) *cl.Queue {
	t.Helper()
	q, err := c.NewQueue()
	require.NoError(t, err)
	return q
}

const kernels = cltest.Kernels

func build(t testing.TB, c *cl.Context) *cl.Program {
	t.Helper()
	p, err := c.Program("test", kernels, "")
	require.NoError(t, err)
	return p
}

func TestPlatforms(t *testing.T) {
	device(t)
	ps, err := cl.Platforms()
	require.NoError(t, err)
	require.NotEmpty(t, ps)
	for _, p := range ps {
		assert.NotEmpty(t, p.Name)
		assert.True(t, strings.HasPrefix(p.Version, "OpenCL "), p.Version)
		for _, d := range p.Devices {
			info := d.Info()
			assert.NotEmpty(t, info.Name)
			assert.Equal(t, p.Name, info.Platform)
			assert.True(t, strings.HasPrefix(info.Version, "OpenCL "), info.Version)
			assert.Positive(t, info.ComputeUnits)
			assert.Positive(t, info.GlobalMemBytes)
			assert.Positive(t, info.MaxAllocBytes)
			assert.LessOrEqual(t, info.MaxAllocBytes, info.GlobalMemBytes)
			assert.NotZero(t, info.Type&(cl.TypeCPU|cl.TypeGPU|cl.TypeAccelerator|cl.TypeCustom), info.Type.String())
		}
	}
}

func TestBufferRoundTrip(t *testing.T) {
	c := open(t)
	q := newQueue(t, c)
	const seed = 14
	rng := rand.New(rand.NewPCG(seed, seed))
	for _, tc := range []struct {
		name string
		size int64
	}{{"one byte", 1}, {"odd", 1001}, {"page", 4096}, {"megabyte", 1 << 20}} {
		t.Run(tc.name, func(t *testing.T) {
			src := make([]byte, tc.size)
			for i := range src {
				src[i] = byte(rng.UintN(256))
			}
			a, err := c.Alloc(tc.size)
			require.NoError(t, err)
			b, err := c.Alloc(tc.size)
			require.NoError(t, err)
			defer func() { assert.NoError(t, a.Release()); assert.NoError(t, b.Release()) }()
			require.NoError(t, q.Write(a, 0, src))
			require.NoError(t, q.Copy(b, 0, a, 0, tc.size))
			got := make([]byte, tc.size)
			require.NoError(t, q.Read(b, 0, got))
			assert.True(t, bytes.Equal(src, got), "seed %d: copy of %d bytes differs", seed, tc.size)

			// Fill a 4-byte-aligned middle part, then read it all back.
			off, n := (tc.size/4)&^3, (tc.size/2)&^3
			require.NoError(t, q.Fill(b, off, n, []byte{0xde, 0xad, 0xbe, 0xef}))
			require.NoError(t, q.Read(b, 0, got))
			want := bytes.Clone(src)
			for i := off; i < off+n; i++ {
				want[i] = []byte{0xde, 0xad, 0xbe, 0xef}[(i-off)%4]
			}
			assert.True(t, bytes.Equal(want, got), "seed %d: fill [%d,%d) of %d bytes", seed, off, off+n, tc.size)

			// A partial read at an offset.
			part := make([]byte, tc.size-tc.size/3)
			require.NoError(t, q.Read(a, tc.size/3, part))
			assert.Equal(t, src[tc.size/3:], part)
			require.NoError(t, q.Finish(t.Context()))
		})
	}
}

func TestBufferBadInput(t *testing.T) {
	c := open(t)
	q := newQueue(t, c)
	b, err := c.Alloc(64)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"read past end", q.Read(b, 60, make([]byte, 8)), "range [60, 68) outside the 64-byte buffer"},
		{"write at negative", q.Write(b, -1, make([]byte, 1)), "range [-1, 0) outside"},
		{"copy too long", q.Copy(b, 0, b, 32, 33), "copy source: range [32, 65) outside"},
		{"empty pattern", q.Fill(b, 0, 8, nil), "fill: empty pattern"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.ErrorContains(t, tc.err, tc.want) })
	}
	_, err = c.Alloc(0)
	assert.ErrorContains(t, err, "alloc 0 bytes: size must be positive")
	err = q.Copy(b, 0, b, 8, 16)
	var clErr *cl.Error
	require.ErrorAs(t, err, &clErr, "an overlapping copy is the implementation's CL_MEM_COPY_OVERLAP")
	assert.Equal(t, "clEnqueueCopyBuffer", clErr.Call)
	assert.Contains(t, err.Error(), "CL_MEM_COPY_OVERLAP (-8)")
	require.NoError(t, b.Release())
	require.NoError(t, b.Release(), "Release is idempotent")
	assert.ErrorIs(t, q.Write(b, 0, []byte{1}), cl.ErrClosed)
}

func TestVectorAdd(t *testing.T) {
	c := open(t)
	q := newQueue(t, c)
	p := build(t, c)
	const n = 1000
	a, b := make([]float32, n), make([]float32, n)
	for i := range a {
		a[i], b[i] = float32(i), float32(3*i+1)
	}
	bufs := make([]*cl.Buffer, 3)
	for i := range bufs {
		var err error
		bufs[i], err = c.Alloc(4 * n)
		require.NoError(t, err)
	}
	require.NoError(t, q.Write(bufs[0], 0, cltest.BytesOf(a)))
	require.NoError(t, q.Write(bufs[1], 0, cltest.BytesOf(b)))
	k, err := q.Kernel(p, "vadd")
	require.NoError(t, err)
	k2, err := q.Kernel(p, "vadd")
	require.NoError(t, err)
	assert.Same(t, k, k2, "one kernel object per queue and entry point")
	for i, buf := range bufs {
		require.NoError(t, k.SetBuffer(i, buf))
	}
	require.NoError(t, k.SetUint32(3, n))
	require.NoError(t, q.Launch(k, []int{1024}, []int{64}))
	m, err := q.Marker()
	require.NoError(t, err)
	require.NoError(t, m.Wait(t.Context()))
	st, err := m.Status()
	require.NoError(t, err)
	assert.Equal(t, cl.Complete, st)
	m.Release()
	got := make([]float32, n)
	require.NoError(t, q.Read(bufs[2], 0, cltest.BytesOf(got)))
	for i := range got {
		require.Equal(t, float32(4*i+1), got[i], "c[%d]", i)
	}

	// Launch shape errors are values, not panics.
	assert.ErrorContains(t, q.Launch(k, nil, nil), "want 1 to 3 dimensions")
	assert.ErrorContains(t, q.Launch(k, []int{1000}, []int{64}), "local must divide global")
	err = q.Launch(k, []int{8, 8, 8, 8}, nil)
	assert.ErrorContains(t, err, "want 1 to 3 dimensions")
	other := newQueue(t, c)
	assert.ErrorContains(t, other.Launch(k, []int{8}, nil), "kernel not made by this queue's Kernel")
}

func TestKernelErrors(t *testing.T) {
	c := open(t)
	q := newQueue(t, c)
	p := build(t, c)
	_, err := q.Kernel(p, "nosuch")
	require.ErrorIs(t, err, cl.InvalidKernelName)
	assert.Contains(t, err.Error(), `program "test": kernel "nosuch": opencl: clCreateKernel: CL_INVALID_KERNEL_NAME (-46)`)
	k, err := q.Kernel(p, "touch")
	require.NoError(t, err)
	assert.ErrorIs(t, k.SetBuffer(3, mustAlloc(t, c, 4)), cl.Status(-49), "CL_INVALID_ARG_INDEX")
	err = q.Launch(k, []int{1}, nil)
	assert.ErrorIs(t, err, cl.InvalidKernelArgs, "an argument never set")
	assert.ErrorContains(t, err, "queue 0: launch touch: opencl: clEnqueueNDRangeKernel: CL_INVALID_KERNEL_ARGS (-52)")
}

func mustAlloc(t testing.TB, c *cl.Context, n int64) *cl.Buffer {
	t.Helper()
	b, err := c.Alloc(n)
	require.NoError(t, err)
	return b
}

func TestBuildError(t *testing.T) {
	c := open(t)
	_, err := c.Program("broken", "__kernel void f(__global int *p) { p[0] = undeclared_name; }", "")
	var be *cl.BuildError
	require.ErrorAs(t, err, &be)
	assert.Equal(t, "broken", be.Program)
	assert.Equal(t, c.Device().Info().Name, be.Device)
	assert.Contains(t, be.Log, "undeclared_name", "the compiler's log names the fault")
	assert.ErrorIs(t, err, cl.BuildProgramFailure)
	assert.Contains(t, err.Error(), `opencl: build program "broken" on `)
	assert.Contains(t, err.Error(), "CL_BUILD_PROGRAM_FAILURE")
	_, again := c.Program("broken2", "__kernel void f(__global int *p) { p[0] = undeclared_name; }", "")
	assert.Same(t, err, again, "a failed build is cached by source")
	_, err = c.Program("empty", "", "")
	assert.ErrorContains(t, err, `program "empty": empty source`)
}

func TestProgramCache(t *testing.T) {
	c := open(t)
	p1 := build(t, c)
	p2, err := c.Program("other name", kernels, "")
	require.NoError(t, err)
	assert.Same(t, p1, p2)
	assert.Equal(t, "test", p2.Name())
	p3, err := c.Program("opts", kernels, "-cl-fast-relaxed-math")
	require.NoError(t, err)
	assert.NotSame(t, p1, p3, "options are part of the key")
}

// TestQueuesOverlap proves two queues run kernels at the same time with a
// device-side handshake: each kernel raises its flag and waits for the
// other's, so both report success only if they ran concurrently.
func TestQueuesOverlap(t *testing.T) {
	c := open(t)
	if cu := c.Device().Info().ComputeUnits; cu < 2 {
		t.Skipf("%s has %d compute unit: two kernels cannot overlap", c.Device(), cu)
	}
	p := build(t, c)
	flags, result := mustAlloc(t, c, 8), mustAlloc(t, c, 8)
	qs := []*cl.Queue{newQueue(t, c), newQueue(t, c)}
	require.NoError(t, qs[0].Fill(flags, 0, 8, []byte{0, 0, 0, 0}))
	require.NoError(t, qs[0].Fill(result, 0, 8, []byte{0xff, 0xff, 0xff, 0xff}))
	require.NoError(t, qs[0].Finish(t.Context()))
	var marks []*cl.Event
	for me, q := range qs {
		k, err := q.Kernel(p, "handshake")
		require.NoError(t, err)
		require.NoError(t, k.SetBuffer(0, flags))
		require.NoError(t, k.SetInt32(1, int32(me)))
		require.NoError(t, k.SetInt32(2, int32(1-me)))
		require.NoError(t, k.SetInt64(3, 1<<33)) // a bound that only a missing overlap reaches
		require.NoError(t, k.SetBuffer(4, result))
		require.NoError(t, q.Launch(k, []int{1}, nil))
		m, err := q.Marker()
		require.NoError(t, err)
		marks = append(marks, m)
	}
	for _, m := range marks {
		require.NoError(t, m.Wait(t.Context()))
		m.Release()
	}
	got := make([]int32, 2)
	require.NoError(t, qs[1].Read(result, 0, cltest.BytesOf(got)))
	assert.Equal(t, []int32{1, 1}, got, "each kernel saw the other's flag while it ran")
}

// TestCrossQueueDependency: a slow producer on queue 0, a consumer on
// queue 1 after Wait(marker): the consumer always sees the producer's
// values.
func TestCrossQueueDependency(t *testing.T) {
	c := open(t)
	p := build(t, c)
	q0, q1 := newQueue(t, c), newQueue(t, c)
	const n = 256
	in, out := mustAlloc(t, c, 4*n), mustAlloc(t, c, 4*n)
	prod, err := q0.Kernel(p, "produce")
	require.NoError(t, err)
	cons, err := q1.Kernel(p, "consume")
	require.NoError(t, err)
	require.NoError(t, prod.SetBuffer(0, in))
	require.NoError(t, prod.SetInt64(2, 20000))
	require.NoError(t, cons.SetBuffer(0, in))
	require.NoError(t, cons.SetBuffer(1, out))
	const seed = 7
	rng := rand.New(rand.NewPCG(seed, seed))
	got := make([]int32, n)
	for round := range 20 {
		v := rng.Int32N(1 << 20)
		require.NoError(t, prod.SetInt32(1, v))
		require.NoError(t, q0.Launch(prod, []int{n}, nil))
		m, err := q0.Marker()
		require.NoError(t, err)
		require.NoError(t, q1.Wait(m))
		m.Release()
		require.NoError(t, q1.Launch(cons, []int{n}, nil))
		require.NoError(t, q1.Read(out, 0, cltest.BytesOf(got)))
		for i, g := range got {
			require.Equal(t, 2*v+1, g, "seed %d round %d element %d", seed, round, i)
		}
		// In-order queue 0 must not let the next producer overwrite
		// in before consume ran: wait for queue 1 from queue 0.
		m1, err := q1.Marker()
		require.NoError(t, err)
		require.NoError(t, q0.Wait(m1))
		m1.Release()
	}
	require.NoError(t, q0.Finish(t.Context()))
	require.NoError(t, q1.Finish(t.Context()))
}

// TestUserEventFailureCrossesQueues: a user event completed with an error
// fails the markers that cover it, on its queue and on the queue waiting
// for that queue, while the commands after it still run.
func TestUserEventFailureCrossesQueues(t *testing.T) {
	c := open(t)
	p := build(t, c)
	q0, q1 := newQueue(t, c), newQueue(t, c)
	u, err := c.NewUserEvent()
	require.NoError(t, err)
	buf := mustAlloc(t, c, 4)
	require.NoError(t, q0.Fill(buf, 0, 4, []byte{0, 0, 0, 0}))
	require.NoError(t, q0.Wait(u.Event()))
	k, err := q0.Kernel(p, "touch")
	require.NoError(t, err)
	require.NoError(t, k.SetBuffer(0, buf))
	require.NoError(t, q0.Launch(k, []int{1}, nil))
	m0, err := q0.Marker()
	require.NoError(t, err)
	m1, err := q1.Marker(m0)
	require.NoError(t, err)
	select {
	case <-m1.Done():
		t.Fatal("a marker behind an incomplete user event completed")
	default:
	}
	assert.NoError(t, m1.Err(), "Err is nil before Done")
	root := errors.New("producer on another device failed")
	require.NoError(t, u.Complete(root))
	assert.ErrorContains(t, u.Complete(nil), "completed twice")
	err0 := m0.Wait(t.Context())
	err1 := m1.Wait(t.Context())
	assert.ErrorIs(t, err0, root)
	assert.ErrorIs(t, err1, root)
	assert.Contains(t, err1.Error(), "queue 1 marker")
	assert.Contains(t, err1.Error(), "queue 0 marker")
	got := make([]int32, 1)
	require.NoError(t, q0.Read(buf, 0, cltest.BytesOf(got)))
	assert.Equal(t, []int32{1}, got, "the OpenCL event completed, so the kernel ran")
	m0.Release()
	m1.Release()
	u.Event().Release()
	// The next marker reports only what happened since.
	require.NoError(t, q0.Finish(t.Context()))
	require.NoError(t, q1.Finish(t.Context()))
}

func TestFinishHonoursContext(t *testing.T) {
	c := open(t)
	q := newQueue(t, c)
	u, err := c.NewUserEvent()
	require.NoError(t, err)
	require.NoError(t, q.Wait(u.Event()))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	assert.ErrorIs(t, q.Finish(ctx), context.Canceled, "the queue is held by the user event")
	require.NoError(t, u.Complete(nil))
	require.NoError(t, q.Finish(t.Context()))
	u.Event().Release()
}

func TestCheckpointFreesEvents(t *testing.T) {
	c := open(t)
	q := newQueue(t, c)
	b := mustAlloc(t, c, 4)
	for range 1000 {
		require.NoError(t, q.Fill(b, 0, 4, []byte{1, 2, 3, 4}))
	}
	assert.Less(t, cl.PendingForTest(q), 256, "the queue examines its commands every 256")
	require.NoError(t, q.Finish(t.Context()))
	assert.Zero(t, cl.PendingForTest(q))
}

// TestQueueSettled: Settled stays below a command held behind a user
// event (and below its Wait, which a later marker examines) until a
// marker after it completes, then covers it; it never decreases.
func TestQueueSettled(t *testing.T) {
	c := open(t)
	q := newQueue(t, c)
	b := mustAlloc(t, c, 4)
	require.NoError(t, q.Finish(t.Context()))
	before := q.Settled()
	u, err := c.NewUserEvent()
	require.NoError(t, err)
	require.NoError(t, q.Wait(u.Event()))
	require.NoError(t, q.Fill(b, 0, 4, []byte{1, 2, 3, 4}))
	fill := q.LastCommand()
	require.Greater(t, fill, before)
	m, err := q.Marker()
	require.NoError(t, err)
	assert.Less(t, q.Settled(), fill, "the fill waits behind the user event")
	require.NoError(t, u.Complete(nil))
	require.NoError(t, m.Wait(t.Context()))
	assert.Equal(t, m.Seq(), q.Settled(), "the marker after the fill completed")
	m.Release()
	u.Event().Release()
}

// TestPassiveMarker: a passive marker is settled by the waiter of a
// queue whose marker waited on it, reporting the failures of what it
// covers there and advancing its own queue's Settled; one nobody waits
// on stays unsettled while its queue's later markers settle, until
// Close.
func TestPassiveMarker(t *testing.T) {
	c := open(t)
	q0, q1 := newQueue(t, c), newQueue(t, c)
	buf := mustAlloc(t, c, 4)
	u, err := c.NewUserEvent()
	require.NoError(t, err)
	require.NoError(t, q0.Wait(u.Event()))
	require.NoError(t, q0.Fill(buf, 0, 4, []byte{1, 2, 3, 4}))
	pm, err := q0.PassiveMarker()
	require.NoError(t, err)
	require.NoError(t, q1.Wait(pm))
	m1, err := q1.Marker()
	require.NoError(t, err)
	root := errors.New("producer failed")
	require.NoError(t, u.Complete(root))
	err1 := m1.Wait(t.Context())
	assert.ErrorIs(t, err1, root, "the waiting queue reports what the passive marker covers")
	assert.Contains(t, err1.Error(), "queue 1 marker")
	require.True(t, isClosed(pm.Done()), "settled by queue 1's waiter")
	assert.ErrorIs(t, pm.Err(), root)
	assert.GreaterOrEqual(t, q0.Settled(), pm.Seq())

	lone, err := q0.PassiveMarker()
	require.NoError(t, err)
	require.NoError(t, q0.Finish(t.Context()))
	assert.False(t, isClosed(lone.Done()), "no waiter watches a passive marker")
	require.NoError(t, q0.Close())
	assert.True(t, isClosed(lone.Done()), "Close settles it")
	assert.NoError(t, lone.Err())
	for _, e := range []*cl.Event{pm, m1, lone, u.Event()} {
		e.Release()
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestCloseReleasesEverything closes a context with work in flight, a user
// event nobody completed and a command waiting on it: Close completes the
// event, waits for the work, and refuses new work; the goroutine leak
// check in TestMain sees every waiter gone.
func TestCloseReleasesEverything(t *testing.T) {
	c, err := cl.Open(device(t))
	require.NoError(t, err)
	p := build(t, c)
	q0, q1 := newQueue(t, c), newQueue(t, c)
	b := mustAlloc(t, c, 1<<16)
	u, err := c.NewUserEvent()
	require.NoError(t, err)
	require.NoError(t, q1.Wait(u.Event()))
	require.NoError(t, q1.Fill(b, 0, 1<<16, []byte{7}))
	k, err := q0.Kernel(p, "touch")
	require.NoError(t, err)
	require.NoError(t, k.SetBuffer(0, b))
	require.NoError(t, q0.Launch(k, []int{1 << 14}, nil))
	m, err := q1.Marker()
	require.NoError(t, err)
	require.NoError(t, c.Close(), "the user event's failure went to the marker after it")
	assert.ErrorIs(t, m.Err(), cl.ErrClosed, "Close completed the user event with ErrClosed")
	m.Release()
	u.Event().Release()
	assert.NoError(t, c.Close(), "Close is idempotent")
	_, err = c.Alloc(8)
	assert.ErrorIs(t, err, cl.ErrClosed)
	_, err = c.NewQueue()
	assert.ErrorIs(t, err, cl.ErrClosed)
	_, err = c.Program("x", kernels, "")
	assert.ErrorIs(t, err, cl.ErrClosed)
	_, err = c.NewUserEvent()
	assert.ErrorIs(t, err, cl.ErrClosed)
	assert.ErrorIs(t, q0.Launch(k, []int{1}, nil), cl.ErrClosed)
	_, err = q0.Marker()
	assert.ErrorIs(t, err, cl.ErrClosed)
	assert.NoError(t, q0.Close())
}

// children are the subprocess scenarios: each returns the exit status.
var children = map[string]func() int{
	"fault":         childFault,
	"failed-kernel": childFailedKernel,
}

func runChild(t *testing.T, name string) (string, error) {
	t.Helper()
	device(t)
	return cltest.RunChild(t, name)
}

func childOpen() (*cl.Context, *cl.Queue, *cl.Program, error) {
	ds, err := cl.Devices()
	if err != nil {
		return nil, nil, nil, err
	}
	c, err := cl.Open(ds[0])
	if err != nil {
		return nil, nil, nil, err
	}
	q, err := c.NewQueue()
	if err != nil {
		return nil, nil, nil, err
	}
	p, err := c.Program("child", kernels+`
__kernel void wild(__global int *p) { p[(long)1 << 40] = 1; }
`, "")
	return c, q, p, err
}

// childFault launches a kernel that stores a terabyte past its buffer.
func childFault() int {
	c, q, p, err := childOpen()
	if err != nil {
		os.Stdout.WriteString("setup: " + err.Error() + "\n")
		return 2
	}
	k, _ := q.Kernel(p, "wild")
	b, _ := c.Alloc(4)
	_ = k.SetBuffer(0, b)
	// Hold the launch behind a user event so "launched" is written
	// before the kernel can run.
	u, _ := c.NewUserEvent()
	_ = q.Wait(u.Event())
	if err := q.Launch(k, []int{1}, nil); err != nil {
		os.Stdout.WriteString("launch: " + err.Error() + "\n")
		return 2
	}
	os.Stdout.WriteString("launched\n")
	_ = u.Complete(nil)
	u.Event().Release()
	err = q.Finish(context.Background())
	os.Stdout.WriteString("survived: " + cltest.ErrString(err) + "\n")
	_ = c.Close()
	return 0
}

// TestFaultInSubprocess: a kernel that faults either kills its process
// (contained here in a subprocess) or is reported as failed; it never
// passes as a success.
func TestFaultInSubprocess(t *testing.T) {
	out, err := runChild(t, "fault")
	require.Contains(t, out, "launched\n", "the child got as far as the launch: %s", out)
	if err == nil {
		assert.NotContains(t, out, "survived: no error", "a faulting kernel reported success")
		return
	}
	var ee *osexec.ExitError
	require.ErrorAs(t, err, &ee, out)
	assert.NotContains(t, out, "survived", "the process died in the fault")
	t.Logf("the faulting kernel killed its process as expected: %v", err)
}

// childFailedKernel makes the device fail a kernel (a failed OpenCL
// status in its wait list) and prints what the marker after it reports.
func childFailedKernel() int {
	// Many rounds: the queue's waiter must not free the events a failure
	// is still propagating through (see Context.deferRelease), a race
	// that one round rarely loses.
	for range 20 {
		if rc := failedKernelRound(); rc != 0 {
			return rc
		}
	}
	return 0
}

// failedKernelRound is one round of childFailedKernel on a new context.
func failedKernelRound() int {
	c, q, p, err := childOpen()
	if err != nil {
		os.Stdout.WriteString("setup: " + err.Error() + "\n")
		return 2
	}
	u, _ := c.NewUserEvent()
	b, _ := c.Alloc(4)
	k, _ := q.Kernel(p, "touch")
	_ = k.SetBuffer(0, b)
	// The kernel waits on the user event through its queue's Wait marker.
	_ = q.Wait(u.Event())
	_ = q.Launch(k, []int{1}, nil)
	m, err := q.Marker()
	if err != nil {
		os.Stdout.WriteString("marker: " + err.Error() + "\n")
		return 2
	}
	if err := u.SetStatusForTest(-1); err != nil {
		os.Stdout.WriteString("fail: " + err.Error() + "\n")
		return 2
	}
	_ = u.Complete(nil) // the host side; the OpenCL status stays failed
	err = m.Wait(context.Background())
	var ce *cl.CommandError
	if errors.As(err, &ce) {
		os.Stdout.WriteString("command failed: " + ce.Op + " " + ce.Status.String() + "\n")
	}
	os.Stdout.WriteString("marker: " + cltest.ErrString(err) + "\n")
	m.Release()
	u.Event().Release()
	_ = c.Close()
	return 0
}

// TestFailedKernelReported: the device fails a kernel after the fact; the
// marker after it reports a *CommandError naming the launch, although the
// OpenCL implementation may give the marker itself CL_COMPLETE.
func TestFailedKernelReported(t *testing.T) {
	out, err := runChild(t, "failed-kernel")
	require.NoError(t, err, out)
	assert.Contains(t, out, "command 2 (launch touch) failed: ", out)
	t.Log(strings.TrimSpace(out))
}

// TestHostErrorNames needs no device: every status prints its CL_* name.
func TestHostErrorNames(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"out of resources", &cl.Error{Call: "clEnqueueNDRangeKernel", Code: cl.OutOfResources}, "opencl: clEnqueueNDRangeKernel: CL_OUT_OF_RESOURCES (-5)"},
		{"unknown code", &cl.Error{Call: "clFinish", Code: -999}, "opencl: clFinish: CL_ERROR(-999) (-999)"},
		{"command", &cl.CommandError{Device: "dev", Queue: 1, Seq: 7, Op: "launch vadd", Status: cl.OutOfResources},
			"opencl: dev: queue 1 command 7 (launch vadd) failed: CL_OUT_OF_RESOURCES (-5)"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.EqualError(t, tc.err, tc.want) })
	}
	assert.ErrorIs(t, &cl.Error{Call: "x", Code: cl.OutOfResources}, cl.OutOfResources)
	assert.NotErrorIs(t, &cl.Error{Call: "x", Code: cl.OutOfResources}, cl.OutOfHostMemory)
	assert.Equal(t, "CPU|default", (cl.TypeCPU | cl.TypeDefault).String())
	assert.Equal(t, "queued", cl.Queued.String())
	assert.Equal(t, "CL_OUT_OF_RESOURCES", cl.ExecStatus(-5).String())
}

func TestWaitBadInput(t *testing.T) {
	c, other := open(t), open(t)
	q, oq := newQueue(t, c), newQueue(t, other)
	om, err := oq.Marker()
	require.NoError(t, err)
	defer om.Release()
	ou, err := other.NewUserEvent()
	require.NoError(t, err)
	defer ou.Event().Release()
	released, err := q.Marker()
	require.NoError(t, err)
	released.Release()
	for _, tc := range []struct {
		name string
		wait *cl.Event
		want string
	}{
		{"nil", nil, "wait event 0 is nil"},
		{"marker of another context", om, "wait event 0 is of another context"},
		{"user event of another context", ou.Event(), "wait event 0 is of another context"},
		{"released", released, "wait event 0: opencl: closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorContains(t, q.Wait(tc.wait), tc.want)
			_, err := q.Marker(tc.wait)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	_, err = q.Kernel(build(t, other), "touch")
	assert.ErrorContains(t, err, "program not built by this queue's context")
	require.NoError(t, ou.Complete(nil))
	require.NoError(t, q.Finish(t.Context()))
}

// TestConcurrentEnqueue: goroutines share one queue; each fills its own
// part and waits on its own marker; every part holds its pattern.
func TestConcurrentEnqueue(t *testing.T) {
	c := open(t)
	q := newQueue(t, c)
	const workers, part = 4, 4096
	b := mustAlloc(t, c, workers*part)
	errs := make(chan error, workers)
	for w := range workers {
		go func() {
			for i := range 50 {
				if err := q.Fill(b, int64(w*part), part, []byte{byte(w), byte(i)}); err != nil {
					errs <- err
					return
				}
			}
			m, err := q.Marker()
			if err == nil {
				err = m.Wait(t.Context())
				m.Release()
			}
			errs <- err
		}()
	}
	for range workers {
		require.NoError(t, <-errs)
	}
	got := make([]byte, workers*part)
	require.NoError(t, q.Read(b, 0, got))
	for w := range workers {
		for i := w * part; i < (w+1)*part; i += 2 {
			require.Equal(t, []byte{byte(w), 49}, got[i:i+2], "worker %d byte %d", w, i)
		}
	}
}

// TestSubBuffer: a sub-buffer at an aligned offset shares its parent's
// bytes; bad ranges and unaligned offsets are errors naming them; the
// asynchronous copies move the bytes once a marker after them completes.
func TestSubBuffer(t *testing.T) {
	c := open(t)
	q := newQueue(t, c)
	align := c.Device().Info().BaseAlignBytes
	require.Positive(t, align)
	parent := mustAlloc(t, c, 4*align)
	sub, err := parent.Sub(align, 2*align)
	require.NoError(t, err)
	assert.Equal(t, 2*align, sub.Bytes())
	src := bytes.Repeat([]byte{7}, int(2*align))
	require.NoError(t, q.Fill(parent, 0, 4*align, []byte{0}))
	require.NoError(t, q.WriteAsync(sub, 0, src))
	got := make([]byte, 4*align)
	require.NoError(t, q.ReadAsync(parent, 0, got))
	require.NoError(t, q.Finish(t.Context()))
	want := make([]byte, 4*align)
	copy(want[align:], src)
	assert.Equal(t, want, got)
	for _, tc := range []struct {
		name   string
		off, n int64
		want   string
	}{
		{"unaligned", 1, 8, "opencl: sub-buffer at 1: offset is not a multiple of"},
		{"empty", align, 0, "empty"},
		{"outside", align, 4 * align, "outside the"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parent.Sub(tc.off, tc.n)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	require.NoError(t, sub.Release())
}
