package failgraph

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/streamdag/streamdag/buffers"
)

// FailureID identifies a failure within a Store. Ids are 64-bit, minted in
// order from 1 and never reused (a reused id would let one scope's cleanup
// drop another's node); 0 means "no failure". Printed as "#N".
type FailureID uint64

// String returns "#N".
func (id FailureID) String() string { return fmt.Sprintf("#%d", uint64(id)) }

// MaxSkipRecords is how many skip records a failure keeps: the newest 16,
// as CubeCL's ErrorGraph does; older ones are dropped and only counted.
const MaxSkipRecords = 16

// Skip records one launch skipped because a read was tainted by a failure.
type Skip struct {
	Kernel string // the skipped kernel
	// Needed is the tainted range of the read that skipped it: from the
	// read's first tainted byte to the end of that byte's span within
	// the read (the whole read for a buffer whose reservation failed).
	Needed buffers.Binding
	// Produced are the non-empty ranges it would have written (they take
	// the failure), each once, in declaration order.
	Produced []buffers.Binding
}

// Failure is a copy of one node of the error graph.
type Failure struct {
	ID     FailureID
	Kernel string // the kernel whose launch raised Root
	Root   error
	// Allocations is how many buffers hold at least one byte of this
	// failure (an unallocated buffer counts as one).
	Allocations int
	// Skips are the newest skip records (at most MaxSkipRecords), oldest
	// first; TotalSkips counts every skip, dropped ones included.
	Skips      []Skip
	TotalSkips int
}

// Dropped returns how many skip records were dropped by the cap.
func (f *Failure) Dropped() int { return f.TotalSkips - len(f.Skips) }

// ChainFrom returns the path from kernel back to the root: the kernels
// that left kernel's input unwritten, newest first, ending with the root
// kernel (omitted when no kernel raised the root, as for memory that was
// never allocated). It starts from kernel's newest skip record; for the
// root kernel itself, or a kernel with no record (dropped by the cap), it
// returns just the root kernel. The path follows bytes, not buffers (see
// walk), so it does not depend on how launches were spread over streams.
func (f *Failure) ChainFrom(kernel string) []string {
	for i := len(f.Skips) - 1; i >= 0; i-- {
		if f.Skips[i].Kernel == kernel {
			return f.walk(f.Skips[i].Needed, i)
		}
	}
	return []string{f.Kernel}
}

// walk follows the first byte of target back to the root: among the
// records before upper, the last one whose Produced holds that byte is the
// skipped launch that last wrote it; name its kernel and go on from the
// byte it needed. Writers of one byte are ordered by their hazards, and a
// reader after them, so the record found is the same in every run of a
// plan. The root kernel ends the chain.
func (f *Failure) walk(target buffers.Binding, upper int) []string {
	var chain []string
	for {
		i := upper - 1
		for ; i >= 0 && !producedByte(f.Skips[i].Produced, target.Buffer, target.Offset); i-- {
		}
		if i < 0 {
			break
		}
		chain = append(chain, f.Skips[i].Kernel)
		target, upper = f.Skips[i].Needed, i
	}
	if f.Kernel == "" {
		return chain
	}
	return append(chain, f.Kernel)
}

// producedByte reports whether one of ws holds byte off of buffer b.
func producedByte(ws []buffers.Binding, b buffers.ID, off int64) bool {
	for _, w := range ws {
		if w.Buffer == b && w.Offset <= off && off < w.End() {
			return true
		}
	}
	return false
}

// node is a failure in the graph.
type node struct {
	kernel string
	root   error
	tagged int    // allocations holding at least one byte of it
	skips  []Skip // newest MaxSkipRecords, oldest first
	total  int
}

// record adds a skip record, dropping the oldest past MaxSkipRecords.
func (n *node) record(rec Skip) {
	if len(n.skips) == MaxSkipRecords {
		n.skips = append(n.skips[:0], n.skips[1:]...)
	}
	n.skips = append(n.skips, rec)
	n.total++
}

// span is a tainted byte range [off, end) of one buffer.
type span struct {
	off, end int64
	f        FailureID
}

