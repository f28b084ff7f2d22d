package failgraph_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/failgraph"
)

// names prints buffer i as "bufI".
func names(id buffers.ID) string { return fmt.Sprintf("buf%d", id) }

// bind returns the binding [off, off+n) of buffer id.
func bind(id buffers.ID, off, n int64) buffers.Binding {
	return buffers.Binding{Buffer: id, Offset: off, Length: n}
}

// bs is shorthand for a binding list.
func bs(b ...buffers.Binding) []buffers.Binding { return b }

// ids is shorthand for a failure id list.
func ids(f ...failgraph.FailureID) []failgraph.FailureID { return f }

// failures returns, in order, the failure id of each error joined in err:
// an *UnwrittenError gives its failure, a "never allocated" error with no
// failure gives 0. Any other error fails the test.
func failures(t testing.TB, err error) []failgraph.FailureID {
	t.Helper()
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	out := make([]failgraph.FailureID, 0, len(errs))
	for _, e := range errs {
		var ue *failgraph.UnwrittenError
		switch {
		case errors.As(e, &ue):
			out = append(out, ue.Failure)
		case errors.Is(e, failgraph.ErrNeverAllocated):
			out = append(out, 0)
		default:
			require.Failf(t, "unexpected error", "%T: %v", e, e)
		}
	}
	return out
}

// unwritten returns the single *UnwrittenError err must be: a single
// report comes as it is, not joined.
func unwritten(t testing.TB, err error) *failgraph.UnwrittenError {
	t.Helper()
	require.Error(t, err)
	ue, ok := err.(*failgraph.UnwrittenError)
	require.True(t, ok, "want one *UnwrittenError, got %T: %v", err, err)
	return ue
}

// chain returns the message of each level errors.Unwrap reaches from err.
func chain(err error) []string {
	var levels []string
	for e := err; e != nil; e = errors.Unwrap(e) {
		levels = append(levels, e.Error())
	}
	return levels
}

// A single read error is the *UnwrittenError itself, and errors.Unwrap
// walks it one link per skipped kernel, newest first, to the root error.
func TestUnwrittenErrorUnwrapsToRoot(t *testing.T) {
	s := failgraph.New(names)
	errA := fmt.Errorf("a failed: %w", io.ErrUnexpectedEOF)
	s.Fail("a", errA, bs(bind(0, 0, 8)))
	_, skip := s.SkipIfTainted("b", bs(bind(0, 0, 8)), bs(bind(1, 0, 8)))
	require.True(t, skip)
	_, skip = s.SkipIfTainted("c", bs(bind(1, 0, 8)), bs(bind(2, 0, 8)))
	require.True(t, skip)

	err := s.EnsureWritten(bind(2, 0, 8))
	assert.Equal(t, []string{
		"failgraph: buf2 was not written: failure #1 (taints 3 buffers): c ← b ← a: a failed: unexpected EOF",
		`kernel "c" skipped: kernel "b" skipped: a failed: unexpected EOF`,
		`kernel "b" skipped: a failed: unexpected EOF`,
		"a failed: unexpected EOF",
		"unexpected EOF",
	}, chain(err))
	var ue *failgraph.UnwrittenError
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, []string{"c", "b", "a"}, ue.Chain)
	var se *failgraph.SkipError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "c", se.Kernel, "the first link is the kernel that should have written the buffer")
	assert.ErrorIs(t, err, errA)
	assert.ErrorIs(t, err, io.ErrUnexpectedEOF)

	// The root kernel's own write unwraps straight to the root.
	assert.Same(t, errA, errors.Unwrap(s.EnsureWritten(bind(0, 0, 8))))

	// No kernel raised a never-allocated root: every kernel of the chain
	// is a skipped one.
	s = failgraph.New(names)
	s.FailUnallocated("", 3, nil)
	_, skip = s.SkipIfTainted("k", bs(bind(3, 0, 8)), bs(bind(5, 0, 8)))
	require.True(t, skip)
	levels := chain(s.EnsureWritten(bind(5, 0, 8)))
	require.Len(t, levels, 4, "%q", levels)
	assert.Equal(t, `kernel "k" skipped: buf3: `+failgraph.ErrNeverAllocated.Error(), levels[1])
	assert.Equal(t, failgraph.ErrNeverAllocated.Error(), levels[3])
}

// checkSpans asserts the store's span invariants on buffers 0..n-1: spans
// are non-empty, sorted and disjoint, touching spans of one failure are
// fused, and the lock-free counter matches what the store holds.
func checkSpans(t testing.TB, s *failgraph.Store, n int, msgAndArgs ...any) {
	t.Helper()
	for id := range buffers.ID(n) {
		sps := s.Spans(id)
		for i, sp := range sps {
			require.Less(t, sp.Off, sp.End, append([]any{"empty span %v of buffer %d"}, sp, id)...)
			require.NotZero(t, sp.Failure, msgAndArgs...)
			if i == 0 {
				continue
			}
			prev := sps[i-1]
			require.LessOrEqual(t, prev.End, sp.Off, msgAndArgs...)
			if prev.End == sp.Off {
				require.NotEqual(t, prev.Failure, sp.Failure, "unfused spans %v %v of buffer %d", prev, sp, id)
			}
		}
	}
	counter, held := s.Counts()
	require.Equal(t, int64(held), counter, msgAndArgs...)
}

func TestFailureIDString(t *testing.T) {
	assert.Equal(t, "#1", failgraph.FailureID(1).String())
	assert.Equal(t, "#18446744073709551615", failgraph.FailureID(1<<64-1).String())
	assert.Equal(t, "failure #42", fmt.Sprintf("failure %v", failgraph.FailureID(42)))
}

// step is one operation of a table case: a Fail (kernel != "") or a
// Written (kernel == "") of b.
type step struct {
	kernel string
	b      buffers.Binding
}

// probe is one EnsureWritten read and the failures it must report.
type probe struct {
	reads []buffers.Binding
	want  []failgraph.FailureID
}

