package failgraph_test

import (
	"context"
	"errors"
	"fmt"
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

// failures returns the failure ids of the *UnwrittenErrors in err, in order.
func failures(t *testing.T, err error) []failgraph.FailureID {
	t.Helper()
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	ids := make([]failgraph.FailureID, 0, len(errs))
	for _, e := range errs {
		var ue *failgraph.UnwrittenError
		require.ErrorAs(t, e, &ue)
		ids = append(ids, ue.Failure)
	}
	return ids
}

// checkSpans asserts the store's span invariants on buffers 0..n-1: spans
// are non-empty, sorted, disjoint, touching spans of one failure and kernel
// are fused, and the lock-free counter matches.
func checkSpans(t *testing.T, s *failgraph.Store, n int, msgAndArgs ...any) {
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
				require.False(t, prev.Failure == sp.Failure && prev.By == sp.By,
					"unfused spans %v %v of buffer %d", prev, sp, id)
			}
		}
	}
	counter, spans := s.Counts()
	require.Equal(t, int64(spans), counter, msgAndArgs...)
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
				{[]buffers.Binding{bind(0, 40, 20)}, nil},
				{[]buffers.Binding{bind(0, 0, 10)}, []failgraph.FailureID{1}},
				{[]buffers.Binding{bind(0, 60, 40)}, []failgraph.FailureID{1}},
				{[]buffers.Binding{bind(0, 39, 2)}, []failgraph.FailureID{1}},
				{[]buffers.Binding{bind(0, 59, 2)}, []failgraph.FailureID{1}},
				{[]buffers.Binding{bind(0, 0, 100)}, []failgraph.FailureID{1}},
			},
			spans: []failgraph.Span{{Off: 0, End: 40, Failure: 1, By: "a"}, {Off: 60, End: 100, Failure: 1, By: "a"}},
			len:   1,
		},
		{
			name:  "writes at both edges trim",
			steps: []step{{"a", bind(0, 0, 100)}, {"", bind(0, 0, 10)}, {"", bind(0, 90, 10)}},
			probes: []probe{
				{[]buffers.Binding{bind(0, 0, 10)}, nil},
				{[]buffers.Binding{bind(0, 90, 10)}, nil},
				{[]buffers.Binding{bind(0, 9, 82)}, []failgraph.FailureID{1}},
			},
			spans: []failgraph.Span{{Off: 10, End: 90, Failure: 1, By: "a"}},
			len:   1,
		},
		{
			name:   "write covering a taint removes the failure",
			steps:  []step{{"a", bind(0, 10, 10)}, {"", bind(0, 0, 100)}},
			probes: []probe{{[]buffers.Binding{bind(0, 0, 100)}, nil}},
			len:    0,
		},
		{
			name:   "new failure takes every byte of the old",
			steps:  []step{{"a", bind(0, 0, 50)}, {"b", bind(0, 0, 50)}},
			probes: []probe{{[]buffers.Binding{bind(0, 0, 100)}, []failgraph.FailureID{2}}},
			spans:  []failgraph.Span{{Off: 0, End: 50, Failure: 2, By: "b"}},
			len:    1,
		},
		{
			name:  "new failure takes part of the old",
			steps: []step{{"a", bind(0, 0, 50)}, {"b", bind(0, 25, 50)}},
			probes: []probe{
				{[]buffers.Binding{bind(0, 0, 25)}, []failgraph.FailureID{1}},
				{[]buffers.Binding{bind(0, 25, 50)}, []failgraph.FailureID{2}},
				{[]buffers.Binding{bind(0, 0, 100)}, []failgraph.FailureID{1, 2}},
			},
			spans: []failgraph.Span{{Off: 0, End: 25, Failure: 1, By: "a"}, {Off: 25, End: 75, Failure: 2, By: "b"}},
			len:   2,
		},
		{
			name:  "new failure inside the old splits it",
			steps: []step{{"a", bind(0, 0, 100)}, {"b", bind(0, 40, 20)}},
			probes: []probe{
				{[]buffers.Binding{bind(0, 0, 100)}, []failgraph.FailureID{1, 2}},
				{[]buffers.Binding{bind(0, 60, 40)}, []failgraph.FailureID{1}},
			},
			spans: []failgraph.Span{
				{Off: 0, End: 40, Failure: 1, By: "a"},
				{Off: 40, End: 60, Failure: 2, By: "b"},
				{Off: 60, End: 100, Failure: 1, By: "a"},
			},
			len: 2,
		},
		{
			name:  "touching reads find nothing",
			steps: []step{{"a", bind(0, 10, 10)}},
			probes: []probe{
				{[]buffers.Binding{bind(0, 0, 10)}, nil},
				{[]buffers.Binding{bind(0, 20, 10)}, nil},
				{[]buffers.Binding{bind(0, 19, 1)}, []failgraph.FailureID{1}},
				{[]buffers.Binding{bind(0, 0, 11)}, []failgraph.FailureID{1}},
			},
			spans: []failgraph.Span{{Off: 10, End: 20, Failure: 1, By: "a"}},
			len:   1,
		},
		{
			name:   "other buffers stay clean",
			steps:  []step{{"a", bind(0, 0, 64)}},
			probes: []probe{{[]buffers.Binding{bind(1, 0, 64)}, nil}},
			spans:  []failgraph.Span{{Off: 0, End: 64, Failure: 1, By: "a"}},
			len:    1,
		},
		{
			name:   "empty binding claims nothing",
			steps:  []step{{"a", bind(0, 5, 0)}},
			probes: []probe{{[]buffers.Binding{bind(0, 0, 64)}, nil}},
			len:    0,
		},
		{
			name:   "empty binding takes no byte from another failure",
			steps:  []step{{"a", bind(0, 0, 10)}, {"b", bind(0, 5, 0)}},
			probes: []probe{{[]buffers.Binding{bind(0, 0, 64)}, []failgraph.FailureID{1}}},
			spans:  []failgraph.Span{{Off: 0, End: 10, Failure: 1, By: "a"}},
			len:    1,
		},
		{
			name:   "empty write releases nothing",
			steps:  []step{{"a", bind(0, 0, 10)}, {"", bind(0, 5, 0)}},
			probes: []probe{{[]buffers.Binding{bind(0, 5, 1)}, []failgraph.FailureID{1}}},
			spans:  []failgraph.Span{{Off: 0, End: 10, Failure: 1, By: "a"}},
			len:    1,
		},
		{
			name:   "negative length is empty",
			steps:  []step{{"a", bind(0, 0, 10)}, {"b", bind(0, 8, -4)}, {"", bind(0, 9, -9)}},
			probes: []probe{{[]buffers.Binding{bind(0, 0, 10)}, []failgraph.FailureID{1}}, {[]buffers.Binding{bind(0, 8, -4)}, nil}},
			spans:  []failgraph.Span{{Off: 0, End: 10, Failure: 1, By: "a"}},
			len:    1,
		},
		{
			name:  "zero-length read finds nothing",
			steps: []step{{"a", bind(0, 0, 10)}},
			probes: []probe{
				{[]buffers.Binding{bind(0, 5, 0)}, nil},
				{[]buffers.Binding{bind(0, 0, 0)}, nil},
				{nil, nil},
			},
			spans: []failgraph.Span{{Off: 0, End: 10, Failure: 1, By: "a"}},
			len:   1,
		},
		{
			name:  "several reads de-duplicate in discovery order",
			steps: []step{{"a", bind(0, 0, 10)}, {"b", bind(1, 0, 10)}, {"c", bind(0, 20, 10)}},
			probes: []probe{
				{[]buffers.Binding{bind(1, 0, 64), bind(0, 0, 64), bind(1, 0, 64)}, []failgraph.FailureID{2, 1, 3}},
				{[]buffers.Binding{bind(0, 25, 1), bind(0, 0, 64)}, []failgraph.FailureID{3, 1}},
			},
			spans: []failgraph.Span{{Off: 0, End: 10, Failure: 1, By: "a"}, {Off: 20, End: 30, Failure: 3, By: "c"}},
			len:   3,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := failgraph.New(names)
			var next failgraph.FailureID
			for _, st := range tt.steps {
				if st.kernel == "" {
					s.Written([]buffers.Binding{st.b})
					continue
				}
				next++
				require.Equal(t, next, s.Fail(st.kernel, errors.New(st.kernel+" failed"), []buffers.Binding{st.b}))
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
				s.Fail("a", errors.New("boom"), []buffers.Binding{bind(0, 0, 10), bind(0, 20, 10), bind(0, 5, 20)})
			},
			spans: []failgraph.Span{{Off: 0, End: 30, Failure: 1, By: "a"}},
		},
		{
			name: "two adjacent cancels of one kernel",
			run: func(s *failgraph.Store) {
				s.Cancel("k", cause, []buffers.Binding{bind(0, 10, 10)})
				s.Cancel("k", cause, []buffers.Binding{bind(0, 0, 10)})
			},
			spans: []failgraph.Span{{Off: 0, End: 20, Failure: 1, By: "k"}},
		},
		{
			name: "adjacent writes of one skip",
			run: func(s *failgraph.Store) {
				s.Fail("a", errors.New("boom"), []buffers.Binding{bind(1, 0, 8)})
				s.SkipIfTainted("b", []buffers.Binding{bind(1, 0, 8)}, []buffers.Binding{bind(0, 0, 10), bind(0, 10, 10)})
			},
			spans: []failgraph.Span{{Off: 0, End: 20, Failure: 1, By: "b"}},
		},
		{
			name: "same failure, other kernel: no fuse",
			run: func(s *failgraph.Store) {
				s.Fail("a", errors.New("boom"), []buffers.Binding{bind(0, 0, 10)})
				s.SkipIfTainted("b", []buffers.Binding{bind(0, 0, 1)}, []buffers.Binding{bind(0, 10, 10)})
			},
			spans: []failgraph.Span{{Off: 0, End: 10, Failure: 1, By: "a"}, {Off: 10, End: 20, Failure: 1, By: "b"}},
		},
		{
			name: "same kernel, other failure: no fuse",
			run: func(s *failgraph.Store) {
				s.Fail("a", errors.New("one"), []buffers.Binding{bind(0, 0, 10)})
				s.Fail("a", errors.New("two"), []buffers.Binding{bind(0, 10, 10)})
			},
			spans: []failgraph.Span{{Off: 0, End: 10, Failure: 1, By: "a"}, {Off: 10, End: 20, Failure: 2, By: "a"}},
		},
		{
			name: "a write between two fused halves splits them again",
			run: func(s *failgraph.Store) {
				s.Cancel("k", cause, []buffers.Binding{bind(0, 0, 10)})
				s.Cancel("k", cause, []buffers.Binding{bind(0, 10, 10)})
				s.Written([]buffers.Binding{bind(0, 5, 10)})
			},
			spans: []failgraph.Span{{Off: 0, End: 5, Failure: 1, By: "k"}, {Off: 15, End: 20, Failure: 1, By: "k"}},
		},
		{
			name: "a gap refilled by the same failure and kernel fuses back",
			run: func(s *failgraph.Store) {
				s.Cancel("k", cause, []buffers.Binding{bind(0, 0, 30)})
				s.Written([]buffers.Binding{bind(0, 10, 10)})
				s.Cancel("k", cause, []buffers.Binding{bind(0, 10, 10)})
			},
			spans: []failgraph.Span{{Off: 0, End: 30, Failure: 1, By: "k"}},
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
	id1 := s.Fail("a", errA, []buffers.Binding{bind(0, 0, 32), bind(1, 0, 8)})
	id2 := s.Fail("b", errB, []buffers.Binding{bind(0, 16, 48)})
	require.Equal(t, failgraph.FailureID(1), id1)
	require.Equal(t, failgraph.FailureID(2), id2)
	assert.Equal(t, 2, s.Len())

	// Failure 2 takes the rest of failure 1's bytes: set, not add.
	s.Fail("b2", errB, []buffers.Binding{bind(1, 0, 8)})
	s.Fail("b3", errB, []buffers.Binding{bind(0, 0, 16)})
	_, ok := s.Failure(id1)
	assert.False(t, ok, "failure 1 holds no byte and must leave the graph")
	_, ok = s.Failure(id2)
	assert.True(t, ok)
	assert.Equal(t, 3, s.Len()) // failures 2, 3 and 4

	err := s.EnsureWritten(bind(0, 0, 64), bind(1, 0, 8))
	assert.Equal(t, []failgraph.FailureID{4, 2, 3}, failures(t, err))
	assert.NotErrorIs(t, err, errA)

	// Writing everything empties the graph and the clean path is back.
	s.Written([]buffers.Binding{bind(0, 0, 64), bind(1, 0, 8)})
	assert.Zero(t, s.Len())
	assert.NoError(t, s.EnsureWritten(bind(0, 0, 64), bind(1, 0, 8)))
	checkSpans(t, s, 2)
	counter, _ := s.Counts()
	assert.Zero(t, counter)
}

