package opencl_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl"
)

// words returns n bytes holding v in every 4-byte word.
func words(n int, v uint32) []byte {
	b := make([]byte, n)
	for i := 0; i+4 <= n; i += 4 {
		binary.LittleEndian.PutUint32(b[i:], v)
	}
	return b
}

// TestDeviceSlabReuseWaitsForCommands: memory released while commands
// enqueued before its Release still wait to run on it (a kernel that
// writes it and a copy that reads it, held behind a user event) keeps
// its region: memory allocated meanwhile gets another one, and neither
// sees the other's bytes. Once those commands have finished, the region
// is handed out again and reads as zeroes.
func TestDeviceSlabReuseWaitsForCommands(t *testing.T) {
	d := newDevice(t, 2)
	p, err := d.Program("args", argKernels, "")
	require.NoError(t, err)
	s0, s1 := codeStream(d, 0), codeStream(d, 1)
	const n = 256
	write := func(s gpu.CodeStream, m gpu.Memory, v int64) error {
		return errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "scaled", Global: []int{n / 4},
			Args: []gpu.KernelArg{mem(m), scalar(v), scalar(float32(0))}}))
	}
	region := func(m gpu.Memory) [2]int {
		sl, r, ok := opencl.RegionForTest(m)
		require.True(t, ok, "%d bytes are slab memory", n)
		return [2]int{sl, r}
	}
	read := func(s gpu.CodeStream, m gpu.Memory) []byte {
		got := make([]byte, n)
		require.NoError(t, errOf(s.CopyOut(got, m, 0)))
		require.NoError(t, recordWait(t, s))
		return got
	}
	a, err := d.Alloc(n)
	require.NoError(t, err)
	ra := region(a)
	release, err := opencl.HoldForTest(s0)
	require.NoError(t, err)
	gotA := make([]byte, n)
	require.NoError(t, write(s0, a, 0x1111))
	require.NoError(t, errOf(s0.CopyOut(gotA, a, 0)))
	require.NoError(t, a.Release(), "released with its kernel and copy still to run")

	b := alloc(t, d, n)
	assert.NotEqual(t, ra, region(b), "a region is not handed out while commands enqueued before its release wait")
	require.Equal(t, make([]byte, n), read(s1, b), "new memory reads as zeroes")
	require.NoError(t, write(s1, b, 0x2222))

	require.NoError(t, release(0))
	require.NoError(t, recordWait(t, s0))
	assert.Equal(t, words(n, 0x1111), gotA, "the released memory's copy read its own kernel's bytes")
	assert.Equal(t, words(n, 0x2222), read(s1, b), "the released memory's kernel did not write the new memory")

	require.NoError(t, opencl.SettleForTest(t.Context(), d))
	c := alloc(t, d, n)
	assert.Equal(t, ra, region(c), "the region is handed out again once its commands finished")
	assert.Equal(t, make([]byte, n), read(s0, c), "reused memory reads as zeroes, not its last holder's bytes")
	require.NoError(t, write(s0, c, 0x3333))
	require.Equal(t, words(n, 0x3333), read(s0, c))
	require.NoError(t, c.Zero())
	assert.Equal(t, make([]byte, n), read(s1, c), "Zero of reused memory, seen by another stream")
}

