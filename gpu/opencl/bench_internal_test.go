package opencl

import (
	"testing"

	"github.com/streamdag/streamdag/gpu"
)

// BenchmarkLaunchKernel is the per-launch host cost of an empty
// 1-work-item kernel with one buffer argument: a gpu.CodeStream's
// LaunchKernel (kernel lookup, argument check, the layer's launch)
// beside a raw Queue.Launch loop on a kernel whose argument is set once
// (the baseline), on one device in the same run. Every 1024 launches
// both loops wait for the queue, inside the timer. The ratio of the two
// is the boundary's cost (target: at most 1.3).
func BenchmarkLaunchKernel(b *testing.B) {
	ds, err := Devices()
	if err != nil || len(ds) == 0 {
		b.Skipf("no OpenCL device: %v", err)
	}
	d, err := NewDevice(ds[0], WithStreams(2))
	if err != nil {
		b.Fatal(err)
	}
	defer d.Close()
	src := "__kernel void empty(__global int *p) {}"
	gp, err := d.Program("bench", src, "")
	if err != nil {
		b.Fatal(err)
	}
	mem, err := d.Alloc(4)
	if err != nil {
		b.Fatal(err)
	}
	defer mem.Release()
	// The baseline: stream 1's own queue and a kernel object of its own.
	q := d.(*clDevice).streams[1].q
	k, err := q.Kernel(gp.(*clProgram).p, "empty")
	if err != nil {
		b.Fatal(err)
	}
	if err := k.SetBuffer(0, mem.(*clMemory).b); err != nil {
		b.Fatal(err)
	}
	global := []int{1}
	b.Run("impl=Queue.Launch", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if err := q.Launch(k, global, nil); err != nil {
				b.Fatal(err)
			}
			if i++; i%1024 == 0 {
				if err := q.Finish(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := q.Finish(b.Context()); err != nil {
			b.Fatal(err)
		}
	})
	s := d.Stream(0).(gpu.CodeStream)
	launch := &gpu.KernelLaunch{Program: gp, Entry: "empty", Global: global, Args: []gpu.KernelArg{{Mem: mem}}, Label: "empty"}
	b.Run("impl=LaunchKernel", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if _, err := s.LaunchKernel(launch); err != nil {
				b.Fatal(err)
			}
			if i++; i%1024 == 0 {
				if err := s.Record().Wait(b.Context()); err != nil {
					b.Fatal(err)
				}
			}
		}
		if err := s.Record().Wait(b.Context()); err != nil {
			b.Fatal(err)
		}
	})
}
