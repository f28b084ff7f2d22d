package failgraph_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/failgraph"
)

const (
	propSeeds   = 40
	propOps     = 300
	propStreams = 4  // streams are labels of kernel names
	propLive    = 6  // most buffers alive at once
	propBytes   = 64 // largest buffer
)

// propBuffer is the oracle's view of one live buffer: the failure holding
// each byte (0: last written by work that succeeded, or never written), or,
// when its reservation failed, the failure of that (0: "never allocated",
// no failure minted yet).
type propBuffer struct {
	bytes   []failgraph.FailureID
	by      []*skipRec // by byte: the skipped launch that last wrote it (nil: any other writer)
	unalloc bool
	failure failgraph.FailureID // of an unallocated buffer
}

// skipRec is the oracle's record of a skipped launch: its kernel, and the
// skipped launch that last wrote the first byte it needed, then.
type skipRec struct {
	kernel string
	from   *skipRec
}

// stale reports whether a read of some byte of b must fail.
func (b *propBuffer) stale() bool {
	return b.unalloc || slices.ContainsFunc(b.bytes, func(f failgraph.FailureID) bool { return f != 0 })
}

// holds reports whether b carries failure f.
func (b *propBuffer) holds(f failgraph.FailureID) bool {
	return (b.unalloc && b.failure == f) || slices.Contains(b.bytes, f)
}

// oracle is the per-byte model of a Store over a random program.
type oracle struct {
	live    map[buffers.ID]*propBuffer
	order   []buffers.ID // live buffers, in allocation order
	nextBuf buffers.ID
	last    failgraph.FailureID // the last failure id minted
	cancel  failgraph.FailureID // the shared cancel failure, while held
	kernel  map[failgraph.FailureID]string
	root    map[failgraph.FailureID]error // nil: check ErrTornDown / ErrNeverAllocated instead
	skips   map[failgraph.FailureID]int
}

func newOracle() *oracle {
	return &oracle{live: map[buffers.ID]*propBuffer{}, kernel: map[failgraph.FailureID]string{},
		root: map[failgraph.FailureID]error{}, skips: map[failgraph.FailureID]int{}}
}

func (o *oracle) mint(kernel string, root error) failgraph.FailureID {
	o.last++
	o.kernel[o.last], o.root[o.last] = kernel, root
	return o.last
}

func (o *oracle) set(writes []buffers.Binding, f failgraph.FailureID) {
	o.setBy(writes, f, nil)
}

// setBy is set by the skipped launch rec (nil: another writer).
func (o *oracle) setBy(writes []buffers.Binding, f failgraph.FailureID, rec *skipRec) {
	for _, w := range writes {
		for i := w.Offset; i < w.End(); i++ {
			o.live[w.Buffer].bytes[i] = f
			o.live[w.Buffer].by[i] = rec
		}
	}
}

// chain is the chain the read check must give for failure f met first by
// reads: from the first byte of f read back through the skipped launches
// that last wrote each needed byte, then the root kernel.
func (o *oracle) chain(reads []buffers.Binding, f failgraph.FailureID) []string {
	var rec *skipRec
found:
	for _, r := range reads {
		if r.Length <= 0 {
			continue
		}
		b := o.live[r.Buffer]
		if b.unalloc {
			if b.failure == f {
				break found
			}
			continue
		}
		for i := r.Offset; i < r.End(); i++ {
			if b.bytes[i] == f {
				rec = b.by[i]
				break found
			}
		}
	}
	var chain []string
	for ; rec != nil; rec = rec.from {
		chain = append(chain, rec.kernel)
	}
	if k := o.kernel[f]; k != "" {
		chain = append(chain, k)
	}
	return chain
}

