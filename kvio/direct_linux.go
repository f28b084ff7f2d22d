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

// errFinishBuffered marks a direct transfer that stopped before the end of
// its range for a reason buffered I/O can deal with (see directFile.rw);
// the caller finishes the range buffered.
var errFinishBuffered = errors.New("kvio: finish buffered")

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

// directPread is pread on an O_DIRECT descriptor; a variable so tests can
// play a file system that completes a read past a size that shrank while it
// was in flight.
var directPread = syscall.Pread

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
// When it stops before the end of p for a reason buffered I/O can deal
// with, it returns the bytes done and errFinishBuffered, and the caller
// finishes the range buffered: the file system refused the transfer
// (EINVAL, which also disables direct I/O for the file for good), a
// partial block, or the end of the file.
//
// A read never returns bytes past the end of the file as it is when the
// read ends. The size is checked before the read, and only the whole
// blocks before the end go through O_DIRECT: a direct read that meets the
// end fills the caller's buffer past it with zeros (the rest of the block
// and beyond), while the buffered read of the rest stops at the end and
// leaves the bytes past it as they were. The size is checked again after the read,
// and the count cut to it, for a file that shrank while the read was in
// flight (some file systems complete it with zeros).
func (d *directFile) rw(op opKind, p []byte, off int64) (int, error) {
	want := len(p)
	if op == opRead {
		size, err := d.size(off)
		if err != nil {
			return 0, err
		}
		if off+int64(len(p)) > size {
			p = p[:max(size-off, 0)/directAlign*directAlign]
		}
	}
	n := 0
loop:
	for n < len(p) {
		var (
			m   int
			err error
		)
		if op == opRead {
			m, err = directPread(d.fd, p[n:], off+int64(n))
		} else {
			m, err = syscall.Pwrite(d.fd, p[n:], off+int64(n))
		}
		switch {
		case errors.Is(err, syscall.EINTR):
			continue
		case errors.Is(err, syscall.EINVAL):
			why := "O_DIRECT transfer refused: invalid argument"
			d.disabled.CompareAndSwap(nil, &why)
			break loop
		case err != nil:
			return n, fmt.Errorf("kvio: %s %s at %d (O_DIRECT): %w", op, d.f.Name(), off+int64(n), err)
		case m == 0 && op == opRead:
			break loop // end of file
		case m == 0:
			return n, fmt.Errorf("kvio: write %s at %d (O_DIRECT): no progress", d.f.Name(), off+int64(n))
		}
		n += m
		if n%directAlign != 0 { // a partial block
			break
		}
	}
	if op == opRead && n > 0 {
		size, err := d.size(off + int64(n))
		if err != nil {
			return 0, err
		}
		n = int(min(int64(n), max(size-off, 0)))
	}
	if n < want {
		return n, errFinishBuffered
	}
	return n, nil
}

// size returns the size in bytes of the file now; at names the read in an
// error.
func (d *directFile) size(at int64) (int64, error) {
	var st syscall.Stat_t
	for {
		err := syscall.Fstat(d.fd, &st)
		if err == nil {
			return st.Size, nil
		}
		if !errors.Is(err, syscall.EINTR) {
			return 0, fmt.Errorf("kvio: read %s at %d (O_DIRECT): %w", d.f.Name(), at, &os.PathError{Op: "fstat", Path: d.f.Name(), Err: err})
		}
	}
}
