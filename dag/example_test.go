package dag_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/streamdag/streamdag/dag"
)

// A three-kernel pipeline: load reads an input file into a batch, clean
// filters it, and count writes an 8-byte total. Kernels are added in any
// order; Validate finds the order they must run in.
func Example() {
	g := dag.New()
	file := g.AddBuffer("flights.parquet", 1<<20, dag.Input())
	raw := g.AddValue("raw")
	clean := g.AddValue("cleaned")
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
	// dag: cycle: kernel a → buffer y → kernel b → buffer x → kernel a
	// 5 nodes on the path
}

// A graph whose size is known ahead: Grow makes room for every kernel and
// buffer at once, then each stage reads the previous stage's batch.
func ExampleGraph_Grow() {
	const stages = 4
	g := dag.New()
	g.Grow(stages, stages)
	run := func(context.Context, dag.Launch) error { return nil }
	prev := g.AddValue("batch0")
	g.AddKernel("stage0", run, dag.Writes(prev))
	for i := 1; i < stages; i++ {
		out := g.AddValue(fmt.Sprintf("batch%d", i))
		g.AddKernel(fmt.Sprintf("stage%d", i), run, dag.Reads(prev), dag.Writes(out))
		prev = out
	}
	fmt.Println(g.Validate(), g.NumKernels(), g.Order())
	// Output:
	// <nil> 4 [0 1 2 3]
}