func TestFailWithoutWrites(t *testing.T) {
	s := failgraph.New(names)
	id := s.Fail("a", errors.New("boom"), nil)
	assert.Equal(t, failgraph.FailureID(1), id)
	_, ok := s.Failure(id)
	assert.False(t, ok, "a failure that holds no byte is not kept")
	assert.Zero(t, s.Len())
	// Ids are never reused.
	assert.Equal(t, failgraph.FailureID(2), s.Fail("b", errors.New("boom"), []buffers.Binding{bind(0, 0, 1)}))
}

func TestSkipIfTainted(t *testing.T) {
	s := failgraph.New(names)
	errA, errX := errors.New("a failed"), errors.New("x failed")
	id1 := s.Fail("a", errA, []buffers.Binding{bind(1, 0, 64)})
	id2 := s.Fail("x", errX, []buffers.Binding{bind(2, 32, 32)})

	// Clean reads: nothing is recorded, nothing is tainted or released.
	id, skip := s.SkipIfTainted("k0", []buffers.Binding{bind(0, 0, 64), bind(2, 0, 32)}, []buffers.Binding{bind(1, 0, 64)})
	assert.False(t, skip)
	assert.Zero(t, id)
	assert.Equal(t, []failgraph.FailureID{id1}, failures(t, s.EnsureWritten(bind(1, 0, 64))))

	// An empty read over tainted bytes finds nothing.
	_, skip = s.SkipIfTainted("k0", []buffers.Binding{bind(1, 10, 0)}, nil)
	assert.False(t, skip)

	// The first tainted read in declaration order wins: buffer 2 (failure
	// 2), though buffer 1 (failure 1) is tainted too.
	reads := []buffers.Binding{bind(0, 0, 64), bind(2, 0, 64), bind(1, 0, 64)}
	writes := []buffers.Binding{bind(3, 0, 8), bind(3, 16, 8)}
	id, skip = s.SkipIfTainted("k", reads, writes)
	require.True(t, skip)
	assert.Equal(t, id2, id)

	f2, ok := s.Failure(id2)
	require.True(t, ok)
	assert.Equal(t, []failgraph.Skip{{Kernel: "k", Needed: "buf2", From: "x"}}, f2.Skips)
	f1, ok := s.Failure(id1)
	require.True(t, ok)
	assert.Empty(t, f1.Skips)

	// The writes carry the same failure; no new id was minted.
	assert.Equal(t, 2, s.Len())
	assert.Equal(t, []failgraph.Span{{Off: 0, End: 8, Failure: id2, By: "k"}, {Off: 16, End: 24, Failure: id2, By: "k"}}, s.Spans(3))
	var ue *failgraph.UnwrittenError
	require.ErrorAs(t, s.EnsureWritten(bind(3, 0, 64)), &ue)
	assert.Equal(t, &failgraph.UnwrittenError{Failure: id2, Buffer: "buf3", Chain: []string{"k", "x"}, Kernel: "x", Root: errX}, ue)
	assert.NoError(t, s.EnsureWritten(bind(3, 8, 8)))
	assert.Equal(t, failgraph.FailureID(3), s.Fail("y", errors.New("y"), []buffers.Binding{bind(4, 0, 1)}))

	// Within one read, the lowest tainted byte wins.
	s.Fail("z", errors.New("z"), []buffers.Binding{bind(5, 0, 16)})
	s.Fail("w", errors.New("w"), []buffers.Binding{bind(5, 32, 16)})
	id, skip = s.SkipIfTainted("k2", []buffers.Binding{bind(5, 8, 56)}, nil)
	require.True(t, skip)
	assert.Equal(t, failgraph.FailureID(4), id)
	checkSpans(t, s, 6)
}