func TestRanges(t *testing.T) {
	tests := []struct {
		name   string
		steps  []step // the n-th Fail mints failure n
		probes []probe
		spans  []failgraph.Span // spans of buffer 0 at the end
		len    int
	}{
		{
			name:  "write splits a taint",
			steps: []step{{"a", bind(0, 0, 100)}, {"", bind(0, 40, 20)}},
			probes: []probe{
				{bs(bind(0, 40, 20)), nil},
				{bs(bind(0, 0, 10)), ids(1)},
				{bs(bind(0, 60, 40)), ids(1)},
				{bs(bind(0, 39, 2)), ids(1)},
				{bs(bind(0, 59, 2)), ids(1)},
				{bs(bind(0, 0, 100)), ids(1)},
			},
			spans: []failgraph.Span{{Off: 0, End: 40, Failure: 1}, {Off: 60, End: 100, Failure: 1}},
			len:   1,
		},
		{
			name:  "writes at both edges trim",
			steps: []step{{"a", bind(0, 0, 100)}, {"", bind(0, 0, 10)}, {"", bind(0, 90, 10)}},
			probes: []probe{
				{bs(bind(0, 0, 10)), nil},
				{bs(bind(0, 90, 10)), nil},
				{bs(bind(0, 9, 82)), ids(1)},
			},
			spans: []failgraph.Span{{Off: 10, End: 90, Failure: 1}},
			len:   1,
		},
		{
			name:   "partial write releases only what it covered",
			steps:  []step{{"a", bind(0, 0, 64)}, {"", bind(0, 0, 32)}},
			probes: []probe{{bs(bind(0, 0, 32)), nil}, {bs(bind(0, 31, 2)), ids(1)}},
			spans:  []failgraph.Span{{Off: 32, End: 64, Failure: 1}},
			len:    1,
		},
		{
			name:   "write covering a taint removes the failure",
			steps:  []step{{"a", bind(0, 10, 10)}, {"", bind(0, 0, 100)}},
			probes: []probe{{bs(bind(0, 0, 100)), nil}},
			len:    0,
		},
		{
			name:   "writes that add up to the taint remove the failure",
			steps:  []step{{"a", bind(0, 0, 30)}, {"", bind(0, 0, 10)}, {"", bind(0, 20, 10)}, {"", bind(0, 10, 10)}},
			probes: []probe{{bs(bind(0, 0, 30)), nil}},
			len:    0,
		},
		{
			name:   "new failure takes every byte of the old",
			steps:  []step{{"a", bind(0, 0, 50)}, {"b", bind(0, 0, 50)}},
			probes: []probe{{bs(bind(0, 0, 100)), ids(2)}},
			spans:  []failgraph.Span{{Off: 0, End: 50, Failure: 2}},
			len:    1,
		},
		{
			name:  "new failure takes part of the old",
			steps: []step{{"a", bind(0, 0, 50)}, {"b", bind(0, 25, 50)}},
			probes: []probe{
				{bs(bind(0, 0, 25)), ids(1)},
				{bs(bind(0, 25, 50)), ids(2)},
				{bs(bind(0, 0, 100)), ids(1, 2)},
			},
			spans: []failgraph.Span{{Off: 0, End: 25, Failure: 1}, {Off: 25, End: 75, Failure: 2}},
			len:   2,
		},
		{
			name:  "new failure inside the old splits it",
			steps: []step{{"a", bind(0, 0, 100)}, {"b", bind(0, 40, 20)}},
			probes: []probe{
				{bs(bind(0, 0, 100)), ids(1, 2)},
				{bs(bind(0, 60, 40)), ids(1)},
			},
			spans: []failgraph.Span{
				{Off: 0, End: 40, Failure: 1},
				{Off: 40, End: 60, Failure: 2},
				{Off: 60, End: 100, Failure: 1},
			},
			len: 2,
		},
		{
			name:  "new failure over two old ones takes from both",
			steps: []step{{"a", bind(0, 0, 20)}, {"b", bind(0, 20, 20)}, {"c", bind(0, 10, 20)}},
			probes: []probe{
				{bs(bind(0, 0, 40)), ids(1, 3, 2)},
			},
			spans: []failgraph.Span{
				{Off: 0, End: 10, Failure: 1},
				{Off: 10, End: 30, Failure: 3},
				{Off: 30, End: 40, Failure: 2},
			},
			len: 3,
		},
		{
			name:  "touching reads find nothing",
			steps: []step{{"a", bind(0, 10, 10)}},
			probes: []probe{
				{bs(bind(0, 0, 10)), nil},
				{bs(bind(0, 20, 10)), nil},
				{bs(bind(0, 19, 1)), ids(1)},
				{bs(bind(0, 0, 11)), ids(1)},
			},
			spans: []failgraph.Span{{Off: 10, End: 20, Failure: 1}},
			len:   1,
		},
		{
			name:   "other buffers stay clean",
			steps:  []step{{"a", bind(0, 0, 64)}},
			probes: []probe{{bs(bind(1, 0, 64)), nil}},
			spans:  []failgraph.Span{{Off: 0, End: 64, Failure: 1}},
			len:    1,
		},
		{
			name:   "empty range claims nothing",
			steps:  []step{{"a", bind(0, 5, 0)}},
			probes: []probe{{bs(bind(0, 0, 64)), nil}},
			len:    0,
		},
		{
			name:   "empty range takes no byte from another failure",
			steps:  []step{{"a", bind(0, 0, 10)}, {"b", bind(0, 5, 0)}},
			probes: []probe{{bs(bind(0, 0, 64)), ids(1)}},
			spans:  []failgraph.Span{{Off: 0, End: 10, Failure: 1}},
			len:    1,
		},
		{
			name:   "empty write releases nothing",
			steps:  []step{{"a", bind(0, 0, 10)}, {"", bind(0, 5, 0)}},
			probes: []probe{{bs(bind(0, 5, 1)), ids(1)}},
			spans:  []failgraph.Span{{Off: 0, End: 10, Failure: 1}},
			len:    1,
		},
		{
			name:   "negative length is empty",
			steps:  []step{{"a", bind(0, 0, 10)}, {"b", bind(0, 8, -4)}, {"", bind(0, 9, -9)}},
			probes: []probe{{bs(bind(0, 0, 10)), ids(1)}, {bs(bind(0, 8, -4)), nil}},
			spans:  []failgraph.Span{{Off: 0, End: 10, Failure: 1}},
			len:    1,
		},
		{
			name:  "zero-length read finds nothing",
			steps: []step{{"a", bind(0, 0, 10)}},
			probes: []probe{
				{bs(bind(0, 5, 0)), nil},
				{bs(bind(0, 0, 0)), nil},
				{nil, nil},
			},
			spans: []failgraph.Span{{Off: 0, End: 10, Failure: 1}},
			len:   1,
		},
		{
			name:  "several reads de-duplicate in discovery order",
			steps: []step{{"a", bind(0, 0, 10)}, {"b", bind(1, 0, 10)}, {"c", bind(0, 20, 10)}},
			probes: []probe{
				{bs(bind(1, 0, 64), bind(0, 0, 64), bind(1, 0, 64)), ids(2, 1, 3)},
				{bs(bind(0, 25, 1), bind(0, 0, 64)), ids(3, 1)},
			},
			spans: []failgraph.Span{{Off: 0, End: 10, Failure: 1}, {Off: 20, End: 30, Failure: 3}},
			len:   3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := failgraph.New(names)
			var next failgraph.FailureID
			for _, st := range tt.steps {
				if st.kernel == "" {
					s.Written(bs(st.b))
					continue
				}
				next++
				require.Equal(t, next, s.Fail(st.kernel, errors.New(st.kernel+" failed"), bs(st.b)))
			}
			for _, p := range tt.probes {
				err := s.EnsureWritten(p.reads...)
				assert.Equal(t, p.want, failures(t, err), "reads %v", p.reads)
				if p.want == nil {
					assert.NoError(t, err, "reads %v", p.reads)
				}
			}
			assert.Equal(t, tt.spans, s.Spans(0))
			assert.Equal(t, tt.len, s.Len())
			assert.Equal(t, tt.len == 0, s.Empty())
			checkSpans(t, s, 2)
		})
	}
}

