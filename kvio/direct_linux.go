package kvio

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// directAlign is the alignment, in bytes, of O_DIRECT transfers: file
// offset, length and memory address. 4096 is the logical block size or a
// multiple of it on every Linux file system in common use (see open(2),
// "O_DIRECT").
const directAlign = 4096

// errDirectRefused marks a direct transfer that the file system refused
// (EINVAL); the caller finishes the range buffered.
var errDirectRefused = errors.New("O_DIRECT refused")

// directFile is a second descriptor of a file, opened with O_DIRECT.
type directFile struct {
	f        *os.File
	fd       int
	disabled atomic.Pointer[string] // why direct I/O stopped, once it did
}

// openDirectFlags opens path with O_DIRECT added to flag; a variable so
// tests can play a file system that refuses it.
var openDirectFlags = func(path string, flag int) (*os.File, error) {
	return os.OpenFile(path, flag|syscall.O_DIRECT, 0)
}

// openDirect returns the O_DIRECT twin of path, or nil and why not. Some
// file systems refuse O_DIRECT with EINVAL (tmpfs before Linux 6.6,
// several FUSE and network file systems).
func openDirect(path string, flag int) (*directFile, string) {
	f, err := openDirectFlags(path, flag)
	if err != nil {
		if errors.Is(err, syscall.EINVAL) {
			return nil, "O_DIRECT refused: invalid argument"
		}
		return nil, fmt.Sprintf("O_DIRECT open failed: %v", err)
	}
	return &directFile{f: f, fd: int(f.Fd())}, ""
}

// middle returns the part p[lo:hi] of a transfer of p at off that O_DIRECT
// can do: aligned in the file and in memory, at least one block long; ok is
// false when there is none or direct I/O is disabled.
func (d *directFile) middle(p []byte, off int64) (lo, hi int, ok bool) {
	if d.disabled.Load() != nil || len(p) < directAlign {
		return 0, 0, false
	}
	lo = int((directAlign - off%directAlign) % directAlign)
	end := off + int64(len(p))
	hi = len(p) - int(end%directAlign)
	if hi-lo < directAlign || (uintptr(unsafe.Pointer(&p[0]))+uintptr(lo))%directAlign != 0 {
		return 0, 0, false
	}
	return lo, hi, true
}

// rw transfers the aligned p at the aligned off with pread or pwrite on the
// O_DIRECT descriptor, looping over partial transfers and retrying EINTR.
// A read returns fewer bytes and a nil error at end of file. On EINVAL it
// disables direct I/O for the file and returns errDirectRefused with the
// bytes done so far.
func (d *directFile) rw(op opKind, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		var (
			m   int
			err error
		)
		if op == opRead {
			m, err = syscall.Pread(d.fd, p[n:], off+int64(n))
		} else {
			m, err = syscall.Pwrite(d.fd, p[n:], off+int64(n))
		}
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EINVAL):
			why := "O_DIRECT transfer refused: invalid argument"
			d.disabled.CompareAndSwap(nil, &why)
			return n, errDirectRefused
		case err != nil:
			return n, fmt.Errorf("kvio: %s %s at %d (O_DIRECT): %w", op, d.f.Name(), off+int64(n), err)
		case m == 0 && op == opRead:
			return n, nil // end of file
		case m == 0:
			return n, fmt.Errorf("kvio: write %s at %d (O_DIRECT): no progress", d.f.Name(), off+int64(n))
		}
		n += m
		if n%directAlign != 0 && n < len(p) { // a partial block: finish buffered
			return n, errDirectRefused
		}
	}
	return n, nil
}
