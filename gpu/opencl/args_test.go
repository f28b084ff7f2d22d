package opencl_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/gpu/opencl/internal/cltest"
)

const argKernels = `
__kernel void scaled(__global int *out, long v, float f) { out[get_global_id(0)] = (int)v + (int)f; }
__kernel void scratch(__global int *out, __local int *tmp) { tmp[0] = 1; out[0] = tmp[0]; }
__kernel void plus1(__global const uint *in, __global uint *out) {
	size_t i = get_global_id(0);
	out[i] = in[i] + 1;
}
__kernel void isnull(__global const int *p, __global int *out) { out[0] = p == 0 ? 7 : 8; }
`

// TestDeviceArgumentMismatch: an argument that does not fit its
// parameter (a scalar for a pointer, a buffer for a scalar or a __local
// pointer, a scalar of another size) and a wrong argument count are
// errors naming the kernel and the argument, never a crash in OpenCL;
// the stream still works after them.
func TestDeviceArgumentMismatch(t *testing.T) {
	d := newDevice(t, 1)
	p, err := d.Program("args", argKernels, "")
	require.NoError(t, err)
	s := codeStream(d, 0)
	out := alloc(t, d, 16)
	launch := func(entry string, args ...gpu.KernelArg) error {
		return errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: entry, Global: []int{1}, Args: args, Label: "k " + entry}))
	}
	for _, tc := range []struct {
		name  string
		entry string
		args  []gpu.KernelArg
		want  string
	}{
		{"int64 for a pointer", "scaled", []gpu.KernelArg{scalar(int64(1)), scalar(int64(2)), scalar(float32(3))},
			`k scaled: argument 0: opencl: kernel "scaled": argument 0: a int64 scalar for parameter 0 (__global int* out), a pointer`},
		{"uint64 for a pointer", "scaled", []gpu.KernelArg{scalar(uint64(1)), scalar(int64(2)), scalar(float32(3))}, "argument 0: a uint64 scalar for parameter 0"},
		{"float64 for a pointer", "scaled", []gpu.KernelArg{scalar(1.5), scalar(int64(2)), scalar(float32(3))}, "argument 0: a float64 scalar for parameter 0"},
		{"int32 for a pointer", "scaled", []gpu.KernelArg{scalar(int32(1)), scalar(int64(2)), scalar(float32(3))}, "argument 0: a int32 scalar for parameter 0"},
		{"buffer for a scalar", "scaled", []gpu.KernelArg{mem(out), mem(out), scalar(float32(3))},
			"argument 1: a buffer for parameter 1 (long v), which is not a __global or __constant pointer"},
		{"int32 for a long", "scaled", []gpu.KernelArg{mem(out), scalar(int32(2)), scalar(float32(3))},
			"argument 1: a 4-byte int32 for parameter 1 (long v), of 8 bytes"},
		{"float64 for a float", "scaled", []gpu.KernelArg{mem(out), scalar(int64(2)), scalar(3.0)},
			"argument 2: a 8-byte float64 for parameter 2 (float f), of 4 bytes"},
		{"buffer for a local pointer", "scratch", []gpu.KernelArg{mem(out), mem(out)},
			"argument 1: a buffer for parameter 1 (__local int* tmp), which is not a __global or __constant pointer"},
		{"scalar for a local pointer", "scratch", []gpu.KernelArg{mem(out), scalar(int64(8))}, "argument 1: a int64 scalar for parameter 1 (__local int* tmp), a pointer"},
		{"too few", "scaled", []gpu.KernelArg{mem(out), scalar(int64(2))}, `k scaled: kernel "scaled" takes 3 arguments, the launch binds 2`},
		{"too many", "scaled", []gpu.KernelArg{mem(out), scalar(int64(2)), scalar(float32(3)), scalar(int32(4))}, `kernel "scaled" takes 3 arguments, the launch binds 4`},
		{"none", "scaled", nil, `kernel "scaled" takes 3 arguments, the launch binds 0`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := launch(tc.entry, tc.args...)
			require.Error(t, err)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	// After a good launch the count check still holds: a shorter launch
	// never runs on the arguments the previous one left set.
	require.NoError(t, launch("scaled", mem(out), scalar(int64(2)), scalar(float32(3))))
	assert.ErrorContains(t, launch("scaled", mem(out)), "takes 3 arguments, the launch binds 1")
	got := make([]byte, 4)
	require.NoError(t, errOf(s.CopyOut(got, out, 0)))
	require.NoError(t, recordWait(t, s), "the refused launches enqueued nothing")
	assert.Equal(t, uint32(5), binary.LittleEndian.Uint32(got))
}

// TestDeviceLaunchShapeLimits: a shape the device cannot run is an error
// of LaunchKernel naming the launch, never a launch reported done that
// never ran: work-items past size_t, a local size past
// CL_DEVICE_MAX_WORK_ITEM_SIZES, a work-group past
// CL_DEVICE_MAX_WORK_GROUP_SIZE.
func TestDeviceLaunchShapeLimits(t *testing.T) {
	d := newDevice(t, 1)
	p := devProgram(t, d)
	s := codeStream(d, 0)
	buf := alloc(t, d, 4096)
	info, ok := opencl.InfoOf(d)
	require.True(t, ok)
	require.Equal(t, 64, info.AddressBits, "PoCL on a 64-bit host")
	require.Len(t, info.MaxWorkItems, 3)
	require.Positive(t, info.MaxWorkGroup)
	wg := info.MaxWorkGroup
	for _, tc := range []struct {
		name          string
		global, local []int
		want          string
	}{
		{"work-items past size_t", []int{1 << 62, 1 << 62}, nil,
			"launch big: global [4611686018427387904 4611686018427387904], local []: 4611686018427387904×4611686018427387904 work-items exceed the device's 64-bit size_t"},
		{"three dimensions past size_t", []int{1 << 30, 1 << 30, 1 << 30}, nil, "work-items exceed the device's 64-bit size_t"},
		{"local past the work-item size", []int{2 * (info.MaxWorkItems[0] + 1)}, []int{info.MaxWorkItems[0] + 1},
			fmt.Sprintf("local size %d in dimension 0 exceeds the device's %d", info.MaxWorkItems[0]+1, info.MaxWorkItems[0])},
		{"work-group past the limit", []int{wg, 2}, []int{wg, 2}, fmt.Sprintf("a work-group of %d×2 work-items exceeds the device's %d", wg, wg)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "touch", Global: tc.global, Local: tc.local, Args: []gpu.KernelArg{mem(buf)}, Label: "launch big"}))
			require.Error(t, err)
			assert.ErrorContains(t, err, tc.want)
		})
	}
	require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "touch", Global: []int{64, 1}, Local: []int{16, 1}, Args: []gpu.KernelArg{mem(buf)}})),
		"a shape within the limits runs")
	got := make([]int32, 64)
	require.NoError(t, errOf(s.CopyOut(cltest.BytesOf(got), buf, 0)))
	require.NoError(t, recordWait(t, s))
	assert.Equal(t, int32(1), got[63], "element 63 touched once")
}