// held returns the distinct failures that live buffers carry.
func (o *oracle) held() map[failgraph.FailureID]int {
	out := map[failgraph.FailureID]int{}
	for _, id := range o.order {
		b := o.live[id]
		var seen []failgraph.FailureID
		if b.unalloc && b.failure != 0 {
			seen = append(seen, b.failure)
		}
		for _, f := range b.bytes {
			if f != 0 && !slices.Contains(seen, f) {
				seen = append(seen, f)
			}
		}
		for _, f := range seen {
			out[f]++
		}
	}
	return out
}

// firstTainted is the pre-launch check: the failure of the first tainted
// byte of the first read that has one, the bytes of the read it holds from
// there on (all of the read for an unallocated buffer), and whether one
// was found (f is 0 for a never-allocated buffer).
func (o *oracle) firstTainted(reads []buffers.Binding) (f failgraph.FailureID, needed buffers.Binding, found bool) {
	for _, r := range reads {
		if r.Length <= 0 {
			continue
		}
		b := o.live[r.Buffer]
		if b.unalloc {
			return b.failure, r, true
		}
		for i := r.Offset; i < r.End(); i++ {
			if f := b.bytes[i]; f != 0 {
				end := i
				for end < r.End() && b.bytes[end] == f {
					end++
				}
				return f, bind(r.Buffer, i, end-i), true
			}
		}
	}
	return 0, buffers.Binding{}, false
}

// reports is the read check: the failures met in discovery order, each
// once; 0 stands for a never-allocated buffer's error, once per buffer.
func (o *oracle) reports(reads []buffers.Binding) []failgraph.FailureID {
	var out []failgraph.FailureID
	seen := map[failgraph.FailureID]bool{}
	never := map[buffers.ID]bool{}
	add := func(f failgraph.FailureID) {
		if !seen[f] {
			seen[f] = true
			out = append(out, f)
		}
	}
	for _, r := range reads {
		if r.Length <= 0 {
			continue
		}
		b := o.live[r.Buffer]
		switch {
		case b.unalloc && b.failure == 0:
			if !never[r.Buffer] {
				never[r.Buffer] = true
				out = append(out, 0)
			}
		case b.unalloc:
			add(b.failure)
		default:
			for i := r.Offset; i < r.End(); i++ {
				if b.bytes[i] != 0 {
					add(b.bytes[i])
				}
			}
		}
	}
	return out
}

