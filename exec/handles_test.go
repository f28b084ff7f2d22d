package exec_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
)

// bytesOf returns the bytes of raw buffer id of the running launch l
// (dag.Bytes). A kernel that did not declare id panics with the
// *dag.AccessError, which fails its launch.
func bytesOf(l dag.Launch, id dag.BufferID) []byte {
	b, err := dag.Bytes(l, id)
	if err != nil {
		panic(err)
	}
	return b
}

// valueOf returns the value of h's buffer of the running launch l
// (dag.Get), panicking with Get's error, which fails the launch.
func valueOf[T any](l dag.Launch, h dag.Value[T]) T {
	v, err := dag.Get(l, h)
	if err != nil {
		panic(err)
	}
	return v
}

// releaser is a value that counts its releases.
type releaser struct{ released *int }

func (r releaser) Release() { *r.released++ }

// A kernel that asks for a buffer it did not declare with that access,
// or for a value of another type, gets an error that names the kernel,
// the buffer and what is wrong, never a panic; the declared accesses
// work. Put takes over the value even when it fails.
func TestHandleAccessErrors(t *testing.T) {
	e := newExecutor(t, 1)
	g := dag.New()
	in := dag.AddValue[string](g, "in", dag.Input())
	out := dag.AddValue[string](g, "out")
	other := dag.AddValue[releaser](g, "other")
	raw := g.AddBuffer("raw", 8)
	var errs struct{ getOut, putIn, putOther, bytesRaw, bytesIn, missingOut, wrongType, get error }
	var got string
	released := 0
	g.AddKernel("k", func(_ context.Context, l dag.Launch) error {
		got, errs.get = dag.Get(l, in)
		_, errs.getOut = dag.Get(l, out)
		errs.putIn = dag.Put(l, in, "x")
		errs.putOther = dag.Put(l, other, releaser{&released})
		_, errs.bytesRaw = dag.Bytes(l, raw)
		_, errs.bytesIn = dag.Bytes(l, in.ID())
		errs.missingOut = l.Missing(out.ID())
		return dag.Put(l, out, got+"!")
	}, dag.Reads(in.ID()), dag.Writes(out.ID()))
	g.AddKernel("make other", func(_ context.Context, l dag.Launch) error {
		return dag.Put(l, other, releaser{&released})
	}, dag.Writes(other.ID()))
	g.AddKernel("typed", func(_ context.Context, l dag.Launch) error {
		_, errs.wrongType = dag.Get(l, in)
		return nil
	}, dag.Reads(in.ID()), dag.Writes(raw))

	res, err := e.Run(t.Context(), g, exec.WithInput(in.ID(), "hi"))
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())
	require.NoError(t, errs.get)
	assert.Equal(t, "hi", got)
	v, err := res.Value(out.ID())
	require.NoError(t, err)
	assert.Equal(t, "hi!", v)
	assert.NoError(t, errs.bytesIn, "a declared read's bytes (none: a value buffer)")
	assert.NoError(t, errs.wrongType)

	for _, c := range []struct {
		name string
		err  error
		want string
		acc  dag.Access
	}{
		{"Get of a write", errs.getOut, `dag: kernel "k": buffer "out" is not among its reads`, dag.AccessRead},
		{"Put of a read", errs.putIn, `dag: kernel "k": buffer "in" is not among its writes`, dag.AccessWrite},
		{"Put of an undeclared buffer", errs.putOther, `dag: kernel "k": buffer "other" is not among its writes`, dag.AccessWrite},
		{"Bytes of an undeclared buffer", errs.bytesRaw, `dag: kernel "k": buffer "raw" is not among its reads or writes`, dag.AccessAny},
		{"Missing of a write", errs.missingOut, `dag: kernel "k": buffer "out" is not among its reads`, dag.AccessRead},
	} {
		var ae *dag.AccessError
		if assert.ErrorAs(t, c.err, &ae, c.name) {
			assert.Equal(t, c.want, ae.Error(), c.name)
			assert.Equal(t, "k", ae.Kernel, c.name)
			assert.Equal(t, c.acc, ae.Access, c.name)
		}
	}
	// The failed Put released its value; the other kernel's value is
	// released with the result.
	assert.Equal(t, 1, released, "the value of the failed Put is released, the stored one is not yet")
}

// A value of another type than the handle's reads as an error naming the
// buffer and both types; an input given no value holds nothing.
func TestHandleWrongType(t *testing.T) {
	e := newExecutor(t, 1)
	for _, c := range []struct {
		name string
		want string
	}{
		{"an int", `dag: kernel "k": buffer "in" holds int, not string`},
		{"nothing", `dag: kernel "k": buffer "in" holds nothing, not string`},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := dag.New()
			in := dag.AddValue[string](g, "in", dag.Input())
			var getErr error
			g.AddKernel("k", func(_ context.Context, l dag.Launch) error {
				_, getErr = dag.Get(l, in)
				return nil
			}, dag.Reads(in.ID()), dag.Writes(g.AddBuffer("done", 1)))
			var opts []exec.RunOption
			if c.name == "an int" {
				opts = append(opts, exec.WithInput(in.ID(), 42))
			}
			res, err := e.Run(t.Context(), g, opts...)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Err())
			assert.EqualError(t, getErr, c.want)
		})
	}
}

