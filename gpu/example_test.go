package gpu_test

import (
	"context"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"

	"github.com/streamdag/streamdag/gpu"
)

// Two streams of the CPU device: b waits on an event recorded on a, so
// b's task sees what a's task wrote.
func ExampleNewCPU() {
	dev, err := gpu.NewCPU(gpu.WithStreams(2))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer dev.Close()
	a, b := dev.Stream(0), dev.Stream(1)

	var sum int
	_ = a.Launch(gpu.TaskFunc(func() { sum = 20 }))
	_ = a.Launch(gpu.TaskFunc(func() { sum += 1 }))
	_ = b.Wait(a.Record()) // b's later tasks wait for a's two tasks
	_ = b.Launch(gpu.TaskFunc(func() { sum *= 2 }))
	if err := b.Synchronize(context.Background()); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(dev.ID(), dev.NumStreams(), sum)
	// Output: cpu 2 42
}

// A panicking task does not stop its stream; Synchronize reports it.
func ExampleStream_Synchronize() {
	dev, _ := gpu.NewCPU(gpu.WithStreams(1))
	defer dev.Close()
	s := dev.Stream(0)
	_ = s.Launch(gpu.TaskFunc(func() { panic("out of range") }))
	ran := false
	_ = s.Launch(gpu.TaskFunc(func() { ran = true }))
	fmt.Println(s.Synchronize(context.Background()))
	fmt.Println(ran)
	// Output:
	// gpu: cpu stream 0: task panicked: out of range
	// true
}

// Discover with go-nvml's DGX A100 mock in place of the host's NVML.
func ExampleDiscover() {
	inv := gpu.Discover(context.Background(), gpu.WithNVML(dgxa100.New()))
	fmt.Println(inv.NVML)
	for _, d := range inv.GPUs()[:2] {
		fmt.Printf("%v: %s, %d GiB, compute capability %v\n", d.ID, d.Name, d.MemoryBytes>>30, d.ComputeCapability)
	}
	fmt.Println(len(inv.GPUs()), "GPUs")
	// Output:
	// NVML available (driver 550.54.15)
	// gpu0: Mock NVIDIA A100-SXM4-40GB, 40 GiB, compute capability 8.0
	// gpu1: Mock NVIDIA A100-SXM4-40GB, 40 GiB, compute capability 8.0
	// 8 GPUs
}
