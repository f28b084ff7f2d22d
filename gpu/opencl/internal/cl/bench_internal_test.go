package cl

import (
	"testing"
	"unsafe"

	"github.com/ebitengine/purego"
)

// BenchmarkLaunch is the per-launch host cost of an empty 1-work-item
// kernel: Queue.Launch (bookkeeping plus purego.SyscallN) beside a raw
// SyscallN enqueue loop with no event (the floor) and the same call
// through a purego.RegisterLibFunc reflection stub. Every 1024 launches
// the loop waits for the queue (clFinish), inside the timer for all three.
func BenchmarkLaunch(b *testing.B) {
	ds, err := Devices()
	if err != nil || len(ds) == 0 {
		b.Skipf("no OpenCL device: %v", err)
	}
	c, err := Open(ds[0])
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	q, err := c.NewQueue()
	if err != nil {
		b.Fatal(err)
	}
	p, err := c.Program("bench", "__kernel void empty(__global int *p) {}", "")
	if err != nil {
		b.Fatal(err)
	}
	k, err := q.Kernel(p, "empty")
	if err != nil {
		b.Fatal(err)
	}
	buf, err := c.Alloc(4)
	if err != nil {
		b.Fatal(err)
	}
	if err := k.SetBuffer(0, buf); err != nil {
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
	gs := new([1]uintptr)
	gs[0] = 1
	b.Run("impl=raw-SyscallN", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r, _, _ := purego.SyscallN(cl.enqueueNDRangeKernel, q.h, k.h, 1, 0, uintptr(unsafe.Pointer(&gs[0])), 0, 0, 0, 0)
			if r != 0 {
				b.Fatal(check("clEnqueueNDRangeKernel", r))
			}
			if i++; i%1024 == 0 {
				syscall(cl.finish, q.h)
			}
		}
		syscall(cl.finish, q.h)
	})
	ev := new(uintptr)
	b.Run("impl=raw-SyscallN-event", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			r, _, _ := purego.SyscallN(cl.enqueueNDRangeKernel, q.h, k.h, 1, 0, uintptr(unsafe.Pointer(&gs[0])), 0, 0, 0, uintptr(unsafe.Pointer(ev)))
			if r != 0 {
				b.Fatal(check("clEnqueueNDRangeKernel", r))
			}
			purego.SyscallN(cl.releaseEvent, *ev)
			if i++; i%1024 == 0 {
				syscall(cl.finish, q.h)
			}
		}
		syscall(cl.finish, q.h)
	})
	var enqueue func(q, k uintptr, dim uint32, off, global, local *uintptr, n uint32, wait, ev *uintptr) int32
	purego.RegisterLibFunc(&enqueue, libH, "clEnqueueNDRangeKernel")
	b.Run("impl=RegisterLibFunc", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if r := enqueue(q.h, k.h, 1, nil, &gs[0], nil, 0, nil, nil); r != 0 {
				b.Fatal(check("clEnqueueNDRangeKernel", uintptr(uint32(r))))
			}
			if i++; i%1024 == 0 {
				syscall(cl.finish, q.h)
			}
		}
		syscall(cl.finish, q.h)
	})
}
