package failgraph

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/streamdag/streamdag/buffers"
)

// FailureID identifies a failure within a Store. Ids are minted in order
// from 1 and never reused; 0 means "no failure".
type FailureID uint64

// Skip records one launch skipped because a read was tainted by a failure.
type Skip struct {
	Kernel string // the skipped kernel
	Needed string // the buffer whose tainted bytes it needed
	From   string // the kernel that left those bytes tainted (the root kernel, or an earlier skip)
}

// Failure is a node of the error graph: a root error and what it caused.
type Failure struct {
	ID     FailureID
	Kernel string // the kernel whose launch raised Root
	Root   error
	Skips  []Skip // launches skipped because of this failure, in the order they were skipped
}

// span is a tainted byte range [off, end) of one buffer.
type span struct {
	off, end int64
	f        FailureID
	by       string // kernel that left it tainted
}

// Store is the error graph of one run. The zero value is not usable; call
// New.
type Store struct {
	tainted atomic.Int64 // number of spans; 0 means the clean path needs no lock

	mu       sync.Mutex
	next     FailureID
	failures map[FailureID]*Failure
	spans    map[buffers.ID][]span // sorted by off, non-overlapping
	names    func(buffers.ID) string
	cancel   FailureID // the store's "cancelled" failure while it is in the graph
}

// New returns an empty store. names gives a buffer's name for reports
// (nil prints "buffer N").
func New(names func(buffers.ID) string) *Store {
	if names == nil {
		names = func(id buffers.ID) string { return fmt.Sprintf("buffer %d", id) }
	}
	return &Store{failures: map[FailureID]*Failure{}, spans: map[buffers.ID][]span{}, names: names}
}

// Fail mints a new failure for err raised by kernel and taints every
// binding of writes with it. It returns the new id.
func (s *Store) Fail(kernel string, err error, writes []buffers.Binding) FailureID {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next++
	id := s.next
	s.failures[id] = &Failure{ID: id, Kernel: kernel, Root: err}
	for _, w := range writes {
		s.set(w, id, kernel)
	}
	s.gc()
	return id
}

// SkipIfTainted is the pre-launch check. It finds the first tainted byte
// of reads (in declaration order; empty bindings find nothing). When there
// is none it returns (0, false) and records nothing. Otherwise the launch
// of kernel is to be skipped: the skip is recorded on the root failure that
// holds that byte (with the buffer it needed and the kernel that left it
// tainted), every binding of writes takes that same failure (no new id),
// and it returns (root, true). Without any taint it costs one atomic load.
func (s *Store) SkipIfTainted(kernel string, reads, writes []buffers.Binding) (FailureID, bool) {
	if s.tainted.Load() == 0 {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range reads {
		sp, found := s.first(r)
		if !found {
			continue
		}
		f := s.failures[sp.f]
		f.Skips = append(f.Skips, Skip{Kernel: kernel, Needed: s.names(r.Buffer), From: sp.by})
		for _, w := range writes {
			s.set(w, sp.f, kernel)
		}
		s.gc()
		return sp.f, true
	}
	return 0, false
}

// Cancel taints writes of kernel, a launch that never started because the
// run was cancelled with cause. Every cancelled launch of one store shares
// one failure, minted on first use (and again if the graph dropped it). It
// returns that failure's id.
func (s *Store) Cancel(kernel string, cause error, writes []buffers.Binding) FailureID {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.failures[s.cancel]; !ok {
		s.next++
		s.cancel = s.next
		s.failures[s.cancel] = &Failure{ID: s.cancel, Kernel: kernel, Root: fmt.Errorf("failgraph: run cancelled: %w", cause)}
	}
	for _, w := range writes {
		s.set(w, s.cancel, kernel)
	}
	s.gc()
	return s.cancel
}

// Written releases exactly the bytes of writes: they were written by work
// that succeeded. Without any taint it costs one atomic load.
func (s *Store) Written(writes []buffers.Binding) {
	if s.tainted.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range writes {
		s.set(w, 0, "")
	}
	s.gc()
}

// Failure returns a copy of failure id, or false when it is not (or no
// longer) in the graph.
func (s *Store) Failure(id FailureID) (Failure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.failures[id]
	if !ok {
		return Failure{}, false
	}
	c := *f
	c.Skips = slices.Clone(f.Skips)
	return c, true
}

// Len returns the number of failures in the graph.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.failures)
}

// Chain returns the kernels from the one that left binding b tainted back
// to the root kernel: newest first, the root last. It is empty when b is
// clean.
func (s *Store) Chain(b buffers.Binding) (FailureID, []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, ok := s.first(b)
	if !ok {
		return 0, nil
	}
	return sp.f, s.chain(sp)
}