// TestDeviceSlabSizes: memory of many sizes, around each size class's
// bounds and the largest slab size, has its own bytes (filled each with
// a byte of its own, each reads back only that byte), is counted in the
// budget by the bytes asked for, and reads as zeroes when allocated
// again over released regions and after a Zero of a neighbour-sharing
// slab.
func TestDeviceSlabSizes(t *testing.T) {
	d := newDevice(t, 2)
	s0, s1 := codeStream(d, 0), codeStream(d, 1)
	align := opencl.BaseAlignForTest(d)
	top := int64(opencl.SlabMaxForTest)
	sizes := []int64{1, 7, 8, 63, 64, 65, align - 1, align, align + 1, 2*align + 8, 1000, 4096, 4097,
		top/2 - 1, top / 2, top/2 + 1, top - 8, top, top + 1, 3 * top}
	for round := range 3 {
		ms := make([]gpu.Memory, len(sizes))
		var total int64
		for i, n := range sizes {
			m, err := d.Alloc(n)
			require.NoError(t, err)
			ms[i] = m
			total += n
			assert.Equal(t, n, m.Bytes(), "round %d: Bytes of a %d-byte memory", round, n)
			_, _, slab := opencl.RegionForTest(m)
			assert.Equal(t, n <= top, slab, "round %d: %d bytes from a slab", round, n)
		}
		_, err := d.Alloc(d.Info().MemoryBytes)
		assert.ErrorContains(t, err, fmt.Sprintf(": %d of its %d bytes are in use", total, d.Info().MemoryBytes),
			"round %d: the budget counts the bytes asked for", round)
		got := make([][]byte, len(ms))
		for i, m := range ms {
			got[i] = make([]byte, sizes[i])
			require.NoError(t, errOf(s0.CopyOut(got[i], m, 0)))
		}
		require.NoError(t, recordWait(t, s0))
		for i := range ms {
			require.Equal(t, make([]byte, sizes[i]), got[i], "round %d: new %d-byte memory reads as zeroes", round, sizes[i])
		}
		for i, m := range ms {
			require.NoError(t, errOf(s1.Fill(m, 0, sizes[i], []byte{byte(i + 1)})))
		}
		require.NoError(t, recordWait(t, s1))
		// Zero every other memory: its neighbours keep their bytes.
		for i, m := range ms {
			if i%2 == 0 {
				require.NoError(t, m.Zero())
			}
		}
		for i, m := range ms {
			require.NoError(t, errOf(s0.CopyOut(got[i], m, 0)))
		}
		require.NoError(t, recordWait(t, s0))
		for i := range ms {
			want := bytes.Repeat([]byte{byte(i + 1)}, int(sizes[i]))
			if i%2 == 0 {
				want = make([]byte, sizes[i])
			}
			require.Equal(t, want, got[i], "round %d memory %d (%d bytes)", round, i, sizes[i])
		}
		for _, m := range ms {
			require.NoError(t, m.Release())
			require.NoError(t, m.Release(), "Release is idempotent")
		}
		_, err = d.Alloc(d.Info().MemoryBytes + 1)
		assert.ErrorContains(t, err, fmt.Sprintf(": 0 of its %d bytes are in use", d.Info().MemoryBytes),
			"round %d: each release returned its bytes once", round)
		require.NoError(t, opencl.SettleForTest(t.Context(), d), "the next round reuses the regions")
	}
	// A region released twice is handed out once.
	regions := map[[2]int]int64{}
	for _, n := range sizes {
		m := alloc(t, d, n)
		if sl, r, ok := opencl.RegionForTest(m); ok {
			k := [2]int{sl, r}
			_, dup := regions[k]
			require.False(t, dup, "memory of %d bytes got the region of memory of %d", n, regions[k])
			regions[k] = n
		}
	}
}

// TestDeviceSlabOffsets: kernel arguments at offsets of memory carved
// from a slab, at a region past the slab's first, bind the memory's own
// bytes from the offset (a sub-buffer cut from the slab at the region
// plus the offset).
func TestDeviceSlabOffsets(t *testing.T) {
	d := newDevice(t, 1)
	p, err := d.Program("args", argKernels, "")
	require.NoError(t, err)
	s := codeStream(d, 0)
	align := opencl.BaseAlignForTest(d)
	n := 4 * align
	var ms []gpu.Memory
	for range 3 { // x and z are not their slab's first regions
		ms = append(ms, alloc(t, d, n))
	}
	x, z := ms[1], ms[2]
	for _, m := range []gpu.Memory{x, z} {
		_, r, ok := opencl.RegionForTest(m)
		require.True(t, ok)
		require.Positive(t, r)
	}
	in := make([]byte, n)
	for i := range n / 4 {
		binary.LittleEndian.PutUint32(in[4*i:], uint32(1000+i))
	}
	require.NoError(t, errOf(s.CopyIn(x, 0, in)))
	require.NoError(t, errOf(s.CopyIn(ms[0], 0, words(int(n), 7))))
	for _, off := range []int64{align, 3 * align, 2 * align} {
		k := int((n - off) / 4)
		require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "plus1", Global: []int{k},
			Args: []gpu.KernelArg{{Mem: x, Offset: off}, {Mem: z, Offset: align}}, Label: fmt.Sprint("plus1 at ", off)})))
		got := make([]byte, n)
		require.NoError(t, errOf(s.CopyOut(got, z, 0)))
		require.NoError(t, recordWait(t, s))
		for j := range min(k, int((n-align)/4)) {
			w := binary.LittleEndian.Uint32(got[align+int64(4*j):])
			require.Equal(t, uint32(1000+int(off/4)+j+1), w, "offset %d word %d", off, j)
		}
	}
	got := make([]byte, n)
	require.NoError(t, errOf(s.CopyOut(got, ms[0], 0)))
	require.NoError(t, recordWait(t, s))
	assert.Equal(t, words(int(n), 7), got, "the slab's first region is untouched")
}

