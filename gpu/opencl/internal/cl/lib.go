package cl

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// libNames are the sonames tried in order: the ICD loader every vendor
// driver registers with (Khronos ocl-icd), then the unversioned name.
var libNames = []string{"libOpenCL.so.1", "libOpenCL.so"}

// fns holds the OpenCL 1.2 entry points this package calls, as C function
// pointers for purego.SyscallN. It is filled once by load and read-only
// after.
type fns struct {
	getPlatformIDs, getPlatformInfo, getDeviceIDs, getDeviceInfo uintptr
	createContext, releaseContext                                uintptr
	createCommandQueue, releaseCommandQueue, flush, finish       uintptr
	createBuffer, createSubBuffer, releaseMemObject              uintptr
	enqueueWriteBuffer, enqueueReadBuffer                        uintptr
	enqueueCopyBuffer, enqueueFillBuffer                         uintptr
	createProgramWithSource, buildProgram, getProgramBuildInfo   uintptr
	releaseProgram, createKernel, releaseKernel, setKernelArg    uintptr
	getKernelInfo, getKernelArgInfo                              uintptr
	enqueueNDRangeKernel, enqueueMarkerWithWaitList              uintptr
	waitForEvents, getEventInfo, retainEvent, releaseEvent       uintptr
	createUserEvent, setUserEventStatus, getEventProfilingInfo   uintptr
}

var (
	loadOnce sync.Once
	cl       fns
	libH     uintptr // the dlopen handle, for the benchmarks' stub baseline
	loadErr  error
)

// load opens the OpenCL library once per process and resolves every entry
// point; the error (wrapping ErrUnavailable) is kept and returned to every
// later caller.
func load() error {
	loadOnce.Do(func() {
		var h uintptr
		var firstErr error
		for _, name := range libNames {
			var err error
			h, err = purego.Dlopen(name, purego.RTLD_NOW|purego.RTLD_GLOBAL)
			if err == nil {
				break
			}
			if firstErr == nil {
				firstErr = fmt.Errorf("dlopen %s: %w", name, err)
			}
		}
		if h == 0 {
			loadErr = fmt.Errorf("%w: %w", ErrUnavailable, firstErr)
			return
		}
		libH = h
		syms := []struct {
			name string
			p    *uintptr
		}{
			{"clGetPlatformIDs", &cl.getPlatformIDs}, {"clGetPlatformInfo", &cl.getPlatformInfo},
			{"clGetDeviceIDs", &cl.getDeviceIDs}, {"clGetDeviceInfo", &cl.getDeviceInfo},
			{"clCreateContext", &cl.createContext}, {"clReleaseContext", &cl.releaseContext},
			{"clCreateCommandQueue", &cl.createCommandQueue}, {"clReleaseCommandQueue", &cl.releaseCommandQueue},
			{"clFlush", &cl.flush}, {"clFinish", &cl.finish},
			{"clCreateBuffer", &cl.createBuffer}, {"clCreateSubBuffer", &cl.createSubBuffer},
			{"clReleaseMemObject", &cl.releaseMemObject},
			{"clEnqueueWriteBuffer", &cl.enqueueWriteBuffer}, {"clEnqueueReadBuffer", &cl.enqueueReadBuffer},
			{"clEnqueueCopyBuffer", &cl.enqueueCopyBuffer}, {"clEnqueueFillBuffer", &cl.enqueueFillBuffer},
			{"clCreateProgramWithSource", &cl.createProgramWithSource}, {"clBuildProgram", &cl.buildProgram},
			{"clGetProgramBuildInfo", &cl.getProgramBuildInfo}, {"clReleaseProgram", &cl.releaseProgram},
			{"clCreateKernel", &cl.createKernel}, {"clReleaseKernel", &cl.releaseKernel},
			{"clSetKernelArg", &cl.setKernelArg}, {"clEnqueueNDRangeKernel", &cl.enqueueNDRangeKernel},
			{"clGetKernelInfo", &cl.getKernelInfo}, {"clGetKernelArgInfo", &cl.getKernelArgInfo},
			{"clEnqueueMarkerWithWaitList", &cl.enqueueMarkerWithWaitList},
			{"clWaitForEvents", &cl.waitForEvents}, {"clGetEventInfo", &cl.getEventInfo},
			{"clRetainEvent", &cl.retainEvent}, {"clReleaseEvent", &cl.releaseEvent},
			{"clCreateUserEvent", &cl.createUserEvent}, {"clSetUserEventStatus", &cl.setUserEventStatus},
			{"clGetEventProfilingInfo", &cl.getEventProfilingInfo},
		}
		for _, s := range syms {
			p, err := purego.Dlsym(h, s.name)
			if err != nil {
				loadErr = fmt.Errorf("%w: %s: %w", ErrUnavailable, s.name, err)
				return
			}
			*s.p = p
		}
	})
	return loadErr
}

// cstr returns s as a NUL-terminated byte slice for C.
func cstr(s string) []byte {
	b := make([]byte, len(s)+1)
	copy(b, s)
	return b
}

// gostr returns the C string in b up to its first NUL.
func gostr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// infoBytes calls an OpenCL clGet*Info function of the shape (obj, param,
// size, value, size_ret) twice: once for the size, once for the bytes.
func infoBytes(call string, fn, obj, param uintptr) ([]byte, error) {
	var n uintptr
	if err := check(call, syscall(fn, obj, param, 0, 0, uintptr(unsafe.Pointer(&n)))); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, nil
	}
	b := make([]byte, n)
	if err := check(call, syscall(fn, obj, param, n, uintptr(unsafe.Pointer(&b[0])), 0)); err != nil {
		return nil, err
	}
	return b, nil
}

// infoString is infoBytes as a Go string.
func infoString(call string, fn, obj, param uintptr) (string, error) {
	b, err := infoBytes(call, fn, obj, param)
	return gostr(b), err
}

// infoUint reads a fixed-size unsigned value (cl_uint, cl_ulong, size_t,
// cl_bitfield) of at most 8 bytes.
func infoUint(call string, fn, obj, param uintptr, size uintptr) (uint64, error) {
	var v uint64
	err := check(call, syscall(fn, obj, param, size, uintptr(unsafe.Pointer(&v)), 0))
	return v, err
}

// syscall calls the C function fn with args and returns its first result
// register. Pointers passed as uintptr must point to memory the caller
// keeps alive; purego.SyscallN is go:uintptrescapes, so a conversion
// written in its argument list keeps the object alive, but one made here
// by the caller does not: callers pass pointers to heap objects they hold.
//
//go:uintptrescapes
func syscall(fn uintptr, args ...uintptr) uintptr {
	r, _, _ := purego.SyscallN(fn, args...)
	return r
}
