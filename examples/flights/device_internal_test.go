package flights

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl"
)

// openCLDevice opens the first OpenCL device with one stream, closed
// when the test ends; it skips the test when there is none (fails under
// CI).
func openCLDevice(t *testing.T) gpu.CodeDevice {
	t.Helper()
	ds, err := opencl.Devices()
	if err != nil || len(ds) == 0 {
		if os.Getenv("CI") != "" {
			t.Fatalf("no OpenCL device: %v", err)
		}
		t.Skipf("no OpenCL device (install pocl-opencl-icd): %v", err)
	}
	d, err := opencl.NewDevice(ds[0])
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, d.Close()) })
	return d
}

// launchVariant runs kernel id's OpenCL variant of g on d's stream 0:
// each buffer argument gets device memory holding bufs[its buffer] (an
// output's initial bytes too), each scalar its value; then it copies
// every buffer argument back into bufs. A launch of no work-items is not
// enqueued.
func launchVariant(t *testing.T, d gpu.CodeDevice, g *dag.Graph, id dag.KernelID, bufs map[dag.BufferID][]byte) {
	t.Helper()
	vs := g.KernelVariants(id)
	require.Len(t, vs, 1)
	v := vs[0]
	require.Equal(t, dag.OpenCLCode, v.Kind)
	p, err := d.Program(v.Entry, v.Source, "")
	require.NoError(t, err)
	s := d.Stream(0).(gpu.CodeStream)
	argBytes := make([]int64, len(v.Args))
	args := make([]gpu.KernelArg, len(v.Args))
	devMem := map[dag.BufferID]gpu.Memory{}
	for i, a := range v.Args {
		if bd, ok := a.Buffer(); ok {
			require.Zero(t, bd.Offset, "argument %d", i)
			host := bufs[bd.Buffer]
			require.Equal(t, int64(len(host)), bd.Length, "argument %d", i)
			argBytes[i] = bd.Length
			m, err := d.Alloc(bd.Length)
			require.NoError(t, err)
			t.Cleanup(func() { assert.NoError(t, m.Release()) })
			require.NoError(t, errOf(s.CopyIn(m, 0, host)))
			args[i] = gpu.KernelArg{Mem: m}
			devMem[bd.Buffer] = m
			continue
		}
		sc, _ := a.Scalar()
		x, ok := sc.(int64)
		require.True(t, ok, "argument %d: scalar %T", i, sc)
		args[i] = gpu.KernelArg{Scalar: x}
	}
	shape := v.Shape(argBytes)
	require.NoError(t, shape.Check())
	if shape.Global[0] > 0 { // dag.Shape: a zero runs no work-item (OpenCL refuses the launch)
		require.NoError(t, errOf(s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: v.Entry, Global: shape.Global, Local: shape.Local,
			Args: args, Label: v.Entry})))
	}
	for id, m := range devMem {
		require.NoError(t, errOf(s.CopyOut(bufs[id], m, 0)))
	}
	require.NoError(t, s.Record().Wait(context.Background()))
}