// slabMemories allocates n memories of the smallest size class on d, a
// fresh device, and checks that they are regions 0 to n-1 of one slab.
func slabMemories(t *testing.T, d gpu.CodeDevice, n int) ([]gpu.Memory, int) {
	t.Helper()
	bytes := max(opencl.BaseAlignForTest(d), 64)
	ms := make([]gpu.Memory, n)
	for i := range ms {
		ms[i] = alloc(t, d, bytes)
		sl, r, ok := opencl.RegionForTest(ms[i])
		require.True(t, ok)
		require.Equal(t, [2]int{0, i}, [2]int{sl, r}, "memory %d of a fresh device", i)
	}
	return ms, int(bytes)
}

// TestDeviceZeroRuns: a slab whose regions 0-2 and 5-6 are zeroed while
// a kernel enqueued on another stream, held behind a user event, reads
// region 3 and writes region 4 is zeroed through one sub-buffer per run
// of pending regions, [0, 3) and [5, 7), so no zero command overlaps the
// held kernel's memory: the zeroed memory reads as zeroes while the
// kernel still waits, and once it has run, regions 3 and 4 hold its
// bytes. A second identical generation reuses the two sub-buffers and
// sets no zero kernel argument.
func TestDeviceZeroRuns(t *testing.T) {
	d := newDevice(t, 2)
	p, err := d.Program("args", argKernels, "")
	require.NoError(t, err)
	s0, s1 := codeStream(d, 0), codeStream(d, 1)
	ms, n := slabMemories(t, d, 7)
	fill := func() {
		for i, m := range ms {
			require.NoError(t, errOf(s0.CopyIn(m, 0, words(n, uint32(1000+i)))))
		}
		require.NoError(t, recordWait(t, s0))
	}
	zeroed := []int{0, 1, 2, 5, 6}
	zeroAndRead := func(gen string) {
		for _, i := range zeroed {
			require.NoError(t, ms[i].Zero())
		}
		got := make([][]byte, len(ms))
		for _, i := range zeroed {
			got[i] = make([]byte, n)
			require.NoError(t, errOf(s0.CopyOut(got[i], ms[i], 0)))
		}
		require.NoError(t, recordWait(t, s0))
		for _, i := range zeroed {
			assert.Equal(t, make([]byte, n), got[i], "%s: memory %d reads as zeroes", gen, i)
		}
	}
	fill()
	release, err := opencl.HoldForTest(s1)
	require.NoError(t, err)
	require.NoError(t, errOf(s1.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "plus1", Global: []int{n / 4},
		Args: []gpu.KernelArg{mem(ms[3]), mem(ms[4])}, Label: "plus1 3 to 4"})))
	made0, released0, _ := opencl.ZeroCountsForTest(d)
	zeroAndRead("first generation, beside the held kernel")
	made1, released1, sets1 := opencl.ZeroCountsForTest(d)
	assert.Equal(t, made0+2, made1, "one sub-buffer per run")
	assert.Equal(t, released0, released1)
	assert.Equal(t, [][2]int{{0, 3}, {0, 7}, {5, 2}}, opencl.ZeroRunsForTest(ms[0]),
		"the runs of pending regions, beside the allocation's [0, 7)")

	require.NoError(t, release(0))
	require.NoError(t, recordWait(t, s1))
	got := make([]byte, n)
	require.NoError(t, errOf(s1.CopyOut(got, ms[3], 0)))
	require.NoError(t, recordWait(t, s1))
	assert.Equal(t, words(n, 1003), got, "the held kernel's input kept its bytes")
	require.NoError(t, errOf(s1.CopyOut(got, ms[4], 0)))
	require.NoError(t, recordWait(t, s1))
	assert.Equal(t, words(n, 1004), got, "the held kernel wrote its output")

	fill()
	zeroAndRead("second generation")
	made2, released2, sets2 := opencl.ZeroCountsForTest(d)
	assert.Equal(t, made1, made2, "the same runs reuse their sub-buffers")
	assert.Equal(t, released1, released2)
	assert.Equal(t, sets1, sets2, "the zero kernels keep the runs' arguments")
}

