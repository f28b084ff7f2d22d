package cl

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Context is an OpenCL context on one device, owning the queues, buffers,
// programs and user events made from it. Its methods are safe for
// concurrent use. Close releases everything; after it every constructor
// returns ErrClosed.
type Context struct {
	h   uintptr
	dev Device

	mu      sync.Mutex
	closed  bool
	queues  map[*Queue]struct{}
	nqueues int
	buffers map[*Buffer]struct{}
	progs   map[string]*progEntry
	users   map[*UserEvent]struct{}
	// failed are the handles of events whose release waits for Close:
	// those of the commands a failed marker covered (see deferRelease).
	failed []uintptr
}

// deferRelease keeps event handle h until Close releases it. PoCL 3.1
// propagates a failed status (pocl_update_event_failed) to the dependents
// of the failed event in the thread that set it, holding each event it
// passes through while it recurses into the next, so a marker deep in the
// chain completes, and the queue's waiter would free the events it
// covers, before that thread has let go of them: the process then aborts
// ("PTHREAD ERROR in pocl_update_event_failed()"). Failures are rare, so
// the handles of a failed marker's commands are kept until the context
// closes, when no command is left running.
func (c *Context) deferRelease(h uintptr) {
	c.mu.Lock()
	c.failed = append(c.failed, h)
	c.mu.Unlock()
}

// Open creates a context on dev (a Device from Platforms or Devices). It
// starts nothing; each Queue starts its own waiter goroutine. Errors: an
// *Error from clCreateContext, or ErrUnavailable.
func Open(dev Device) (*Context, error) {
	if err := load(); err != nil {
		return nil, err
	}
	if dev.id == 0 {
		return nil, errors.New("opencl: open: the zero Device (take one from Platforms or Devices)")
	}
	ids := []uintptr{dev.id}
	var st int32
	h := syscall(cl.createContext, 0, 1, uintptr(unsafe.Pointer(&ids[0])), 0, 0, uintptr(unsafe.Pointer(&st)))
	if err := check("clCreateContext", uintptr(uint32(st))); err != nil {
		return nil, fmt.Errorf("opencl: open %s: %w", dev.info.Name, err)
	}
	return &Context{h: h, dev: dev, queues: map[*Queue]struct{}{}, buffers: map[*Buffer]struct{}{},
		progs: map[string]*progEntry{}, users: map[*UserEvent]struct{}{}}, nil
}

// Device returns the device the context was opened on.
func (c *Context) Device() Device { return c.dev }

// Close completes every user event not yet completed (as failed with
// ErrClosed), closes every queue (waiting for the work enqueued on it, as
// Queue.Close does), then releases every program, kernel, buffer and the
// context. It returns the failures the queues' last commands reported and
// any release error, joined. Close is idempotent: later calls return nil.
// Events handed out stay valid for Done, Err and Release.
func (c *Context) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	users := mapKeys(c.users)
	queues := mapKeys(c.queues)
	c.mu.Unlock()
	var errs []error
	for _, u := range users {
		_ = u.Complete(ErrClosed)
	}
	for _, q := range queues {
		errs = append(errs, q.Close())
	}
	c.mu.Lock()
	progs := c.progs
	bufs := mapKeys(c.buffers)
	failed := c.failed
	c.progs, c.failed = nil, nil
	c.mu.Unlock()
	for _, h := range failed {
		errs = append(errs, check("clReleaseEvent", syscall(cl.releaseEvent, h)))
	}
	for _, e := range progs {
		<-e.ready
		if e.p != nil {
			errs = append(errs, check("clReleaseProgram", syscall(cl.releaseProgram, e.p.h)))
		}
	}
	for _, b := range bufs {
		errs = append(errs, b.Release())
	}
	errs = append(errs, check("clReleaseContext", syscall(cl.releaseContext, c.h)))
	return errors.Join(errs...)
}

