package kvio

import (
	"math/bits"
	"sync"
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

// NewPoolAllocator returns an arrow-go memory.Allocator of Go memory whose
// freed buffers serve later allocations: sizes are rounded up to a power
// of two, and a buffer Free hands back serves the next Allocate of at
// most its size (zeroed then, as Allocate's bytes always are). Its pools
// are sync.Pools, so the garbage collector still reclaims what stays
// unused. Free only what nothing reads any more, as arrow-go's reference
// counts do: the bytes may back another buffer at once. Safe for
// concurrent use.
func NewPoolAllocator() memory.Allocator { return &recycler{} }

// recycler is a memory.Allocator of Go memory whose freed buffers serve
// later allocations: sizes are rounded up to a power of two, and Free
// keeps a buffer in a pool of its size for the next Allocate of at most
// that size (zeroed then, as Allocate's bytes always are). The pools are
// sync.Pools, so the garbage collector still reclaims what stays unused.
// Only for buffers that nothing uses after Free. Safe for concurrent use.
type recycler struct {
	classes [48]sync.Pool // classes[c] holds *[]byte of cap 1<<c
}

var _ memory.Allocator = (*recycler)(nil)

// Allocate returns size zeroed bytes, cap the next power of two.
func (r *recycler) Allocate(size int) []byte {
	if size <= 0 {
		return make([]byte, size) // panics for a negative size, as make does
	}
	c := bits.Len(uint(size - 1))
	if c >= len(r.classes) {
		return make([]byte, size)
	}
	if p, ok := r.classes[c].Get().(*[]byte); ok {
		b := (*p)[:size]
		clear(b)
		return b
	}
	return make([]byte, size, 1<<c)
}

// Reallocate returns b resized to size, keeping min(len(b), size) leading
// bytes: b itself when size fits in cap(b), else a new buffer, b going
// back to its pool.
func (r *recycler) Reallocate(size int, b []byte) []byte {
	if size <= cap(b) {
		return b[:size]
	}
	n := r.Allocate(size)
	copy(n, b)
	r.Free(b)
	return n
}

// Free keeps b for a later Allocate when its capacity is a power of two
// (one of this allocator's buffers), and drops it otherwise.
func (r *recycler) Free(b []byte) {
	c := bits.Len(uint(cap(b))) - 1
	if c < 0 || c >= len(r.classes) || cap(b) != 1<<c {
		return
	}
	b = b[:0]
	r.classes[c].Put(&b)
}
