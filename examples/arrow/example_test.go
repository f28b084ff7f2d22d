package arrow_test

import (
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/kvio"
)

// Each row group of a Parquet file is one typed record-batch buffer,
// filtered and counted by its own kernel on one of two streams; a kernel
// adds the counts. Then a failure injected into one partition's kernel is
// read back as a chain to its root.
func Example() {
	ctx := context.Background()
	f, err := kvio.Open("testdata/flights.parquet") // 2000 flights in 2 row groups
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	src, err := kvio.OpenParquet(ctx, f, kvio.WithColumns("delay"))
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	g, total := pipeline(src)
	dev, err := cpu.New(cpu.WithStreams(2)) // the two partitions run on two streams
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	e, err := exec.New(dev)
	if err != nil {
		log.Fatal(err)
	}
	for _, fail := range []string{"", "filter 1"} { // a clean run, then one with a failure
		if fail != "" {
			if err := g.InjectFailure(fail, false); err != nil {
				log.Fatal(err)
			}
		}
		res, err := e.Run(ctx, g) // err: an invalid graph (a cycle, an unwritten read, …)
		if err != nil {
			log.Fatal(err)
		}
		n, err := exec.Get(res, total) // err: total was left unwritten, and why
		if err == nil {
			fmt.Println(n, "flights over 15 minutes late")
		}
		for ; err != nil; err = errors.Unwrap(err) { // the chain, down to the root
			fmt.Println(err)
		}
		res.Close()
	}
	// Output:
	// 554 flights over 15 minutes late
	// failgraph: total was not written: failure #1 (taints 2 buffers): merge ← filter 1: exec: kernel "filter 1": dag: injected failure
	// kernel "merge" skipped: exec: kernel "filter 1": dag: injected failure
	// exec: kernel "filter 1": dag: injected failure
	// dag: injected failure
}

// pipeline declares, per row group of src, a kernel that reads it into a record-batch
// buffer and one that counts its late flights; and a kernel that adds up the counts.
func pipeline(src kvio.Source) (*dag.Graph, dag.Value[int64]) {
	g := dag.New()
	total := dag.AddValue[int64](g, "total")
	var counts []dag.Value[int64]
	var ids []dag.BufferID
	for i := range src.NumParts() {
		rows := dag.AddValue[arrow.RecordBatch](g, fmt.Sprint("rows ", i))
		late := dag.AddValue[int64](g, fmt.Sprint("late ", i))
		counts, ids = append(counts, late), append(ids, late.ID())
		g.AddKernel(fmt.Sprint("read ", i), func(ctx context.Context, l dag.Launch) error {
			rec, err := src.ReadPart(ctx, i, l.Allocator())
			if err != nil {
				return err
			}
			return dag.Put(l, rows, rec)
		}, dag.Writes(rows.ID()))
		g.AddKernel(fmt.Sprint("filter ", i), func(_ context.Context, l dag.Launch) error {
			rec, err := dag.Get(l, rows) // an error if the kernel did not declare rows
			if err != nil {
				return err
			}
			delay, err := kvio.Column[*array.Int16](rec, "delay")
			if err != nil {
				return err
			}
			n := int64(0)
			for i, d := range delay.Int16Values() {
				if d > 15 && delay.IsValid(i) {
					n++
				}
			}
			return dag.Put(l, late, n)
		}, dag.Reads(rows.ID()), dag.Writes(late.ID()))
	}
	g.AddKernel("merge", func(_ context.Context, l dag.Launch) error {
		var sum int64
		for _, h := range counts {
			n, err := dag.Get(l, h)
			if err != nil {
				return err
			}
			sum += n
		}
		return dag.Put(l, total, sum)
	}, dag.Reads(ids...), dag.Writes(total.ID()))
	return g, total
}