// A kernel whose optional read's producer failed runs, and reading it
// through its handle gives the error graph's UnwrittenError naming the
// failure, from Missing and from Get alike; its other read is there.
func TestHandleMissingAfterFailedProducer(t *testing.T) {
	e := newExecutor(t, 1)
	g := dag.New()
	good, bad := dag.AddValue[int](g, "good"), dag.AddValue[int](g, "bad")
	out := dag.AddValue[int](g, "out")
	boom := errors.New("boom")
	g.AddKernel("make good", func(_ context.Context, l dag.Launch) error { return dag.Put(l, good, 1) }, dag.Writes(good.ID()))
	g.AddKernel("make bad", func(context.Context, dag.Launch) error { return boom }, dag.Writes(bad.ID()))
	var missing, getErr, goodMissing error
	var v int
	g.AddKernel("merge", func(_ context.Context, l dag.Launch) error {
		goodMissing = l.Missing(good.ID())
		missing = l.Missing(bad.ID())
		_, getErr = dag.Get(l, bad)
		var err error
		v, err = dag.Get(l, good)
		if err != nil {
			return err
		}
		return dag.Put(l, out, v)
	}, dag.ReadsOptional(good.ID(), bad.ID()), dag.Writes(out.ID()))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	assert.Equal(t, map[string]exec.Status{"make good": exec.StatusOK, "make bad": exec.StatusFailed, "merge": exec.StatusOK},
		statuses(res.Report))
	assert.NoError(t, goodMissing)
	assert.Equal(t, 1, v)
	for name, err := range map[string]error{"Missing": missing, "Get": getErr} {
		var ue *failgraph.UnwrittenError
		if assert.ErrorAs(t, err, &ue, name) {
			assert.Equal(t, "bad", ue.Buffer, name)
			assert.Equal(t, "make bad", ue.Kernel, name)
			assert.ErrorIs(t, err, boom, name)
		}
	}
}

// Get, Put and Bytes of a declared buffer allocate nothing (a pointer
// value stored, on the CPU device's host path).
func TestHandleAccessDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	e := newExecutor(t, 1)
	g := dag.New()
	in, out := dag.AddValue[*int](g, "in", dag.Input()), dag.AddValue[*int](g, "out")
	raw := g.AddBuffer("raw", 8)
	var allocs float64
	g.AddKernel("k", func(_ context.Context, l dag.Launch) error {
		var err error
		allocs = testing.AllocsPerRun(100, func() {
			var p *int
			if p, err = dag.Get(l, in); err == nil {
				if err = dag.Put(l, out, p); err == nil {
					_, err = dag.Bytes(l, raw)
				}
			}
		})
		return err
	}, dag.Reads(in.ID()), dag.Writes(out.ID(), raw))
	x := 7
	res, err := e.Run(t.Context(), g, exec.WithInput(in.ID(), &x))
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())
	assert.Zero(t, allocs)
}

// exec.Get reads a result's value as its handle's type: the value, the
// UnwrittenError of a failed producer's output, and a named error for a
// buffer holding nothing or another type.
func TestResultGet(t *testing.T) {
	g := dag.New()
	ok := dag.AddValue[string](g, "ok")
	bad := dag.AddValue[int](g, "bad")
	empty := dag.AddValue[int](g, "empty")
	wrong := dag.AddValue[int](g, "wrong")
	g.AddKernel("good", func(_ context.Context, l dag.Launch) error { return dag.Put(l, ok, "yes") }, dag.Writes(ok.ID()))
	g.AddKernel("fails", func(context.Context, dag.Launch) error { return dag.ErrInjected }, dag.Writes(bad.ID()))
	g.AddKernel("none", func(context.Context, dag.Launch) error { return nil }, dag.Writes(empty.ID()))
	g.AddKernel("other", func(_ context.Context, l dag.Launch) error {
		b, err := l.Buffer(wrong.ID(), dag.AccessWrite)
		if err != nil {
			return err
		}
		b.Store("not an int")
		return nil
	}, dag.Writes(wrong.ID()))
	res, err := newExecutor(t, 2).Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	v, err := exec.Get(res, ok)
	require.NoError(t, err)
	assert.Equal(t, "yes", v)
	_, err = exec.Get(res, bad)
	var ue *failgraph.UnwrittenError
	require.ErrorAs(t, err, &ue)
	assert.ErrorIs(t, err, dag.ErrInjected)
	_, err = exec.Get(res, empty)
	assert.EqualError(t, err, `exec: buffer "empty" holds nothing, not int`)
	_, err = exec.Get(res, wrong)
	assert.EqualError(t, err, `exec: buffer "wrong" holds string, not int`)
	require.NoError(t, res.Close())
	_, err = exec.Get(res, ok)
	assert.ErrorIs(t, err, exec.ErrResultClosed)
}
