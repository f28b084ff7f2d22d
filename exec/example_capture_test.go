package exec_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
)

// Capture a run of a plan and replay it: the replay gives the same
// bytes, and its report says it replayed the capture. A capture during
// which a kernel fails is doomed: Replay refuses it with that failure.
func ExampleExecutor_Capture() {
	build := func() (*dag.Graph, dag.BufferID) {
		g := dag.New()
		squares := g.AddBuffer("squares", 4)
		g.AddKernel("square", func(_ context.Context, l dag.Launch) error {
			b, err := dag.Bytes(l, squares)
			for i := range b {
				b[i] = byte(i * i)
			}
			return err
		}, dag.Writes(squares))
		return g, squares
	}
	dev, err := cpu.New(cpu.WithStreams(2))
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	e, err := exec.New(dev)
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()

	g, squares := build()
	p, err := e.Plan(g)
	if err != nil {
		log.Fatal(err)
	}
	c, res, err := e.Capture(ctx, p)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Close()
	first, _ := res.Buffer(squares)
	fmt.Println(c)
	fmt.Println("write set:", c.Writes())

	again, err := c.Replay(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer again.Close()
	second, _ := again.Buffer(squares)
	fmt.Println(res.Report.Ran, "then", again.Report.Ran, "| same bytes:", bytes.Equal(first.Bytes(), second.Bytes()))

	bad, _ := build()
	if err := bad.InjectFailure("square", false); err != nil {
		log.Fatal(err)
	}
	pb, err := e.Plan(bad)
	if err != nil {
		log.Fatal(err)
	}
	cb, resb, err := e.Capture(ctx, pb)
	if err != nil {
		log.Fatal(err)
	}
	defer resb.Close()
	_, err = cb.Replay(ctx)
	fmt.Println(err)
	fmt.Println(errors.Is(err, dag.ErrInjected))
	// Output:
	// capture of 1 launch on 1 stream (replays engine lists): replayable
	// write set: [buffer 0 [0:4)]
	// ran plan then replayed capture | same bytes: true
	// exec: capture doomed: kernel "square" failed: exec: kernel "square": dag: injected failure
	// true
}
