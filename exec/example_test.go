package exec_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu/cpu"
)

// A pipeline over value buffers: an input given with the run, two
// kernels, and the result read back.
func ExampleExecutor_Run() {
	g := dag.New()
	in := dag.AddValue[[]int](g, "numbers", dag.Input())
	sum := dag.AddValue[int](g, "total")
	double := dag.AddValue[int](g, "doubled")
	g.AddKernel("sum", func(_ context.Context, l dag.Launch) error {
		numbers, err := dag.Get(l, in)
		if err != nil {
			return err
		}
		total := 0
		for _, v := range numbers {
			total += v
		}
		return dag.Put(l, sum, total)
	}, dag.Reads(in.ID()), dag.Writes(sum.ID()))
	g.AddKernel("double", func(_ context.Context, l dag.Launch) error {
		v, err := dag.Get(l, sum)
		if err != nil {
			return err
		}
		return dag.Put(l, double, 2*v)
	}, dag.Reads(sum.ID()), dag.Writes(double.ID()))

	dev, err := cpu.New(cpu.WithStreams(2))
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	e, err := exec.New(dev)
	if err != nil {
		log.Fatal(err)
	}
	res, err := e.Run(context.Background(), g, exec.WithInput(in.ID(), []int{1, 2, 3}))
	if err != nil {
		log.Fatal(err) // the graph is invalid: a cycle, a read nobody writes, …
	}
	defer res.Close()
	v, err := res.Value(double.ID())
	fmt.Println(v, err, res.Report.Count(exec.StatusOK), "launches ok")
	// Output:
	// 12 <nil> 2 launches ok
}

// A failed kernel taints what it left unwritten: its readers are skipped,
// and reading the result names the chain back to the root failure.
func ExampleResult_Value_failure() {
	g := dag.New()
	a := dag.AddValue[string](g, "a")
	b := dag.AddValue[string](g, "b")
	g.AddKernel("load", func(context.Context, dag.Launch) error {
		return errors.New("disk on fire")
	}, dag.Writes(a.ID()))
	g.AddKernel("transform", func(_ context.Context, l dag.Launch) error {
		v, err := dag.Get(l, a)
		if err != nil {
			return err
		}
		return dag.Put(l, b, v)
	}, dag.Reads(a.ID()), dag.Writes(b.ID()))

	dev, err := cpu.New()
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	e, err := exec.New(dev)
	if err != nil {
		log.Fatal(err)
	}
	res, err := e.Run(context.Background(), g)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Close()
	_, err = res.Value(b.ID())
	fmt.Println(err)
	fmt.Println(res.Report.Count(exec.StatusFailed), "failed,", res.Report.Count(exec.StatusSkipped), "skipped")
	// Output:
	// failgraph: b was not written: failure #1 (taints 2 buffers): transform ← load: exec: kernel "load": disk on fire
	// 1 failed, 1 skipped
}

// A read error is walked with errors.Unwrap: one line per level, from the
// buffer read through each skipped kernel to the root kernel's error.
func ExampleResult_Value_chain() {
	g := dag.New()
	raw := dag.AddValue[[]int](g, "raw").ID()
	clean := dag.AddValue[[]int](g, "clean").ID()
	total := dag.AddValue[int](g, "total").ID()
	skipped := func(context.Context, dag.Launch) error { return nil } // never runs: its input is unwritten
	g.AddKernel("load", func(context.Context, dag.Launch) error { return dag.ErrInjected }, dag.Writes(raw))
	g.AddKernel("filter", skipped, dag.Reads(raw), dag.Writes(clean))
	g.AddKernel("agg", skipped, dag.Reads(clean), dag.Writes(total))

	dev, err := cpu.New()
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	e, err := exec.New(dev)
	if err != nil {
		log.Fatal(err)
	}
	res, err := e.Run(context.Background(), g)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Close()
	_, err = res.Value(total)
	for e := err; e != nil; e = errors.Unwrap(e) {
		fmt.Println(e)
	}
	var ue *failgraph.UnwrittenError
	fmt.Println(errors.As(err, &ue), ue.Chain, errors.Is(err, dag.ErrInjected))
	// Output:
	// failgraph: total was not written: failure #1 (taints 3 buffers): agg ← filter ← load: exec: kernel "load": dag: injected failure
	// kernel "agg" skipped: kernel "filter" skipped: exec: kernel "load": dag: injected failure
	// kernel "filter" skipped: exec: kernel "load": dag: injected failure
	// exec: kernel "load": dag: injected failure
	// dag: injected failure
	// true [agg filter load] true
}
