package dag_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/topology"
)

func TestNamesAreCopied(t *testing.T) {
	g := dag.New()
	buf := []byte("first")
	// A string over a buffer the caller reuses: the graph must keep its
	// own copy.
	b := dag.AddValue[any](g, unsafe.String(&buf[0], len(buf))).ID()
	k := g.AddKernel(unsafe.String(&buf[0], len(buf))+"-k", nop, dag.Writes(b))
	copy(buf, "XXXXX")
	assert.Equal(t, "first", g.Buffer(b).Name)
	assert.Equal(t, "first-k", g.KernelName(k))
}

func TestNamesSurviveArenaGrowth(t *testing.T) {
	g := dag.New()
	long := strings.Repeat("n", 100_000) // longer than any arena growth step
	var names []string
	var early []string // names read before the arena grew
	for i := range 5000 {
		n := "k" + strconv.Itoa(i)
		if i == 1234 {
			n = long
		}
		if i%7 == 0 {
			n = "" // an empty name is a mistake, and reads as empty
		}
		b := dag.AddValue[any](g, "b"+strconv.Itoa(i)).ID()
		g.AddKernel(n, nop, dag.Writes(b))
		names = append(names, n)
		if i < 10 {
			early = append(early, g.KernelName(dag.KernelID(i)))
		}
	}
	for i, n := range names {
		require.Equal(t, n, g.KernelName(dag.KernelID(i)), "kernel %d", i)
		require.Equal(t, n, g.Kernel(dag.KernelID(i)).Name)
		require.Equal(t, "b"+strconv.Itoa(i), g.Buffer(dag.BufferID(i)).Name)
	}
	assert.Equal(t, names[:10], early, "names handed out before the arena grew stay valid")
	err := g.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dag: kernel 0 has an empty name")
	assert.Contains(t, err.Error(), "dag: kernel 7 has an empty name")
}

func TestUnknownReadKeepsWrites(t *testing.T) {
	g := dag.New()
	a := dag.AddValue[any](g, "a").ID()
	out := g.AddBuffer("out", 16)
	// Whole-buffer options only, and with ranges.
	fast := g.AddKernel("fast", nop, dag.Reads(a, 99), dag.Writes(out))
	general := g.AddKernel("general", nop, dag.Reads(a), dag.ReadsRange(77, 0, 1), dag.WritesRange(out, 8, 8), dag.WritesRange(out, 0, 8))
	assert.Equal(t, []buffers.Binding{{Buffer: a, Length: 1}}, g.Kernel(fast).Reads)
	assert.Equal(t, []buffers.Binding{{Buffer: out, Length: 16}}, g.Kernel(fast).Writes)
	assert.Equal(t, []buffers.Binding{{Buffer: a, Length: 1}}, g.Kernel(general).Reads)
	assert.Equal(t, []buffers.Binding{{Buffer: out, Offset: 8, Length: 8}, {Buffer: out, Length: 8}}, g.Kernel(general).Writes)
	err := g.Validate()
	require.Error(t, err)
	assert.Contains(t, err.Error(), `dag: kernel "fast" reads unknown buffer id 99`)
	assert.Contains(t, err.Error(), `dag: kernel "general" reads unknown buffer id 77`)
}

func TestViewsAndAccessors(t *testing.T) {
	g := dag.New()
	in := g.AddBuffer("in", 32, dag.Input(), dag.SizeHint(5))
	v := dag.AddValue[any](g, "v", dag.SizeHint(4096), dag.SizeHint(100)).ID() // the later hint wins
	w := dag.AddValue[any](g, "w").ID()
	k := g.AddKernel("k", nop, dag.Reads(in), dag.Writes(v), dag.OnStream(2))
	j := g.AddKernel("j", nop, dag.ReadsOptional(v), dag.Writes(w))
	assert.Equal(t, dag.BufferDecl{ID: in, Name: "in", SizeBytes: 32, Input: true, SizeHint: 5}, g.Buffer(in))
	assert.Equal(t, int64(32), g.Buffer(in).TransferBytes(), "a raw buffer moves its size")
	assert.Equal(t, dag.BufferDecl{ID: v, Name: "v", Value: true, SizeHint: 100}, g.Buffer(v))
	assert.Equal(t, dag.BufferDecl{ID: w, Name: "w", Value: true}, g.Buffer(w))

	for id, kern := range g.Kernels() {
		assert.Equal(t, id, kern.ID)
		assert.Equal(t, g.KernelReads(id), kern.Reads)
		assert.Equal(t, g.KernelWrites(id), kern.Writes)
		assert.Equal(t, g.KernelName(id), kern.Name)
	}
	assert.Equal(t, 2, g.Kernel(k).Stream)
	assert.Equal(t, -1, g.Kernel(j).Stream)
	assert.Equal(t, []bool{true}, g.Kernel(j).Optional)
	assert.Nil(t, g.Kernel(k).Optional)

	n := 0
	for range g.Kernels() {
		n++
		break
	}
	for range g.Buffers() {
		n++
		break
	}
	assert.Equal(t, 2, n, "the iterators stop when asked")
	assert.Panics(t, func() { g.Kernel(2) })
	assert.Panics(t, func() { g.KernelName(-1) })
	assert.Panics(t, func() { g.Buffer(3) })
}