func TestChainFrom(t *testing.T) {
	s := failgraph.New(names)
	const a, b, c, d = 0, 1, 2, 3 // buffer i is written by kernel i
	errA := errors.New("a failed")
	root := s.Fail("a", errA, []buffers.Binding{bind(a, 0, 64)})
	for _, k := range []struct {
		kernel string
		reads  []buffers.Binding
		writes buffers.ID
	}{
		{"b", []buffers.Binding{bind(a, 0, 64)}, b},
		{"c", []buffers.Binding{bind(b, 0, 64)}, c},
		{"d", []buffers.Binding{bind(c, 0, 64), bind(a, 0, 64)}, d}, // c first: d's source is c
	} {
		id, skip := s.SkipIfTainted(k.kernel, k.reads, []buffers.Binding{bind(k.writes, 0, 64)})
		require.True(t, skip, k.kernel)
		require.Equal(t, root, id, k.kernel)
	}
	require.Equal(t, 1, s.Len())

	f, ok := s.Failure(root)
	require.True(t, ok)
	assert.Equal(t, "a", f.Kernel)
	assert.Equal(t, errA, f.Root)
	assert.Equal(t, []failgraph.Skip{
		{Kernel: "b", Needed: "buf0", From: "a"},
		{Kernel: "c", Needed: "buf1", From: "b"},
		{Kernel: "d", Needed: "buf2", From: "c"},
	}, f.Skips)

	for _, tt := range []struct {
		kernel string
		want   []string
	}{
		{"d", []string{"c", "b", "a"}},
		{"c", []string{"b", "a"}},
		{"b", []string{"a"}},
		{"a", nil},
		{"never-skipped", nil},
	} {
		assert.Equal(t, tt.want, f.ChainFrom(tt.kernel), "ChainFrom(%q)", tt.kernel)
	}

	for _, tt := range []struct {
		read buffers.Binding
		want []string
	}{
		{bind(a, 0, 64), []string{"a"}},
		{bind(c, 0, 64), []string{"c", "b", "a"}},
		{bind(d, 10, 1), []string{"d", "c", "b", "a"}},
	} {
		id, chain := s.Chain(tt.read)
		assert.Equal(t, root, id)
		assert.Equal(t, tt.want, chain, "Chain(%v)", tt.read)

		var ue *failgraph.UnwrittenError
		err := s.EnsureWritten(tt.read)
		require.ErrorAs(t, err, &ue)
		assert.Equal(t, tt.want, ue.Chain)
		assert.ErrorIs(t, err, errA)
	}
	id, chain := s.Chain(bind(4, 0, 64))
	assert.Zero(t, id)
	assert.Empty(t, chain)

	// Failure returns a copy: changing it leaves the graph alone.
	f.Skips[0].Kernel = "changed"
	again, _ := s.Failure(root)
	assert.Equal(t, "b", again.Skips[0].Kernel)
}

