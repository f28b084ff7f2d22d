package dag_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/streamdag/streamdag/dag"
)

// A three-kernel pipeline: load reads an input file into a batch, clean
// filters it, and count writes an 8-byte total. Kernels are added in any
// order; Validate finds the order they must run in.
func Example() {
	g := dag.New()
	file := g.AddBuffer("flights.parquet", 1<<20, dag.Input())
	raw := dag.AddValue[any](g, "raw").ID()
	clean := dag.AddValue[any](g, "cleaned").ID()
	total := g.AddBuffer("total", 8)

	run := func(context.Context, dag.Launch) error { return nil }
	g.AddKernel("count", run, dag.Reads(clean), dag.Writes(total))
	g.AddKernel("clean", run, dag.Reads(raw), dag.Writes(clean))
	g.AddKernel("load", run, dag.Reads(file), dag.Writes(raw))

	if err := g.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	for _, id := range g.Order() {
		fmt.Println(g.Kernel(id).Name)
	}
	// Output:
	// load
	// clean
	// count
}

// Two kernels that each read what the other writes form a cycle; Validate
// names it, starting and ending at the kernel added first.
func ExampleGraph_Validate() {
	g := dag.New()
	x := g.AddBuffer("x", 64)
	y := g.AddBuffer("y", 64)
	run := func(context.Context, dag.Launch) error { return nil }
	g.AddKernel("a", run, dag.Reads(x), dag.Writes(y))
	g.AddKernel("b", run, dag.Reads(y), dag.Writes(x))

	err := g.Validate()
	fmt.Println(err)

	var cycle *dag.CycleError
	if errors.As(err, &cycle) {
		fmt.Println(len(cycle.Path), "nodes on the path")
	}
	// Output:
	// dag: cycle: kernel a → buffer y → kernel b → buffer x → kernel a (kernels are ordered through whole buffers, whatever byte ranges they read and write)
	// 5 nodes on the path
}

// A graph whose size is known ahead: Grow makes room for every kernel and
// buffer at once, then each stage reads the previous stage's batch.
func ExampleGraph_Grow() {
	const stages = 4
	g := dag.New()
	g.Grow(stages, stages)
	run := func(context.Context, dag.Launch) error { return nil }
	prev := dag.AddValue[any](g, "batch0").ID()
	g.AddKernel("stage0", run, dag.Writes(prev))
	for i := 1; i < stages; i++ {
		out := dag.AddValue[any](g, fmt.Sprintf("batch%d", i)).ID()
		g.AddKernel(fmt.Sprintf("stage%d", i), run, dag.Reads(prev), dag.Writes(out))
		prev = out
	}
	fmt.Println(g.Validate(), g.NumKernels(), g.Order())
	// Output:
	// <nil> 4 [0 1 2 3]
}

// A kernel with code for two kinds of device: a Go function, which the
// CPU device and simulated GPUs run, and an OpenCL C variant, which an
// OpenCL device runs. The variant gives its source, its entry point, its
// launch shape (one work item per float of its first argument) and how
// the kernel's buffers and a scalar bind to the entry point's arguments.
// Building and validating the graph needs no OpenCL.
func Example_variants() {
	const scaleCL = `__kernel void scale(__global const float *x, __global float *y, float a) {
	size_t i = get_global_id(0);
	y[i] = a * x[i];
}`
	g := dag.New()
	x := g.AddBuffer("x", 4096, dag.Input())
	y := g.AddBuffer("y", 4096)
	scale := func(_ context.Context, l dag.Launch) error {
		in, err := dag.Bytes(l, x)
		if err != nil {
			return err
		}
		out, err := dag.Bytes(l, y)
		if err != nil {
			return err
		}
		for i := 0; i < len(in); i += 4 {
			v := math.Float32frombits(binary.LittleEndian.Uint32(in[i:]))
			binary.LittleEndian.PutUint32(out[i:], math.Float32bits(2*v))
		}
		return nil
	}
	perFloat := func(argBytes []int64) dag.Shape { return dag.Shape{Global: []int{int(argBytes[0] / 4)}} }
	k := g.AddKernel("scale", scale, dag.Reads(x), dag.Writes(y),
		dag.OpenCL(scaleCL, "scale", perFloat, dag.BufferArg(x), dag.BufferArg(y), dag.ScalarArg(float32(2))))
	if err := g.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	kern := g.Kernel(k)
	fmt.Println("code:", kern.Codes())
	for _, v := range kern.Variants {
		sizes := make([]int64, len(v.Args))
		fmt.Printf("%s variant, entry point %s:\n", v.Kind, v.Entry)
		for i, a := range v.Args {
			if bd, ok := a.Buffer(); ok {
				sizes[i] = bd.Length
				fmt.Printf("  arg %d: __global pointer to %s [%d:%d)\n", i, g.Buffer(bd.Buffer).Name, bd.Offset, bd.End())
			} else {
				fmt.Printf("  arg %d: %s\n", i, a)
			}
		}
		fmt.Println("  global size:", v.Shape(sizes).Global)
	}
	// Output:
	// code: go, opencl
	// opencl variant, entry point scale:
	//   arg 0: __global pointer to x [0:4096)
	//   arg 1: __global pointer to y [0:4096)
	//   arg 2: float32 2
	//   global size: [1024]
}