func mapKeys[K comparable, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// Buffer is a device buffer: an opaque handle to Bytes bytes of device
// memory (CL_MEM_READ_WRITE), contents undefined until written or filled.
// Release frees it; the device keeps the memory until the commands
// already enqueued on it finish.
type Buffer struct {
	h        uintptr
	bytes    int64
	ctx      *Context
	released atomic.Bool
}

// Alloc creates a device buffer of bytes bytes (> 0). Errors: ErrClosed
// after Close; an *Error such as CL_INVALID_BUFFER_SIZE (bytes above the
// device's MaxAllocBytes) or CL_MEM_OBJECT_ALLOCATION_FAILURE.
func (c *Context) Alloc(bytes int64) (*Buffer, error) {
	if bytes <= 0 {
		return nil, fmt.Errorf("opencl: alloc %d bytes: size must be positive", bytes)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	var st int32
	const clMemReadWrite = 1
	h := syscall(cl.createBuffer, c.h, clMemReadWrite, uintptr(bytes), 0, uintptr(unsafe.Pointer(&st)))
	if err := check("clCreateBuffer", uintptr(uint32(st))); err != nil {
		return nil, fmt.Errorf("opencl: alloc %d bytes on %s: %w", bytes, c.dev.info.Name, err)
	}
	b := &Buffer{h: h, bytes: bytes, ctx: c}
	c.buffers[b] = struct{}{}
	return b, nil
}

// NullBuffer returns a zero-byte Buffer of the context with no OpenCL
// memory: SetBuffer binds it as a NULL pointer, and a command over a
// non-empty range of it is an error. Release does nothing to it; it is
// not counted among the context's buffers.
func (c *Context) NullBuffer() *Buffer { return &Buffer{ctx: c} }

// Bytes returns the buffer's size in bytes.
func (b *Buffer) Bytes() int64 { return b.bytes }

// Release frees the buffer. It is idempotent; a released buffer given to a
// command is an error (ErrClosed). Releasing a buffer while another
// goroutine enqueues a command on it is a programmer error.
func (b *Buffer) Release() error {
	if !b.released.CompareAndSwap(false, true) {
		return nil
	}
	if b.h == 0 {
		return nil // the empty stand-in of zero-byte device memory
	}
	b.ctx.mu.Lock()
	delete(b.ctx.buffers, b)
	b.ctx.mu.Unlock()
	return check("clReleaseMemObject", syscall(cl.releaseMemObject, b.h))
}

// Sub creates a sub-buffer: the n bytes of b from off, as a Buffer of its
// own (clCreateSubBuffer; it shares b's memory and keeps it alive until
// both are released). off must be a multiple of the device's
// BaseAlignBytes. Release it like any Buffer (Context.Close releases it
// too). Errors: a range outside b or an empty one, an unaligned off
// (naming the alignment), ErrClosed, an *Error from clCreateSubBuffer
// (CL_MISALIGNED_SUB_BUFFER_OFFSET).
func (b *Buffer) Sub(off, n int64) (*Buffer, error) {
	if err := b.span("sub-buffer", off, n); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, fmt.Errorf("opencl: sub-buffer at %d: empty", off)
	}
	if a := b.ctx.dev.info.BaseAlignBytes; a > 0 && off%a != 0 {
		return nil, fmt.Errorf("opencl: sub-buffer at %d: offset is not a multiple of %s's %d-byte base address alignment", off, b.ctx.dev.info.Name, a)
	}
	c := b.ctx
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, ErrClosed
	}
	region := &[2]uintptr{uintptr(off), uintptr(n)}
	st := new(int32)
	const clMemReadWrite, clBufferCreateTypeRegion = 1, 0x1220
	h := syscall(cl.createSubBuffer, b.h, clMemReadWrite, clBufferCreateTypeRegion, uintptr(unsafe.Pointer(region)), uintptr(unsafe.Pointer(st)))
	if err := check("clCreateSubBuffer", uintptr(uint32(*st))); err != nil {
		return nil, fmt.Errorf("opencl: sub-buffer [%d, %d) of a %d-byte buffer on %s: %w", off, off+n, b.bytes, c.dev.info.Name, err)
	}
	s := &Buffer{h: h, bytes: n, ctx: c}
	c.buffers[s] = struct{}{}
	return s, nil
}

