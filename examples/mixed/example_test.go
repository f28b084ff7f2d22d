package mixed_test

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/opencl"
)

// squareCL is OpenCL C: one work-item per element of x.
const squareCL = `
__kernel void square(__global const int *x, __global long *y) {
	size_t i = get_global_id(0);
	y[i] = (long)x[i] * x[i];
}`

// Example runs fill (Go) → square (OpenCL C) → sum (Go) on the CPU
// device and the first OpenCL device. square has no Go function, so the
// executor places it on the OpenCL device, with a copy of x there before
// it and of y back after it: launches of the plan, on the OpenCL
// device's stream.
func Example() {
	const n = 1000
	g := dag.New()
	x := g.AddBuffer("x", 4*n)               // n int32
	y := g.AddBuffer("y", 8*n)               // n int64
	total := dag.AddValue[int64](g, "total") // Get and Put of it check the type
	g.AddKernel("fill", func(_ context.Context, l dag.Launch) error {
		b, err := dag.Bytes(l, x)
		if err != nil {
			return err
		}
		for i := range n {
			binary.LittleEndian.PutUint32(b[4*i:], uint32(i))
		}
		return nil
	}, dag.Writes(x))
	perInt := func(argBytes []int64) dag.Shape { return dag.Shape{Global: []int{int(argBytes[0] / 4)}} }
	g.AddKernel("square", nil, dag.Reads(x), dag.Writes(y),
		dag.OpenCL(squareCL, "square", perInt, dag.BufferArg(x), dag.BufferArg(y)))
	g.AddKernel("sum", func(_ context.Context, l dag.Launch) error {
		b, err := dag.Bytes(l, y)
		if err != nil {
			return err
		}
		var s int64
		for i := range n {
			s += int64(binary.LittleEndian.Uint64(b[8*i:]))
		}
		return dag.Put(l, total, s)
	}, dag.Reads(y), dag.Writes(total.ID()))

	// The devices: the CPU and the first OpenCL device, one stream each.
	ds, err := opencl.Devices()
	if err != nil || len(ds) == 0 {
		fmt.Println("no OpenCL device:", err)
		return
	}
	cl, err := opencl.NewDevice(ds[0])
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	host, err := cpu.New(cpu.WithStreams(1))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer host.Close()
	e, err := exec.NewMulti([]gpu.Device{host, cl}, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	res, err := e.Run(context.Background(), g)
	if err != nil {
		fmt.Println(err) // an invalid graph, or no device for a kernel
		return
	}
	defer res.Close()
	if err := res.Report.Err(); err != nil {
		fmt.Println(err) // a failed launch: a build error with its log, …
		return
	}
	v, err := exec.Get(res, total)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("sum of squares:", v)
	for _, l := range res.Report.Launches() {
		fmt.Printf("%s on %s\n", l.Kernel, l.Device)
	}
	var copied int64
	for _, c := range res.Report.Copies {
		copied += c.Bytes
	}
	fmt.Println("bytes copied:", copied)
	// Output:
	// sum of squares: 332833500
	// fill on cpu
	// copy x cpu→opencl0 on opencl0
	// square on opencl0
	// copy y opencl0→cpu on opencl0
	// sum on cpu
	// bytes copied: 12000
}
