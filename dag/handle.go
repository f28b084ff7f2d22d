package dag

import (
	"fmt"
	"reflect"
)

// Value is a typed handle on a value buffer that holds a T, as AddValue
// returns it: kernels that declared an access to the buffer reach its
// value through Get and Put, and the compiler checks the type. It is a
// plain immutable value (the buffer's id), valid for the graph that made
// it, to copy and share between goroutines freely; the zero Value is the
// handle of buffer 0.
type Value[T any] struct{ id BufferID }

// ID returns the handle's buffer id: for Reads, Writes, ReadsOptional,
// Graph.Buffer, and what takes a buffer id (an input, a result).
func (h Value[T]) ID() BufferID { return h.id }

// AddValue declares a buffer of g that holds one Go value of type T
// (typically an Arrow record batch) and returns its handle. Mistakes (a
// duplicate or empty name) are recorded and reported by Validate; the
// handle is still valid for building. The name is copied into the graph.
// O(1) amortised; apart from recording a mistake it allocates nothing of
// its own (see Graph).
func AddValue[T any](g *Graph, name string, opts ...BufferOption) Value[T] {
	return Value[T]{g.addBuffer(bufferRec{name: g.putName(&g.bnames, name), flags: bufValue}, opts)}
}

// Access is the access a kernel asks of a buffer through Launch.Buffer:
// AccessRead (one of its declared reads), AccessWrite (one of its
// declared writes) or AccessAny (either).
type Access uint8

// The accesses of Launch.Buffer.
const (
	AccessRead Access = 1 << iota
	AccessWrite
	AccessAny = AccessRead | AccessWrite
)

// AccessError is the error of a launch asked for a buffer its kernel did
// not declare with that access (Launch.Buffer, Launch.Missing, Get, Put,
// Bytes).
type AccessError struct {
	Kernel string   // the kernel's name
	Buffer BufferID // the buffer asked for
	Name   string   // the buffer's name; "" when Buffer is not a buffer of the graph
	Access Access   // the access asked for
}

// Error says "dag: kernel K: buffer B is not among its reads" (writes,
// reads or writes), or that the id is not a buffer of the graph.
func (e *AccessError) Error() string {
	if e.Name == "" {
		return fmt.Sprintf("dag: kernel %q: buffer id %d is not a buffer of the graph", e.Kernel, e.Buffer)
	}
	among := "its reads or writes"
	switch e.Access {
	case AccessRead:
		among = "its reads"
	case AccessWrite:
		among = "its writes"
	}
	return fmt.Sprintf("dag: kernel %q: buffer %q is not among %s", e.Kernel, e.Name, among)
}

// RangeError is the error of a launch that stated a write (Launch.Wrote)
// of a byte range outside its buffer or outside the kernel's declared
// writes of it.
type RangeError struct {
	Kernel    string   // the kernel's name
	Buffer    BufferID // the buffer of the range
	Name      string   // the buffer's name
	Offset    int64    // the range's first byte
	Length    int64    // the range's length in bytes
	SizeBytes int64    // the buffer's size (1 for a value buffer)
}

// Error says `dag: kernel "K": [a:b) is outside buffer "B", which has N
// bytes`, or `dag: kernel "K": [a:b) of buffer "B" is not among its
// writes`.
func (e *RangeError) Error() string {
	if e.Offset < 0 || e.Length < 0 || e.Offset > e.SizeBytes-e.Length {
		return fmt.Sprintf("dag: kernel %q: %s is outside buffer %q, which has %d bytes",
			e.Kernel, rangeText(e.Offset, e.Length), e.Name, e.SizeBytes)
	}
	return fmt.Sprintf("dag: kernel %q: [%d:%d) of buffer %q is not among its writes", e.Kernel, e.Offset, e.Offset+e.Length, e.Name)
}

// rangeText writes bytes [offset, offset+length) as "[a:b)", or as
// "[a:a+n)" (or "[a:a-n)") when the end overflows int64.
func rangeText(offset, length int64) string {
	if end := offset + length; (length > 0) == (end > offset) || length == 0 {
		return fmt.Sprintf("[%d:%d)", offset, end)
	}
	return fmt.Sprintf("[%d:%d%+d)", offset, offset, length)
}

// Get returns the value of h's buffer, which the launch's kernel declared
// among its reads. It returns an *AccessError when the kernel did not
// declare that read; the read's error (Launch.Missing: a
// *failgraph.UnwrittenError naming the failure) when the buffer holds
// nothing because its writer failed or was skipped (only an optional
// read runs so); and an error naming the buffer and both types when it
// holds something other than a T, or nothing at all. The buffer keeps
// its reference to the value: a kernel that keeps it past its launch
// Retains it. O(declared bindings); no allocation on success. Call it
// only from the kernel's own goroutine, during its launch.
func Get[T any](l Launch, h Value[T]) (T, error) {
	var zero T
	b, err := l.Buffer(h.id, AccessRead)
	if err != nil {
		return zero, err
	}
	v := b.Value()
	if t, ok := v.(T); ok {
		return t, nil
	}
	held := "nothing"
	if v != nil {
		held = fmt.Sprintf("%T", v)
	} else if err := l.Missing(h.id); err != nil {
		return zero, err
	}
	return zero, fmt.Errorf("dag: kernel %q: buffer %q holds %s, not %v", l.Kernel(), b.Name(), held, reflect.TypeFor[T]())
}

// Put stores v as the value of h's buffer, which the launch's kernel
// declared among its writes, releasing the value it held before (see
// buffers.Buffer.Store). Put takes over the caller's reference to v, also
// when it fails: then a v with a Release method is released. It returns
// an *AccessError when the kernel did not declare that write, and the
// buffer's error when it is already released. O(declared bindings); it
// allocates only what converting v to an interface costs (nothing for a
// pointer, an interface or a small integer). Call it only from the
// kernel's own goroutine, during its launch.
func Put[T any](l Launch, h Value[T], v T) error {
	b, err := l.Buffer(h.id, AccessWrite)
	if err != nil {
		if r, ok := any(v).(interface{ Release() }); ok && r != nil {
			r.Release()
		}
		return err
	}
	return b.Store(v)
}

// Bytes returns the host bytes of raw buffer id (AddBuffer; length
// SizeBytes), which the launch's kernel declared among its reads or its
// writes: a read's bytes to read, a write's to fill (the bytes of a range
// binding are the whole buffer's; the kernel keeps to its range). A
// write's bytes start each run at zero where no earlier launch of the run
// wrote them. The slice is valid during the launch. It returns an
// *AccessError when the kernel declared neither, and nil bytes for a value
// buffer. Bytes of an optional read whose writer failed hold what the
// buffer held before; ask Launch.Missing first. O(declared bindings); no
// allocation.
func Bytes(l Launch, id BufferID) ([]byte, error) {
	b, err := l.Buffer(id, AccessAny)
	if err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}
