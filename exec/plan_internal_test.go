package exec

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
)

// randomHazardGraph returns a valid random graph of up to 40 kernels over
// raw input buffers and value buffers: reads and writes of overlapping
// byte ranges (read-after-write, write-after-read, write-after-write,
// writes that cover earlier accesses), stream pins, and estimates on
// about one kernel in five when withEstimates. Each writer of bytes an
// earlier kernel wrote also reads that kernel's token, so overlapping
// writers are ordered; a graph that still has a cycle is drawn again.
func randomHazardGraph(rng *rand.Rand, withEstimates bool) *dag.Graph {
	nop := func(context.Context, dag.Launch) error { return nil }
	for {
		g := dag.New()
		nb := 2 + rng.IntN(6)
		bufs := make([]dag.BufferID, nb)
		sizes := make([]int64, nb) // 0: a value buffer
		written := make([]bool, nb)
		for i := range nb {
			if rng.IntN(4) == 0 {
				bufs[i] = dag.AddValue[any](g, fmt.Sprint("v", i)).ID()
				continue
			}
			sizes[i] = int64(4 + rng.IntN(30))
			bufs[i] = g.AddBuffer(fmt.Sprint("r", i), sizes[i], dag.Input())
			written[i] = true
		}
		type write struct {
			kernel   int
			off, end int64
		}
		writers := make([][]write, nb)
		var tokens []dag.BufferID
		for k := range 3 + rng.IntN(38) {
			var opts []dag.KernelOption
			used := make([]bool, nb)
			for range rng.IntN(4) {
				b := rng.IntN(nb)
				switch {
				case !written[b]:
					continue
				case sizes[b] == 0 && rng.IntN(5) == 0:
					opts = append(opts, dag.ReadsOptional(bufs[b]))
				case sizes[b] == 0:
					opts = append(opts, dag.Reads(bufs[b]))
				default:
					off := rng.Int64N(sizes[b])
					opts = append(opts, dag.ReadsRange(bufs[b], off, rng.Int64N(sizes[b]-off+1)))
				}
				used[b] = true
			}
			after := make([]bool, len(tokens)) // earlier kernels whose writes this one's overlap
			for range 1 + rng.IntN(2) {
				b := rng.IntN(nb)
				if used[b] {
					continue
				}
				used[b] = true
				off, end := int64(0), int64(1)
				switch {
				case sizes[b] == 0:
					opts = append(opts, dag.Writes(bufs[b]))
				case rng.IntN(4) == 0:
					end = sizes[b]
					opts = append(opts, dag.WritesRange(bufs[b], 0, end))
				default:
					off = rng.Int64N(sizes[b])
					end = off + 1 + rng.Int64N(sizes[b]-off)
					opts = append(opts, dag.WritesRange(bufs[b], off, end-off))
				}
				for _, w := range writers[b] {
					after[w.kernel] = after[w.kernel] || w.off < end && off < w.end
				}
				writers[b] = append(writers[b], write{k, off, end})
				written[b] = true
			}
			for j, ok := range after {
				if ok {
					opts = append(opts, dag.Reads(tokens[j]))
				}
			}
			tokens = append(tokens, dag.AddValue[any](g, fmt.Sprint("tok", k)).ID())
			opts = append(opts, dag.Writes(tokens[k]))
			if rng.IntN(6) == 0 {
				opts = append(opts, dag.OnStream(rng.IntN(4)))
			}
			if withEstimates && rng.IntN(5) == 0 {
				opts = append(opts, dag.Estimate(time.Duration(1+rng.Int64N(5000))))
			}
			g.AddKernel(fmt.Sprint("k", k), nop, opts...)
		}
		if g.Validate() == nil {
			return g
		}
	}
}

// listSchedule is launchOrder's contract computed the direct way: a list
// schedule over the hazards of order that takes, among the ready
// kernels, the one of highest rank (cost plus the highest rank among the
// kernels that depend on it), ties by position, with a scan of every
// ready kernel per step.
func listSchedule(g *dag.Graph, order []dag.KernelID) []dag.KernelID {
	n := len(order)
	haz := newHazards(0)
	haz.reset(g.NumBuffers(), n)
	succs := make([][]int, n)
	indeg := make([]int, n)
	for i, kid := range order {
		haz.access(i, g.KernelReads(kid), g.KernelWrites(kid))
		for _, d := range haz.launchDeps(i) {
			succs[d] = append(succs[d], i)
			indeg[i]++
		}
	}
	rank := make([]float64, n)
	for i := n - 1; i >= 0; i-- {
		c := defaultLaunchCost
		if e := g.Kernel(order[i]).Estimate; e > 0 {
			c = float64(e) / float64(time.Microsecond)
		}
		r := 0.0
		for _, s := range succs[i] {
			r = max(r, rank[s])
		}
		rank[i] = r + c
	}
	var ready, out []int
	for i := range n {
		if indeg[i] == 0 {
			ready = append(ready, i)
		}
	}
	for len(ready) > 0 {
		best := 0
		for j, i := range ready {
			if b := ready[best]; rank[i] > rank[b] || rank[i] == rank[b] && i < b {
				best = j
			}
		}
		i := ready[best]
		ready = slices.Delete(ready, best, best+1)
		out = append(out, i)
		for _, s := range succs[i] {
			if indeg[s]--; indeg[s] == 0 {
				ready = append(ready, s)
			}
		}
	}
	kids := make([]dag.KernelID, len(out))
	for k, i := range out {
		kids[k] = order[i]
	}
	return kids
}

// launchOrder sorts the kernels by rank instead of running the list
// schedule; the two agree on random graphs with overlapping accesses,
// with and without estimates (the counting and the comparison sort). The
// hazards it leaves, reordered for its order when it changed the order,
// are those a pass over its order finds.
func TestLaunchOrderIsTheListSchedule(t *testing.T) {
	for seed := range uint64(1500) {
		rng := rand.New(rand.NewPCG(seed, seed))
		g := randomHazardGraph(rng, seed%2 == 1)
		order := g.Order()
		want := listSchedule(g, order)
		haz := newHazards(0)
		got, from, found := launchOrder(g, order, haz, true)
		require.Equal(t, want, got, "seed %d", seed)
		require.Equal(t, len(order) >= 3, found, "seed %d", seed)
		if from == nil {
			require.Equal(t, order, got, "seed %d", seed)
		} else {
			for j, i := range from {
				require.Equal(t, order[i], got[j], "seed %d, launch %d", seed, j)
			}
		}
		if seed%2 == 0 { // no estimates: the hint changes nothing
			got2, from2, _ := launchOrder(g, order, newHazards(0), false)
			require.Equal(t, want, got2, "seed %d", seed)
			require.Equal(t, from, from2, "seed %d", seed)
		}
		if !found {
			continue
		}
		if from != nil {
			haz.reorder(from)
		}
		ref := newHazards(0)
		ref.reset(g.NumBuffers(), len(got))
		for i, kid := range got {
			ref.access(i, g.KernelReads(kid), g.KernelWrites(kid))
			require.Equal(t, ref.launchDeps(i), haz.launchDeps(i), "seed %d, launch %d", seed, i)
		}
	}
}
