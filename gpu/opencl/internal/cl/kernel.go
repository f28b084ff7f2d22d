package cl

import (
	"errors"
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
	h      uintptr
	name   string
	op     string // "launch NAME"
	q      *Queue
	params []param // what OpenCL reports of each parameter, read once
	arg    [8]byte // the C-visible value of the argument being set
}

// param is what clGetKernelArgInfo reports of one kernel parameter
// (programs are built with -cl-kernel-arg-info); known is false when the
// implementation reports nothing (CL_KERNEL_ARG_INFO_NOT_AVAILABLE), and
// then only the parameter count is checked.
type param struct {
	known bool
	addr  uint32  // CL_KERNEL_ARG_ADDRESS_QUALIFIER
	typ   string  // CL_KERNEL_ARG_TYPE_NAME, "float*", "int"
	name  string  // CL_KERNEL_ARG_NAME
	size  uintptr // the size of a scalar type this package knows; 0 otherwise
}

// OpenCL kernel info names and address qualifiers (cl.h).
const (
	clKernelNumArgs            = 0x1191
	clKernelArgAddressQualifer = 0x1196
	clKernelArgTypeName        = 0x1198
	clKernelArgName            = 0x119A

	clAddressGlobal   = 0x119B
	clAddressLocal    = 0x119C
	clAddressConstant = 0x119D
	clAddressPrivate  = 0x119E
)

// scalarSizes are the sizes of the OpenCL C scalar types a kernel
// parameter can have (OpenCL C 3.0, "Built-in Scalar Data Types").
var scalarSizes = map[string]uintptr{
	"char": 1, "uchar": 1, "unsigned char": 1,
	"short": 2, "ushort": 2, "unsigned short": 2, "half": 2,
	"int": 4, "uint": 4, "unsigned int": 4, "float": 4,
	"long": 8, "ulong": 8, "unsigned long": 8, "double": 8,
}

// kernelParams reads the parameters of kernel object h.
func kernelParams(h uintptr) ([]param, error) {
	n, err := infoUint("clGetKernelInfo", cl.getKernelInfo, h, clKernelNumArgs, 4)
	if err != nil {
		return nil, err
	}
	ps := make([]param, n)
	for i := range ps {
		p := &ps[i]
		addr := new(uint32)
		st := check("clGetKernelArgInfo", syscall(cl.getKernelArgInfo, h, uintptr(i), clKernelArgAddressQualifer, 4, uintptr(unsafe.Pointer(addr)), 0))
		if errors.Is(st, Status(-19)) { // CL_KERNEL_ARG_INFO_NOT_AVAILABLE
			continue
		}
		if st != nil {
			return nil, st
		}
		p.known, p.addr = true, *addr
		p.typ, _ = argInfoString(h, i, clKernelArgTypeName)
		p.name, _ = argInfoString(h, i, clKernelArgName)
		p.size = scalarSizes[p.typ]
	}
	return ps, nil
}

// argInfoString reads a string of clGetKernelArgInfo.
func argInfoString(h uintptr, i int, what uintptr) (string, error) {
	n := new(uintptr)
	if err := check("clGetKernelArgInfo", syscall(cl.getKernelArgInfo, h, uintptr(i), what, 0, 0, uintptr(unsafe.Pointer(n)))); err != nil || *n == 0 {
		return "", err
	}
	b := make([]byte, *n)
	err := check("clGetKernelArgInfo", syscall(cl.getKernelArgInfo, h, uintptr(i), what, *n, uintptr(unsafe.Pointer(&b[0])), 0))
	return gostr(b), err
}

// pointer reports whether the parameter is a __global or __constant
// pointer, which takes a buffer.
func (p param) pointer() bool { return p.addr == clAddressGlobal || p.addr == clAddressConstant }

// describe names parameter i: "parameter 2 (long spins)".
func (p param) describe(i int) string {
	if !p.known {
		return fmt.Sprintf("parameter %d", i)
	}
	q := ""
	switch p.addr {
	case clAddressGlobal:
		q = "__global "
	case clAddressLocal:
		q = "__local "
	case clAddressConstant:
		q = "__constant "
	}
	return fmt.Sprintf("parameter %d (%s%s %s)", i, q, p.typ, p.name)
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
	params, err := kernelParams(h)
	if err != nil {
		syscall(cl.releaseKernel, h)
		return nil, fmt.Errorf("opencl: program %q: kernel %q: parameters: %w", p.name, name, err)
	}
	k := &Kernel{h: h, name: name, op: "launch " + name, q: q, params: params}
	q.kernels[key] = k
	return k, nil
}

// Name returns the kernel's entry point name.
func (k *Kernel) Name() string { return k.name }

// NumParams returns the number of parameters the entry point declares.
func (k *Kernel) NumParams() int { return len(k.params) }

