package failgraph_test

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/failgraph"
)

// begin opens a capture window on s and ends it when the test ends.
func begin(t *testing.T, s *failgraph.Store) *failgraph.Window {
	t.Helper()
	w, err := s.BeginCapture()
	require.NoError(t, err)
	t.Cleanup(w.End)
	return w
}

// doom returns the window's *DoomError.
func doom(t *testing.T, w *failgraph.Window) *failgraph.DoomError {
	t.Helper()
	var d *failgraph.DoomError
	require.ErrorAs(t, w.Err(), &d)
	require.True(t, w.Doomed())
	return d
}

// A clean scope records exactly the byte ranges it wrote: ranges of one
// buffer that overlap or touch fuse, a gap stays a gap, empty ranges
// are left out, and the window is not doomed.
func TestWindowCleanScopeRecordsWrites(t *testing.T) {
	s := failgraph.New(nil)
	w := begin(t, s)
	for _, ws := range [][]buffers.Binding{
		bs(bind(2, 0, 8)),
		bs(bind(1, 20, 10), bind(1, 0, 10)),
		bs(bind(1, 10, 2), bind(3, 5, 0)), // touches [0,10): fuses; the empty range is no write
	} {
		id, skipped := launch(s, "k", nil, ws, func() error { return nil })
		require.Zero(t, id)
		require.False(t, skipped)
	}
	s.Written(bs(bind(2, 4, 8))) // overlaps [0,8): [0,12)
	assert.NoError(t, w.Err())
	assert.False(t, w.Doomed())
	assert.Equal(t, bs(bind(1, 0, 12), bind(1, 20, 10), bind(2, 0, 12)), w.Writes())
	assert.Equal(t, 0, s.Len())
}

// A failed scope dooms the window with its failure text and records
// nothing; a later failure does not change the doom.
func TestWindowFailedScopeDooms(t *testing.T) {
	boom := errors.New("boom")
	s := failgraph.New(nil)
	w := begin(t, s)
	launch(s, "ok", nil, bs(bind(0, 0, 4)), func() error { return nil })
	id, _ := launch(s, "bad", nil, bs(bind(1, 0, 16)), func() error { return boom })
	require.NotZero(t, id)
	launch(s, "worse", nil, bs(bind(2, 0, 16)), func() error { return errors.New("later") })
	d := doom(t, w)
	assert.Equal(t, &failgraph.DoomError{Kernel: "bad", Failure: id, Root: boom}, d)
	assert.EqualError(t, w.Err(), `kernel "bad" failed: boom`)
	assert.ErrorIs(t, w.Err(), boom)
	assert.Equal(t, bs(bind(0, 0, 4)), w.Writes(), "the failed scopes' bytes are not in the write set")
}

// A panicking scope dooms the window with its *KernelPanicError.
func TestWindowPanicDooms(t *testing.T) {
	s := failgraph.New(nil)
	w := begin(t, s)
	launch(s, "p", nil, bs(bind(0, 0, 4)), func() error { panic("bad shape") })
	var kp *failgraph.KernelPanicError
	require.ErrorAs(t, w.Err(), &kp)
	assert.Equal(t, "bad shape", kp.Value)
	assert.ErrorIs(t, w.Err(), failgraph.ErrTornDown)
	assert.Nil(t, w.Writes())
}

// A skipped scope dooms the window, even when it is the only scope inside
// it and the failure that taints its read was raised before the window
// opened (that failure itself doomed nothing). The doom names the
// skipped kernel and the root failure.
func TestWindowSkippedScopeDooms(t *testing.T) {
	boom := errors.New("boom")
	for _, check := range []bool{false, true} {
		t.Run(fmt.Sprintf("CheckReads=%v", check), func(t *testing.T) {
			s := failgraph.New(nil)
			root, _ := launch(s, "src", nil, bs(bind(0, 0, 8)), func() error { return boom })
			w := begin(t, s)
			require.NoError(t, w.Err(), "a failure outside the window dooms nothing")
			var f failgraph.FailureID
			if check {
				sk, skip := s.CheckReads("mid", bs(bind(0, 4, 4)), bs(bind(1, 0, 8)))
				require.True(t, skip)
				f = sk.Failure
			} else {
				var skip bool
				f, skip = s.SkipIfTainted("mid", bs(bind(0, 4, 4)), bs(bind(1, 0, 8)))
				require.True(t, skip)
			}
			require.Equal(t, root, f)
			assert.Equal(t, &failgraph.DoomError{Kernel: "mid", Skipped: true, Failure: root, Root: boom}, doom(t, w))
			assert.EqualError(t, w.Err(), fmt.Sprintf(`kernel "mid" skipped: failure %s: boom`, root))
			assert.ErrorIs(t, w.Err(), boom)
			assert.Nil(t, w.Writes(), "a skipped scope records nothing")
		})
	}
}

// A cancelled launch is a failed scope: it dooms the window with the
// cancel failure.
func TestWindowCancelDooms(t *testing.T) {
	cause := errors.New("stop")
	s := failgraph.New(nil)
	w := begin(t, s)
	id := s.Cancel("late", cause, bs(bind(0, 0, 4)))
	d := doom(t, w)
	assert.Equal(t, "late", d.Kernel)
	assert.Equal(t, id, d.Failure)
	assert.False(t, d.Skipped)
	assert.ErrorIs(t, w.Err(), failgraph.ErrCancelled)
	assert.ErrorIs(t, w.Err(), cause)
}

