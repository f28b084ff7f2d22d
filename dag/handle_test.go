package dag_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/streamdag/streamdag/dag"
)

// AddValue's handles are the graph's buffer ids, in order with
// AddBuffer's, and declare value buffers.
func TestAddValueHandles(t *testing.T) {
	g := dag.New()
	a := dag.AddValue[string](g, "a", dag.SizeHint(64))
	raw := g.AddBuffer("raw", 8)
	b := dag.AddValue[[]int](g, "b", dag.Input())
	assert.Equal(t, []dag.BufferID{0, 1, 2}, []dag.BufferID{a.ID(), raw, b.ID()})
	assert.Equal(t, dag.BufferDecl{ID: 0, Name: "a", Value: true, SizeHint: 64}, g.Buffer(a.ID()))
	assert.Equal(t, dag.BufferDecl{ID: 2, Name: "b", Value: true, Input: true}, g.Buffer(b.ID()))
}

// An AccessError says which kernel asked for which buffer with what access.
func TestAccessErrorMessages(t *testing.T) {
	for _, c := range []struct {
		err  dag.AccessError
		want string
	}{
		{dag.AccessError{Kernel: "k", Buffer: 3, Name: "b", Access: dag.AccessRead}, `dag: kernel "k": buffer "b" is not among its reads`},
		{dag.AccessError{Kernel: "k", Buffer: 3, Name: "b", Access: dag.AccessWrite}, `dag: kernel "k": buffer "b" is not among its writes`},
		{dag.AccessError{Kernel: "k", Buffer: 3, Name: "b", Access: dag.AccessAny}, `dag: kernel "k": buffer "b" is not among its reads or writes`},
		{dag.AccessError{Kernel: "k", Buffer: 7, Access: dag.AccessRead}, `dag: kernel "k": buffer id 7 is not a buffer of the graph`},
	} {
		assert.EqualError(t, &c.err, c.want)
	}
}
