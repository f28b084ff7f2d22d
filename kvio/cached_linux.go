package kvio

import (
	"errors"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// sysPreadv2 is the number of the preadv2 system call (Linux 4.6) on the
// 64-bit architectures whose number kvio knows; 0 elsewhere, where reads
// never try the page cache first.
var sysPreadv2 = map[string]uintptr{"amd64": 327, "arm64": 286, "riscv64": 286, "loong64": 286}[runtime.GOARCH]

// rwfNoWait is preadv2's RWF_NOWAIT flag (Linux 4.14): return what the page
// cache holds, or EAGAIN, instead of waiting for the device.
const rwfNoWait = 0x8

// cachedFile reads, from a file's descriptor, only what the page cache
// already holds.
type cachedFile struct {
	fd       int
	disabled atomic.Bool // the kernel or the file system refused RWF_NOWAIT
}

// newCachedFile returns the cachedFile of fd, or nil where preadv2 is not
// known.
func newCachedFile(fd int) *cachedFile {
	if sysPreadv2 == 0 {
		return nil
	}
	return &cachedFile{fd: fd}
}

// preadNoWait is preadv2(fd, [p], off, RWF_NOWAIT); a variable so tests
// can play a kernel or file system that refuses the flag.
var preadNoWait = func(fd int, p []byte, off int64) (int, error) {
	iov := syscall.Iovec{Base: unsafe.SliceData(p)}
	iov.SetLen(len(p))
	// On 64-bit architectures the offset is one register; the high half
	// argument is ignored.
	n, _, errno := syscall.Syscall6(sysPreadv2, uintptr(fd), uintptr(unsafe.Pointer(&iov)), 1, uintptr(off), 0, rwfNoWait)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// read fills p from offset off with what the page cache holds, stopping at
// the first byte that would need the device; eof is true when it reached
// the end of the file. Errors are not reported: the caller reads the rest
// the ordinary way, which reports them. A kernel or file system that
// refuses RWF_NOWAIT (EOPNOTSUPP, EINVAL, ENOSYS) disables the cachedFile.
func (c *cachedFile) read(p []byte, off int64) (n int, eof bool) {
	if c.disabled.Load() || len(p) == 0 {
		return 0, false
	}
	for n < len(p) {
		m, err := preadNoWait(c.fd, p[n:], off+int64(n))
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EOPNOTSUPP), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.ENOSYS):
			c.disabled.Store(true)
			return n, false
		case err != nil: // EAGAIN: the rest is not cached
			return n, false
		case m == 0:
			return n, true
		}
		n += m
	}
	return n, false
}