// A copy of clean bytes records its destination; a copy that carries
// taint is a skipped scope: it dooms the window and records nothing.
func TestWindowCarry(t *testing.T) {
	boom := errors.New("boom")
	s := failgraph.New(nil)
	w := begin(t, s)
	require.Empty(t, s.Carry("copy a", bind(0, 0, 8), bind(1, 8, 8)))
	require.NoError(t, w.Err())
	assert.Equal(t, bs(bind(1, 8, 8)), w.Writes())

	root := s.Fail("src", boom, bs(bind(2, 4, 2)))
	w.End() // that failure doomed the first window; the second sees only the copy
	w2 := begin(t, s)
	require.Equal(t, []failgraph.FailureID{root}, s.Carry("copy b", bind(2, 0, 8), bind(3, 0, 8)))
	assert.Equal(t, &failgraph.DoomError{Kernel: "copy b", Skipped: true, Failure: root, Root: boom}, doom(t, w2))
	assert.Nil(t, w2.Writes())
}

// Outside a window nothing is doomed or recorded: scopes before
// BeginCapture and after End leave it as it was, and End gives the store
// its clean path back.
func TestWindowOutsideRecordsNothing(t *testing.T) {
	boom := errors.New("boom")
	s := failgraph.New(nil)
	launch(s, "before", nil, bs(bind(0, 0, 4)), func() error { return nil })
	launch(s, "before bad", nil, bs(bind(1, 0, 4)), func() error { return boom })
	s.Written(bs(bind(1, 0, 4))) // clean again
	require.True(t, s.Empty())

	w, err := s.BeginCapture()
	require.NoError(t, err)
	assert.False(t, s.Empty(), "an open window takes the clean path off")
	launch(s, "inside", nil, bs(bind(2, 0, 4)), func() error { return nil })
	w.End()
	w.End() // idempotent
	assert.True(t, s.Empty(), "End gives the clean path back")

	launch(s, "after", nil, bs(bind(3, 0, 4)), func() error { return nil })
	launch(s, "after bad", nil, bs(bind(4, 0, 4)), func() error { return boom })
	s.SkipIfTainted("after skipped", bs(bind(4, 0, 4)), bs(bind(5, 0, 4)))
	assert.NoError(t, w.Err())
	assert.Equal(t, bs(bind(2, 0, 4)), w.Writes())
}

// A store has one open window at a time; after End another can open.
func TestBeginCaptureOnePerStore(t *testing.T) {
	s := failgraph.New(nil)
	w, err := s.BeginCapture()
	require.NoError(t, err)
	_, err = s.BeginCapture()
	require.ErrorIs(t, err, failgraph.ErrWindowOpen)
	assert.EqualError(t, err, "failgraph: a capture window is already open")
	w.End()
	w2, err := s.BeginCapture()
	require.NoError(t, err)
	w2.End()
	assert.True(t, s.Empty())
}

// Scopes settled from many goroutines at once all reach the window: the
// write set holds every clean scope's bytes, and the doom is one of the
// failed scopes'.
func TestWindowConcurrentScopes(t *testing.T) {
	const n = 64
	s := failgraph.New(nil)
	w := begin(t, s)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ws := bs(bind(buffers.ID(i%4), int64(i/4)*8, 8))
			if i%16 == 15 {
				launch(s, fmt.Sprintf("bad%d", i), nil, ws, func() error { return fmt.Errorf("boom %d", i) })
				return
			}
			launch(s, "ok", nil, ws, func() error { return nil })
		}()
	}
	wg.Wait()
	d := doom(t, w)
	assert.False(t, d.Skipped)
	assert.Equal(t, d.Kernel[len("bad"):], d.Root.Error()[len("boom "):], "the doom keeps its own scope's text")
	// Buffer 3 holds the failed scopes (i = 15, 31, 47, 63: offsets 24,
	// 56, 88, 120); buffers 0-2 were written whole.
	assert.Equal(t, bs(bind(0, 0, 128), bind(1, 0, 128), bind(2, 0, 128),
		bind(3, 0, 24), bind(3, 32, 24), bind(3, 64, 24), bind(3, 96, 24)), w.Writes())
}

// A launch that failed after stating part of its writes finished
// (FailPartly) dooms the window and records nothing in its write set,
// while the stated bytes read as written and the rest as tainted.
func TestWindowPartlyFailedScopeRecordsNothing(t *testing.T) {
	boom := errors.New("boom")
	s := failgraph.New(nil)
	w := begin(t, s)
	id := s.FailPartly("part", boom, bs(bind(1, 0, 16)), bs(bind(1, 0, 8)))
	d := doom(t, w)
	assert.Equal(t, &failgraph.DoomError{Kernel: "part", Failure: id, Root: boom}, d)
	assert.Nil(t, w.Writes(), "a failed scope records nothing, not even what it stated written")
	assert.NoError(t, s.EnsureWritten(bind(1, 0, 8)))
	assert.ErrorIs(t, s.EnsureWritten(bind(1, 8, 8)), boom)
}
