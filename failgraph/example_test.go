package failgraph_test

import (
	"errors"
	"fmt"

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
	// failgraph: out was not written: failure #1 (taints 1 buffer): scale: failgraph: torn down: kernel "scale" panicked: bad shape
	// <nil> true
}