// TestDeviceAllocZeroed: Alloc's memory reads as zeroes even where
// memory released before held other bytes, and Zero clears memory
// again, ordered before the commands of every stream enqueued after it.
func TestDeviceAllocZeroed(t *testing.T) {
	d := newDevice(t, 2)
	s0, s1 := codeStream(d, 0), codeStream(d, 1)
	const n = 1 << 16
	for round := range 8 {
		m, err := d.Alloc(n)
		require.NoError(t, err)
		got := make([]byte, n)
		require.NoError(t, errOf(s0.CopyOut(got, m, 0)))
		require.NoError(t, recordWait(t, s0))
		require.Equal(t, make([]byte, n), got, "round %d: a new allocation reads as zeroes", round)
		require.NoError(t, errOf(s0.Fill(m, 0, n, []byte{0xEE})))
		require.NoError(t, recordWait(t, s0))
		require.NoError(t, m.Zero())
		require.NoError(t, errOf(s1.CopyOut(got, m, 0)))
		require.NoError(t, recordWait(t, s1))
		require.Equal(t, make([]byte, n), got, "round %d: zeroed again, seen by another stream", round)
		require.NoError(t, errOf(s0.Fill(m, 0, n, []byte{0xEE})))
		require.NoError(t, recordWait(t, s0))
		require.NoError(t, m.Release()) // its bytes, 0xEE, go back to the implementation
	}
	m, err := d.Alloc(8)
	require.NoError(t, err)
	require.NoError(t, m.Release())
	assert.ErrorIs(t, m.Zero(), gpu.ErrClosed)
}

// TestDeviceZeroMany: Zero of many memories (more than one zero-kernel
// launch's worth, small and large, one released before any stream used
// it) clears each of them for every stream, and a stream waits for all
// those fills with one command, not one per memory.
func TestDeviceZeroMany(t *testing.T) {
	d := newDevice(t, 2)
	s0, s1 := codeStream(d, 0), codeStream(d, 1)
	sizes := []int64{opencl.SlabMaxForTest + 8, 1, 4, opencl.SlabMaxForTest}
	for i := range 37 {
		sizes = append(sizes, int64(8*(i+1)))
	}
	ms := make([]gpu.Memory, len(sizes))
	for i, n := range sizes {
		ms[i] = alloc(t, d, n)
		require.NoError(t, errOf(s0.Fill(ms[i], 0, n, []byte{0xEE})))
	}
	require.NoError(t, recordWait(t, s0))
	gone, err := d.Alloc(256)
	require.NoError(t, err)
	for round := range 3 {
		require.NoError(t, gone.Zero())
		require.NoError(t, gone.Release(), "round %d: released with its fill pending", round)
		for _, m := range ms {
			require.NoError(t, m.Zero())
		}
		for si, s := range []gpu.CodeStream{s1, s0} {
			got := make([][]byte, len(ms))
			before := s.Record()
			for i, m := range ms {
				got[i] = make([]byte, sizes[i])
				require.NoError(t, errOf(s.CopyOut(got[i], m, 0)))
			}
			after := s.Record()
			require.NoError(t, after.Wait(t.Context()))
			for i := range ms {
				require.Equal(t, make([]byte, sizes[i]), got[i], "round %d stream %d memory %d (%d bytes)", round, si, i, sizes[i])
			}
			// The copies, at most one wait for the fills, the marker.
			assert.LessOrEqual(t, opencl.SeqForTest(after)-opencl.SeqForTest(before), uint64(len(ms)+2),
				"round %d stream %d: commands enqueued for %d copies", round, si, len(ms))
		}
		for i, m := range ms {
			require.NoError(t, errOf(s1.Fill(m, 0, sizes[i], []byte{byte(round + 1)})))
		}
		require.NoError(t, recordWait(t, s1))
		gone, err = d.Alloc(256)
		require.NoError(t, err)
	}
	require.NoError(t, gone.Release())
}