// Store is the error graph of one device (or one run). The zero value is
// not usable; call New. A Store is safe for concurrent use; its clean-path
// calls (Written, SkipIfTainted, EnsureWritten and a scope's Exit when
// nothing is tainted and no capture window is open) take no lock and
// allocate nothing.
type Store struct {
	tainted atomic.Int64 // spans + unallocated records + open capture windows: 0 means clean, no lock needed

	mu       sync.Mutex
	next     FailureID
	failures map[FailureID]*node
	spans    map[buffers.ID][]span    // sorted by off, disjoint
	unalloc  map[buffers.ID]FailureID // buffers whose reservation failed (0: no failure known)
	names    func(buffers.ID) string
	cancels  []cancelled // the store's "cancelled" failures, one per cause
	win      *Window     // the open capture window, or nil
}

// cancelled is the failure of the launches cancelled with one cause.
type cancelled struct {
	cause error
	id    FailureID
}

// New returns an empty store. names gives a buffer's name for reports
// (nil prints "buffer N").
func New(names func(buffers.ID) string) *Store {
	if names == nil {
		names = func(id buffers.ID) string { return fmt.Sprintf("buffer %d", id) }
	}
	return &Store{failures: map[FailureID]*node{}, spans: map[buffers.ID][]span{},
		unalloc: map[buffers.ID]FailureID{}, names: names}
}

// mint adds a failure node with no bytes yet. Caller holds mu and must
// taint something with it or prune it.
func (s *Store) mint(kernel string, err error) FailureID {
	s.next++
	s.failures[s.next] = &node{kernel: kernel, root: err}
	return s.next
}

// prune drops failure id when no allocation holds it. Caller holds mu.
func (s *Store) prune(id FailureID) {
	if n, ok := s.failures[id]; ok && n.tagged <= 0 {
		delete(s.failures, id)
	}
}

// Fail mints a new failure for err raised by kernel and taints every
// binding of writes with it ("set, not add": the bytes leave whatever
// failure held them). It returns the new id; a failure that taints no
// byte (empty writes) leaves the graph at once, but its id stays spent.
func (s *Store) Fail(kernel string, err error, writes []buffers.Binding) FailureID {
	return s.FailPartly(kernel, err, writes, nil)
}

// FailPartly is Fail for a launch that stated, before it failed, that it
// had finished writing the ranges written (a subset of writes): those
// bytes read as written, and only the rest of writes takes the new
// failure. The failure dooms an open capture window like Fail, and
// written is not recorded in the window's write set (a failed scope
// records nothing). A failure whose written covers all of writes still
// gets its id, and is pruned at once, as Fail prunes one with no bytes.
func (s *Store) FailPartly(kernel string, err error, writes, written []buffers.Binding) FailureID {
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.mint(kernel, err)
	s.doomed(kernel, false, id, err)
	for _, w := range writes {
		s.set(w, id)
	}
	for _, w := range written {
		s.set(w, 0)
	}
	s.prune(id)
	return id
}

