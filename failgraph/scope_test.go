package failgraph_test

import (
	"errors"
	"fmt"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/failgraph"
)

// launch submits kernel the way the executor does: the pre-launch check,
// then body inside a write scope, settled by Exit or, when body panics,
// ExitPanic. It returns the failure the write set now carries (0: none)
// and whether the launch was skipped.
func launch(s *failgraph.Store, kernel string, reads, writes []buffers.Binding, body func() error) (id failgraph.FailureID, skipped bool) {
	if id, skip := s.SkipIfTainted(kernel, reads, writes); skip {
		return id, true
	}
	sc := s.Enter(kernel, writes)
	defer func() {
		if v := recover(); v != nil {
			id = sc.ExitPanic(v, debug.Stack())
		}
	}()
	return sc.Exit(body()), false
}

func TestScope(t *testing.T) {
	boom := errors.New("boom")
	panicErr := errors.New("index out of range")
	writes := bs(bind(0, 0, 32), bind(1, 16, 16))
	tests := []struct {
		name  string
		body  func() error
		clean bool
		check func(t *testing.T, root error)
	}{
		{
			name:  "succeeds",
			body:  func() error { return nil },
			clean: true,
		},
		{
			name: "fails: the real error in place",
			body: func() error { return boom },
			check: func(t *testing.T, root error) {
				assert.Same(t, boom, root)
				assert.NotErrorIs(t, root, failgraph.ErrTornDown)
			},
		},
		{
			name: "panics with a value: torn down",
			body: func() error { panic("bad shape") },
			check: func(t *testing.T, root error) {
				var td *failgraph.KernelPanicError
				require.ErrorAs(t, root, &td)
				assert.Equal(t, "k", td.Kernel)
				assert.Equal(t, "bad shape", td.Value)
				assert.Contains(t, string(td.Stack), "failgraph_test.TestScope", "the stack of the panicking goroutine")
				assert.ErrorIs(t, root, failgraph.ErrTornDown)
				assert.Nil(t, td.Unwrap(), "a non-error panic value unwraps to nil")
				assert.EqualError(t, root, `kernel "k" panicked: bad shape`)
			},
		},
		{
			name: "panics with an error: torn down, unwraps to it",
			body: func() error { panic(panicErr) },
			check: func(t *testing.T, root error) {
				var td *failgraph.KernelPanicError
				require.ErrorAs(t, root, &td)
				assert.Same(t, panicErr, td.Value)
				assert.ErrorIs(t, root, failgraph.ErrTornDown)
				assert.ErrorIs(t, root, panicErr)
				assert.NotEmpty(t, td.Stack)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := failgraph.New(names)
			id, skipped := launch(s, "k", bs(bind(9, 0, 8)), writes, tt.body)
			require.False(t, skipped)
			if tt.clean {
				assert.Zero(t, id)
				assert.True(t, s.Empty(), "the write set is clean")
				assert.Zero(t, s.Len())
				assert.NoError(t, s.EnsureWritten(writes...))
				return
			}
			require.Equal(t, failgraph.FailureID(1), id)
			f, ok := s.Failure(id)
			require.True(t, ok)
			assert.Equal(t, "k", f.Kernel)
			assert.Equal(t, 2, f.Allocations)
			assert.Equal(t, []failgraph.Span{{Off: 0, End: 32, Failure: id}}, s.Spans(0))
			assert.Equal(t, []failgraph.Span{{Off: 16, End: 32, Failure: id}}, s.Spans(1))
			tt.check(t, f.Root)

			err := s.EnsureWritten(bind(1, 0, 64))
			ue := unwritten(t, err)
			assert.Equal(t, id, ue.Failure)
			assert.Equal(t, []string{"k"}, ue.Chain)
			assert.Equal(t, f.Root, ue.Root)
			assert.ErrorIs(t, err, f.Root, "the read check unwraps to the root")
			assert.Equal(t, errors.Is(f.Root, failgraph.ErrTornDown), errors.Is(err, failgraph.ErrTornDown))
			assert.NoError(t, s.EnsureWritten(bind(1, 0, 16)), "bytes outside the write set stay clean")

			// A later successful write over the same bytes clears them.
			id, skipped = launch(s, "k", nil, writes, func() error { return nil })
			assert.False(t, skipped)
			assert.Zero(t, id)
			assert.NoError(t, s.EnsureWritten(writes...))
			assert.Zero(t, s.Len())
			assert.True(t, s.Empty())
		})
	}
}

