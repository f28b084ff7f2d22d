package kvio

import (
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
)

// PageAlignBytes is the alignment of the buffers PageAllocator returns:
// 4096 bytes, the page size on x86-64 and the block size O_DIRECT needs on
// the common Linux file systems.
const PageAlignBytes = 4096

// PageAllocator is an arrow-go memory.Allocator whose buffers start on a
// PageAlignBytes boundary, so a File with direct I/O can move them with
// O_DIRECT without a bounce copy. Memory comes from the Go heap (size plus
// at most PageAlignBytes-1 bytes of padding) and is reclaimed by the
// garbage collector: Free only drops the reference, as with arrow-go's
// GoAllocator. Wrap it in memory.NewCheckedAllocator to count bytes. The
// zero value is ready to use and safe for concurrent use.
type PageAllocator struct{}

var _ memory.Allocator = PageAllocator{}

// Allocate returns size zeroed bytes starting on a page boundary (len and
// cap size). It panics for a negative size, as make does.
func (PageAllocator) Allocate(size int) []byte { return AlignedBytes(size) }

// Reallocate returns b resized to size, keeping min(len(b), size) leading
// bytes; it returns b itself when size fits in cap(b).
func (a PageAllocator) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		return b[:size]
	}
	n := a.Allocate(size)
	copy(n, b)
	return n
}

// Free releases b to the garbage collector.
func (PageAllocator) Free([]byte) {}

// AlignedBytes returns n zeroed bytes whose first byte is on a
// PageAlignBytes boundary (len and cap n). It panics for a negative n.
func AlignedBytes(n int) []byte {
	if n == 0 {
		return []byte{}
	}
	b := make([]byte, n+PageAlignBytes-1)
	skip := int(-uintptr(unsafe.Pointer(&b[0])) & (PageAlignBytes - 1))
	return b[skip : skip+n : skip+n]
}