// SkipIfTainted is the pre-launch check. It finds the first tainted byte
// of reads (in declaration order; empty bindings find nothing; a buffer
// whose reservation failed counts as tainted by that failure). When there
// is none it returns (0, false) and records nothing. Otherwise the launch
// of kernel is to be skipped: the skip is recorded on the ROOT failure
// (kernel, the tainted bytes it needed, the ranges it would have written),
// every binding of writes takes that same failure (no new id), and it
// returns (root, true). Without any taint it costs one atomic load.
func (s *Store) SkipIfTainted(kernel string, reads, writes []buffers.Binding) (FailureID, bool) {
	if s.tainted.Load() == 0 { // the clean path
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, _ := s.skipIfTainted(kernel, reads, writes)
	return f, f != 0
}

// Skipped is what CheckReads tells about a skipped launch: the root
// failure, its error and kernel, and the chain from the skipped kernel
// back to the root kernel (as Failure.ChainFrom), read when the skip was
// recorded, so it stays known after the failure leaves the graph.
type Skipped struct {
	Failure FailureID
	Root    error
	Kernel  string   // the root kernel ("" for memory never allocated)
	Chain   []string // newest first, the root kernel last
}

// CheckReads is SkipIfTainted for a caller that reports the skip: on a
// skip it also returns the root error and chain, read under the same
// lock. Without any taint it costs one atomic load.
func (s *Store) CheckReads(kernel string, reads, writes []buffers.Binding) (Skipped, bool) {
	if s.tainted.Load() == 0 {
		return Skipped{}, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f, n := s.skipIfTainted(kernel, reads, writes)
	if f == 0 {
		return Skipped{}, false
	}
	skips := n.skips
	last := len(skips) - 1
	chain := (&Failure{Kernel: n.kernel, Skips: skips}).walk(skips[last].Needed, last)
	return Skipped{Failure: f, Root: n.root, Kernel: n.kernel, Chain: chain}, true
}

// skipIfTainted is SkipIfTainted's slow path; it returns the root failure
// and its node (0, nil: not skipped). Caller holds mu.
func (s *Store) skipIfTainted(kernel string, reads, writes []buffers.Binding) (FailureID, *node) {
	for _, r := range reads {
		f, needed, found := s.first(r)
		if !found {
			continue
		}
		if f == 0 { // never allocated, no failure known: give it one
			f = s.mint("", fmt.Errorf("%s: %w", s.names(r.Buffer), ErrNeverAllocated))
			s.unalloc[r.Buffer] = f
			s.failures[f].tagged++
		}
		n := s.failures[f]
		rec := Skip{Kernel: kernel, Needed: needed}
		for _, w := range writes {
			if w.Length > 0 && !slices.Contains(rec.Produced, w) {
				rec.Produced = append(rec.Produced, w)
			}
		}
		n.record(rec)
		s.doomed(kernel, true, f, n.root)
		for _, w := range writes {
			s.set(w, f)
		}
		return f, n
	}
	return 0, nil
}

// Written releases exactly the bytes of writes: they were last written by
// work that succeeded. A partial write releases only what it covered; a
// failure left with no byte leaves the graph. Without any taint it costs
// one atomic load.
func (s *Store) Written(writes []buffers.Binding) {
	if s.tainted.Load() == 0 { // the clean path, small enough to inline
		return
	}
	s.written(writes)
}

func (s *Store) written(writes []buffers.Binding) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, w := range writes {
		s.set(w, 0)
	}
	s.recordWrites(writes...)
}

// Carry makes the bytes of dst hold the taint of the bytes of src, byte
// for byte: kernel copied src (a binding of another buffer, of the same
// length) into dst. Each byte of dst takes the failure of the matching
// byte of src, or becomes clean where src is clean; a src whose
// reservation failed taints all of dst. For each failure carried it
// records a skip of kernel (needed src's buffer, produced dst's), so a
// chain read through dst runs on through the copy to the root; no failure
// is minted (a never-allocated src gets one, as SkipIfTainted gives it).
// It returns the failures carried, in order of first byte (nil when src
// is clean). Without any taint it costs one atomic load. src and dst must
// name different buffers and have equal lengths (a programmer error
// otherwise: it panics).
func (s *Store) Carry(kernel string, src, dst buffers.Binding) []FailureID {
	if src.Buffer == dst.Buffer || src.Length != dst.Length {
		panic(fmt.Sprintf("failgraph: carry %v into %v: want two buffers and equal lengths", src, dst))
	}
	if s.tainted.Load() == 0 {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	type piece struct {
		src, dst buffers.Binding
		f        FailureID
	}
	var pieces []piece
	if f, ok := s.unalloc[src.Buffer]; ok && src.Length > 0 {
		if f == 0 {
			f = s.mint("", fmt.Errorf("%s: %w", s.names(src.Buffer), ErrNeverAllocated))
			s.unalloc[src.Buffer] = f
			s.failures[f].tagged++
		}
		pieces = append(pieces, piece{src, dst, f})
	} else {
		for _, sp := range s.spans[src.Buffer] {
			lo, hi := max(sp.off, src.Offset), min(sp.end, src.End())
			if lo < hi {
				pieces = append(pieces, piece{buffers.Binding{Buffer: src.Buffer, Offset: lo, Length: hi - lo},
					buffers.Binding{Buffer: dst.Buffer, Offset: dst.Offset + lo - src.Offset, Length: hi - lo}, sp.f})
			}
		}
	}
	// Every carried failure is held by src, so clearing dst first prunes
	// none of them.
	s.set(dst, 0)
	var carried []FailureID
	for i, p := range pieces {
		s.set(p.dst, p.f)
		if slices.Contains(carried, p.f) {
			continue
		}
		carried = append(carried, p.f)
		// One skip record per failure: the first source range of it the
		// copy read, and every range of dst it left carrying it.
		sk := Skip{Kernel: kernel, Needed: p.src}
		for _, q := range pieces[i:] {
			if q.f == p.f {
				sk.Produced = append(sk.Produced, q.dst)
			}
		}
		s.failures[p.f].record(sk)
	}
	if len(carried) == 0 {
		s.recordWrites(dst)
	} else {
		s.doomed(kernel, true, carried[0], s.failures[carried[0]].root)
	}
	return carried
}

// Cancel taints writes of kernel, a launch that never started because the
// run was cancelled with cause. Every cancelled launch of one store with
// the same cause (compared with ==) shares one failure, named after the
// first of them: its id is minted on first use and kept, so a launch
// cancelled after the failure left the graph (its bytes all written
// since, or no bytes at all) brings it back under the same id. It returns
// that failure's id.
func (s *Store) Cancel(kernel string, cause error, writes []buffers.Binding) FailureID {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := slices.IndexFunc(s.cancels, func(c cancelled) bool { return sameError(c.cause, cause) })
	if i < 0 {
		s.cancels = append(s.cancels, cancelled{cause: cause, id: s.mint(kernel, fmt.Errorf("%w: %w", ErrCancelled, cause))})
		i = len(s.cancels) - 1
	}
	id := s.cancels[i].id
	if _, ok := s.failures[id]; !ok {
		s.failures[id] = &node{kernel: kernel, root: fmt.Errorf("%w: %w", ErrCancelled, cause)}
	}
	s.doomed(kernel, false, id, s.failures[id].root)
	for _, w := range writes {
		s.set(w, id)
	}
	s.prune(id)
	return id
}

// ErrCancelled is matched (errors.Is) by the root error of a Cancel
// failure, which also matches its cause.
var ErrCancelled = errors.New("failgraph: run cancelled")

// sameError reports whether a and b are the same error value, without
// panicking on errors whose dynamic type is not comparable.
func sameError(a, b error) bool {
	if a == nil || b == nil {
		return a == b
	}
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// FailUnallocated records that the reservation of buffer id failed with
// err (raised while preparing kernel's launch, or "" for the run): reads of
// it return that failure until Allocated is called. With a nil err the
// buffer reads as "never allocated". It returns the failure's id (0 for a
// nil err).
func (s *Store) FailUnallocated(kernel string, id buffers.ID, err error) FailureID {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropUnalloc(id)
	var f FailureID
	if err != nil {
		f = s.mint(kernel, err)
		s.failures[f].tagged++
	}
	s.unalloc[id] = f
	s.tainted.Add(1)
	return f
}

// Allocated forgets an unallocated record of buffer id.
func (s *Store) Allocated(id buffers.ID) {
	if s.tainted.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropUnalloc(id)
}

func (s *Store) dropUnalloc(id buffers.ID) {
	f, ok := s.unalloc[id]
	if !ok {
		return
	}
	delete(s.unalloc, id)
	s.tainted.Add(-1)
	if n := s.failures[f]; n != nil {
		n.tagged--
		s.prune(f)
	}
}

// Failure returns a copy of failure id, or false when it is not (or no
// longer) in the graph.
func (s *Store) Failure(id FailureID) (Failure, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	n, ok := s.failures[id]
	if !ok {
		return Failure{}, false
	}
	return n.copy(id), true
}

func (n *node) copy(id FailureID) Failure {
	skips := make([]Skip, len(n.skips))
	for i, k := range n.skips {
		skips[i] = Skip{Kernel: k.Kernel, Needed: k.Needed, Produced: slices.Clone(k.Produced)}
	}
	return Failure{ID: id, Kernel: n.kernel, Root: n.root, Allocations: n.tagged, Skips: skips, TotalSkips: n.total}
}

// Failures returns a copy of every failure in the graph, in id order.
func (s *Store) Failures() []Failure {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Failure, 0, len(s.failures))
	for id, n := range s.failures {
		out = append(out, n.copy(id))
	}
	slices.SortFunc(out, func(a, b Failure) int { return cmp.Compare(a.ID, b.ID) })
	return out
}

// Len returns the number of failures in the graph.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.failures)
}

// Empty reports whether nothing is tainted (the graph then holds no
// failure) and no capture window is open (BeginCapture: the clean path
// is off while one is). It costs one atomic load.
func (s *Store) Empty() bool { return s.tainted.Load() == 0 }

// UnwrittenError is returned by EnsureWritten when a read covers bytes
// that failed or skipped work left unwritten.
type UnwrittenError struct {
	Failure     FailureID
	Buffer      string // the buffer read
	Allocations int    // how many buffers the failure taints (holds bytes or the reservation of)
	// Chain names the kernels from the one that should have written the
	// buffer back to the root: skipped kernels newest first, the root
	// kernel last (none when no kernel raised the root, as for memory
	// that was never allocated).
	Chain   []string
	Kernel  string // the root kernel
	Root    error  // the root error
	Dropped int    // older skip records dropped by the cap: the chain may stop before the root
}

// Error names the buffer, the failure, its chain and root error, and any
// dropped skip records.
func (e *UnwrittenError) Error() string {
	var b strings.Builder
	unit := "buffers"
	if e.Allocations == 1 {
		unit = "buffer"
	}
	fmt.Fprintf(&b, "failgraph: %s was not written: failure %s (taints %d %s): ",
		e.Buffer, e.Failure, e.Allocations, unit)
	if len(e.Chain) > 0 {
		fmt.Fprintf(&b, "%s: ", strings.Join(e.Chain, " ← "))
	}
	fmt.Fprintf(&b, "%v", e.Root)
	if e.Dropped > 0 {
		fmt.Fprintf(&b, " (%d older skip records were dropped; the chain may stop before the root)", e.Dropped)
	}
	return b.String()
}

// Unwrap returns the next link of the chain from the read to the root:
// the *SkipError of Chain's first skipped kernel (the one that should
// have written the buffer), whose Unwrap gives the next skipped kernel's,
// and so on; the last one unwraps to Root. With no skipped kernel in
// Chain (the buffer was the root kernel's own write) it returns Root.
// Each call builds the links afresh from Chain and Root.
func (e *UnwrittenError) Unwrap() error {
	skipped := e.Chain
	if e.Kernel != "" && len(skipped) > 0 { // the root kernel ends Chain
		skipped = skipped[:len(skipped)-1]
	}
	err := e.Root
	for i := len(skipped) - 1; i >= 0; i-- {
		err = &SkipError{Kernel: skipped[i], Err: err}
	}
	return err
}

// SkipError is a link of an UnwrittenError's chain: Kernel was skipped
// because bytes it read were left unwritten, and Err says why: the
// *SkipError of the kernel that left them unwritten, or the root error
// when that kernel raised it.
type SkipError struct {
	Kernel string // the skipped kernel
	Err    error  // the next link towards the root
}

// Error returns `kernel "NAME" skipped: ` and Err's message. It has no
// package prefix: it is read inside an UnwrittenError's chain.
func (e *SkipError) Error() string { return fmt.Sprintf("kernel %q skipped: %v", e.Kernel, e.Err) }

// Unwrap returns Err.
func (e *SkipError) Unwrap() error { return e.Err }

// ErrNeverAllocated is matched (errors.Is) by reads of a buffer whose
// reservation failed with no failure recorded.
var ErrNeverAllocated = errors.New("failgraph: memory was never allocated: the reservation behind it failed")

// EnsureWritten is the read check: it returns nil when every byte of reads
// was last written by work that succeeded, else one *UnwrittenError per
// failure found (de-duplicated by failure id, in discovery order), and an
// ErrNeverAllocated error per buffer never allocated. A single error is
// returned as it is, so errors.Unwrap walks its chain to the root; several
// are joined with errors.Join. Without any taint it costs one atomic load.
func (s *Store) EnsureWritten(reads ...buffers.Binding) error {
	if s.tainted.Load() == 0 { // the clean path, small enough to inline
		return nil
	}
	return s.ensureWritten(reads)
}

func (s *Store) ensureWritten(reads []buffers.Binding) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs []error
	seen := map[FailureID]bool{}
	never := map[buffers.ID]bool{}                         // never-allocated buffers already reported
	report := func(f FailureID, b buffers.ID, off int64) { // off: the first byte of f read
		if seen[f] {
			return
		}
		seen[f] = true
		n := s.failures[f]
		errs = append(errs, &UnwrittenError{Failure: f, Buffer: s.names(b), Allocations: n.tagged,
			Chain:  (&Failure{Kernel: n.kernel, Skips: n.skips}).walk(buffers.Binding{Buffer: b, Offset: off, Length: 1}, len(n.skips)),
			Kernel: n.kernel, Root: n.root, Dropped: n.total - len(n.skips)})
	}
	for _, r := range reads {
		if r.Length <= 0 {
			continue
		}
		if f, ok := s.unalloc[r.Buffer]; ok {
			if f == 0 {
				if !never[r.Buffer] {
					never[r.Buffer] = true
					errs = append(errs, fmt.Errorf("failgraph: %s: %w", s.names(r.Buffer), ErrNeverAllocated))
				}
			} else {
				report(f, r.Buffer, r.Offset)
			}
			continue
		}
		for _, sp := range s.spans[r.Buffer] {
			if sp.end > r.Offset && sp.off < r.End() {
				report(sp.f, r.Buffer, max(sp.off, r.Offset))
			}
		}
	}
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}

