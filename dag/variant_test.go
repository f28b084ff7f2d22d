package dag_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
)

const copyCL = `__kernel void copy(__global const uchar *in, __global uchar *out, uint n) {
	size_t i = get_global_id(0);
	if (i < n) out[i] = in[i];
}`

// bytesShape is copyCL's launch shape: one work item per byte of its
// first argument.
func bytesShape(argBytes []int64) dag.Shape { return dag.Shape{Global: []int{int(argBytes[0])}} }

func TestVariantProblems(t *testing.T) {
	tests := []struct {
		name  string
		build func(g *dag.Graph)
		want  string
	}{
		{
			name:  "no variant at all",
			build: func(g *dag.Graph) { g.AddKernel("k", nil, dag.Writes(g.AddBuffer("x", 8))) },
			want:  `dag: kernel "k" has no code: a nil function and no device variant`,
		},
		{
			name: "empty source",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nil, dag.Writes(x), dag.OpenCL("", "copy", bytesShape, dag.BufferArg(x)))
			},
			want: `dag: kernel "k": opencl variant with an empty source`,
		},
		{
			name: "empty entry point",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nop, dag.Writes(x), dag.OpenCL(copyCL, "", bytesShape, dag.BufferArg(x)))
			},
			want: `dag: kernel "k": opencl variant with an empty entry point`,
		},
		{
			name: "nil launch shape",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nil, dag.Writes(x), dag.OpenCL(copyCL, "copy", nil, dag.BufferArg(x)))
			},
			want: `dag: kernel "k": opencl variant with a nil launch shape`,
		},
		{
			name: "argument names a buffer the kernel does not declare",
			build: func(g *dag.Graph) {
				x, y := g.AddBuffer("x", 8), g.AddBuffer("y", 8, dag.Input())
				g.AddKernel("k", nil, dag.Writes(x), dag.OpenCL(copyCL, "copy", bytesShape, dag.BufferArg(y), dag.BufferArg(x)))
			},
			want: `dag: kernel "k": opencl argument 0 binds buffer "y", which the kernel neither reads nor writes`,
		},
		{
			name: "argument names no buffer of the graph",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nil, dag.Writes(x), dag.OpenCL(copyCL, "copy", bytesShape, dag.BufferArg(x), dag.BufferArg(99)))
			},
			want: `dag: kernel "k": opencl argument 1 binds buffer id 99, which the kernel neither reads nor writes`,
		},
		{
			name: "scalar of an unsupported type",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nil, dag.Writes(x), dag.OpenCL(copyCL, "copy", bytesShape, dag.BufferArg(x), dag.ScalarArg(8)))
			},
			want: `dag: kernel "k": opencl argument 1 is a scalar of type int: want int32, uint32, int64, uint64, float32 or float64`,
		},
		{
			name: "zero argument",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nil, dag.Writes(x), dag.OpenCL(copyCL, "copy", bytesShape, dag.Arg{}))
			},
			want: `dag: kernel "k": opencl argument 0 is neither a buffer, a scalar nor a status word (the zero Arg)`,
		},
		{
			name: "two status words",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nil, dag.Writes(x), dag.OpenCL(copyCL, "copy", bytesShape, dag.BufferArg(x), dag.StatusArg(), dag.StatusArg()))
			},
			want: `dag: kernel "k": opencl argument 2 is a second status word`,
		},
		{
			name: "device code of no kind",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nop, dag.Writes(x), dag.DeviceCode("", copyCL, "copy", bytesShape, dag.BufferArg(x)))
			},
			want: `dag: kernel "k": device-code variant of no kind`,
		},
		{
			name: "device code of the host kind",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				g.AddKernel("k", nop, dag.Writes(x), dag.DeviceCode(dag.HostCode, copyCL, "copy", bytesShape, dag.BufferArg(x)))
			},
			want: `dag: kernel "k": device-code variant of kind "go": host code is the kernel's Go function`,
		},
		{
			name: "two variants of a new kind",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				v := dag.DeviceCode("fakecl", "src", "copy", bytesShape, dag.BufferArg(x))
				g.AddKernel("k", nil, dag.Writes(x), v, dag.OpenCL(copyCL, "copy", bytesShape, dag.BufferArg(x)), v)
			},
			want: `dag: kernel "k" has two fakecl variants`,
		},
		{
			name: "two OpenCL variants",
			build: func(g *dag.Graph) {
				x := g.AddBuffer("x", 8)
				v := dag.OpenCL(copyCL, "copy", bytesShape, dag.BufferArg(x))
				g.AddKernel("k", nil, dag.Writes(x), v, v)
			},
			want: `dag: kernel "k" has two opencl variants`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := dag.New()
			tc.build(g)
			errs := problems(t, g.Validate())
			require.Len(t, errs, 1, "%v", errs)
			assert.EqualError(t, errs[0], tc.want)
			assert.Nil(t, g.Order())
		})
	}
}