func TestScopePartialRewrite(t *testing.T) {
	s := failgraph.New(names)
	id := s.Enter("k", bs(bind(0, 0, 64))).Exit(errors.New("boom"))
	require.NotZero(t, id)
	// A later scope rewrites only the first half: only it is cleared.
	assert.Zero(t, s.Enter("k2", bs(bind(0, 0, 32))).Exit(nil))
	assert.NoError(t, s.EnsureWritten(bind(0, 0, 32)))
	assert.Equal(t, ids(id), failures(t, s.EnsureWritten(bind(0, 0, 64))))
	assert.Equal(t, []failgraph.Span{{Off: 32, End: 64, Failure: id}}, s.Spans(0))
	// A failing scope over part of it takes those bytes: set, not add.
	id2 := s.Enter("k3", bs(bind(0, 48, 32))).ExitPanic("again", nil)
	assert.Equal(t, id+1, id2)
	assert.Equal(t, []failgraph.Span{{Off: 32, End: 48, Failure: id}, {Off: 48, End: 80, Failure: id2}}, s.Spans(0))
	assert.Equal(t, 2, s.Len())
}

func TestScopeEmptyWriteSet(t *testing.T) {
	s := failgraph.New(names)
	id := s.Enter("k", nil).Exit(errors.New("boom"))
	assert.Equal(t, failgraph.FailureID(1), id)
	assert.Zero(t, s.Len(), "a failure that claims no byte leaves the graph")
	assert.True(t, s.Empty())
	assert.Equal(t, failgraph.FailureID(2), s.Enter("k", nil).ExitPanic("p", nil), "ids are never reused")
	assert.True(t, s.Empty())
}

func TestSkipThenScope(t *testing.T) {
	// The executor's flow: a failed producer, a skipped consumer that
	// takes the same id, then a retry of both that succeeds.
	s := failgraph.New(names)
	in, out := bs(bind(0, 0, 64)), bs(bind(1, 0, 64))
	boom := errors.New("boom")
	ok := func() error { return nil }
	ran := false
	body := func() error { ran = true; return nil }

	root, skipped := launch(s, "load", nil, in, func() error { return boom })
	require.False(t, skipped)
	id, skipped := launch(s, "filter", in, out, body)
	assert.True(t, skipped)
	assert.False(t, ran, "a skipped launch does not run")
	assert.Equal(t, root, id)
	assert.Equal(t, []string{"filter", "load"}, unwritten(t, s.EnsureWritten(out...)).Chain)
	assert.Equal(t, root+1, s.Enter("x", nil).Exit(boom), "the skip minted no id")

	_, skipped = launch(s, "load", nil, in, ok)
	require.False(t, skipped)
	_, skipped = launch(s, "filter", in, out, body)
	assert.False(t, skipped)
	assert.True(t, ran)
	assert.NoError(t, s.EnsureWritten(append(in, out...)...))
	assert.True(t, s.Empty())
}

// kernelBody stands for a launch's work in BenchmarkScope: it touches its
// bindings so the call cannot be optimised away.
//
//go:noinline
func kernelBody(reads, writes []buffers.Binding) error {
	if len(reads)+len(writes) == 0 {
		return errors.New("no bindings")
	}
	return nil
}

// plainLaunch is BenchmarkScope's baseline: one launch, no error graph.
//
//go:noinline
func plainLaunch(reads, writes []buffers.Binding) error {
	return kernelBody(reads, writes)
}

// scopedLaunch is one launch through the error graph, as the executor
// submits it: the pre-launch check, then the body inside a write scope.
//
//go:noinline
func scopedLaunch(s *failgraph.Store, kernel string, reads, writes []buffers.Binding) error {
	if _, skip := s.SkipIfTainted(kernel, reads, writes); skip {
		return errors.New("skipped")
	}
	sc := s.Enter(kernel, writes)
	if id := sc.Exit(kernelBody(reads, writes)); id != 0 {
		return fmt.Errorf("failure %v", id)
	}
	return nil
}

// BenchmarkScope measures the clean path's cost per launch with the
// scope (SkipIfTainted, Enter, Exit(nil) on a clean store, a 2-binding
// write set) beside the same launch without it. Both launch functions are
// out of line, as an executor's per-launch code is. The "with"
// sub-benchmark reports ns/launch and, when "without" ran before it in the
// same process, ns/launch-added; compare runs with benchstat over
// -count=10.
func BenchmarkScope(b *testing.B) {
	reads := bs(bind(0, 0, 4096), bind(1, 0, 4096))
	writes := bs(bind(2, 0, 4096), bind(3, 0, 4096))
	var base float64 // ns per launch of the baseline, 0 before it ran
	nsPer := func(b *testing.B) float64 { return float64(b.Elapsed().Nanoseconds()) / float64(b.N) }

	b.Run("without", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := plainLaunch(reads, writes); err != nil {
				b.Fatal(err)
			}
		}
		base = nsPer(b)
		b.ReportMetric(base, "ns/launch")
	})
	b.Run("with", func(b *testing.B) {
		s := failgraph.New(nil)
		b.ReportAllocs()
		for b.Loop() {
			if err := scopedLaunch(s, "k", reads, writes); err != nil {
				b.Fatal(err)
			}
		}
		ns := nsPer(b)
		b.ReportMetric(ns, "ns/launch")
		if base > 0 {
			b.ReportMetric(ns-base, "ns/launch-added")
		}
	})
}