// TestDeviceKernelsMatchHost runs the OpenCL C of filter and partial on
// the OpenCL device and their Go variants on the same random columns
// (every delay width; empty input, one row, work-group edges, the most
// work-groups, every row rejected, codes out of range), and requires the
// same bytes: the keep mask and every work-group table.
func TestDeviceKernelsMatchHost(t *testing.T) {
	d := openCLDevice(t)
	tests := []struct {
		name     string
		rows     int
		groups   int   // keys drawn from [-1, groups)
		minDelay int64 // filter threshold
		extreme  bool  // delays over the whole range of their type
	}{
		{"empty", 0, 10, 0, false},
		{"one row", 1, 3, 0, false},
		{"one work-group", deviceWorkGroup, 7, 0, false},
		{"work-group edge", deviceWorkGroup + 1, 300, -5, false},
		{"three work-groups", 2*rowsPerGroup + 17, 300, 0, false},
		{"most work-groups", maxPartialGroups*rowsPerGroup + 5000, DeviceGroups, 10, false},
		{"all rejected by delay", 5000, 50, math.MaxInt64, false},
		{"all keys null", 5000, 0, -1 << 40, false},
		{"extreme delays, wrapping sums", 70000, 20, math.MinInt64, true},
		{"codes out of range", 3000, DeviceGroups + 200, 0, false},
	}
	for _, width := range []int{1, 2, 4, 8} {
		for ti, tc := range tests {
			seed := uint64(1400 + 10*ti + width)
			t.Run(fmt.Sprintf("int%d/%s", 8*width, tc.name), func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, seed))
				n := int64(tc.rows)
				g := dag.New()
				delay := g.AddBuffer("delay", max(n*int64(width), minDeviceBytes), dag.Input())
				key := g.AddBuffer("key", max(n*4, minDeviceBytes), dag.Input())
				keep := g.AddBuffer("keep", max(n, minDeviceBytes))
				table := g.AddBuffer("table", tableBytes(partialGroups(n)))
				filter := g.AddKernel("filter", hostFilter(width, n, tc.minDelay, delay, key, keep), dag.Reads(delay, key), dag.Writes(keep),
					filterOption(width, n, tc.minDelay, delay, key, keep))
				partial := g.AddKernel("partial", hostPartial(width, n, delay, key, keep, table), dag.Reads(delay, key, keep), dag.Writes(table),
					partialOption(width, n, delay, key, keep, table))
				require.NoError(t, g.Validate())

				delayBytes := make([]byte, max(n*int64(width), minDeviceBytes))
				keyBytes := make([]byte, max(n*4, minDeviceBytes))
				ds, ks := delayBytes[:n*int64(width)], int32s(keyBytes)[:n]
				bits := uint(8 * width)
				for i := range n {
					v := rng.Int64N(200) - 50
					if tc.extreme {
						v = int64(rng.Uint64()) >> (64 - bits) // the type's whole range
					}
					for j := range width {
						ds[i*int64(width)+int64(j)] = byte(uint64(v) >> (8 * j))
					}
					ks[i] = int32(rng.IntN(tc.groups+1)) - 1
				}

				// Go variants.
				hostKeep := make([]byte, max(n, minDeviceBytes))
				filterRows(width, delayBytes, ks, hostKeep[:n], tc.minDelay)
				hostTable := make([]byte, tableBytes(partialGroups(n)))
				partialRows(width, delayBytes, ks, hostKeep[:n], int64s(hostTable))

				// OpenCL variants, each from the Go variant's input.
				bufs := map[dag.BufferID][]byte{
					delay: delayBytes, key: keyBytes,
					keep: make([]byte, len(hostKeep)), table: make([]byte, len(hostTable)),
				}
				launchVariant(t, d, g, filter, bufs)
				require.Equal(t, hostKeep[:n], bufs[keep][:n], "keep mask (seed %d)", seed)
				copy(bufs[keep], hostKeep)
				launchVariant(t, d, g, partial, bufs)
				require.Equal(t, hostTable, bufs[table], "partial tables (seed %d)", seed)

				var kept int64
				for _, b := range hostKeep[:n] {
					kept += int64(b)
				}
				var counted int64
				tb := int64s(hostTable)
				for w := 0; w < len(tb); w += 3 * DeviceGroups {
					for _, x := range tb[w : w+DeviceGroups] {
						counted += x
					}
				}
				if tc.name == "codes out of range" {
					assert.Less(t, kept, n, "rows with codes >= DeviceGroups are rejected")
				}
				assert.Equal(t, kept, counted, "every kept row is counted once")
				if tc.minDelay == math.MaxInt64 || tc.groups == 0 || n == 0 {
					assert.Zero(t, kept)
				} else if n > 100 {
					assert.Positive(t, kept)
				}
			})
		}
	}
}

// errOf returns the error of a CodeStream enqueue, dropping its sequence
// number.
func errOf(_ uint64, err error) error { return err }