func TestFuse(t *testing.T) {
	cause := context.Canceled
	tests := []struct {
		name  string
		run   func(s *failgraph.Store)
		spans []failgraph.Span
	}{
		{
			name: "one failure's overlapping writes",
			run: func(s *failgraph.Store) {
				s.Fail("a", errors.New("boom"), bs(bind(0, 0, 10), bind(0, 20, 10), bind(0, 5, 20)))
			},
			spans: []failgraph.Span{{Off: 0, End: 30, Failure: 1}},
		},
		{
			name: "one failure's touching writes",
			run: func(s *failgraph.Store) {
				s.Fail("a", errors.New("boom"), bs(bind(0, 10, 10), bind(0, 0, 10)))
			},
			spans: []failgraph.Span{{Off: 0, End: 20, Failure: 1}},
		},
		{
			name: "two touching cancels share a failure",
			run: func(s *failgraph.Store) {
				s.Cancel("k1", cause, bs(bind(0, 10, 10)))
				s.Cancel("k2", cause, bs(bind(0, 0, 10)))
			},
			spans: []failgraph.Span{{Off: 0, End: 20, Failure: 1}},
		},
		{
			name: "a skip's touching writes",
			run: func(s *failgraph.Store) {
				s.Fail("a", errors.New("boom"), bs(bind(1, 0, 8)))
				s.SkipIfTainted("b", bs(bind(1, 0, 8)), bs(bind(0, 0, 10), bind(0, 10, 10)))
			},
			spans: []failgraph.Span{{Off: 0, End: 20, Failure: 1}},
		},
		{
			name: "same failure from another kernel fuses: spans carry the failure only",
			run: func(s *failgraph.Store) {
				s.Fail("a", errors.New("boom"), bs(bind(0, 0, 10)))
				s.SkipIfTainted("b", bs(bind(0, 0, 1)), bs(bind(0, 10, 10)))
			},
			spans: []failgraph.Span{{Off: 0, End: 20, Failure: 1}},
		},
		{
			name: "a skip writing over its root's bytes keeps one span",
			run: func(s *failgraph.Store) {
				s.Fail("a", errors.New("boom"), bs(bind(0, 0, 20)))
				s.SkipIfTainted("b", bs(bind(0, 0, 1)), bs(bind(0, 5, 30)))
			},
			spans: []failgraph.Span{{Off: 0, End: 35, Failure: 1}},
		},
		{
			name: "touching spans of other failures stay apart",
			run: func(s *failgraph.Store) {
				s.Fail("a", errors.New("one"), bs(bind(0, 0, 10)))
				s.Fail("a", errors.New("two"), bs(bind(0, 10, 10)))
			},
			spans: []failgraph.Span{{Off: 0, End: 10, Failure: 1}, {Off: 10, End: 20, Failure: 2}},
		},
		{
			name: "a write between two fused halves splits them again",
			run: func(s *failgraph.Store) {
				s.Cancel("k", cause, bs(bind(0, 0, 10)))
				s.Cancel("k", cause, bs(bind(0, 10, 10)))
				s.Written(bs(bind(0, 5, 10)))
			},
			spans: []failgraph.Span{{Off: 0, End: 5, Failure: 1}, {Off: 15, End: 20, Failure: 1}},
		},
		{
			name: "a gap refilled by the same failure fuses back",
			run: func(s *failgraph.Store) {
				s.Cancel("k", cause, bs(bind(0, 0, 30)))
				s.Written(bs(bind(0, 10, 10)))
				s.Cancel("k", cause, bs(bind(0, 10, 10)))
			},
			spans: []failgraph.Span{{Off: 0, End: 30, Failure: 1}},
		},
		{
			name: "a gap refilled by a third failure bridging both sides",
			run: func(s *failgraph.Store) {
				s.Fail("a", errors.New("one"), bs(bind(0, 0, 10)))
				s.Fail("b", errors.New("two"), bs(bind(0, 20, 10)))
				s.Fail("c", errors.New("three"), bs(bind(0, 5, 20)))
			},
			spans: []failgraph.Span{{Off: 0, End: 5, Failure: 1}, {Off: 5, End: 25, Failure: 3}, {Off: 25, End: 30, Failure: 2}},
		},
		{
			name: "re-tainting the same bytes with the same failure changes nothing",
			run: func(s *failgraph.Store) {
				s.Cancel("k", cause, bs(bind(0, 0, 10)))
				s.Cancel("k", cause, bs(bind(0, 0, 10), bind(0, 2, 3)))
			},
			spans: []failgraph.Span{{Off: 0, End: 10, Failure: 1}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := failgraph.New(names)
			tt.run(s)
			assert.Equal(t, tt.spans, s.Spans(0))
			checkSpans(t, s, 2)
		})
	}
}