// pick returns a random live buffer (allocated ones only when allocated),
// or false when there is none.
func (o *oracle) pick(r *rand.Rand, allocated bool) (buffers.ID, bool) {
	var ids []buffers.ID
	for _, id := range o.order {
		if !allocated || !o.live[id].unalloc {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return 0, false
	}
	return ids[r.IntN(len(ids))], true
}

// bindings returns up to n random bindings of random live buffers (some
// empty), allocated ones only when allocated, each a whole buffer when
// whole.
func (o *oracle) bindings(r *rand.Rand, n int, allocated, whole bool) []buffers.Binding {
	var out []buffers.Binding
	for range r.IntN(n + 1) {
		if id, ok := o.pick(r, allocated); ok {
			if whole {
				out = append(out, bind(id, 0, int64(len(o.live[id].bytes))))
			} else {
				out = append(out, o.sub(r, id))
			}
		}
	}
	return out
}

// sub returns a random sub-range of buffer id, possibly empty.
func (o *oracle) sub(r *rand.Rand, id buffers.ID) buffers.Binding {
	size := int64(len(o.live[id].bytes))
	off := r.Int64N(size + 1)
	return bind(id, off, r.Int64N(size-off+1))
}

// forget drops buffer id from the oracle.
func (o *oracle) forget(id buffers.ID) {
	delete(o.live, id)
	o.order = slices.DeleteFunc(o.order, func(x buffers.ID) bool { return x == id })
}

// check compares the store with the oracle after every operation. When
// whole, every launch wrote whole buffers, so a buffer carries at most one
// failure and the graph never holds more failures than stale live
// buffers; otherwise a buffer may carry several, and the bound is the
// number of (buffer, failure) claims.
func (o *oracle) check(t *testing.T, s *failgraph.Store, whole bool, msg func(string, ...any) string) {
	t.Helper()
	held := o.held()
	stale, claims := 0, 0
	for _, id := range o.order {
		if o.live[id].stale() {
			stale++
		}
	}
	for _, n := range held {
		claims += n
	}
	require.Equal(t, len(held), s.Len(), msg("Len"))
	require.LessOrEqual(t, s.Len(), claims, msg("the graph holds more failures than claims"))
	if whole {
		require.LessOrEqual(t, s.Len(), stale, msg("the graph holds more failures than stale live buffers"))
	}
	require.Equal(t, stale == 0, s.Empty(), msg("Empty"))
	for _, f := range s.Failures() {
		require.Contains(t, held, f.ID, msg("failure %v is in the graph but no live buffer carries it", f.ID))
		require.Equal(t, held[f.ID], f.Allocations, msg("Allocations of %v", f.ID))
		require.Equal(t, o.kernel[f.ID], f.Kernel, msg("Kernel of %v", f.ID))
		require.Equal(t, o.skips[f.ID], f.TotalSkips, msg("TotalSkips of %v", f.ID))
		require.Equal(t, min(o.skips[f.ID], failgraph.MaxSkipRecords), len(f.Skips), msg("Skips of %v", f.ID))
	}
	checkSpans(t, s, int(o.nextBuf), msg("spans"))
}

// TestProperty runs random programs over propStreams streams: allocate
// (some reservations fail), launches that succeed, fail or panic inside a
// write scope (skipped when a read is tainted), cancelled launches,
// partial host writes, reads, frees. The oracle is per byte: a read
// succeeds iff every byte was last written by work that succeeded; the
// graph never holds more failures than stale live buffers; after every
// buffer is freed the graph is empty.
//
// Two memory configurations: "whole", where a launch writes whole
// buffers (each buffer an allocation, as CubeCL's slices are), and
// "ranges", where launches write random sub-ranges, so one buffer can
// carry several failures.
func TestProperty(t *testing.T) {
	for _, mode := range []string{"whole", "ranges"} {
		for seed := range uint64(propSeeds) {
			t.Run(fmt.Sprintf("%s/seed=%d", mode, seed), func(t *testing.T) {
				t.Parallel()
				property(t, seed, mode == "whole")
			})
		}
	}
}

func property(t *testing.T, seed uint64, whole bool) {
	r := rand.New(rand.NewPCG(seed, seed))
	seen := map[string]int{} // what the program did, for -v
	maxLen := 0
	s := failgraph.New(names)
	o := newOracle()
	for op := range propOps {
		msg := func(what string, args ...any) string {
			return fmt.Sprintf("seed %d (whole %v) op %d: ", seed, whole, op) + fmt.Sprintf(what, args...)
		}
		kernel := fmt.Sprintf("s%d/k%d", r.IntN(propStreams), op)
		switch n := r.IntN(20); {
		case n < 3 && len(o.order) < propLive: // allocate
			id := o.nextBuf
			o.nextBuf++
			n := r.IntN(propBytes + 1)
			b := &propBuffer{bytes: make([]failgraph.FailureID, n), by: make([]*skipRec, n)}
			switch r.IntN(8) {
			case 0: // the reservation failed
				b.unalloc, b.failure = true, o.mint("alloc", errors.New("over budget"))
				require.Equal(t, b.failure, s.FailUnallocated("alloc", id, o.root[b.failure]), msg("FailUnallocated %d", id))
			case 1: // failed, no failure known
				b.unalloc = true
				require.Zero(t, s.FailUnallocated("", id, nil), msg("FailUnallocated %d nil", id))
			}
			o.live[id] = b
			o.order = append(o.order, id)

		case n < 11: // a launch
			reads, writes := o.bindings(r, 3, false, false), o.bindings(r, 2, true, whole)
			want, needed, skip := o.firstTainted(reads)
			outcome := r.IntN(4) // 0, 1: succeeds; 2: fails; 3: panics
			runs := false
			id, skipped := launch(s, kernel, reads, writes, func() error {
				runs = true
				switch outcome {
				case 2:
					return errors.New(kernel + " failed")
				case 3:
					panic(kernel + " panicked")
				}
				return nil
			})
			require.Equal(t, skip, skipped, msg("skipped: reads %v", reads))
			require.Equal(t, !skip, runs, msg("ran"))
			switch {
			case skip:
				seen["skipped"]++
				if want == 0 { // a never-allocated buffer: the skip mints its failure
					want = o.mint("", nil)
					o.live[needed.Buffer].failure = want
				}
				o.skips[want]++
				rec := &skipRec{kernel: kernel}
				if nb := o.live[needed.Buffer]; !nb.unalloc {
					rec.from = nb.by[needed.Offset]
				}
				o.setBy(writes, want, rec)
				var produced []buffers.Binding
				for _, w := range writes {
					if w.Length > 0 && !slices.Contains(produced, w) {
						produced = append(produced, w)
					}
				}
				f, ok := s.Failure(want)
				require.True(t, ok, msg("the skip's root %v left the graph", want))
				require.Equal(t, failgraph.Skip{Kernel: kernel, Needed: needed, Produced: produced},
					f.Skips[len(f.Skips)-1], msg("skip record"))
			case outcome < 2:
				seen["ok"]++
				want = 0
				o.set(writes, 0)
			case outcome == 2:
				seen["failed"]++
				want = o.mint(kernel, nil)
				o.set(writes, want)
			default:
				seen["panicked"]++
				want = o.mint(kernel, failgraph.ErrTornDown)
				o.set(writes, want)
			}
			require.Equal(t, want, id, msg("launch id: reads %v writes %v", reads, writes))

		case n < 12: // a launch never started: the run was cancelled
			writes := o.bindings(r, 2, true, whole)
			if o.cancel == 0 { // minted once, kept for the store's life
				o.cancel = o.mint(kernel, context.Canceled)
			} else if _, ok := o.held()[o.cancel]; !ok { // back in the graph, same id
				o.kernel[o.cancel], o.skips[o.cancel] = kernel, 0
			}
			require.Equal(t, o.cancel, s.Cancel(kernel, context.Canceled, writes), msg("Cancel %v", writes))
			o.set(writes, o.cancel)

		case n < 14: // a partial host write
			if id, ok := o.pick(r, true); ok {
				w := o.sub(r, id)
				s.Written(bs(w))
				o.set(bs(w), 0)
			}

		case n < 18: // a host read
			reads := o.bindings(r, 3, false, false)
			err := s.EnsureWritten(reads...)
			want := o.reports(reads)
			if len(want) > 0 {
				seen["reads failed"]++
			} else {
				seen["reads ok"]++
			}
			require.Equal(t, len(want) == 0, err == nil, msg("EnsureWritten %v: %v", reads, err))
			require.Equal(t, want, failures(t, err), msg("EnsureWritten %v", reads))
			o.checkReports(t, reads, err, msg)

		default: // free
			if id, ok := o.pick(r, false); ok {
				b := o.live[id]
				if b.unalloc {
					s.Allocated(id)
				} else {
					s.Written(bs(bind(id, 0, int64(len(b.bytes)))))
				}
				o.forget(id)
			}
		}
		o.check(t, s, whole, msg)
		maxLen = max(maxLen, s.Len())
	}

	// After every buffer is freed the graph is empty.
	for _, id := range slices.Clone(o.order) {
		if o.live[id].unalloc {
			s.Allocated(id)
		} else {
			s.Written(bs(bind(id, 0, int64(len(o.live[id].bytes)))))
		}
		o.forget(id)
	}
	assert.Zero(t, s.Len(), "seed %d", seed)
	assert.True(t, s.Empty(), "seed %d", seed)
	assert.Empty(t, s.Failures(), "seed %d", seed)
	counter, held := s.Counts()
	assert.Zero(t, counter, "seed %d", seed)
	assert.Zero(t, held, "seed %d", seed)
	seen["most failures"] = maxLen
	t.Logf("seed %d: %v", seed, seen)
}

// checkReports checks each *UnwrittenError in err against the oracle: the
// claim count, the root kernel ending the chain, and the root error.
func (o *oracle) checkReports(t *testing.T, reads []buffers.Binding, err error, msg func(string, ...any) string) {
	t.Helper()
	if err == nil {
		return
	}
	held := o.held()
	errs := []error{err} // a single error comes unjoined
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	for _, e := range errs {
		var ue *failgraph.UnwrittenError
		if !errors.As(e, &ue) {
			continue
		}
		require.Equal(t, held[ue.Failure], ue.Allocations, msg("Allocations of %v", ue.Failure))
		require.Equal(t, o.kernel[ue.Failure], ue.Kernel, msg("Kernel of %v", ue.Failure))
		if k := o.kernel[ue.Failure]; k != "" {
			require.Equal(t, k, ue.Chain[len(ue.Chain)-1], msg("chain %v of %v ends with the root kernel", ue.Chain, ue.Failure))
		}
		// The chain follows bytes. Not checked for the cancel failure,
		// whose bytes cancelled launches also write without a record, nor
		// once the cap dropped records.
		if ue.Failure != o.cancel && o.skips[ue.Failure] <= failgraph.MaxSkipRecords {
			require.Equal(t, o.chain(reads, ue.Failure), ue.Chain, msg("chain of %v read by %v", ue.Failure, reads))
		}
		require.Equal(t, max(0, o.skips[ue.Failure]-failgraph.MaxSkipRecords), ue.Dropped, msg("Dropped of %v", ue.Failure))
		switch root := o.root[ue.Failure]; {
		case o.kernel[ue.Failure] == "":
			require.ErrorIs(t, ue, failgraph.ErrNeverAllocated, msg("root of %v", ue.Failure))
		case root == nil:
			require.EqualError(t, ue.Root, ue.Kernel+" failed", msg("root of %v", ue.Failure))
		default:
			require.ErrorIs(t, ue, root, msg("root of %v", ue.Failure))
		}
	}
}

// TestConcurrent has goroutines fail, skip, cancel and write disjoint
// buffers of one store, through scopes and directly. Run it under -race.
func TestConcurrent(t *testing.T) {
	const workers, rounds = 8, 200
	s := failgraph.New(names)
	var wg sync.WaitGroup
	for w := range workers {
		in, out := buffers.ID(2*w), buffers.ID(2*w+1)
		wg.Go(func() {
			kernel := fmt.Sprintf("w%d", w)
			for i := range rounds {
				errW := fmt.Errorf("%s round %d", kernel, i)
				id := s.Enter(kernel, bs(bind(in, 0, 64))).Exit(errW)
				got, skip := s.SkipIfTainted(kernel+"-next", bs(bind(in, 8, 8)), bs(bind(out, 0, 32)))
				assert.True(t, skip)
				assert.Equal(t, id, got)

				var ue *failgraph.UnwrittenError
				err := s.EnsureWritten(bind(out, 0, 64))
				if assert.ErrorAs(t, err, &ue) {
					assert.Equal(t, id, ue.Failure)
					assert.Equal(t, []string{kernel + "-next", kernel}, ue.Chain)
					assert.Equal(t, 2, ue.Allocations)
					assert.ErrorIs(t, err, errW)
				}

				assert.Zero(t, s.Enter(kernel, bs(bind(in, 0, 64), bind(out, 0, 64))).Exit(nil))
				assert.NoError(t, s.EnsureWritten(bind(in, 0, 64), bind(out, 0, 64)))

				if i%10 == 0 {
					assert.NotZero(t, s.Cancel(kernel, context.Canceled, bs(bind(out, 32, 32))))
					s.Written(bs(bind(out, 0, 64)))
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, s.Len())
	assert.True(t, s.Empty())
	checkSpans(t, s, 2*workers)
}
