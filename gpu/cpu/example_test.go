package cpu_test

import (
	"context"
	"fmt"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
)

// Two streams of the CPU device: b waits on an event recorded on a, so
// b's task sees what a's task wrote.
func ExampleNew() {
	dev, err := cpu.New(cpu.WithStreams(2))
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
	dev, _ := cpu.New(cpu.WithStreams(1))
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

// The CPU device through the driver registry: importing package gpu/cpu
// registers kind "cpu".
func Example_registry() {
	set, err := gpu.Open(context.Background(), cpu.Kind, gpu.WithStreams(2))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer set.Close()
	dev := set.Devices()[0]
	fmt.Println(dev.ID(), dev.NumStreams())
	// Output: cpu 2
}
