package dag

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOptionErrorsAreRecorded: an option that fails is recorded, naming
// the kernel or buffer, and reported by Validate as mistakes are; the
// options after it still apply.
func TestOptionErrorsAreRecorded(t *testing.T) {
	g := New()
	bad := BufferOption(func(*bufferSpec) error { return errors.New("WithX: bad size") })
	x := g.AddBuffer("x", 8, bad, Input())
	failing := KernelOption(func(*kernelSpec) error { return errors.New("WithY: bad value") })
	k := g.AddKernel("k", func(context.Context, Launch) error { return nil }, Reads(x), failing, OnStream(1))
	assert.Equal(t, 1, g.Kernel(k).Stream, "the option after the failing one applies")
	assert.True(t, g.Buffer(x).Input)
	err := g.Validate()
	require.Error(t, err)
	assert.ErrorContains(t, err, `dag: buffer "x": WithX: bad size`)
	assert.ErrorContains(t, err, `dag: kernel "k": WithY: bad value`)
}
