package failgraph

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/streamdag/streamdag/buffers"
)

// Window is a capture window of a Store (CubeCL's capture window): while
// it is open, every scope the store settles tells it how it ended, so
// that the work captured inside it can be replayed only when all of it
// succeeded.
//
// Inside an open window:
//   - a failed scope (Fail, a Scope's Exit with an error or ExitPanic,
//     Cancel) dooms the window and records nothing;
//   - a skipped scope (SkipIfTainted or CheckReads finding a tainted read,
//     Carry bringing taint into its destination) dooms it too, with the
//     root failure;
//   - a clean scope (Written, a Scope's Exit(nil), Carry of clean bytes)
//     records exactly the byte ranges it wrote: the window's write set.
//
// The first scope that dooms the window names the doom (Err); later ones
// change nothing. A doomed window goes on recording clean scopes' writes.
// Outside a window (before BeginCapture, after End) nothing is doomed or
// recorded. FailUnallocated and the read checks (EnsureWritten) are no
// scopes: they neither doom nor record (a launch that needs a buffer
// whose reservation failed is skipped, and that dooms).
//
// While a window is open the store's clean path is off: Written,
// SkipIfTainted, CheckReads and Carry take the store's lock, and Empty
// reports false, so that an executor that keeps to its clean path while
// the store is empty settles every launch through the store.
//
// A Window is safe for concurrent use; its state is guarded by its
// store's lock.
type Window struct {
	s      *Store
	open   bool
	doom   *DoomError
	writes []buffers.Binding // in record order; Writes fuses them
}

// ErrWindowOpen is returned by BeginCapture while another window of the
// store is open.
var ErrWindowOpen = errors.New("failgraph: a capture window is already open")

// BeginCapture opens a capture window on s. A store has at most one open
// window: while one is open it returns ErrWindowOpen. Close it with End.
func (s *Store) BeginCapture() (*Window, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.win != nil {
		return nil, ErrWindowOpen
	}
	w := &Window{s: s, open: true}
	s.win = w
	s.tainted.Add(1) // off the clean path while the window is open
	return w, nil
}

// End closes the window: later scopes neither doom it nor add to its
// write set, and the store's clean path is on again (when nothing is
// tainted). It is idempotent.
func (w *Window) End() {
	s := w.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if !w.open {
		return
	}
	w.open = false
	s.win = nil
	s.tainted.Add(-1)
}

// Doomed reports whether a failed or skipped scope doomed the window.
func (w *Window) Doomed() bool { return w.Err() != nil }

// Err returns nil while no scope doomed the window, else the
// *DoomError of the first one that did, which errors.Is and errors.As
// walk to the root failure's error.
func (w *Window) Err() error {
	w.s.mu.Lock()
	defer w.s.mu.Unlock()
	if w.doom == nil {
		return nil
	}
	return w.doom
}

// Writes returns the window's write set: the byte ranges clean scopes
// wrote while it was open, sorted by buffer and offset, overlapping and
// touching ranges of one buffer fused, empty ranges left out. Bytes a
// failed or skipped scope claimed are not in it unless a clean scope
// wrote them too. It returns a new slice (nil when nothing was written).
// O(n log n) in the ranges recorded.
func (w *Window) Writes() []buffers.Binding {
	w.s.mu.Lock()
	ws := slices.Clone(w.writes)
	w.s.mu.Unlock()
	slices.SortFunc(ws, func(a, b buffers.Binding) int {
		return cmp.Or(cmp.Compare(a.Buffer, b.Buffer), cmp.Compare(a.Offset, b.Offset))
	})
	out := ws[:0]
	for _, b := range ws {
		if n := len(out); n > 0 && out[n-1].Buffer == b.Buffer && out[n-1].End() >= b.Offset {
			out[n-1].Length = max(out[n-1].End(), b.End()) - out[n-1].Offset
			continue
		}
		out = append(out, b)
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// DoomError is why a capture window was doomed: the first scope inside
// it that failed, or that was skipped because bytes it read (or copied)
// were tainted.
type DoomError struct {
	Kernel string // the scope's kernel
	// Skipped says the scope was skipped (its reads were tainted by
	// Failure, raised elsewhere); false: it failed, raising Failure
	// itself.
	Skipped bool
	Failure FailureID // the failure: the root failure for a skip
	Root    error     // the failure's root error
}

// Error returns `kernel "NAME" failed: ROOT` or `kernel "NAME" skipped:
// failure #N: ROOT`. It has no package prefix: the executor wraps it
// ("exec: capture doomed: ...").
func (e *DoomError) Error() string {
	if e.Skipped {
		return fmt.Sprintf("kernel %q skipped: failure %s: %v", e.Kernel, e.Failure, e.Root)
	}
	return fmt.Sprintf("kernel %q failed: %v", e.Kernel, e.Root)
}

// Unwrap returns Root.
func (e *DoomError) Unwrap() error { return e.Root }

// doomed dooms the open window, if any and not doomed yet, with the scope
// of kernel that failed (or was skipped by) failure f. Caller holds mu.
func (s *Store) doomed(kernel string, skipped bool, f FailureID, root error) {
	if w := s.win; w != nil && w.doom == nil {
		w.doom = &DoomError{Kernel: kernel, Skipped: skipped, Failure: f, Root: root}
	}
}

// recordWrites adds the non-empty bindings of writes to the open window's
// write set, if any. Caller holds mu.
func (s *Store) recordWrites(writes ...buffers.Binding) {
	w := s.win
	if w == nil {
		return
	}
	for _, b := range writes {
		if b.Length > 0 {
			w.writes = append(w.writes, b)
		}
	}
}
