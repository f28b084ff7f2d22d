package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"log"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/opencl"
)

// A kernel in OpenCL C beside Go kernels in one graph. "square" has both
// a Go function and an OpenCL variant: it runs on the OpenCL device when
// the machine has one (the plan copies its input in and its output out),
// and its Go function runs on the CPU otherwise. The answer is the same
// either way.
func ExampleNewMulti_openCL() {
	const squareCL = `__kernel void square(__global const uint *in, __global uint *out) {
	size_t i = get_global_id(0);
	out[i] = in[i] * in[i];
}`
	const n = 8
	g := dag.New()
	in, out := g.AddBuffer("in", 4*n), g.AddBuffer("out", 4*n)
	g.AddKernel("fill", func(_ context.Context, l dag.Launch) error {
		for i := range n {
			binary.LittleEndian.PutUint32(bytesOf(l, in)[4*i:], uint32(i))
		}
		return nil
	}, dag.Writes(in))
	g.AddKernel("square", func(_ context.Context, l dag.Launch) error {
		for i := range n {
			v := binary.LittleEndian.Uint32(bytesOf(l, in)[4*i:])
			binary.LittleEndian.PutUint32(bytesOf(l, out)[4*i:], v*v)
		}
		return nil
	}, dag.Reads(in), dag.Writes(out),
		dag.OpenCL(squareCL, "square", func(argBytes []int64) dag.Shape {
			return dag.Shape{Global: []int{int(argBytes[0] / 4)}} // one work item per uint of in
		}, dag.BufferArg(in), dag.BufferArg(out)))

	host, err := cpu.New(cpu.WithStreams(2))
	if err != nil {
		log.Fatal(err)
	}
	defer host.Close()
	devs := []gpu.Device{host}
	if ds, err := opencl.Devices(); err == nil && len(ds) > 0 { // no OpenCL: the CPU alone
		if cl, err := opencl.NewDevice(ds[0], opencl.WithStreams(2)); err == nil {
			defer cl.Close()
			devs = append(devs, cl)
		}
	}
	e, err := exec.NewMulti(devs, nil)
	if err != nil {
		log.Fatal(err)
	}
	res, err := e.Run(context.Background(), g)
	if err != nil {
		log.Fatal(err)
	}
	defer res.Close()
	b, err := res.Buffer(out)
	if err != nil {
		log.Fatal(err) // a launch failed: the error names it and its root cause
	}
	var squares []uint32
	for i := range n {
		squares = append(squares, binary.LittleEndian.Uint32(b.Bytes()[4*i:]))
	}
	fmt.Println(squares)
	// Output: [0 1 4 9 16 25 36 49]
}