// first returns the failure of the first tainted byte of b (its lowest
// offset), or of its buffer's failed reservation, and the bytes of b that
// failure holds from there (to the end of its span; all of b for a failed
// reservation). Caller holds mu.
func (s *Store) first(b buffers.Binding) (FailureID, buffers.Binding, bool) {
	if b.Length <= 0 {
		return 0, buffers.Binding{}, false
	}
	if f, ok := s.unalloc[b.Buffer]; ok {
		return f, b, true
	}
	for _, sp := range s.spans[b.Buffer] {
		if sp.end > b.Offset && sp.off < b.End() {
			off := max(sp.off, b.Offset)
			return sp.f, buffers.Binding{Buffer: b.Buffer, Offset: off, Length: min(sp.end, b.End()) - off}, true
		}
	}
	return 0, buffers.Binding{}, false
}

// set makes the bytes of b belong to failure f (0: clean): "set, not add".
// It splits the spans it cuts, fuses touching or overlapping spans of one
// failure, keeps each failure's allocation count, and prunes failures left
// with no allocation (other than f). Caller holds mu.
func (s *Store) set(b buffers.Binding, f FailureID) {
	if b.Length <= 0 {
		return
	}
	old := s.spans[b.Buffer]
	if len(old) == 0 && f == 0 {
		return
	}
	before := holders(old)
	out := make([]span, 0, len(old)+2)
	for _, sp := range old {
		if sp.end <= b.Offset || sp.off >= b.End() {
			out = append(out, sp)
			continue
		}
		if sp.off < b.Offset {
			out = append(out, span{sp.off, b.Offset, sp.f})
		}
		if sp.end > b.End() {
			out = append(out, span{b.End(), sp.end, sp.f})
		}
	}
	if f != 0 {
		out = append(out, span{b.Offset, b.End(), f})
	}
	slices.SortFunc(out, func(x, y span) int { return cmp.Compare(x.off, y.off) })
	fused := out[:0]
	for _, sp := range out {
		if n := len(fused); n > 0 && fused[n-1].f == sp.f && fused[n-1].end >= sp.off {
			fused[n-1].end = max(fused[n-1].end, sp.end)
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
	after := holders(fused)
	for _, id := range after {
		if !slices.Contains(before, id) {
			s.failures[id].tagged++
		}
	}
	for _, id := range before {
		if !slices.Contains(after, id) {
			if n := s.failures[id]; n != nil {
				n.tagged--
				if id != f {
					s.prune(id)
				}
			}
		}
	}
}

// holders returns the distinct failures of spans.
func holders(spans []span) []FailureID {
	var ids []FailureID
	for _, sp := range spans {
		if !slices.Contains(ids, sp.f) {
			ids = append(ids, sp.f)
		}
	}
	return ids
}
