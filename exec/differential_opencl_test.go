package exec_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/faultdev"
	"github.com/streamdag/streamdag/internal/leaktest"
)

// The differential property test on a real OpenCL device kept across
// one-shot runs: random programs whose raw buffers are sized in units of
// the device's base address alignment, with byte ranges that start at
// multiples of it and anywhere, a zero-byte input that kernels read,
// writers that leave the end of their declared ranges unwritten, and
// injected failures, each run by Executor.Run (a plan for that run
// alone) on a new executor over one CPU device and one OpenCL device
// that every run shares, must give what the CPU device alone gives:
// statuses and errors, every buffer's bytes (unwritten bytes read as
// zeroes on both) and roots. One seed in four is cancelled by one of its
// kernels and checked as TestDifferentialCodeDevicesCancelled checks.
//
// A kernel whose arguments the device can point at (each at a multiple
// of the alignment) gets an OpenCL variant and, one time in two, no Go
// function; one whose ranges the device cannot point at keeps its Go
// function beside its variant, and placement must keep it off the
// device. Every tenth seed also pins such a kernel to the device (no Go
// function), which must be a plan error naming the kernel.
//
// 500 seeds by default (each a one-shot run on the shared devices);
// STREAMDAG_DIFF_CL_SEEDS=N runs N, STREAMDAG_DIFF_SEED=S the one seed S.
// It needs an OpenCL device: it skips without one, and fails under CI.
func TestDifferentialOpenCL(t *testing.T) {
	first, seeds := seedsOf(t, "STREAMDAG_DIFF_CL_SEEDS", 500)
	cl := openCLDevice(t, 3)
	align := argAlign(cl)
	require.Positive(t, align, "the OpenCL device's base address alignment")
	host, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, host.Close()) })
	ref := newExecutor(t, 1)
	placements := []exec.Placement{exec.PlaceHEFT, exec.PlaceRoundRobin, exec.PlaceLeastLoaded}

	var c struct{ runs, onCL, subBuffer, zeroArg, short, failed, cancelled, pinned int }
	for seed := first; seed < first+uint64(seeds); seed++ {
		rng := rand.New(rand.NewPCG(seed, 0xc1))
		prog := randomProgramOf(rng, progShape{unit: align, zero: true, short: true})
		prog.oneShot = true
		cancels := seed%4 == 3
		if cancels {
			prog.cancelAt = rng.IntN(len(prog.kernels))
		}
		want := runProgram(t, ref, prog, nil)
		require.NoError(t, want.planErr, "seed %d: the CPU plan\n%s", seed, prog.describe())

		fits := make([]bool, len(prog.kernels))   // has a variant the device can run
		keepGo := make([]bool, len(prog.kernels)) // keeps its Go function
		var unfit []int                           // has a variant the device cannot run
		for i := range prog.kernels {
			_, any := prog.hashVariant(i, 0)
			_, fits[i] = prog.hashVariant(i, align)
			keepGo[i] = !fits[i] || rng.IntN(2) > 0
			if cancels && i == prog.cancelAt {
				fits[i], any, keepGo[i] = false, false, true // it cancels from Go
			}
			if any && !fits[i] {
				unfit = append(unfit, i)
			}
		}
		prog.code = func(i int) (dag.KernelOption, bool, bool) {
			if cancels && i == prog.cancelAt {
				return nil, false, false
			}
			opt, ok := prog.hashVariant(i, 0)
			return opt, keepGo[i], ok
		}
		pl := placements[rng.IntN(len(placements))]
		e, err := exec.NewMulti([]gpu.Device{host, cl}, nil, exec.WithAllocator(leaktest.Allocator(t)), exec.WithPlacement(pl))
		require.NoError(t, err)
		what := fmt.Sprintf("seed %d on cpu×2 + opencl×3, %s, one-shot run %d on these devices", seed, pl, c.runs+1)
		ctx, cancel := context.WithCancel(t.Context())
		if cancels {
			prog.cancel = cancel
			what += fmt.Sprintf(", k%d cancels", prog.cancelAt)
		}
		got := runProgramCtx(t, ctx, e, prog, nil)
		cancel()
		prog.cancel = nil
		c.runs++
		if got.planErr != nil {
			t.Fatalf("%s: plan: %v\nprogram:\n%s", what, got.planErr, prog.describe())
		}
		if cancels {
			c.cancelled += checkCancelled(t, what, prog, want, got)
		} else if diff := want.diff(got); diff != "" {
			t.Fatalf("%s: differs from the CPU run:\n%s\nprogram:\n%s", what, diff, prog.describe())
		}
		for i, k := range prog.kernels {
			if got.device[k.name] != cl.ID() {
				continue
			}
			require.True(t, fits[i], "%s: %s ran on %s, which cannot point at its ranges\nprogram:\n%s", what, k.name, cl.ID(), prog.describe())
			if !strings.HasPrefix(got.status[k.name], "ok") && !strings.HasPrefix(got.status[k.name], "failed") {
				continue
			}
			c.onCL++
			if strings.HasPrefix(got.status[k.name], "failed") {
				c.failed++
			}
			for _, as := range [2][]access{k.reads, k.writes} {
				for _, a := range as {
					switch {
					case prog.bufs[a.buf].SizeBytes == 0:
						c.zeroArg++
					case a.off >= align:
						c.subBuffer++
					}
					if a.short > 0 {
						c.short++
					}
				}
			}
		}
		if seed%10 == 0 && len(unfit) > 0 {
			// Pinned where it cannot run: a plan error naming the kernel.
			k := unfit[0]
			keepGo[k] = false
			p, err := e.Plan(prog.graph(nil))
			require.Error(t, err, "%s: %s pinned to %s by its only variant\nprogram:\n%s", what, prog.kernels[k].name, cl.ID(), prog.describe())
			require.Nil(t, p)
			require.Contains(t, err.Error(), fmt.Sprintf("%q", prog.kernels[k].name), what)
			require.Contains(t, err.Error(), "align", what)
			c.pinned++
		}
		prog.code = nil
	}
	t.Logf("%d one-shot runs on %s: %d launches ran there (%d failed), %d arguments at sub-buffer offsets, %d zero-byte arguments, %d short writes; %d kernels cancelled; %d pinned plans refused",
		c.runs, cl.ID(), c.onCL, c.failed, c.subBuffer, c.zeroArg, c.short, c.cancelled, c.pinned)
	if seeds >= 100 {
		require.Positive(t, c.onCL)
		require.Positive(t, c.failed)
		require.Positive(t, c.subBuffer)
		require.Positive(t, c.zeroArg)
		require.Positive(t, c.short)
		require.Positive(t, c.cancelled)
		require.Positive(t, c.pinned)
	}
}

