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

// late is what a partition's kernel finds: how many flights left more
// than 15 minutes late, and their delay in minutes all told.
type late struct{ flights, minutes int64 }

// Each row group of a Parquet file is one typed record-batch buffer,
// filtered and aggregated by its own kernel on one of two streams; a
// kernel merges the partitions. Then a failure injected into one
// partition's kernel is read back as a chain to its root.
func Example() {
	ctx := context.Background()
	f, err := kvio.Open("testdata/flights.parquet")
	if err != nil {
		log.Fatal(err)
	}
	defer f.Close()
	src, err := kvio.OpenParquet(ctx, f, kvio.WithColumns("delay"))
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	dev, err := cpu.New(cpu.WithStreams(2))
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()

	g, total := pipeline(src)
	e := exec.New(dev)
	for _, fail := range []string{"", "filter 1"} {
		if fail != "" {
			if err := g.InjectFailure(fail, false); err != nil {
				log.Fatal(err)
			}
		}
		res, err := e.Run(ctx, g)
		if err != nil {
			log.Fatal(err)
		}
		v, err := exec.Get(res, total)
		if err == nil {
			fmt.Println(v.flights, "flights over 15 minutes late,", v.minutes, "minutes in all")
		}
		for ; err != nil; err = errors.Unwrap(err) {
			fmt.Println(err)
		}
		res.Close()
	}
	// Output:
	// 554 flights over 15 minutes late, 52016 minutes in all
	// failgraph: total was not written: failure #1 (taints 2 buffers): merge ← filter 1: exec: kernel "filter 1": dag: injected failure
	// kernel "merge" skipped: exec: kernel "filter 1": dag: injected failure
	// exec: kernel "filter 1": dag: injected failure
	// dag: injected failure
}

// pipeline declares, for each row group of src, a record-batch buffer, a
// kernel that reads the row group into it and one that filters and
// aggregates it; and a kernel that merges the partitions into total.
func pipeline(src kvio.Source) (*dag.Graph, dag.Value[late]) {
	g := dag.New()
	total := dag.AddValue[late](g, "total")
	var sums []dag.Value[late]
	var ids []dag.BufferID
	for i := range src.NumParts() {
		part := dag.AddValue[arrow.RecordBatch](g, fmt.Sprint("row group ", i))
		sum := dag.AddValue[late](g, fmt.Sprint("late ", i))
		sums, ids = append(sums, sum), append(ids, sum.ID())
		g.AddKernel(fmt.Sprint("read ", i), func(ctx context.Context, l dag.Launch) error {
			rec, err := src.ReadPart(ctx, i, l.Allocator())
			if err != nil {
				return err
			}
			return dag.Put(l, part, rec)
		}, dag.Writes(part.ID()))
		g.AddKernel(fmt.Sprint("filter ", i), func(_ context.Context, l dag.Launch) error {
			rec, err := dag.Get(l, part)
			if err != nil {
				return err
			}
			delay, err := kvio.Column[*array.Int16](rec, "delay")
			if err != nil {
				return err
			}
			var s late
			for _, d := range delay.Int16Values() {
				if d > 15 {
					s.flights, s.minutes = s.flights+1, s.minutes+int64(d)
				}
			}
			return dag.Put(l, sum, s)
		}, dag.Reads(part.ID()), dag.Writes(sum.ID()))
	}
	g.AddKernel("merge", func(_ context.Context, l dag.Launch) error {
		var all late
		for _, h := range sums {
			s, err := dag.Get(l, h)
			if err != nil {
				return err
			}
			all.flights, all.minutes = all.flights+s.flights, all.minutes+s.minutes
		}
		return dag.Put(l, total, all)
	}, dag.Reads(ids...), dag.Writes(total.ID()))
	return g, total
}