func (s *Store) chain(sp span) []string {
	return append([]string{sp.by}, s.failures[sp.f].ChainFrom(sp.by)...)
}

// ChainFrom returns the kernels that left kernel's input unwritten, back to
// the root: for a skipped kernel, the kernel whose output it needed, then
// that kernel's own source if it was skipped too, and so on, ending with
// f.Kernel. It is empty for the root kernel itself or a kernel f never
// skipped.
func (f *Failure) ChainFrom(kernel string) []string {
	var chain []string
	for cur := kernel; cur != f.Kernel && len(chain) < len(f.Skips); {
		i := slices.IndexFunc(f.Skips, func(k Skip) bool { return k.Kernel == cur })
		if i < 0 {
			break
		}
		cur = f.Skips[i].From
		chain = append(chain, cur)
	}
	return chain
}

// UnwrittenError is returned by EnsureWritten when a read covers bytes
// that failed or skipped work left unwritten.
type UnwrittenError struct {
	Failure FailureID
	Buffer  string   // the buffer read
	Chain   []string // kernels from the one that left the bytes unwritten back to the root, newest first
	Kernel  string   // the root kernel
	Root    error    // the root error
}

func (e *UnwrittenError) Error() string {
	return fmt.Sprintf("failgraph: %s was not written: failure #%d: %s: %v",
		e.Buffer, e.Failure, strings.Join(e.Chain, " ← "), e.Root)
}

// Unwrap returns the root error.
func (e *UnwrittenError) Unwrap() error { return e.Root }

// EnsureWritten returns nil when every byte of reads was last written by
// work that succeeded, or one *UnwrittenError per failure found (joined,
// de-duplicated, in discovery order).
func (s *Store) EnsureWritten(reads ...buffers.Binding) error {
	if s.tainted.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	seen := map[FailureID]bool{}
	for _, r := range reads {
		if r.Length <= 0 {
			continue
		}
		for _, sp := range s.spans[r.Buffer] {
			if sp.end <= r.Offset || sp.off >= r.End() || seen[sp.f] {
				continue
			}
			seen[sp.f] = true
			f := s.failures[sp.f]
			errs = append(errs, &UnwrittenError{Failure: sp.f, Buffer: s.names(r.Buffer),
				Chain: s.chain(sp), Kernel: f.Kernel, Root: f.Root})
		}
	}
	return errors.Join(errs...)
}

// first returns the first tainted span overlapping b. A binding with
// Length <= 0 is empty and overlaps nothing. Caller holds mu.
func (s *Store) first(b buffers.Binding) (span, bool) {
	if b.Length <= 0 {
		return span{}, false
	}
	for _, sp := range s.spans[b.Buffer] {
		if sp.end > b.Offset && sp.off < b.End() {
			return sp, true
		}
	}
	return span{}, false
}

// set makes bytes of b belong to failure f (0: clean), splitting the spans
// it cuts and fusing touching spans of the same failure. A binding with
// Length <= 0 is empty: it changes nothing (an inverted range would
// otherwise cut neighbours and insert a span with end < off). Caller holds
// mu.
func (s *Store) set(b buffers.Binding, f FailureID, by string) {
	if b.Length <= 0 {
		return
	}
	old := s.spans[b.Buffer]
	out := make([]span, 0, len(old)+2)
	for _, sp := range old {
		if sp.end <= b.Offset || sp.off >= b.End() {
			out = append(out, sp)
			continue
		}
		if sp.off < b.Offset {
			out = append(out, span{sp.off, b.Offset, sp.f, sp.by})
		}
		if sp.end > b.End() {
			out = append(out, span{b.End(), sp.end, sp.f, sp.by})
		}
	}
	if f != 0 {
		out = append(out, span{b.Offset, b.End(), f, by})
	}
	slices.SortFunc(out, func(x, y span) int { return cmp.Compare(x.off, y.off) })
	fused := out[:0]
	for _, sp := range out {
		if n := len(fused); n > 0 && fused[n-1].f == sp.f && fused[n-1].by == sp.by && fused[n-1].end == sp.off {
			fused[n-1].end = sp.end
			continue
		}
		fused = append(fused, sp)
	}
	s.tainted.Add(int64(len(fused) - len(old)))
	if len(fused) == 0 {
		delete(s.spans, b.Buffer)
	} else {
		s.spans[b.Buffer] = fused
	}
}

// gc removes failures that hold no byte any more. Caller holds mu.
func (s *Store) gc() {
	live := map[FailureID]bool{}
	for _, spans := range s.spans {
		for _, sp := range spans {
			live[sp.f] = true
		}
	}
	for id := range s.failures {
		if !live[id] {
			delete(s.failures, id)
		}
	}
}