func TestTakeOver(t *testing.T) {
	s := failgraph.New(names)
	errA, errB := errors.New("a failed"), errors.New("b failed")
	id1 := s.Fail("a", errA, bs(bind(0, 0, 32), bind(1, 0, 8)))
	id2 := s.Fail("b", errB, bs(bind(0, 16, 48)))
	require.Equal(t, failgraph.FailureID(1), id1)
	require.Equal(t, failgraph.FailureID(2), id2)
	assert.Equal(t, 2, s.Len())
	f1, ok := s.Failure(id1)
	require.True(t, ok)
	assert.Equal(t, 2, f1.Allocations, "failure 1 keeps bytes of both buffers")

	// New failures take the rest of failure 1's bytes: set, not add.
	require.Equal(t, failgraph.FailureID(3), s.Fail("b2", errB, bs(bind(1, 0, 8))))
	f1, ok = s.Failure(id1)
	require.True(t, ok)
	assert.Equal(t, 1, f1.Allocations, "failure 1 lost buffer 1")
	require.Equal(t, failgraph.FailureID(4), s.Fail("b3", errB, bs(bind(0, 0, 16))))
	_, ok = s.Failure(id1)
	assert.False(t, ok, "failure 1 holds no byte and must leave the graph")
	_, ok = s.Failure(id2)
	assert.True(t, ok)
	assert.Equal(t, 3, s.Len()) // failures 2, 3 and 4
	got := s.Failures()
	require.Len(t, got, 3)
	assert.Equal(t, ids(2, 3, 4), ids(got[0].ID, got[1].ID, got[2].ID), "Failures is in id order")

	err := s.EnsureWritten(bind(0, 0, 64), bind(1, 0, 8))
	assert.Equal(t, ids(4, 2, 3), failures(t, err))
	assert.NotErrorIs(t, err, errA)
	assert.ErrorIs(t, err, errB)

	// Writing everything empties the graph and the clean path is back.
	s.Written(bs(bind(0, 0, 64), bind(1, 0, 8)))
	assert.Zero(t, s.Len())
	assert.True(t, s.Empty())
	assert.Empty(t, s.Failures())
	assert.NoError(t, s.EnsureWritten(bind(0, 0, 64), bind(1, 0, 8)))
	checkSpans(t, s, 2)
	counter, _ := s.Counts()
	assert.Zero(t, counter)
}

func TestFailWithoutBytes(t *testing.T) {
	tests := []struct {
		name   string
		writes []buffers.Binding
	}{
		{"no writes", nil},
		{"empty ranges", bs(bind(0, 0, 0), bind(1, 7, 0), bind(2, 3, -1))},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := failgraph.New(names)
			id := s.Fail("a", errors.New("boom"), tt.writes)
			assert.Equal(t, failgraph.FailureID(1), id)
			_, ok := s.Failure(id)
			assert.False(t, ok, "a failure that claims no byte leaves the graph")
			assert.Zero(t, s.Len())
			assert.True(t, s.Empty())
			// Ids are never reused.
			assert.Equal(t, failgraph.FailureID(2), s.Fail("b", errors.New("boom"), bs(bind(0, 0, 1))))
		})
	}
}

func TestAllocations(t *testing.T) {
	s := failgraph.New(names)
	allocs := func(id failgraph.FailureID) int {
		t.Helper()
		f, ok := s.Failure(id)
		require.True(t, ok, "failure %v", id)
		return f.Allocations
	}
	// Three bindings over two buffers: two allocations.
	id := s.Fail("a", errors.New("boom"), bs(bind(0, 0, 8), bind(0, 16, 8), bind(1, 0, 8)))
	assert.Equal(t, 2, allocs(id))
	// A skip's write set takes the failure: three.
	_, skip := s.SkipIfTainted("b", bs(bind(1, 0, 8)), bs(bind(2, 0, 8)))
	require.True(t, skip)
	assert.Equal(t, 3, allocs(id))
	// A partial write leaves buffer 0 holding a byte: still three.
	s.Written(bs(bind(0, 0, 8)))
	assert.Equal(t, 3, allocs(id))
	// Its last byte written: two.
	s.Written(bs(bind(0, 16, 8)))
	assert.Equal(t, 2, allocs(id))

	// An unallocated record counts as one allocation, plus the buffers a
	// skip that needed it would have written.
	oom := errors.New("out of memory")
	u := s.FailUnallocated("alloc", 5, oom)
	assert.Equal(t, 1, allocs(u))
	got, skip := s.SkipIfTainted("c", bs(bind(5, 0, 8)), bs(bind(6, 0, 8), bind(7, 0, 8)))
	require.True(t, skip)
	require.Equal(t, u, got)
	assert.Equal(t, 3, allocs(u))
	ue := unwritten(t, s.EnsureWritten(bind(6, 0, 1)))
	assert.Equal(t, 3, ue.Allocations)
	s.Allocated(5)
	assert.Equal(t, 2, allocs(u))
	checkSpans(t, s, 8)
}

func TestSkipIfTainted(t *testing.T) {
	s := failgraph.New(names)
	errA, errX := errors.New("a failed"), errors.New("x failed")
	id1 := s.Fail("a", errA, bs(bind(1, 0, 64)))
	id2 := s.Fail("x", errX, bs(bind(2, 32, 32)))

	// Clean reads: nothing is recorded, nothing is tainted or released.
	id, skip := s.SkipIfTainted("k0", bs(bind(0, 0, 64), bind(2, 0, 32)), bs(bind(1, 0, 64)))
	assert.False(t, skip)
	assert.Zero(t, id)
	assert.Equal(t, ids(id1), failures(t, s.EnsureWritten(bind(1, 0, 64))))
	for _, f := range s.Failures() {
		assert.Zero(t, f.TotalSkips, "failure %v", f.ID)
	}

	// An empty read over tainted bytes finds nothing.
	_, skip = s.SkipIfTainted("k0", bs(bind(1, 10, 0), bind(2, 40, -3)), nil)
	assert.False(t, skip)

	// The first tainted read in declaration order wins: buffer 2 (failure
	// 2), though buffer 1 (failure 1) is tainted too.
	reads := bs(bind(0, 0, 64), bind(2, 0, 64), bind(1, 0, 64))
	writes := bs(bind(3, 0, 8), bind(3, 16, 8), bind(4, 0, 8))
	id, skip = s.SkipIfTainted("k", reads, writes)
	require.True(t, skip)
	assert.Equal(t, id2, id)

	// The skip is recorded on the root failure only, once, with the
	// tainted bytes it needed (from the first one to the end of its span)
	// and the ranges it would have written.
	f2, ok := s.Failure(id2)
	require.True(t, ok)
	assert.Equal(t, []failgraph.Skip{{Kernel: "k", Needed: bind(2, 32, 32),
		Produced: bs(bind(3, 0, 8), bind(3, 16, 8), bind(4, 0, 8))}}, f2.Skips)
	assert.Equal(t, 1, f2.TotalSkips)
	assert.Zero(t, f2.Dropped())
	f1, ok := s.Failure(id1)
	require.True(t, ok)
	assert.Empty(t, f1.Skips)

	// The writes carry the same failure; no new id was minted.
	assert.Equal(t, 2, s.Len())
	assert.Equal(t, []failgraph.Span{{Off: 0, End: 8, Failure: id2}, {Off: 16, End: 24, Failure: id2}}, s.Spans(3))
	ue := unwritten(t, s.EnsureWritten(bind(3, 0, 64)))
	assert.Equal(t, &failgraph.UnwrittenError{Failure: id2, Buffer: "buf3", Allocations: 3,
		Chain: []string{"k", "x"}, Kernel: "x", Root: errX}, ue)
	assert.NoError(t, s.EnsureWritten(bind(3, 8, 8)))
	assert.Equal(t, failgraph.FailureID(3), s.Fail("y", errors.New("y"), bs(bind(5, 0, 1))), "the skip minted no id")

	// Within one read, the lowest tainted byte wins.
	s.Fail("w", errors.New("w"), bs(bind(6, 32, 16)))
	s.Fail("z", errors.New("z"), bs(bind(6, 0, 16)))
	id, skip = s.SkipIfTainted("k2", bs(bind(6, 8, 56)), nil)
	require.True(t, skip)
	assert.Equal(t, failgraph.FailureID(5), id)
	f5, _ := s.Failure(5)
	assert.Equal(t, []failgraph.Skip{{Kernel: "k2", Needed: bind(6, 8, 8)}}, f5.Skips, "no writes: nothing produced")
	checkSpans(t, s, 7)
}