// span checks that [off, off+n) lies inside b.
func (b *Buffer) span(op string, off, n int64) error {
	if b == nil {
		return fmt.Errorf("opencl: %s: nil buffer", op)
	}
	if b.released.Load() {
		return fmt.Errorf("opencl: %s: buffer released: %w", op, ErrClosed)
	}
	if off < 0 || n < 0 || off > b.bytes || n > b.bytes-off {
		return fmt.Errorf("opencl: %s: range [%d, %d) outside the %d-byte buffer", op, off, off+n, b.bytes)
	}
	return nil
}

// Program is OpenCL C source built for the context's device. Kernels are
// made from it per queue (Queue.Kernel). It is released by Context.Close.
type Program struct {
	h    uintptr
	name string
	ctx  *Context
}

// Name returns the name the program was built under.
func (p *Program) Name() string { return p.name }

type progEntry struct {
	ready chan struct{}
	p     *Program
	err   error
}

// Program builds OpenCL C source with the compiler options (may be empty)
// for the context's device, or returns the program already built from the
// same source and options (a failed build is cached too). name labels the
// program in errors; a cached program keeps the name of its first build.
// The build blocks the calling goroutine (a cold build takes about a
// second on PoCL; POCL_CACHE_DIR keeps compiled kernels across
// processes). Concurrent calls with the same source wait for one build.
// A compile error is a *BuildError carrying the compiler's log.
func (c *Context) Program(name, source, options string) (*Program, error) {
	key := options + "\x00" + source
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil, ErrClosed
	}
	if e, ok := c.progs[key]; ok {
		c.mu.Unlock()
		<-e.ready
		return e.p, e.err
	}
	e := &progEntry{ready: make(chan struct{})}
	c.progs[key] = e
	c.mu.Unlock()
	e.p, e.err = c.build(name, source, options)
	close(e.ready)
	return e.p, e.err
}

func (c *Context) build(name, source, options string) (*Program, error) {
	if source == "" {
		return nil, fmt.Errorf("opencl: program %q: empty source", name)
	}
	src := cstr(source)
	ptrs := []uintptr{uintptr(unsafe.Pointer(&src[0]))}
	lens := []uintptr{uintptr(len(source))}
	var st int32
	h := syscall(cl.createProgramWithSource, c.h, 1, uintptr(unsafe.Pointer(&ptrs[0])), uintptr(unsafe.Pointer(&lens[0])), uintptr(unsafe.Pointer(&st)))
	runtime.KeepAlive(src)
	if err := check("clCreateProgramWithSource", uintptr(uint32(st))); err != nil {
		return nil, fmt.Errorf("opencl: program %q: %w", name, err)
	}
	// Argument info lets a launch check each argument against its
	// parameter (Kernel.fits) instead of handing OpenCL a mismatch.
	opts := cstr(strings.TrimSpace(options + " -cl-kernel-arg-info"))
	devs := []uintptr{c.dev.id}
	if err := check("clBuildProgram", syscall(cl.buildProgram, h, 1, uintptr(unsafe.Pointer(&devs[0])), uintptr(unsafe.Pointer(&opts[0])), 0, 0)); err != nil {
		log := c.buildLog(h)
		syscall(cl.releaseProgram, h)
		return nil, &BuildError{Program: name, Device: c.dev.info.Name, Log: log, Err: err}
	}
	return &Program{h: h, name: name, ctx: c}, nil
}

// buildLog returns the program's build log on the context's device, or a
// note saying why it could not be read.
func (c *Context) buildLog(h uintptr) string {
	const clProgramBuildLog = 0x1183
	var n uintptr
	if err := check("clGetProgramBuildInfo", syscall(cl.getProgramBuildInfo, h, c.dev.id, clProgramBuildLog, 0, 0, uintptr(unsafe.Pointer(&n)))); err != nil {
		return "(no build log: " + err.Error() + ")"
	}
	if n == 0 {
		return ""
	}
	b := make([]byte, n)
	if err := check("clGetProgramBuildInfo", syscall(cl.getProgramBuildInfo, h, c.dev.id, clProgramBuildLog, n, uintptr(unsafe.Pointer(&b[0])), 0)); err != nil {
		return "(no build log: " + err.Error() + ")"
	}
	return gostr(b)
}