// TestDeviceZeroByteArgument: zero-byte memory is allocated, copied
// (nothing: no command, sequence number 0) and bound as a NULL __global
// pointer; the commands that are enqueued get increasing sequence
// numbers.
func TestDeviceZeroByteArgument(t *testing.T) {
	d := newDevice(t, 1)
	p, err := d.Program("args", argKernels, "")
	require.NoError(t, err)
	s := codeStream(d, 0)
	empty, out := alloc(t, d, 0), alloc(t, d, 4)
	assert.Zero(t, empty.Bytes())
	require.NoError(t, empty.Zero())
	seq, err := s.CopyIn(empty, 0, nil)
	require.NoError(t, err)
	assert.Zero(t, seq, "a zero-byte copy enqueues no command")
	seq, err = s.Fill(empty, 0, 0, []byte{0})
	require.NoError(t, err)
	assert.Zero(t, seq, "a zero-byte fill enqueues no command")
	assert.ErrorContains(t, errOf(s.CopyIn(empty, 0, []byte{1})), "range [0, 1) outside the 0-byte buffer")
	assert.ErrorContains(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "isnull", Global: []int{1}, Args: []gpu.KernelArg{{Mem: empty, Offset: 1}, mem(out)}})),
		"argument 0: offset 1 outside the 0-byte memory")
	launch, err := s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "isnull", Global: []int{1}, Args: []gpu.KernelArg{mem(empty), mem(out)}})
	require.NoError(t, err)
	got := make([]byte, 4)
	read, err := s.CopyOut(got, out, 0)
	require.NoError(t, err)
	assert.Positive(t, launch)
	assert.Greater(t, read, launch, "sequence numbers increase")
	require.NoError(t, recordWait(t, s))
	assert.Equal(t, uint32(7), binary.LittleEndian.Uint32(got), "a NULL pointer")
}

// TestDeviceSubBufferArgumentReused: memory bound at an offset (a
// sub-buffer) and released, round after round, on one device: every
// round's launch reads its own memory. Run in a subprocess, where a
// stale kernel argument may abort OpenCL.
func TestDeviceSubBufferArgumentReused(t *testing.T) {
	out, err := runChild(t, "sub-buffer-reuse")
	require.NoError(t, err, out)
	assert.Equal(t, "rounds: 300 good\n", out)
}

func init() { children["sub-buffer-reuse"] = childSubBufferReuse }

// childSubBufferReuse does 300 rounds of: allocate x (256 bytes) and z,
// fill x with the round's number, launch plus1 on x from byte 128 into
// z, read z, release both.
func childSubBufferReuse() int {
	ds, err := opencl.Devices()
	if err != nil {
		say("setup: %v", err)
		return 2
	}
	d, err := opencl.NewDevice(ds[0], opencl.WithStreams(2))
	if err != nil {
		say("setup: %v", err)
		return 2
	}
	defer d.Close()
	p, err := d.Program("args", argKernels, "")
	if err != nil {
		say("setup: %v", err)
		return 2
	}
	off := opencl.BaseAlignForTest(d)
	const rounds = 300
	good := 0
	for round := range rounds {
		x, err1 := d.Alloc(2 * off)
		z, err2 := d.Alloc(off)
		if err1 != nil || err2 != nil {
			say("round %d: alloc: %v %v", round, err1, err2)
			return 1
		}
		s := codeStream(d, round%2)
		v := uint32(round + 1)
		in := make([]byte, 2*off)
		for i := 0; i < len(in); i += 4 {
			binary.LittleEndian.PutUint32(in[i:], v)
		}
		got := make([]byte, off)
		err := errOf(s.CopyIn(x, 0, in))
		if err == nil {
			err = errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "plus1", Global: []int{int(off / 4)}, Args: []gpu.KernelArg{{Mem: x, Offset: off}, {Mem: z}}}))
		}
		if err == nil {
			err = errOf(s.CopyOut(got, z, 0))
		}
		if err == nil {
			err = s.Record().Wait(context.Background())
		}
		if err != nil {
			say("round %d: %v", round, err)
			return 1
		}
		if w := binary.LittleEndian.Uint32(got); w != v+1 {
			say("round %d: z[0] = %d, want %d", round, w, v+1)
		} else {
			good++
		}
		_, _ = x.Release(), z.Release()
	}
	say("rounds: %d good", good)
	return 0
}
