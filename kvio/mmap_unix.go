//go:build unix

package kvio

import (
	"fmt"
	"syscall"
)

// mapFile maps the whole of f, read-only and shared, for WithMmap.
func mapFile(f *File) ([]byte, error) {
	if f.own == nil {
		return nil, fmt.Errorf("WithMmap needs a file opened by kvio.Open or OpenFile, not a NewFile reader")
	}
	size := f.Size()
	if size <= 0 || int64(int(size)) != size {
		return nil, fmt.Errorf("mmap: cannot map %d bytes", size)
	}
	b, err := syscall.Mmap(int(f.own.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap: %w", err)
	}
	return b, nil
}

// unmapFile removes a mapping made by mapFile.
func unmapFile(name string, b []byte) error {
	if err := syscall.Munmap(b); err != nil {
		return fmt.Errorf("kvio: munmap %s: %w", name, err)
	}
	return nil
}