func TestVariantView(t *testing.T) {
	g := dag.New()
	in := g.AddBuffer("in", 64, dag.Input())
	out := g.AddBuffer("out", 64)
	// One option, reused: each kernel binds its own ranges.
	opt := dag.OpenCL(copyCL, "copy", bytesShape, dag.BufferArg(in), dag.BufferArg(out), dag.ScalarArg(uint32(32)))
	lo := g.AddKernel("lo", nop, dag.ReadsRange(in, 0, 32), opt, dag.WritesRange(out, 0, 32))
	hi := g.AddKernel("hi", nil, opt, dag.ReadsRange(in, 32, 32), dag.WritesRange(out, 32, 32))
	// Two ranges of one buffer: one pointer spanning both.
	other := g.AddBuffer("other", 8)
	twoRanges := g.AddKernel("two-ranges", nil, dag.ReadsRange(in, 16, 8), dag.ReadsRange(in, 8, 8), dag.Writes(other),
		dag.OpenCL(copyCL, "copy", bytesShape, dag.BufferArg(in), dag.BufferArg(other)), dag.Estimate(1))
	host := g.AddKernel("host", nop, dag.Reads(out))
	require.NoError(t, g.Validate())

	for _, c := range []struct {
		id         dag.KernelID
		host       bool
		codes      string
		firstRange buffers.Binding
	}{
		{lo, true, "go, opencl", buffers.Binding{Buffer: in, Offset: 0, Length: 32}},
		{hi, false, "opencl", buffers.Binding{Buffer: in, Offset: 32, Length: 32}},
		{twoRanges, false, "opencl", buffers.Binding{Buffer: in, Offset: 8, Length: 16}},
	} {
		k := g.Kernel(c.id)
		t.Run(k.Name, func(t *testing.T) {
			assert.Equal(t, c.host, k.Fn != nil)
			assert.Equal(t, c.host, k.HasCode(dag.HostCode))
			assert.True(t, k.HasCode(dag.OpenCLCode))
			assert.Equal(t, c.codes, k.Codes())
			require.Len(t, k.Variants, 1)
			assert.Equal(t, k.Variants, g.KernelVariants(c.id))
			v := k.Variants[0]
			assert.Equal(t, dag.OpenCLCode, v.Kind)
			assert.Equal(t, copyCL, v.Source)
			assert.Equal(t, "copy", v.Entry)
			assert.Equal(t, []int{64}, v.Shape([]int64{64}).Global)
			bd, ok := v.Args[0].Buffer()
			require.True(t, ok)
			assert.Equal(t, c.firstRange, bd)
		})
	}
	args := g.Kernel(hi).Variants[0].Args
	require.Len(t, args, 3)
	bd, ok := args[1].Buffer()
	assert.True(t, ok)
	assert.Equal(t, buffers.Binding{Buffer: out, Offset: 32, Length: 32}, bd)
	_, ok = args[1].Scalar()
	assert.False(t, ok)
	n, ok := args[2].Scalar()
	assert.True(t, ok)
	assert.Equal(t, uint32(32), n)
	_, ok = args[2].Buffer()
	assert.False(t, ok)
	assert.Equal(t, "buffer 1 [32:64)", args[1].String())
	assert.Equal(t, "uint32 32", args[2].String())

	k := g.Kernel(host)
	assert.Nil(t, k.Variants, "a host-only kernel has no variants")
	assert.Nil(t, g.KernelVariants(host))
	assert.True(t, k.HasCode(dag.HostCode))
	assert.False(t, k.HasCode(dag.OpenCLCode))
	assert.Equal(t, "go", k.Codes())
}

