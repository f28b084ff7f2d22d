package cl_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu/opencl/internal/cl"
)

// scaledKernel takes a pointer, a long and a float.
const scaledKernel = `__kernel void scaled(__global int *out, long v, float f) { out[get_global_id(0)] = (int)v + (int)f; }`

// TestKernelArgumentMismatch: the Kernel setters check the parameter too.
func TestKernelArgumentMismatch(t *testing.T) {
	c := open(t)
	q := newQueue(t, c)
	p, err := c.Program("args", scaledKernel, "")
	require.NoError(t, err)
	k, err := q.Kernel(p, "scaled")
	require.NoError(t, err)
	assert.Equal(t, 3, k.NumParams())
	assert.ErrorContains(t, k.SetInt64(0, 1), `opencl: kernel "scaled": argument 0: a int64 scalar for parameter 0 (__global int* out), a pointer`)
	assert.ErrorContains(t, k.SetFloat64(0, 1), "argument 0: a float64 scalar for parameter 0")
	assert.ErrorContains(t, k.SetBuffer(1, mustAlloc(t, c, 4)), "argument 1: a buffer for parameter 1 (long v)")
	assert.ErrorContains(t, k.SetInt32(1, 1), "argument 1: a 4-byte int32 for parameter 1 (long v), of 8 bytes")
	assert.ErrorIs(t, k.SetInt32(-1, 1), cl.Status(-49), "CL_INVALID_ARG_INDEX")
	require.NoError(t, k.SetInt64(1, 1))
	require.NoError(t, k.SetFloat32(2, 1))
	require.NoError(t, q.Close())
	assert.ErrorIs(t, k.SetInt64(1, 1), cl.ErrClosed, "the queue released its kernel objects")
	assert.ErrorIs(t, k.SetBuffer(0, mustAlloc(t, c, 4)), cl.ErrClosed)
}

// TestBadHandlesAreErrors: the zero values of the handle types and
// ranges outside a buffer are errors, never a call into OpenCL with a
// bad handle.
func TestBadHandlesAreErrors(t *testing.T) {
	c := open(t)
	q := newQueue(t, c)
	b := mustAlloc(t, c, 64)
	var zero cl.Buffer
	assert.ErrorContains(t, q.Fill(&zero, 0, 4, []byte{0}), "range [0, 4) outside the 0-byte buffer")
	assert.NoError(t, zero.Release(), "nothing to free")
	assert.ErrorIs(t, q.Fill(&zero, 0, 0, []byte{0}), cl.ErrClosed)
	assert.ErrorContains(t, q.Copy(b, 0, b, -8, 8), "range [-8, 0) outside the 64-byte buffer")
	assert.ErrorContains(t, q.Copy(b, 0, b, 8, -8), "outside the 64-byte buffer")
	assert.ErrorContains(t, q.Write(b, 60, make([]byte, 8)), "range [60, 68) outside the 64-byte buffer")
	_, err := b.Sub(-128, 8)
	assert.ErrorContains(t, err, "range [-128, -120) outside the 64-byte buffer")
	_, err = q.Marker(&cl.Event{})
	assert.ErrorContains(t, err, "wait event 0 is of another context")
	k, err := q.Kernel(nil, "touch")
	assert.Nil(t, k)
	assert.ErrorContains(t, err, `kernel "touch": program not built by this queue's context`)
	require.NoError(t, q.Finish(t.Context()), "nothing bad was enqueued")
}
