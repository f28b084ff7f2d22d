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
	// filter skipped by failure 1
	// failgraph: clean was not written: failure #1: filter ← load: short read
	// <nil> 0
}
