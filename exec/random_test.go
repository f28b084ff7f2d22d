package exec_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
)

// A 10,000-kernel random DAG with 1% of kernels failing: every kernel that
// depends on a failure through data is skipped with that root (the oldest
// failing ancestor's failure along the first tainted read), every other
// kernel ran, and each ran kernel saw all of its inputs written. With
// launch timing off the streams take their fast path (no look at the
// error graph per launch), which must skip exactly the same kernels.
func TestRandomDAGWithFailures(t *testing.T) {
	const n = 10_000
	for _, tc := range []struct {
		seed   uint64
		timing bool
	}{{1, true}, {2, true}, {3, true}, {1, false}, {4, false}, {5, false}} {
		seed := tc.seed
		t.Run(fmt.Sprintf("seed=%d/timing=%v", seed, tc.timing), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			g := dag.New()
			out := make([]dag.Value[bool], n)
			preds := make([][]int, n)
			fails := make([]bool, n)
			boom := errors.New("boom")
			for i := range n {
				out[i] = dag.AddValue[bool](g, fmt.Sprintf("b%d", i))
				opts := []dag.KernelOption{dag.Writes(out[i].ID())}
				if i > 0 {
					for range rng.IntN(4) { // 0–3 inputs from earlier kernels, mostly recent ones
						p := i - 1 - rng.IntN(min(i, 64))
						preds[i] = append(preds[i], p)
						opts = append(opts, dag.Reads(out[p].ID()))
					}
				}
				fails[i] = rng.IntN(100) == 0
				fail := fails[i]
				ins, self := preds[i], out[i]
				g.AddKernel(fmt.Sprintf("k%d", i), func(_ context.Context, l dag.Launch) error {
					for j, p := range ins {
						if v, err := dag.Get(l, out[p]); err != nil || !v {
							return fmt.Errorf("input %d not written: %v", j, err)
						}
					}
					if fail {
						return boom
					}
					return dag.Put(l, self, true)
				}, opts...)
			}
			dev, err := cpu.New(cpu.WithStreams(4))
			require.NoError(t, err)
			defer dev.Close()
			res, err := exec.MustNew(t, dev, exec.WithLaunchTiming(tc.timing)).Run(t.Context(), g)
			require.NoError(t, err)
			defer res.Close()

			// Oracle: a kernel is tainted when it fails or reads a tainted
			// kernel's output; a skipped kernel's root is the root of its
			// first tainted input, in declaration order.
			root := make([]int, n) // -1: clean
			nfail, nskip := 0, 0
			for i := range n {
				root[i] = -1
				for _, p := range preds[i] {
					if root[p] >= 0 {
						root[i] = root[p]
						break
					}
				}
				if root[i] < 0 && fails[i] {
					root[i] = i
				}
			}
			byKernel := make(map[string]exec.LaunchReport, n)
			for _, l := range res.Report.Launches() {
				byKernel[l.Kernel] = l
			}
			failureOf := map[int]uint64{}
			for i := range n {
				l := byKernel[fmt.Sprintf("k%d", i)]
				switch {
				case root[i] == i:
					nfail++
					require.Equal(t, exec.StatusFailed, l.Status, "k%d", i)
					require.ErrorIs(t, l.Err, boom)
					failureOf[i] = uint64(l.Failure)
				case root[i] >= 0:
					nskip++
					require.Equal(t, exec.StatusSkipped, l.Status, "k%d", i)
					if failureOf[root[i]] != uint64(l.Failure) {
						for _, p := range preds[i] {
							pl := byKernel[fmt.Sprintf("k%d", p)]
							t.Logf("k%d pred k%d: %s failure %d root k%d chain %v", i, p, pl.Status, pl.Failure, root[p], pl.Chain)
						}
						t.Logf("k%d: chain %v; failures: %v", i, l.Chain, failureOf)
					}
					require.Equal(t, failureOf[root[i]], uint64(l.Failure), "k%d skipped with root k%d", i, root[i])
					require.Equal(t, fmt.Sprintf("k%d", root[i]), l.Chain[len(l.Chain)-1], "k%d chain ends at its root", i)
				default:
					require.Equal(t, exec.StatusOK, l.Status, "k%d: %v", i, l.Err)
				}
			}
			assert.Positive(t, nfail)
			assert.Positive(t, nskip)
			assert.Equal(t, n-nfail-nskip, res.Report.Count(exec.StatusOK))
			t.Logf("seed %d: %d failed, %d skipped, %d ok, %d waits", seed, nfail, nskip, n-nfail-nskip, res.Report.Waits)
		})
	}
}
