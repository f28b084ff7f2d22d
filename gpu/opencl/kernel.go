package opencl

import (
	"fmt"
	"math"
	"runtime"
	"unsafe"
)

// Kernel is one entry point of a Program, bound to one queue. OpenCL
// kernel arguments are state on the kernel object, so each queue has its
// own Kernel per entry point (Queue.Kernel) and a Kernel is not safe for
// concurrent use: set its arguments and launch it from one goroutine at a
// time. Arguments are captured at Launch, so a Kernel can be re-armed and
// launched again at once. The queue's Close releases it.
type Kernel struct {
	h    uintptr
	name string
	op   string // "launch NAME"
	q    *Queue
	arg  [8]byte // the C-visible value of the argument being set
}

// Kernel returns the queue's kernel object for the entry point name of p,
// creating it on the first call. Errors: ErrClosed; an *Error from
// clCreateKernel (CL_INVALID_KERNEL_NAME for a name p does not define),
// naming the program and kernel.
func (q *Queue) Kernel(p *Program, name string) (*Kernel, error) {
	if p == nil || p.ctx != q.ctx {
		return nil, fmt.Errorf("opencl: queue %d: kernel %q: program not built by this queue's context", q.index, name)
	}
	if err := q.lockOpen("kernel " + name); err != nil {
		return nil, err
	}
	defer q.mu.Unlock()
	key := kernelKey{p, name}
	if k, ok := q.kernels[key]; ok {
		return k, nil
	}
	cname := cstr(name)
	var st int32
	h := syscall(cl.createKernel, p.h, uintptr(unsafe.Pointer(&cname[0])), uintptr(unsafe.Pointer(&st)))
	runtime.KeepAlive(cname)
	if err := check("clCreateKernel", uintptr(uint32(st))); err != nil {
		return nil, fmt.Errorf("opencl: program %q: kernel %q: %w", p.name, name, err)
	}
	k := &Kernel{h: h, name: name, op: "launch " + name, q: q}
	q.kernels[key] = k
	return k, nil
}

// Name returns the kernel's entry point name.
func (k *Kernel) Name() string { return k.name }

func (k *Kernel) set(i int, size uintptr) error {
	if i < 0 {
		return fmt.Errorf("opencl: kernel %q: argument %d: negative index", k.name, i)
	}
	if err := check("clSetKernelArg", syscall(cl.setKernelArg, k.h, uintptr(i), size, uintptr(unsafe.Pointer(&k.arg[0])))); err != nil {
		return fmt.Errorf("opencl: kernel %q: argument %d: %w", k.name, i, err)
	}
	return nil
}

// SetBuffer sets argument i (a __global pointer) to b. Errors: a released
// buffer (ErrClosed), one of another context, an *Error from
// clSetKernelArg (CL_INVALID_ARG_INDEX, CL_INVALID_ARG_SIZE when argument
// i is not a pointer).
func (k *Kernel) SetBuffer(i int, b *Buffer) error {
	if b == nil || b.released.Load() {
		return b.span(fmt.Sprintf("kernel %q argument %d", k.name, i), 0, 0)
	}
	if b.ctx != k.q.ctx {
		return fmt.Errorf("opencl: kernel %q: argument %d: buffer of another context", k.name, i)
	}
	*(*uintptr)(unsafe.Pointer(&k.arg[0])) = b.h
	return k.set(i, unsafe.Sizeof(b.h))
}

// SetInt32 sets argument i (an int) to v. Errors as SetBuffer's.
func (k *Kernel) SetInt32(i int, v int32) error { return k.setU32(i, uint32(v)) }

// SetUint32 sets argument i (a uint) to v. Errors as SetBuffer's.
func (k *Kernel) SetUint32(i int, v uint32) error { return k.setU32(i, v) }

// SetInt64 sets argument i (a long) to v. Errors as SetBuffer's.
func (k *Kernel) SetInt64(i int, v int64) error { return k.setU64(i, uint64(v)) }

// SetUint64 sets argument i (a ulong) to v. Errors as SetBuffer's.
func (k *Kernel) SetUint64(i int, v uint64) error { return k.setU64(i, v) }

// SetFloat32 sets argument i (a float) to v. Errors as SetBuffer's.
func (k *Kernel) SetFloat32(i int, v float32) error { return k.setU32(i, math.Float32bits(v)) }

// SetFloat64 sets argument i (a double) to v. Errors as SetBuffer's.
func (k *Kernel) SetFloat64(i int, v float64) error { return k.setU64(i, math.Float64bits(v)) }

func (k *Kernel) setU32(i int, v uint32) error {
	*(*uint32)(unsafe.Pointer(&k.arg[0])) = v
	return k.set(i, 4)
}

func (k *Kernel) setU64(i int, v uint64) error {
	*(*uint64)(unsafe.Pointer(&k.arg[0])) = v
	return k.set(i, 8)
}
