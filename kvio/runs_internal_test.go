package kvio

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunsSplit(t *testing.T) {
	ctx := t.Context()
	rs := &runs{nrg: 11, ncol: 2}
	a, hiA := rs.claim(ctx)
	b, hiB := rs.claim(ctx)
	require.Equal(t, [4]int{0, 0, 11, 11}, [4]int{a.j, a.lo, a.hi, hiA})
	require.Equal(t, [4]int{1, 0, 11, 11}, [4]int{b.j, b.lo, b.hi, hiB})
	assert.Equal(t, 0, rs.next(a))
	assert.Equal(t, 1, rs.next(a))

	// Every column started: the next claim takes the rear half of the run
	// with the most row groups left (b: 11), rounded up.
	c, hiC := rs.claim(ctx)
	assert.Equal(t, [5]int{1, 5, 11, 5, 11}, [5]int{c.j, c.lo, c.hi, c.next, hiC})
	assert.Equal(t, 5, b.hi, "the owner stops where the thief starts")

	// a has 9 left (2..10): the thief takes 6..10.
	d, _ := rs.claim(ctx)
	assert.Equal(t, [3]int{0, 6, 11}, [3]int{d.j, d.lo, d.hi})
	for range 4 {
		rs.next(a) // 2, 3, 4, 5
	}
	assert.Equal(t, -1, rs.next(a), "a ends at 6")
	assert.False(t, rs.finished())
}

// TestRunsProperty plays goroutines that claim, take row groups, and
// steal in a random order: every row group of every column is taken
// exactly once, in order within a run, and the schedule ends finished.
func TestRunsProperty(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, seed))
		nrg, ncol, workers := 1+rng.IntN(20), 1+rng.IntN(6), 1+rng.IntN(5)
		rs := &runs{nrg: nrg, ncol: ncol}
		taken := make([]int, nrg*ncol)
		type worker struct {
			r    *run
			last int
		}
		ws := make([]worker, workers)
		for busy := true; busy; {
			busy = false
			for _, k := range rng.Perm(workers) {
				w := &ws[k]
				if w.r == nil {
					r, _ := rs.claim(t.Context())
					if r == nil {
						continue
					}
					w.r, w.last = r, r.lo-1
				}
				busy = true
				rg := rs.next(w.r)
				if rg < 0 {
					w.r = nil
					continue
				}
				require.Equal(t, w.last+1, rg, "seed %d: row groups of a run in order", seed)
				w.last = rg
				taken[rg*ncol+w.r.j]++
			}
		}
		for i, n := range taken {
			require.Equal(t, 1, n, "seed %d: row group %d column %d taken %d times", seed, i/ncol, i%ncol, n)
		}
		require.True(t, rs.finished(), "seed %d", seed)
	}
}

func TestRunsFail(t *testing.T) {
	rs := &runs{nrg: 4, ncol: 1}
	ctx, cancel := context.WithCancelCause(t.Context())
	r, _ := rs.claim(ctx)
	require.Equal(t, 0, rs.next(r))
	boom := errors.New("boom")
	rs.fail(0, boom, cancel)
	rs.fail(1, errors.New("later"), cancel)
	assert.Equal(t, boom, rs.failed)
	assert.Equal(t, 0, rs.badPart)
	assert.ErrorIs(t, context.Cause(ctx), boom)
	assert.Equal(t, -1, rs.next(r))
	c, _ := rs.claim(ctx)
	assert.Nil(t, c)
}
