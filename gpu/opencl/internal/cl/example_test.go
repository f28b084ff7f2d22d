package cl_test

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/streamdag/streamdag/gpu/opencl/internal/cl"
)

// Example adds two vectors on the first OpenCL device: build a program,
// make the queue's kernel, set its arguments, launch, wait on a marker,
// read the result back.
func Example() {
	ds, err := cl.Devices()
	if err != nil || len(ds) == 0 {
		fmt.Println("no OpenCL device:", err)
		return
	}
	c, err := cl.Open(ds[0])
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	q, err := c.NewQueue()
	if err != nil {
		fmt.Println(err)
		return
	}
	p, err := c.Program("example", `
__kernel void vadd(__global const int *a, __global const int *b, __global int *c) {
	size_t i = get_global_id(0);
	c[i] = a[i] + b[i];
}`, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	a, b := []int32{1, 2, 3, 4}, []int32{10, 20, 30, 40}
	asBytes := func(s []int32) []byte { return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), 4*len(s)) }
	bufs := make([]*cl.Buffer, 3)
	for i := range bufs {
		if bufs[i], err = c.Alloc(16); err != nil {
			fmt.Println(err)
			return
		}
	}
	_ = q.Write(bufs[0], 0, asBytes(a))
	_ = q.Write(bufs[1], 0, asBytes(b))
	k, err := q.Kernel(p, "vadd")
	if err != nil {
		fmt.Println(err)
		return
	}
	for i, buf := range bufs {
		_ = k.SetBuffer(i, buf)
	}
	if err := q.Launch(k, []int{4}, nil); err != nil {
		fmt.Println(err)
		return
	}
	done, err := q.Marker()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer done.Release()
	if err := done.Wait(context.Background()); err != nil {
		fmt.Println("vadd failed:", err)
		return
	}
	sum := make([]int32, 4)
	_ = q.Read(bufs[2], 0, asBytes(sum))
	fmt.Println(sum)
	// Output: [11 22 33 44]
}