func TestSkipTakesOver(t *testing.T) {
	// A skip's write set takes its bytes from other failures: set, not add.
	s := failgraph.New(names)
	a := s.Fail("a", errors.New("a"), bs(bind(0, 0, 8)))
	b := s.Fail("b", errors.New("b"), bs(bind(1, 0, 8)))
	id, skip := s.SkipIfTainted("k", bs(bind(0, 0, 8)), bs(bind(1, 0, 8)))
	require.True(t, skip)
	require.Equal(t, a, id)
	_, ok := s.Failure(b)
	assert.False(t, ok, "failure b lost its only bytes to the skip")
	assert.Equal(t, ids(a), failures(t, s.EnsureWritten(bind(1, 0, 8))))
	assert.Equal(t, 1, s.Len())
}

// skipLine runs len(kernels) skips, kernel i reading buffer i and writing
// buffer i+1, after root failed writing buffer 0.
func skipLine(t *testing.T, s *failgraph.Store, root error, kernels []string) failgraph.FailureID {
	t.Helper()
	id := s.Fail("root", root, bs(bind(0, 0, 64)))
	for i, k := range kernels {
		got, skip := s.SkipIfTainted(k, bs(bind(buffers.ID(i), 0, 64)), bs(bind(buffers.ID(i+1), 0, 64)))
		require.True(t, skip, k)
		require.Equal(t, id, got, k)
	}
	return id
}

func TestChain(t *testing.T) {
	s := failgraph.New(names)
	const a, b, c, d, e = 0, 1, 2, 3, 4 // buffer i is written by kernel i
	errA := errors.New("a failed")
	root := s.Fail("a", errA, bs(bind(a, 0, 64)))
	for _, k := range []struct {
		kernel string
		reads  []buffers.Binding
		writes buffers.ID
	}{
		{"b", bs(bind(a, 0, 64)), b},
		{"c", bs(bind(b, 0, 64)), c},
		{"d", bs(bind(e, 0, 64), bind(c, 0, 64), bind(a, 0, 64)), d}, // e is clean, c comes first: d needed c
		{"b2", bs(bind(a, 0, 64)), b},                                // b rewritten by a later skip
	} {
		id, skip := s.SkipIfTainted(k.kernel, k.reads, bs(bind(k.writes, 0, 64)))
		require.True(t, skip, k.kernel)
		require.Equal(t, root, id, k.kernel)
	}
	require.Equal(t, 1, s.Len())

	f, ok := s.Failure(root)
	require.True(t, ok)
	assert.Equal(t, root, f.ID)
	assert.Equal(t, "a", f.Kernel)
	assert.Equal(t, errA, f.Root)
	assert.Equal(t, 4, f.Allocations)
	assert.Equal(t, []failgraph.Skip{
		{Kernel: "b", Needed: bind(a, 0, 64), Produced: bs(bind(b, 0, 64))},
		{Kernel: "c", Needed: bind(b, 0, 64), Produced: bs(bind(c, 0, 64))},
		{Kernel: "d", Needed: bind(c, 0, 64), Produced: bs(bind(d, 0, 64))},
		{Kernel: "b2", Needed: bind(a, 0, 64), Produced: bs(bind(b, 0, 64))},
	}, f.Skips)

	// ChainFrom walks from a kernel's newest record, among the records
	// before it: c needed b, which b (not the later b2) produced.
	for _, tt := range []struct {
		kernel string
		want   []string
	}{
		{"d", []string{"c", "b", "a"}},
		{"c", []string{"b", "a"}},
		{"b", []string{"a"}},
		{"b2", []string{"a"}},
		{"a", []string{"a"}},
		{"never-skipped", []string{"a"}},
	} {
		assert.Equal(t, tt.want, f.ChainFrom(tt.kernel), "ChainFrom(%q)", tt.kernel)
	}

	// The read check walks from the newest record that produced the
	// buffer read: newest first, the root kernel last.
	for _, tt := range []struct {
		read buffers.Binding
		want []string
	}{
		{bind(a, 0, 64), []string{"a"}},
		{bind(b, 0, 64), []string{"b2", "a"}},
		{bind(c, 0, 64), []string{"c", "b", "a"}},
		{bind(d, 10, 1), []string{"d", "c", "b", "a"}},
	} {
		ue := unwritten(t, s.EnsureWritten(tt.read))
		assert.Equal(t, root, ue.Failure)
		assert.Equal(t, tt.want, ue.Chain, "read %v", tt.read)
		assert.Equal(t, "a", ue.Kernel)
		assert.Equal(t, errA, ue.Root)
		assert.Zero(t, ue.Dropped)
		assert.ErrorIs(t, ue, errA)
	}
	assert.EqualError(t, s.EnsureWritten(bind(d, 0, 1)),
		"failgraph: buf3 was not written: failure #1 (taints 4 buffers): d ← c ← b ← a: a failed")

	// Failure returns a copy: changing it leaves the graph alone.
	f.Skips[0].Kernel = "changed"
	f.Skips[0].Produced[0].Buffer = 99
	again, _ := s.Failure(root)
	assert.Equal(t, "b", again.Skips[0].Kernel)
	assert.Equal(t, bs(bind(b, 0, 64)), again.Skips[0].Produced)
}