// TestDeviceZeroRunCacheBounded: zeroing each region of a 64-region slab
// alone, in a generation of its own, makes 64 runs; the slab keeps at
// most ZeroRunsMaxForTest of them, the most recently zeroed, every
// evicted one released, and every region reads as zeroes. A run zeroed
// again after its eviction gets a new sub-buffer.
func TestDeviceZeroRunCacheBounded(t *testing.T) {
	d := newDevice(t, 1)
	s := codeStream(d, 0)
	ms, n := slabMemories(t, d, 64)
	for _, m := range ms {
		require.NoError(t, errOf(s.Fill(m, 0, int64(n), []byte{0xff})))
	}
	require.NoError(t, recordWait(t, s))
	made0, _, _ := opencl.ZeroCountsForTest(d)
	got := make([][]byte, len(ms))
	for i, m := range ms {
		require.NoError(t, m.Zero())
		got[i] = make([]byte, n)
		require.NoError(t, errOf(s.CopyOut(got[i], m, 0)), "the copy seals generation %d", i)
	}
	require.NoError(t, recordWait(t, s))
	for i := range ms {
		require.Equal(t, make([]byte, n), got[i], "memory %d", i)
	}
	made, released, _ := opencl.ZeroCountsForTest(d)
	runs := opencl.ZeroRunsForTest(ms[0])
	assert.Equal(t, made0+64, made, "a sub-buffer per new run")
	var want [][2]int
	for r := 64 - opencl.ZeroRunsMaxForTest; r < 64; r++ {
		want = append(want, [2]int{r, 1})
	}
	assert.Equal(t, want, runs, "the most recently zeroed runs")
	assert.Equal(t, uint64(len(runs)), made-released, "every evicted sub-buffer is released")

	require.NoError(t, ms[0].Zero())
	require.NoError(t, errOf(s.CopyOut(got[0], ms[0], 0)))
	require.NoError(t, recordWait(t, s))
	assert.Equal(t, make([]byte, n), got[0])
	made2, released2, _ := opencl.ZeroCountsForTest(d)
	assert.Equal(t, made+1, made2, "an evicted run is made again")
	assert.Equal(t, released+1, released2, "evicting the least recently zeroed")
	assert.Len(t, opencl.ZeroRunsForTest(ms[0]), opencl.ZeroRunsMaxForTest)
}

// cpuTime is the CPU time the process has used so far (user and
// system, all threads: the OpenCL implementation's too).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkZeroChain is the cost of zeroing device memory: a chain of
// 64 empty kernels on one stream, kernel i reading 64-byte memory i-1
// and writing memory i, waited for with one Record, beside the same chain
// after a Zero of all 64 memories, as a reused plan's run zeroes its
// memory, in the same iteration. It reports both per iteration and their
// ratio, zero+chain/chain.
func BenchmarkZeroChain(b *testing.B) {
	d := newDevice(b, 1)
	p, err := d.Program("nop", `__kernel void nop(__global uchar *in, __global uchar *out) {}`, "")
	require.NoError(b, err)
	s := codeStream(d, 0)
	const n = 64
	ms := make([]gpu.Memory, n)
	kls := make([]gpu.KernelLaunch, n)
	for i := range ms {
		ms[i] = alloc(b, d, 64)
		kls[i] = gpu.KernelLaunch{Program: p, Entry: "nop", Global: []int{1},
			Args: []gpu.KernelArg{mem(ms[max(i-1, 0)]), mem(ms[i])}, Label: fmt.Sprint("nop", i)}
	}
	chain := func() {
		for i := range kls {
			if _, err := s.LaunchKernel(&kls[i]); err != nil {
				b.Fatal(err)
			}
		}
		if err := s.Record().Wait(b.Context()); err != nil {
			b.Fatal(err)
		}
	}
	chain() // warm: kernel objects, the zero program
	var chainT, zeroT, chainC, zeroC time.Duration
	for b.Loop() {
		t0, c0 := time.Now(), cpuTime()
		chain()
		t1, c1 := time.Now(), cpuTime()
		for _, m := range ms {
			if err := m.Zero(); err != nil {
				b.Fatal(err)
			}
		}
		chain()
		chainT += t1.Sub(t0)
		zeroT += time.Since(t1)
		chainC += c1 - c0
		zeroC += cpuTime() - c1
	}
	b.ReportMetric(float64(chainT.Nanoseconds())/float64(b.N), "chain-ns/op")
	b.ReportMetric(float64(zeroT.Nanoseconds())/float64(b.N), "zero+chain-ns/op")
	b.ReportMetric(float64(zeroT)/float64(chainT), "zero+chain/chain")
	b.ReportMetric(float64(zeroC)/float64(chainC), "zero+chain/chain-cpu")
}