func TestEnsureWrittenTwoFailures(t *testing.T) {
	s := failgraph.New(names)
	errA, errX := errors.New("a failed"), errors.New("x failed")
	idA := s.Fail("a", errA, []buffers.Binding{bind(0, 0, 32), bind(1, 0, 64)})
	idX := s.Fail("x", errX, []buffers.Binding{bind(0, 32, 32)})
	s.SkipIfTainted("b", []buffers.Binding{bind(1, 0, 1)}, []buffers.Binding{bind(0, 40, 8)})

	// One read over both failures, plus repeats: two errors, in the order
	// the first read meets them.
	err := s.EnsureWritten(bind(0, 0, 64), bind(1, 0, 64), bind(0, 0, 64))
	require.Error(t, err)
	joined, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "want errors.Join, got %T", err)
	errs := joined.Unwrap()
	require.Len(t, errs, 2)

	want := []*failgraph.UnwrittenError{
		{Failure: idA, Buffer: "buf0", Chain: []string{"a"}, Kernel: "a", Root: errA},
		{Failure: idX, Buffer: "buf0", Chain: []string{"x"}, Kernel: "x", Root: errX},
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
	assert.EqualError(t, errs[0], "failgraph: buf0 was not written: failure #1: a: a failed")

	// The skip's bytes come first when the read starts there.
	err = s.EnsureWritten(bind(0, 40, 24), bind(0, 0, 8))
	require.ErrorAs(t, err, &first)
	assert.Equal(t, &failgraph.UnwrittenError{Failure: idA, Buffer: "buf0", Chain: []string{"b", "a"}, Kernel: "a", Root: errA}, first)
	assert.Equal(t, []failgraph.FailureID{idA, idX}, failures(t, err))
	assert.Equal(t, "failgraph: buf0 was not written: failure #1: b ← a: a failed", first.Error())
}