// The differential property on an OpenCL device that reports its loss
// mid-run: random programs (as TestDifferentialOpenCL's, every kernel
// keeping its Go function so that it can move) run on a CPU device and
// the OpenCL device wrapped so that it is lost after a random number of
// the commands the run enqueues on it (faultdev: enqueues past the point
// fail, and the events after it report the commands in flight as lost),
// must give what the CPU device alone gives: the run marks the device
// lost, and the recovery re-runs its work on the CPU device; and so must
// a second run on the device once it is lost, whose lists arrive after
// the loss.
//
// 50 seeds by default; STREAMDAG_DIFF_CL_LOSS_SEEDS=N runs N,
// STREAMDAG_DIFF_SEED=S the one seed S. It needs an OpenCL device: it
// skips without one, and fails under CI.
func TestDifferentialOpenCLDeviceLoss(t *testing.T) {
	first, seeds := seedsOf(t, "STREAMDAG_DIFF_CL_LOSS_SEEDS", 50)
	cl := openCLDevice(t, 2)
	align := argAlign(cl)
	host, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, host.Close()) })
	ref := newExecutor(t, 1)
	lostRuns := 0
	for seed := first; seed < first+uint64(seeds); seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x1055))
		prog := randomProgramOf(rng, progShape{unit: align, zero: true, short: true})
		prog.oneShot = true
		want := runProgram(t, ref, prog, nil)
		require.NoError(t, want.planErr, "seed %d: the CPU plan\n%s", seed, prog.describe())
		prog.code = func(i int) (dag.KernelOption, bool, bool) {
			opt, ok := prog.hashVariant(i, 0)
			return opt, true, ok
		}
		run := func(fd *faultdev.Device) *outcome {
			e, err := exec.NewMulti([]gpu.Device{host, fd}, nil, exec.WithAllocator(leaktest.Allocator(t)))
			require.NoError(t, err)
			return runProgram(t, e, prog, nil)
		}
		// How many commands the run enqueues on the device (not counting
		// those a read of its Result enqueues after it), then the run
		// that loses it part-way.
		count := faultdev.New(cl, math.MaxInt64, 0)
		var total int64
		prog.ran = func() { total = count.Commands() }
		run(count)
		prog.ran = nil
		if total == 0 {
			prog.code = nil
			continue // nothing ran on the device
		}
		after, inflight := rng.Int64N(total), rng.Int64N(3)
		what := fmt.Sprintf("seed %d on cpu×2 + opencl×2, the device lost after %d of %d commands (%d in flight)", seed, after, total, inflight)
		fd := faultdev.New(cl, after, inflight)
		got := run(fd)
		if got.planErr != nil {
			t.Fatalf("%s: plan: %v\nprogram:\n%s", what, got.planErr, prog.describe())
		}
		if diff := want.diff(got); diff != "" {
			t.Fatalf("%s: differs from the CPU run:\n%s\nprogram:\n%s", what, diff, prog.describe())
		}
		if fd.Lost() {
			require.NotNil(t, got.lost, "%s: the device reported its loss, the run did not say so", what)
			require.Equal(t, cl.ID(), *got.lost, what)
			lostRuns++
			// A run on the device once it is lost: its lists arrive after
			// the loss, and their first publish answers it.
			again := run(fd)
			require.NoError(t, again.planErr, "%s, run again: plan", what)
			if diff := want.diff(again); diff != "" {
				t.Fatalf("%s, run again: differs from the CPU run:\n%s\nprogram:\n%s", what, diff, prog.describe())
			}
			require.NotNil(t, again.lost, "%s, run again: the run did not say the device was lost", what)
			require.Equal(t, cl.ID(), *again.lost, what)
		}
		prog.code = nil
	}
	t.Logf("%d seeds: %d runs lost %s part-way and recovered", seeds, lostRuns, cl.ID())
	if seeds >= 10 {
		require.Positive(t, lostRuns, "no run lost the device")
	}
}