func TestChainCap(t *testing.T) {
	kernels := func(n int) []string {
		ks := make([]string, n)
		for i := range ks {
			ks[i] = fmt.Sprintf("k%d", i+1)
		}
		return ks
	}
	reversed := func(ks []string) []string {
		out := make([]string, 0, len(ks)+1)
		for i := len(ks) - 1; i >= 0; i-- {
			out = append(out, ks[i])
		}
		return append(out, "root")
	}
	tests := []struct {
		name    string
		skips   int
		chain   []string // the chain read from the last buffer
		oldest  string   // the oldest record kept
		dropped int
	}{
		{name: "no skip", skips: 0, chain: []string{"root"}, dropped: 0},
		{name: "under the cap", skips: 3, chain: reversed(kernels(3)), oldest: "k1"},
		{name: "at the cap", skips: failgraph.MaxSkipRecords, chain: reversed(kernels(16)), oldest: "k1"},
		{name: "one over the cap", skips: 17, chain: reversed(kernels(17)[1:]), oldest: "k2", dropped: 1},
		{name: "twenty", skips: 20, chain: reversed(kernels(20)[4:]), oldest: "k5", dropped: 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := failgraph.New(names)
			rootErr := errors.New("root failed")
			id := skipLine(t, s, rootErr, kernels(tt.skips))
			f, ok := s.Failure(id)
			require.True(t, ok)
			assert.Equal(t, tt.skips, f.TotalSkips)
			assert.Len(t, f.Skips, min(tt.skips, failgraph.MaxSkipRecords))
			assert.Equal(t, tt.dropped, f.Dropped())
			if tt.oldest != "" {
				assert.Equal(t, tt.oldest, f.Skips[0].Kernel)
				assert.Equal(t, fmt.Sprintf("k%d", tt.skips), f.Skips[len(f.Skips)-1].Kernel)
			}

			err := s.EnsureWritten(bind(buffers.ID(tt.skips), 0, 64))
			ue := unwritten(t, err)
			assert.Equal(t, tt.chain, ue.Chain)
			assert.Equal(t, "root", ue.Chain[len(ue.Chain)-1], "the root kernel is last")
			assert.Equal(t, tt.dropped, ue.Dropped)
			assert.Equal(t, tt.skips+1, ue.Allocations)
			assert.ErrorIs(t, err, rootErr)
			note := fmt.Sprintf("(%d older skip records were dropped; the chain may stop before the root)", tt.dropped)
			if tt.dropped > 0 {
				assert.True(t, strings.HasSuffix(err.Error(), note), "error %q lacks %q", err, note)
			} else {
				assert.NotContains(t, err.Error(), "dropped")
			}
			if tt.skips > 0 {
				assert.True(t, strings.Contains(err.Error(), fmt.Sprintf(": k%d ← ", tt.skips)), err.Error())
			}
		})
	}
}

func TestEnsureWrittenSeveral(t *testing.T) {
	s := failgraph.New(names)
	errA, errX := errors.New("a failed"), errors.New("x failed")
	idA := s.Fail("a", errA, bs(bind(0, 0, 32), bind(1, 0, 64)))
	idX := s.Fail("x", errX, bs(bind(0, 32, 32)))
	_, skip := s.SkipIfTainted("b", bs(bind(1, 0, 1)), bs(bind(0, 40, 8)))
	require.True(t, skip)
	assert.Equal(t, []failgraph.Span{{0, 32, idA}, {32, 40, idX}, {40, 48, idA}, {48, 64, idX}}, s.Spans(0))

	// One read over both failures, plus repeats: two reports, in the order
	// the first read meets them.
	err := s.EnsureWritten(bind(0, 0, 64), bind(1, 0, 64), bind(0, 0, 64))
	require.Error(t, err)
	joined, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "want errors.Join, got %T", err)
	errs := joined.Unwrap()
	require.Len(t, errs, 2)

	want := []*failgraph.UnwrittenError{
		{Failure: idA, Buffer: "buf0", Allocations: 2, Chain: []string{"a"}, Kernel: "a", Root: errA}, // byte 0 is a's own
		{Failure: idX, Buffer: "buf0", Allocations: 1, Chain: []string{"x"}, Kernel: "x", Root: errX},
	}
	for i, e := range errs {
		var ue *failgraph.UnwrittenError
		require.ErrorAs(t, e, &ue)
		assert.Equal(t, want[i], ue)
	}
	assert.ErrorIs(t, err, errA)
	assert.ErrorIs(t, err, errX)
	var first *failgraph.UnwrittenError
	require.ErrorAs(t, err, &first)
	assert.Equal(t, idA, first.Failure)
	assert.EqualError(t, errs[0], "failgraph: buf0 was not written: failure #1 (taints 2 buffers): a: a failed")
	// The chain follows the bytes read: b's skip wrote [40, 48).
	assert.Equal(t, []string{"b", "a"}, unwritten(t, s.EnsureWritten(bind(0, 40, 8))).Chain)
	assert.EqualError(t, errs[1], "failgraph: buf0 was not written: failure #2 (taints 1 buffer): x: x failed")

	// Discovery order follows the reads: failure X first when the read
	// starts on its bytes.
	err = s.EnsureWritten(bind(0, 32, 16), bind(0, 0, 8))
	assert.Equal(t, ids(idX, idA), failures(t, err))
	// The first buffer that shows a failure names it.
	err = s.EnsureWritten(bind(1, 0, 64), bind(0, 0, 64))
	require.ErrorAs(t, err, &first)
	assert.Equal(t, &failgraph.UnwrittenError{Failure: idA, Buffer: "buf1", Allocations: 2, Chain: []string{"a"}, Kernel: "a", Root: errA}, first)
	assert.Equal(t, ids(idA, idX), failures(t, err))
}

func TestDefaultNames(t *testing.T) {
	s := failgraph.New(nil)
	s.Fail("a", errors.New("boom"), bs(bind(7, 0, 1)))
	ue := unwritten(t, s.EnsureWritten(bind(7, 0, 1)))
	assert.Equal(t, "buffer 7", ue.Buffer)
}

