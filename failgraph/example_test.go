package failgraph_test

import (
	"errors"
	"fmt"
	"io"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/failgraph"
)

// A kernel fails, a dependent launch is skipped, and a host read of the
// skipped launch's output names the chain back to the root error.
func ExampleStore() {
	name := map[buffers.ID]string{0: "raw", 1: "clean"}
	s := failgraph.New(func(id buffers.ID) string { return name[id] })
	raw := buffers.Binding{Buffer: 0, Offset: 0, Length: 4096}
	clean := buffers.Binding{Buffer: 1, Offset: 0, Length: 4096}

	s.Fail("load", errors.New("short read"), []buffers.Binding{raw})
	if id, skip := s.SkipIfTainted("filter", []buffers.Binding{raw}, []buffers.Binding{clean}); skip {
		fmt.Println("filter skipped by failure", id)
	}
	fmt.Println(s.EnsureWritten(clean))

	s.Written([]buffers.Binding{raw, clean}) // a retry succeeded
	fmt.Println(s.EnsureWritten(clean), s.Len())
	// Output:
	// filter skipped by failure #1
	// failgraph: clean was not written: failure #1 (taints 2 buffers): filter ← load: short read
	// <nil> 0
}

// A write scope around a launch: success releases the write set, a panic
// leaves it "torn down" with the panic value.
func ExampleStore_Enter() {
	s := failgraph.New(func(buffers.ID) string { return "out" })
	out := []buffers.Binding{{Buffer: 0, Offset: 0, Length: 64}}

	run := func(kernel string, body func()) failgraph.FailureID {
		sc := s.Enter(kernel, out)
		defer func() {
			if v := recover(); v != nil {
				sc.ExitPanic(v, nil)
			}
		}()
		body()
		return sc.Exit(nil)
	}
	run("scale", func() { panic("bad shape") })
	err := s.EnsureWritten(out...)
	fmt.Println(errors.Is(err, failgraph.ErrTornDown))
	fmt.Println(err)

	run("scale", func() {}) // the retry writes the same bytes
	fmt.Println(s.EnsureWritten(out...), s.Empty())
	// Output:
	// true
	// failgraph: out was not written: failure #1 (taints 1 buffer): scale: kernel "scale" panicked: bad shape
	// <nil> true
}

// A read error unwraps one link at a time, from the buffer read through
// each skipped kernel to the root error.
func ExampleUnwrittenError_Unwrap() {
	s := failgraph.New(func(id buffers.ID) string { return []string{"raw", "clean", "total"}[id] })
	raw := buffers.Binding{Buffer: 0, Length: 8}
	clean := buffers.Binding{Buffer: 1, Length: 8}
	total := buffers.Binding{Buffer: 2, Length: 8}
	s.Fail("load", fmt.Errorf("load: %w", io.ErrUnexpectedEOF), []buffers.Binding{raw})
	s.SkipIfTainted("filter", []buffers.Binding{raw}, []buffers.Binding{clean})
	s.SkipIfTainted("sum", []buffers.Binding{clean}, []buffers.Binding{total})

	err := s.EnsureWritten(total)
	for e := err; e != nil; e = errors.Unwrap(e) {
		fmt.Println(e)
	}
	var skip *failgraph.SkipError
	fmt.Println(errors.As(err, &skip), skip.Kernel, errors.Is(err, io.ErrUnexpectedEOF))
	// Output:
	// failgraph: total was not written: failure #1 (taints 3 buffers): sum ← filter ← load: load: unexpected EOF
	// kernel "sum" skipped: kernel "filter" skipped: load: unexpected EOF
	// kernel "filter" skipped: load: unexpected EOF
	// load: unexpected EOF
	// unexpected EOF
	// true sum true
}
