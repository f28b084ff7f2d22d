package opencl_test

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl"
)

// ExampleNewDevice scales a vector on an OpenCL device through the
// gpu.CodeDevice boundary: allocate device memory, build a program, then
// on one stream copy in, launch, copy out and record an event; its Wait
// returns once the bytes are back (or the failures of those commands).
func ExampleNewDevice() {
	ds, err := opencl.Devices()
	if err != nil || len(ds) == 0 {
		fmt.Println("no OpenCL device:", err)
		return
	}
	d, err := opencl.NewDevice(ds[0], opencl.WithStreams(2))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer d.Close()
	p, err := d.Program("example", `
__kernel void scale(__global int *x, int by) { x[get_global_id(0)] *= by; }`, "")
	if err != nil {
		fmt.Println(err)
		return
	}
	x := []int32{1, 2, 3, 4}
	raw := unsafe.Slice((*byte)(unsafe.Pointer(&x[0])), 4*len(x))
	m, err := d.Alloc(int64(len(raw)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Release()
	s := d.Stream(0).(gpu.CodeStream)
	_, _ = s.CopyIn(m, 0, raw)
	if _, err := s.LaunchKernel(&gpu.KernelLaunch{Program: p, Entry: "scale", Global: []int{len(x)},
		Args: []gpu.KernelArg{{Mem: m}, {Scalar: int32(10)}}, Label: "scale"}); err != nil {
		fmt.Println(err)
		return
	}
	_, _ = s.CopyOut(raw, m, 0)
	if err := s.Record().Wait(context.Background()); err != nil {
		fmt.Println("failed:", err)
		return
	}
	fmt.Println(d.ID(), d.Kind(), x)
	// Output: opencl0 opencl [10 20 30 40]
}