func TestUnallocated(t *testing.T) {
	t.Run("reservation failed", func(t *testing.T) {
		s := failgraph.New(names)
		oom := errors.New("out of memory")
		id := s.FailUnallocated("prep", 3, oom)
		require.Equal(t, failgraph.FailureID(1), id)
		assert.False(t, s.Empty())
		assert.Equal(t, 1, s.Len())

		ue := unwritten(t, s.EnsureWritten(bind(3, 0, 8)))
		assert.Equal(t, &failgraph.UnwrittenError{Failure: id, Buffer: "buf3", Allocations: 1,
			Chain: []string{"prep"}, Kernel: "prep", Root: oom}, ue)
		assert.ErrorIs(t, ue, oom)
		assert.NotErrorIs(t, ue, failgraph.ErrNeverAllocated)
		assert.NoError(t, s.EnsureWritten(bind(3, 0, 0)), "zero-length read finds nothing")

		// Any byte of it is tainted for the pre-launch check.
		got, skip := s.SkipIfTainted("k", bs(bind(3, 100, 1)), bs(bind(4, 0, 8)))
		require.True(t, skip)
		assert.Equal(t, id, got)
		assert.Equal(t, ids(id), failures(t, s.EnsureWritten(bind(4, 0, 8), bind(3, 0, 8))))
		assert.Equal(t, []string{"k", "prep"}, unwritten(t, s.EnsureWritten(bind(4, 0, 8))).Chain)

		// Allocated forgets the record; the skip's output still carries it.
		s.Allocated(3)
		assert.NoError(t, s.EnsureWritten(bind(3, 0, 8)))
		assert.Equal(t, ids(id), failures(t, s.EnsureWritten(bind(4, 0, 8))))
		s.Written(bs(bind(4, 0, 8)))
		assert.True(t, s.Empty())
		assert.Zero(t, s.Len())
		s.Allocated(3) // no record: nothing happens
		assert.True(t, s.Empty())
	})
	t.Run("recorded again", func(t *testing.T) {
		s := failgraph.New(names)
		first := s.FailUnallocated("p1", 3, errors.New("one"))
		second := s.FailUnallocated("p2", 3, errors.New("two"))
		assert.Equal(t, first+1, second)
		_, ok := s.Failure(first)
		assert.False(t, ok, "the older record's failure left with it")
		assert.Equal(t, ids(second), failures(t, s.EnsureWritten(bind(3, 0, 1))))
		assert.Zero(t, s.FailUnallocated("p3", 3, nil))
		assert.Zero(t, s.Len())
		assert.Equal(t, ids(0), failures(t, s.EnsureWritten(bind(3, 0, 1))))
		checkSpans(t, s, 4)
	})
	t.Run("never allocated", func(t *testing.T) {
		s := failgraph.New(names)
		assert.Zero(t, s.FailUnallocated("", 3, nil))
		assert.Zero(t, s.Len(), "no failure is minted")
		assert.False(t, s.Empty(), "the record still taints")

		err := s.EnsureWritten(bind(3, 0, 8), bind(3, 8, 8))
		require.ErrorIs(t, err, failgraph.ErrNeverAllocated)
		var ue *failgraph.UnwrittenError
		assert.False(t, errors.As(err, &ue), "no failure, no UnwrittenError: %v", err)
		assert.Equal(t, ids(0), failures(t, err), "one error per buffer")
		assert.EqualError(t, err, "failgraph: buf3: "+failgraph.ErrNeverAllocated.Error())

		// A skip that needed it mints a failure (once) and records on it.
		got, skip := s.SkipIfTainted("k", bs(bind(2, 0, 8), bind(3, 0, 8)), bs(bind(5, 0, 8)))
		require.True(t, skip)
		require.Equal(t, failgraph.FailureID(1), got)
		again, skip := s.SkipIfTainted("k2", bs(bind(3, 0, 8)), nil)
		require.True(t, skip)
		assert.Equal(t, got, again, "minted once")
		f, ok := s.Failure(got)
		require.True(t, ok)
		assert.ErrorIs(t, f.Root, failgraph.ErrNeverAllocated)
		assert.Equal(t, 2, f.Allocations)
		assert.Equal(t, []failgraph.Skip{{Kernel: "k", Needed: bind(3, 0, 8), Produced: bs(bind(5, 0, 8))}, {Kernel: "k2", Needed: bind(3, 0, 8)}}, f.Skips)

		ue = unwritten(t, s.EnsureWritten(bind(5, 0, 8)))
		assert.Equal(t, got, ue.Failure)
		assert.Equal(t, []string{"k"}, ue.Chain, "no kernel raised the root: the chain ends with the skip")
		assert.ErrorIs(t, ue, failgraph.ErrNeverAllocated)
		assert.EqualError(t, ue, "failgraph: buf5 was not written: failure #1 (taints 2 buffers): k: buf3: "+failgraph.ErrNeverAllocated.Error())
		ue = unwritten(t, s.EnsureWritten(bind(3, 0, 8)))
		assert.Empty(t, ue.Chain)
		assert.EqualError(t, ue, "failgraph: buf3 was not written: failure #1 (taints 2 buffers): buf3: "+failgraph.ErrNeverAllocated.Error())

		s.Allocated(3)
		s.Written(bs(bind(5, 0, 8)))
		assert.True(t, s.Empty())
		assert.Zero(t, s.Len())
		checkSpans(t, s, 6)
	})
}

func TestCancel(t *testing.T) {
	s := failgraph.New(names)
	id := s.Cancel("k1", context.Canceled, bs(bind(0, 0, 8)))
	assert.Equal(t, id, s.Cancel("k2", context.Canceled, bs(bind(1, 0, 8))))
	assert.Equal(t, id, s.Cancel("k3", context.Canceled, nil))
	assert.Equal(t, 1, s.Len())

	f, ok := s.Failure(id)
	require.True(t, ok)
	assert.Equal(t, "k1", f.Kernel, "the first cancelled kernel names the shared failure")
	assert.Equal(t, 2, f.Allocations)
	assert.ErrorIs(t, f.Root, context.Canceled)
	assert.EqualError(t, f.Root, "failgraph: run cancelled: context canceled")

	ue := unwritten(t, s.EnsureWritten(bind(1, 0, 8)))
	assert.Equal(t, id, ue.Failure)
	assert.Equal(t, []string{"k1"}, ue.Chain)
	assert.ErrorIs(t, ue, context.Canceled)

	// A real failure in between mints its own id; the cancel id is shared
	// still.
	other := s.Fail("x", errors.New("x"), bs(bind(2, 0, 8)))
	assert.NotEqual(t, id, other)
	assert.Equal(t, id, s.Cancel("k4", context.Canceled, bs(bind(3, 0, 8))))

	// Another cause gets a failure of its own.
	s.Written(bs(bind(0, 0, 8), bind(1, 0, 8), bind(3, 0, 8)))
	_, ok = s.Failure(id)
	require.False(t, ok)
	again := s.Cancel("k5", context.DeadlineExceeded, bs(bind(0, 0, 8)))
	assert.Equal(t, other+1, again)
	f, ok = s.Failure(again)
	require.True(t, ok)
	assert.ErrorIs(t, f.Root, context.DeadlineExceeded)
	assert.Equal(t, "k5", f.Kernel)

	// Launches cancelled with one cause share one id, even when the
	// failure left the graph in between: one with nothing to taint mints
	// it and drops it at once; the next brings it back under that id.
	s2 := failgraph.New(names)
	assert.Equal(t, failgraph.FailureID(1), s2.Cancel("k", context.Canceled, nil))
	assert.Zero(t, s2.Len())
	assert.Equal(t, failgraph.FailureID(1), s2.Cancel("k2", context.Canceled, nil))
	assert.Equal(t, failgraph.FailureID(1), s2.Cancel("k3", context.Canceled, bs(bind(0, 0, 1))))
	f, ok = s2.Failure(1)
	require.True(t, ok)
	assert.Equal(t, "k3", f.Kernel, "named after the first launch it holds bytes of")
	assert.Equal(t, failgraph.FailureID(2), s2.Fail("x", errors.New("x"), nil), "no id was minted twice")
}

