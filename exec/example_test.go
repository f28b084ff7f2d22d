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
	in := g.AddValue("numbers", dag.Input())
	sum := g.AddValue("total")
	double := g.AddValue("doubled")
	g.AddKernel("sum", func(_ context.Context, l dag.Launch) error {
		total := 0
		for _, v := range l.In(0).Value().([]int) {
			total += v
		}
		return l.Out(0).Store(total)
	}, dag.Reads(in), dag.Writes(sum))
	g.AddKernel("double", func(_ context.Context, l dag.Launch) error {
		return l.Out(0).Store(2 * l.In(0).Value().(int))
	}, dag.Reads(sum), dag.Writes(double))

	dev, err := cpu.New(cpu.WithStreams(2))
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	res, err := exec.New(dev).Run(context.Background(), g, exec.WithInput(in, []int{1, 2, 3}))
	if err != nil {
		log.Fatal(err) // the graph is invalid: a cycle, a read nobody writes, …
	}
	defer res.Close()
	v, err := res.Value(double)
	fmt.Println(v, err, res.Report.Count(exec.StatusOK), "launches ok")
	// Output:
	// 12 <nil> 2 launches ok
}

// A failed kernel taints what it left unwritten: its readers are skipped,
// and reading the result names the chain back to the root failure.
func ExampleResult_Value_failure() {
	g := dag.New()
	a := g.AddValue("a")
	b := g.AddValue("b")
	g.AddKernel("load", func(context.Context, dag.Launch) error {
		return errors.New("disk on fire")
	}, dag.Writes(a))
	g.AddKernel("transform", func(_ context.Context, l dag.Launch) error {
		return l.Out(0).Store(l.In(0).Value())
	}, dag.Reads(a), dag.Writes(b))

	dev, err := cpu.New()
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	res, err := exec.New(dev).Run(context.Background(), g)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Close()
	_, err = res.Value(b)
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
	raw, clean, total := g.AddValue("raw"), g.AddValue("clean"), g.AddValue("total")
	skipped := func(context.Context, dag.Launch) error { return nil } // never runs: its input is unwritten
	g.AddKernel("load", func(context.Context, dag.Launch) error { return dag.ErrInjected }, dag.Writes(raw))
	g.AddKernel("filter", skipped, dag.Reads(raw), dag.Writes(clean))
	g.AddKernel("agg", skipped, dag.Reads(clean), dag.Writes(total))

	dev, err := cpu.New()
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	res, err := exec.New(dev).Run(context.Background(), g)
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