// fits returns an error when an argument of size bytes (a buffer when
// buf, else the scalar of scalar's type) does not fit parameter i: an
// index past the parameters, a buffer for a parameter that is not a
// __global or __constant pointer, a scalar for a pointer, a scalar of
// another size than the parameter's type.
func (k *Kernel) fits(i int, size uintptr, buf bool, scalar any) error {
	if i < 0 || i >= len(k.params) {
		return fmt.Errorf("opencl: kernel %q: argument %d: the kernel has %d parameters: %w", k.name, i, len(k.params), Status(-49)) // CL_INVALID_ARG_INDEX
	}
	p := k.params[i]
	what := "buffer"
	if !buf {
		what = fmt.Sprintf("%T", scalar)
	}
	switch {
	case !p.known:
		return nil
	case buf && !p.pointer():
		return fmt.Errorf("opencl: kernel %q: argument %d: a %s for %s, which is not a __global or __constant pointer", k.name, i, what, p.describe(i))
	case !buf && p.addr != clAddressPrivate:
		return fmt.Errorf("opencl: kernel %q: argument %d: a %s scalar for %s, a pointer", k.name, i, what, p.describe(i))
	case !buf && p.size != 0 && p.size != size:
		return fmt.Errorf("opencl: kernel %q: argument %d: a %d-byte %s for %s, of %d bytes", k.name, i, size, what, p.describe(i), p.size)
	}
	return nil
}

// set sets argument i to the size bytes at k.arg after checking them
// against the parameter (fits); the kernel object must not have been
// released with its queue.
func (k *Kernel) set(i int, size uintptr, buf bool, scalar any) error {
	if err := k.fits(i, size, buf, scalar); err != nil {
		return err
	}
	k.q.mu.Lock()
	defer k.q.mu.Unlock()
	if k.q.closed { // lockOpen's error, formatted only when needed
		return fmt.Errorf("opencl: queue %d: kernel %q argument %d: %w", k.q.index, k.name, i, ErrClosed)
	}
	if err := check("clSetKernelArg", syscall(cl.setKernelArg, k.h, uintptr(i), size, uintptr(unsafe.Pointer(&k.arg[0])))); err != nil {
		return fmt.Errorf("opencl: kernel %q: argument %d: %w", k.name, i, err)
	}
	return nil
}

// SetBuffer sets argument i (a __global or __constant pointer) to b.
// Errors: a released buffer or a closed queue (ErrClosed), a buffer of
// another context, an index past the kernel's parameters, a parameter
// that is not such a pointer, an *Error from clSetKernelArg.
func (k *Kernel) SetBuffer(i int, b *Buffer) error {
	if b == nil || b.released.Load() {
		return b.span(fmt.Sprintf("kernel %q argument %d", k.name, i), 0, 0)
	}
	if b.ctx != k.q.ctx {
		return fmt.Errorf("opencl: kernel %q: argument %d: buffer of another context", k.name, i)
	}
	*(*uintptr)(unsafe.Pointer(&k.arg[0])) = b.h
	return k.set(i, unsafe.Sizeof(b.h), true, nil)
}

// SetInt32 sets argument i (an int) to v. Errors: a closed queue
// (ErrClosed), an index past the kernel's parameters, a pointer
// parameter or one of a scalar type of another size, an *Error from
// clSetKernelArg.
func (k *Kernel) SetInt32(i int, v int32) error { return k.Set32(i, uint32(v), int32(0)) }

// SetUint32 sets argument i (a uint) to v. Errors as SetInt32's.
func (k *Kernel) SetUint32(i int, v uint32) error { return k.Set32(i, v, uint32(0)) }

// SetInt64 sets argument i (a long) to v. Errors as SetInt32's.
func (k *Kernel) SetInt64(i int, v int64) error { return k.Set64(i, uint64(v), int64(0)) }

// SetUint64 sets argument i (a ulong) to v. Errors as SetInt32's.
func (k *Kernel) SetUint64(i int, v uint64) error { return k.Set64(i, v, uint64(0)) }

// SetFloat32 sets argument i (a float) to v. Errors as SetInt32's.
func (k *Kernel) SetFloat32(i int, v float32) error {
	return k.Set32(i, math.Float32bits(v), float32(0))
}

// SetFloat64 sets argument i (a double) to v. Errors as SetInt32's.
func (k *Kernel) SetFloat64(i int, v float64) error {
	return k.Set64(i, math.Float64bits(v), float64(0))
}

// Set32 sets argument i to the 4-byte scalar whose bits are v; typ is a
// value of its Go type (int32, uint32, float32), named in errors. Errors
// as SetInt32's.
func (k *Kernel) Set32(i int, v uint32, typ any) error {
	*(*uint32)(unsafe.Pointer(&k.arg[0])) = v
	return k.set(i, 4, false, typ)
}

// Set64 sets argument i to the 8-byte scalar whose bits are v; typ is a
// value of its Go type (int64, uint64, float64), named in errors. Errors
// as SetInt32's.
func (k *Kernel) Set64(i int, v uint64, typ any) error {
	*(*uint64)(unsafe.Pointer(&k.arg[0])) = v
	return k.set(i, 8, false, typ)
}