func TestCleanPathAllocs(t *testing.T) {
	s := failgraph.New(names)
	reads := bs(bind(0, 0, 64), bind(1, 0, 64))
	writes := bs(bind(2, 0, 64), bind(3, 0, 64))
	checks := []struct {
		name string
		f    func()
	}{
		{"Written", func() { s.Written(writes) }},
		{"SkipIfTainted", func() {
			if _, skip := s.SkipIfTainted("k", reads, writes); skip {
				t.Fatal("skip on a clean store")
			}
		}},
		{"EnsureWritten", func() {
			if err := s.EnsureWritten(reads...); err != nil {
				t.Fatal(err)
			}
		}},
		{"Enter+Exit(nil)", func() {
			if id := s.Enter("k", writes).Exit(nil); id != 0 {
				t.Fatal("failure on success")
			}
		}},
		{"Allocated", func() { s.Allocated(4) }},
		{"Empty", func() {
			if !s.Empty() {
				t.Fatal("not empty")
			}
		}},
	}
	run := func(when string) {
		for _, c := range checks {
			assert.Zero(t, testing.AllocsPerRun(100, c.f), "%s on a %s store", c.name, when)
		}
	}
	run("new")

	// After a taint is fully written again, the store is clean once more.
	s.Fail("a", errors.New("boom"), bs(bind(0, 0, 64), bind(1, 8, 8)))
	s.FailUnallocated("", 4, nil)
	s.Written(reads)
	s.Allocated(4)
	require.Zero(t, s.Len())
	require.True(t, s.Empty())
	run("cleaned")
}

// Carry copies taint byte for byte: each byte of the destination takes the
// failure of its source byte, clean bytes come out clean, and a chain read
// through the destination passes the copy on its way to the root.
func TestCarry(t *testing.T) {
	s := failgraph.New(names)
	boom := errors.New("boom")
	f := s.Fail("lo", boom, bs(bind(0, 0, 8)))
	g := s.Fail("hi", boom, bs(bind(0, 12, 4)))
	old := s.Fail("old", boom, bs(bind(1, 0, 16))) // replaced where the copy writes

	got := s.Carry("copy", bind(0, 4, 12), bind(1, 0, 12))
	assert.Equal(t, ids(f, g), got)
	assert.Equal(t, ids(f), failures(t, s.EnsureWritten(bind(1, 0, 4))))
	assert.NoError(t, s.EnsureWritten(bind(1, 4, 4)), "clean source bytes come out clean")
	assert.Equal(t, ids(g), failures(t, s.EnsureWritten(bind(1, 8, 4))))
	assert.Equal(t, ids(old), failures(t, s.EnsureWritten(bind(1, 12, 4))), "bytes past the copy keep their taint")
	ue := unwritten(t, s.EnsureWritten(bind(1, 0, 1)))
	assert.Equal(t, []string{"copy", "lo"}, ue.Chain)

	t.Run("clean source", func(t *testing.T) {
		s := failgraph.New(names)
		s.Fail("k", boom, bs(bind(1, 0, 4)))
		assert.Nil(t, s.Carry("copy", bind(0, 0, 4), bind(1, 0, 4)))
		assert.True(t, s.Empty())
	})
	t.Run("unallocated source", func(t *testing.T) {
		s := failgraph.New(names)
		u := s.FailUnallocated("alloc", 0, boom)
		assert.Equal(t, ids(u), s.Carry("copy", bind(0, 0, 4), bind(1, 2, 4)))
		assert.Equal(t, ids(u), failures(t, s.EnsureWritten(bind(1, 0, 8))))
	})
	t.Run("same buffer panics", func(t *testing.T) {
		assert.Panics(t, func() { failgraph.New(names).Carry("c", bind(0, 0, 4), bind(0, 4, 4)) })
	})
}

// A chain follows the bytes a launch read, not the buffer: d read y[0:8),
// which b's skip left unwritten; c's skip, recorded later, wrote y[8:16).
func TestChainFollowsBytes(t *testing.T) {
	const x, y, z = 0, 1, 2
	s := failgraph.New(names)
	errA := errors.New("a failed")
	root := s.Fail("a", errA, bs(bind(x, 0, 16)))
	for _, k := range []struct {
		kernel        string
		read, written buffers.Binding
	}{
		{"b", bind(x, 0, 8), bind(y, 0, 8)},
		{"c", bind(x, 8, 8), bind(y, 8, 8)},
		{"d", bind(y, 0, 8), bind(z, 0, 8)},
	} {
		id, skip := s.SkipIfTainted(k.kernel, bs(k.read), bs(k.written))
		require.True(t, skip, k.kernel)
		require.Equal(t, root, id, k.kernel)
	}
	f, ok := s.Failure(root)
	require.True(t, ok)
	assert.Equal(t, []string{"b", "a"}, f.ChainFrom("d"))
	assert.Equal(t, []string{"d", "b", "a"}, unwritten(t, s.EnsureWritten(bind(z, 0, 8))).Chain)
	assert.Equal(t, []string{"c", "a"}, unwritten(t, s.EnsureWritten(bind(y, 8, 8))).Chain)
	assert.Equal(t, []string{"b", "a"}, unwritten(t, s.EnsureWritten(bind(y, 0, 16))).Chain, "from the first tainted byte read")

	sk, skip := s.CheckReads("e", bs(bind(z, 4, 4)), nil)
	require.True(t, skip)
	assert.Equal(t, failgraph.Skipped{Failure: root, Root: errA, Kernel: "a", Chain: []string{"d", "b", "a"}}, sk)
}