func TestSetFuncAndKernelByName(t *testing.T) {
	g := dag.New()
	b := dag.AddValue[any](g, "b").ID()
	k := g.AddKernel("k", nop, dag.Writes(b))
	id, ok := g.KernelByName("k")
	require.True(t, ok)
	assert.Equal(t, k, id)
	_, ok = g.KernelByName("nope")
	assert.False(t, ok)

	boom := errors.New("boom")
	g.SetFunc(k, func(context.Context, dag.Launch) error { return boom })
	assert.ErrorIs(t, g.Kernel(k).Fn(t.Context(), nil), boom)

	g.SetFunc(k, nil)
	assert.ErrorContains(t, g.Validate(), `dag: kernel "k" has no code: a nil function and no device variant`)
	g.SetFunc(k, nop)
	require.NoError(t, g.Validate(), "a nil function set back is no longer a mistake")

	require.NoError(t, g.InjectFailure("k", false))
	assert.ErrorIs(t, g.Kernel(k).Fn(t.Context(), nil), dag.ErrInjected)
	assert.EqualError(t, g.Kernel(k).Fn(t.Context(), nil), "dag: injected failure", "the root error names its package")
	assert.ErrorContains(t, g.InjectFailure("x", false), `dag: no kernel "x" to fail (kernels: k)`)
}

// TestInjectFailureDropsDeviceCode: a failure injected into a kernel with
// an OpenCL variant, pinned to an OpenCL device, leaves it only the
// failing Go function, with no pin to the OpenCL device; a pin to
// another device stays.
func TestInjectFailureDropsDeviceCode(t *testing.T) {
	nop := func(context.Context, dag.Launch) error { return nil }
	g := dag.New()
	b := g.AddBuffer("b", 8)
	c := g.AddBuffer("c", 8)
	cl := dag.OpenCL("__kernel void k(__global int *b) {}", "k", func([]int64) dag.Shape { return dag.Shape{Global: []int{1}} }, dag.BufferArg(b))
	k := g.AddKernel("k", nop, dag.Writes(b), cl, dag.OnDevice(topology.OpenCL(0)))
	h := g.AddKernel("h", nop, dag.Writes(c), cl, dag.Reads(b), dag.OnDevice(topology.GPU(1)))
	p := g.AddKernel("p", nop, dag.Reads(c), dag.PreferDevice(topology.OpenCL(0)), dag.OpenCL("__kernel void p(__global int *c) {}", "p", func([]int64) dag.Shape { return dag.Shape{Global: []int{1}} }, dag.BufferArg(c)))
	require.NoError(t, g.Validate())
	for _, name := range []string{"k", "h", "p"} {
		require.NoError(t, g.InjectFailure(name, false))
	}
	for _, id := range []dag.KernelID{k, h, p} {
		kr := g.Kernel(id)
		assert.Empty(t, kr.Variants, kr.Name)
		assert.Equal(t, "go", kr.Codes(), kr.Name)
		assert.ErrorIs(t, kr.Fn(t.Context(), nil), dag.ErrInjected, kr.Name)
	}
	assert.Nil(t, g.Kernel(k).Device)
	assert.Equal(t, topology.GPU(1), *g.Kernel(h).Device, "a pin to a device that runs host code stays")
	assert.Nil(t, g.Kernel(p).Prefer)
	require.NoError(t, g.Validate())
}

// TestBuildWithFormattedNamesAllocatesOnlyOptions: names formatted on the
// stack cost no allocation; the kernel's one option does.
func TestBuildWithFormattedNamesAllocatesOnlyOptions(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	const n = 4096
	g := dag.New()
	g.Grow(n, n)
	i := 0
	allocs := testing.AllocsPerRun(n-1, func() {
		// Names formatted on the stack, as a user would: the graph copies
		// them, so they need not escape.
		var buf [32]byte
		out := dag.AddValue[any](g, string(strconv.AppendInt(append(buf[:0], 'b'), int64(i), 10))).ID()
		g.AddKernel(string(strconv.AppendInt(append(buf[:0], 'k'), int64(i), 10)), nop, dag.Writes(out))
		i++
	})
	assert.Equal(t, 1.0, allocs, "allocations per kernel, amortised: its option")
	require.NoError(t, g.Validate())
}

func TestFunctionsStayPerKernel(t *testing.T) {
	g := dag.New()
	var ran []int
	mk := func(i int) dag.KernelFunc {
		return func(context.Context, dag.Launch) error { ran = append(ran, i); return nil }
	}
	shared := mk(100)
	ids := []dag.KernelID{
		g.AddKernel("a", shared),
		g.AddKernel("b", shared),
		g.AddKernel("c", mk(2)),
		g.AddKernel("d", shared),
		g.AddKernel("e", nop),
		g.AddKernel("f", nop),
	}
	g.SetFunc(ids[1], mk(1)) // only b changes
	for _, id := range ids {
		require.NoError(t, g.Kernel(id).Fn(t.Context(), nil))
	}
	assert.Equal(t, []int{100, 1, 2, 100}, ran)
	require.NoError(t, g.Validate())
}