func TestDefaultNames(t *testing.T) {
	s := failgraph.New(nil)
	s.Fail("a", errors.New("boom"), []buffers.Binding{bind(7, 0, 1)})
	var ue *failgraph.UnwrittenError
	require.ErrorAs(t, s.EnsureWritten(bind(7, 0, 1)), &ue)
	assert.Equal(t, "buffer 7", ue.Buffer)
}

func TestCancel(t *testing.T) {
	s := failgraph.New(names)
	id := s.Cancel("k1", context.Canceled, []buffers.Binding{bind(0, 0, 8)})
	assert.Equal(t, id, s.Cancel("k2", context.Canceled, []buffers.Binding{bind(1, 0, 8)}))
	assert.Equal(t, id, s.Cancel("k3", context.Canceled, nil))
	assert.Equal(t, 1, s.Len())

	f, ok := s.Failure(id)
	require.True(t, ok)
	assert.Equal(t, "k1", f.Kernel)
	assert.ErrorIs(t, f.Root, context.Canceled)

	var ue *failgraph.UnwrittenError
	err := s.EnsureWritten(bind(1, 0, 8))
	require.ErrorAs(t, err, &ue)
	assert.Equal(t, []string{"k2"}, ue.Chain)
	assert.Equal(t, "k1", ue.Kernel)
	assert.ErrorIs(t, err, context.Canceled)

	// A real failure in between mints its own id; the cancel id is shared
	// still.
	other := s.Fail("x", errors.New("x"), []buffers.Binding{bind(2, 0, 8)})
	assert.NotEqual(t, id, other)
	assert.Equal(t, id, s.Cancel("k4", context.Canceled, []buffers.Binding{bind(3, 0, 8)}))

	// Once the graph drops the cancel failure, the next cancel mints anew.
	s.Written([]buffers.Binding{bind(0, 0, 8), bind(1, 0, 8), bind(3, 0, 8)})
	_, ok = s.Failure(id)
	require.False(t, ok)
	again := s.Cancel("k5", context.DeadlineExceeded, []buffers.Binding{bind(0, 0, 8)})
	assert.Greater(t, again, other)
	f, ok = s.Failure(again)
	require.True(t, ok)
	assert.ErrorIs(t, f.Root, context.DeadlineExceeded)
	assert.Equal(t, "k5", f.Kernel)
}

func TestCleanPathAllocs(t *testing.T) {
	s := failgraph.New(names)
	reads := []buffers.Binding{bind(0, 0, 64), bind(1, 0, 64)}
	writes := []buffers.Binding{bind(2, 0, 64)}
	clean := func() {
		s.Written(writes)
		if _, skip := s.SkipIfTainted("k", reads, writes); skip {
			t.Fatal("skip on a clean store")
		}
		if err := s.EnsureWritten(reads...); err != nil {
			t.Fatal(err)
		}
	}
	assert.Zero(t, testing.AllocsPerRun(100, clean), "untainted store")

	// After a taint is fully written again, the store is clean once more.
	s.Fail("a", errors.New("boom"), []buffers.Binding{bind(0, 0, 64), bind(1, 8, 8)})
	s.Written(reads)
	require.Zero(t, s.Len())
	assert.Zero(t, testing.AllocsPerRun(100, clean), "store cleaned by writes")
}