// A kernel's device code may be of any kind, named as data: a kind no
// package of the module knows is stored, bound and reported like OpenCL
// C, beside a variant of another kind.
func TestDeviceCodeOfAnyKind(t *testing.T) {
	const fake dag.CodeKind = "fakecl"
	g := dag.New()
	in, out := g.AddBuffer("in", 64, dag.Input()), g.AddBuffer("out", 64)
	id := g.AddKernel("k", nil, dag.ReadsRange(in, 16, 32), dag.Writes(out),
		dag.DeviceCode(fake, "fake source", "fake_copy", bytesShape, dag.BufferArg(in), dag.BufferArg(out), dag.ScalarArg(uint32(32))),
		dag.OpenCL(copyCL, "copy", bytesShape, dag.BufferArg(in), dag.BufferArg(out), dag.ScalarArg(uint32(32))))
	require.NoError(t, g.Validate())
	k := g.Kernel(id)
	assert.Equal(t, "fakecl, opencl", k.Codes())
	assert.True(t, k.HasCode(fake))
	assert.True(t, k.HasCode(dag.OpenCLCode))
	assert.False(t, k.HasCode(dag.HostCode))
	assert.False(t, k.HasCode("cuda"))
	require.Len(t, k.Variants, 2)
	v := k.Variants[0]
	assert.Equal(t, fake, v.Kind)
	assert.Equal(t, "fake source", v.Source)
	assert.Equal(t, "fake_copy", v.Entry)
	bd, ok := v.Args[0].Buffer()
	require.True(t, ok)
	assert.Equal(t, buffers.Binding{Buffer: in, Offset: 16, Length: 32}, bd)
	assert.Equal(t, dag.OpenCLCode, k.Variants[1].Kind)
	assert.Equal(t, dag.CodeKind("go"), dag.HostCode)
	assert.Equal(t, dag.CodeKind("opencl"), dag.OpenCLCode)
}

func TestShapeCheck(t *testing.T) {
	tests := []struct {
		name  string
		shape dag.Shape
		want  string // "" for a launchable shape
	}{
		{"one dimension", dag.Shape{Global: []int{1024}}, ""},
		{"three dimensions with local", dag.Shape{Global: []int{64, 8, 4}, Local: []int{16, 8, 1}}, ""},
		{"no work items", dag.Shape{Global: []int{0}}, ""},
		{"no dimension", dag.Shape{}, "dag: launch shape with 0 dimensions: want 1 to 3"},
		{"four dimensions", dag.Shape{Global: []int{1, 1, 1, 1}}, "dag: launch shape with 4 dimensions: want 1 to 3"},
		{"local of another rank", dag.Shape{Global: []int{8, 8}, Local: []int{8}}, "dag: launch shape with 2 global and 1 local dimensions"},
		{"negative global", dag.Shape{Global: []int{8, -1}}, "dag: launch shape: negative global size -1 in dimension 1"},
		{"local not dividing", dag.Shape{Global: []int{10}, Local: []int{4}}, "dag: launch shape: local size 4 does not divide global size 10 in dimension 0"},
		{"zero local", dag.Shape{Global: []int{10}, Local: []int{0}}, "dag: launch shape: local size 0 does not divide global size 10 in dimension 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.shape.Check()
			if tc.want == "" {
				assert.NoError(t, err)
			} else {
				assert.EqualError(t, err, tc.want)
			}
		})
	}
}

// A kernel with only a Go function allocates no more than before when a
// graph also holds kernels with variants: the variants stay in their
// kernels' side records.
func TestHostKernelsBesideVariantsAllocateOnlyOptions(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	const n = 1024
	g := dag.New()
	g.Grow(n+2, n+2)
	x := g.AddBuffer("x", 8)
	g.AddKernel("device", nil, dag.Writes(x), dag.OpenCL(copyCL, "copy", bytesShape, dag.BufferArg(x)))
	names := make([]string, n)
	for i := range names {
		names[i] = name("k", i)
	}
	i := 0
	allocs := testing.AllocsPerRun(n-1, func() {
		g.AddKernel(names[i], nop, dag.Reads(x))
		i++
	})
	assert.Equal(t, 1.0, allocs, "allocations per host-only kernel: its option")
}

func TestStatusArg(t *testing.T) {
	a := dag.StatusArg()
	assert.True(t, a.Status())
	_, isBuf := a.Buffer()
	_, isScalar := a.Scalar()
	assert.False(t, isBuf)
	assert.False(t, isScalar)
	assert.Equal(t, "status word", a.String())
	assert.False(t, dag.ScalarArg(int32(1)).Status())

	g := dag.New()
	x := g.AddBuffer("x", 8)
	k := g.AddKernel("k", nil, dag.Writes(x), dag.OpenCL(copyCL, "copy", bytesShape, dag.StatusArg(), dag.BufferArg(x)))
	require.NoError(t, g.Validate())
	vs := g.KernelVariants(k)
	require.Len(t, vs, 1)
	assert.True(t, vs[0].Args[0].Status())
}
