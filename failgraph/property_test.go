package failgraph_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/failgraph"
)

const (
	propBuffers = 4
	propBytes   = 64
)

// oracle is the per-byte model of a Store: the failure that holds each
// byte of each buffer, or 0.
type oracle [propBuffers][propBytes]failgraph.FailureID

func (o *oracle) set(bs []buffers.Binding, id failgraph.FailureID) {
	for _, b := range bs {
		for i := b.Offset; i < b.End(); i++ {
			o[b.Buffer][i] = id
		}
	}
}

// found returns the distinct failures of reads in discovery order: read by
// read, byte by byte.
func (o *oracle) found(reads []buffers.Binding) []failgraph.FailureID {
	var ids []failgraph.FailureID
	seen := map[failgraph.FailureID]bool{}
	for _, r := range reads {
		for i := r.Offset; i < r.End(); i++ {
			if id := o[r.Buffer][i]; id != 0 && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// live returns the number of distinct failures holding a byte.
func (o *oracle) live() int {
	ids := map[failgraph.FailureID]bool{}
	for b := range o {
		for _, id := range o[b] {
			if id != 0 {
				ids[id] = true
			}
		}
	}
	return len(ids)
}

func (o *oracle) holds(id failgraph.FailureID) bool {
	for b := range o {
		for _, x := range o[b] {
			if x == id {
				return true
			}
		}
	}
	return false
}

// randBindings returns up to max random bindings (some empty).
func randBindings(r *rand.Rand, max int) []buffers.Binding {
	bs := make([]buffers.Binding, r.IntN(max+1))
	for i := range bs {
		off := r.Int64N(propBytes + 1)
		bs[i] = bind(buffers.ID(r.IntN(propBuffers)), off, r.Int64N(propBytes-off+1))
	}
	return bs
}

// TestProperty runs random programs of fail, cancel, skip, write and read
// against the per-byte oracle.
func TestProperty(t *testing.T) {
	for seed := range uint64(30) {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			r := rand.New(rand.NewPCG(seed, seed))
			s := failgraph.New(names)
			var o oracle
			var next, cancelID failgraph.FailureID
			for op := range 300 {
				msg := func(what string, args ...any) string {
					return fmt.Sprintf("seed %d op %d: ", seed, op) + fmt.Sprintf(what, args...)
				}
				kernel := fmt.Sprintf("k%d", op)
				switch n := r.IntN(10); {
				case n < 2: // a launch fails
					writes := randBindings(r, 3)
					next++
					require.Equal(t, next, s.Fail(kernel, errors.New(kernel), writes), msg("Fail %v", writes))
					o.set(writes, next)
				case n < 3: // a launch is cancelled
					writes := randBindings(r, 2)
					if cancelID == 0 || !o.holds(cancelID) {
						next++
						cancelID = next
					}
					require.Equal(t, cancelID, s.Cancel(kernel, errors.New("cancelled"), writes), msg("Cancel %v", writes))
					o.set(writes, cancelID)
				case n < 5: // the pre-launch check
					reads, writes := randBindings(r, 3), randBindings(r, 2)
					var want failgraph.FailureID
					for _, rd := range reads {
						if ids := o.found([]buffers.Binding{rd}); len(ids) > 0 {
							want = ids[0]
							break
						}
					}
					id, skip := s.SkipIfTainted(kernel, reads, writes)
					require.Equal(t, want, id, msg("SkipIfTainted %v %v", reads, writes))
					require.Equal(t, want != 0, skip, msg("SkipIfTainted %v %v", reads, writes))
					if skip {
						o.set(writes, want)
					}
				case n < 8: // a launch succeeds
					writes := randBindings(r, 3)
					s.Written(writes)
					o.set(writes, 0)
				default: // a host read
					reads := randBindings(r, 3)
					err := s.EnsureWritten(reads...)
					want := o.found(reads)
					require.Equal(t, len(want) > 0, err != nil, msg("EnsureWritten %v: %v", reads, err))
					require.Equal(t, want, failures(t, err), msg("EnsureWritten %v", reads))
				}
				require.Equal(t, o.live(), s.Len(), msg("Len"))
				checkSpans(t, s, propBuffers, msg("spans"))
			}

			// Writing everything empties the graph.
			all := make([]buffers.Binding, propBuffers)
			for i := range all {
				all[i] = bind(buffers.ID(i), 0, propBytes)
			}
			s.Written(all)
			assert.Zero(t, s.Len(), "seed %d", seed)
			assert.NoError(t, s.EnsureWritten(all...), "seed %d", seed)
			counter, _ := s.Counts()
			assert.Zero(t, counter, "seed %d", seed)
		})
	}
}

// TestConcurrent has goroutines fail, skip, cancel and write disjoint
// buffers of one store. Run it under -race.
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
				id := s.Fail(kernel, errW, []buffers.Binding{bind(in, 0, 64)})
				got, skip := s.SkipIfTainted(kernel+"-next", []buffers.Binding{bind(in, 8, 8)}, []buffers.Binding{bind(out, 0, 32)})
				assert.True(t, skip)
				assert.Equal(t, id, got)

				var ue *failgraph.UnwrittenError
				err := s.EnsureWritten(bind(out, 0, 64))
				if assert.ErrorAs(t, err, &ue) {
					assert.Equal(t, id, ue.Failure)
					assert.Equal(t, []string{kernel + "-next", kernel}, ue.Chain)
					assert.ErrorIs(t, err, errW)
				}

				s.Written([]buffers.Binding{bind(in, 0, 64), bind(out, 0, 64)})
				assert.NoError(t, s.EnsureWritten(bind(in, 0, 64), bind(out, 0, 64)))

				if i%10 == 0 {
					assert.NotZero(t, s.Cancel(kernel, errors.New("stop"), []buffers.Binding{bind(out, 32, 32)}))
					s.Written([]buffers.Binding{bind(out, 0, 64)})
				}
			}
		})
	}
	wg.Wait()
	assert.Zero(t, s.Len())
	checkSpans(t, s, 2*workers)
	counter, _ := s.Counts()
	assert.Zero(t, counter)
}
