package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/topology"
)

// hashCL is the OpenCL C twin of program.kernelFunc for a kernel of raw
// reads and writes: it hashes up to three read ranges (o, n relative to
// their argument's pointer), then fails softly (status 7) or writes up to
// two ranges from the hash, byte for byte as the Go function does.
const hashCL = `
#define MIX(h, v) (((h) ^ (ulong)(v)) * 0x100000001b3UL)
__kernel void hashk(__global const uchar *r0, __global const uchar *r1, __global const uchar *r2,
		__global uchar *w0, __global uchar *w1,
		ulong idx, uint nr, uint nw,
		ulong o0, ulong n0, ulong o1, ulong n1, ulong o2, ulong n2,
		ulong wn0, ulong wn1, int fail, __global int *status) {
	ulong h = MIX(0xcbf29ce484222325UL, idx);
	__global const uchar *rs[3] = {r0, r1, r2};
	ulong os[3] = {o0, o1, o2};
	ulong ns[3] = {n0, n1, n2};
	for (uint j = 0; j < nr; j++)
		for (ulong x = 0; x < ns[j]; x++)
			h = MIX(h, rs[j][os[j] + x]);
	if (fail) {
		*status = 7;
		return;
	}
	if (nw > 0)
		for (ulong x = 0; x < wn0; x++)
			w0[x] = (uchar)MIX(h, x);
	if (nw > 1)
		for (ulong x = 0; x < wn1; x++)
			w1[x] = (uchar)MIX(h, (1UL << 16) + x);
}
`

func init() {
	fakeKernels["hashk"] = func(_ []int, a []any) error {
		h := mix(0xcbf29ce484222325, a[5].(uint64))
		nr, nw := a[6].(uint32), a[7].(uint32)
		for j := range nr {
			r, o, n := a[j].([]byte), a[8+2*j].(uint64), a[9+2*j].(uint64)
			for _, c := range r[o : o+n] {
				h = mix(h, uint64(c))
			}
		}
		if a[16].(int32) != 0 {
			binary.LittleEndian.PutUint32(a[17].([]byte), 7)
			return nil
		}
		for j := range nw {
			w, n := a[3+j].([]byte), a[14+j].(uint64)
			for x := range n {
				w[x] = byte(mix(h, uint64(j)<<16+x))
			}
		}
		return nil
	}
}

// oneItem is the launch shape of hashCL: one work item does it all.
func hashShape([]int64) dag.Shape { return dag.Shape{Global: []int{1}} }

// softAsHost writes a code kernel's soft failure of a random program as
// the failure its Go function returns, so runs compare with the CPU's.
func softAsHost(msg string) string { return softRE.ReplaceAllString(msg, `exec: kernel "$1": boom $1`) }

var softRE = regexp.MustCompile(`exec: kernel "(k\d+)" set its status word to 7`)

// hashVariant returns kernel i's hashCL variant, or false when the kernel
// cannot have one: it touches a value buffer, has an optional read, an
// empty read of a buffer that is not empty or more than three reads, or
// (align > 0) an argument that would not start at a multiple of align
// bytes of its buffer (OpenCL points kernel arguments only at multiples
// of the device's base address alignment).
func (p *program) hashVariant(i int, align int64) (dag.KernelOption, bool) {
	k := p.kernels[i]
	if len(k.reads) > 3 || len(k.writes) > 2 {
		return nil, false
	}
	lo := map[dag.BufferID]int64{} // the pointer of each buffer: its first declared byte
	for _, as := range [2][]access{k.reads, k.writes} {
		for _, a := range as {
			if a.value || a.optional || a.n == 0 && p.bufs[a.buf].SizeBytes > 0 {
				return nil, false
			}
			if v, ok := lo[a.buf]; !ok || a.off < v {
				lo[a.buf] = a.off
			}
		}
	}
	if align > 0 {
		for _, v := range lo {
			if v%align != 0 {
				return nil, false
			}
		}
	}
	args := make([]dag.Arg, 0, 18)
	var offs []dag.Arg
	for j := range 3 {
		a := k.writes[0] // an unused pointer: any declared buffer
		if j < len(k.reads) {
			a = k.reads[j]
		}
		args = append(args, dag.BufferArg(a.buf))
		n := uint64(0) // an unused slot reads nothing
		if j < len(k.reads) {
			n = uint64(a.n)
		}
		offs = append(offs, dag.ScalarArg(uint64(a.off-lo[a.buf])), dag.ScalarArg(n))
	}
	wn := make([]dag.Arg, 2)
	for j := range 2 {
		a := k.writes[min(j, len(k.writes)-1)]
		args = append(args, dag.BufferArg(a.buf))
		n := uint64(0)
		if j < len(k.writes) {
			n = uint64(a.n - a.short)
		}
		wn[j] = dag.ScalarArg(n)
	}
	fail := int32(0)
	if k.fail {
		fail = 1
	}
	args = append(args, dag.ScalarArg(uint64(i)), dag.ScalarArg(uint32(len(k.reads))), dag.ScalarArg(uint32(len(k.writes))))
	args = append(args, offs...)
	args = append(args, wn...)
	args = append(args, dag.ScalarArg(fail), dag.StatusArg())
	return dag.OpenCL(hashCL, "hashk", hashShape, args...), true
}

// The differential property test on mixed plans: the random programs of
// TestDifferentialMultiDevice, whose kernels of raw reads and writes also
// get an OpenCL variant (hashCL; a third of them with no Go function), run
// on a CPU device plus a code device with several streams each (1 + 2
// and 2 + 3), under every placement strategy and with each kernel placed
// at random among the devices with code for it, and must give what the
// CPU device alone gives: statuses and errors (a code kernel's injected
// failure is a soft one, through its status word) and every buffer's
// bytes and roots.
//
// Every seed runs on the fake code device (in one of its two shapes);
// every eighth also on the machine's OpenCL device when there is one
// (there its kernels' arguments start at their buffers' first byte).
// 200 seeds by default, a few seconds under -race;
// STREAMDAG_DIFF_CODE_SEEDS=N runs N, STREAMDAG_DIFF_SEED=S the one seed S.
func TestDifferentialCodeDevices(t *testing.T) {
	first, seeds := seedsOf(t, "STREAMDAG_DIFF_CODE_SEEDS", 200)
	ref := newExecutor(t, 1)
	type mixed struct {
		name  string
		align int64  // the code device's argument alignment (0: any offset)
		every uint64 // runs the seeds that are phase modulo every
		phase uint64
		cpu   int // streams of the CPU device
		code  int // streams of the code device
		id    topology.DeviceID
		ran   int // launches that ran on the code device
		e     map[exec.Placement]*exec.Executor
	}
	var machines []*mixed
	for _, cd := range codeDevs() {
		if cd.avail != nil {
			if err := cd.avail(); err != nil {
				if os.Getenv("CI") != "" {
					t.Fatalf("OpenCL needed under CI (.ci/run installs pocl-opencl-icd): %v", err)
				}
				t.Logf("the mixed plans run without %s: %v", cd.name, err)
				continue
			}
		}
		// The fake device in two shapes (CPU 1 + 2 streams on even seeds,
		// CPU 2 + 3 on odd ones); OpenCL as CPU 2 + 3 on every eighth.
		shapes := [][2]int{{1, 2}, {2, 3}}
		every, phase := uint64(2), []uint64{0, 1}
		if cd.name != "fake" {
			shapes, every, phase = [][2]int{{2, 3}}, 8, []uint64{0}
		}
		for i, sh := range shapes {
			m := &mixed{name: cd.name, every: every, phase: phase[i],
				cpu: sh[0], code: sh[1], e: map[exec.Placement]*exec.Executor{}}
			dev := cd.make(t, sh[1])
			m.id, m.align = dev.ID(), argAlign(dev)
			for _, pl := range []exec.Placement{exec.PlaceHEFT, exec.PlaceRoundRobin, exec.PlaceLeastLoaded} {
				m.e[pl] = cpuAnd(t, sh[0], dev, exec.WithPlacement(pl))
			}
			machines = append(machines, m)
		}
	}
	for seed := first; seed < first+uint64(seeds); seed++ {
		for _, m := range machines {
			if seed%m.every != m.phase {
				continue
			}
			rng := rand.New(rand.NewPCG(seed, seed))
			prog := randomProgram(rng)
			want := runProgram(t, ref, prog, nil)
			require.NoError(t, want.planErr, "seed %d: the CPU plan\n%s", seed, prog.describe())
			host := make([]bool, len(prog.kernels))
			has := make([]bool, len(prog.kernels))
			for i := range prog.kernels {
				_, has[i] = prog.hashVariant(i, m.align)
				host[i] = !has[i] || rng.IntN(3) > 0
			}
			prog.code = func(i int) (dag.KernelOption, bool, bool) {
				opt, ok := prog.hashVariant(i, m.align)
				return opt, host[i], ok
			}
			for _, pl := range []exec.Placement{exec.PlaceHEFT, exec.PlaceRoundRobin, exec.PlaceLeastLoaded, placeAnywhere} {
				what := fmt.Sprintf("seed %d on cpu×%d + %s×%d, %s", seed, m.cpu, m.name, m.code, pl)
				e := m.e[pl]
				var anywhere []int
				if pl == placeAnywhere {
					e, what = m.e[exec.PlaceHEFT], fmt.Sprintf("seed %d on cpu×%d + %s×%d, kernels placed at random", seed, m.cpu, m.name, m.code)
					for i := range prog.kernels {
						d := 0
						if has[i] && (!host[i] || rng.IntN(2) == 0) {
							d = 1
						}
						anywhere = append(anywhere, d)
					}
				}
				got := runProgram(t, e, prog, anywhere)
				if got.planErr != nil {
					t.Fatalf("%s: plan: %v\nprogram:\n%s", what, got.planErr, prog.describe())
				}
				if diff := want.diff(got); diff != "" {
					t.Fatalf("%s: differs from the CPU run:\n%s\nprogram:\n%s", what, diff, prog.describe())
				}
				m.ran += got.ran[m.id]
			}
			prog.code = nil
		}
	}
	for _, m := range machines {
		t.Logf("cpu×%d + %s×%d: %d launches ran on the code device", m.cpu, m.name, m.code, m.ran)
		if seeds >= 50 {
			require.Positive(t, m.ran, "%s: no launch ran on the code device", m.name)
		}
	}
}

// Cancellation on mixed plans: the random programs of
// TestDifferentialCodeDevices, with one kernel's Go function cancelling
// the run's ctx, on the CPU device plus a code device. Whatever the run
// got to, every launch settles (ok, failed, skipped or cancelled: none is
// left pending), a launch that succeeded or failed did what it does in
// the uncancelled CPU run, and a buffer the result lets a caller read
// holds exactly the uncancelled run's bytes: cancellation never yields
// wrong bytes. 100 seeds on the fake device, every fourth on OpenCL too;
// the launches that ran on after the cancel (queued on the device when it
// came) are counted and logged.
func TestDifferentialCodeDevicesCancelled(t *testing.T) {
	seeds := envInt(t, "STREAMDAG_DIFF_CODE_SEEDS", 100)
	ref := newExecutor(t, 1)
	type mixed struct {
		name  string
		every uint64
		e     *exec.Executor
		id    topology.DeviceID
		align int64
	}
	var cancelled, ran int
	queued := map[string]int{} // by machine: launches queued on its code device at the cancel that ran on
	var machines []mixed
	for _, cd := range codeDevs() {
		if cd.avail != nil && cd.avail() != nil {
			continue // TestDifferentialCodeDevices says why (and fails under CI)
		}
		every := uint64(1)
		if cd.name != "fake" {
			every = 4
		}
		dev := cd.make(t, 3)
		machines = append(machines, mixed{cd.name, every, cpuAnd(t, 2, dev, exec.WithPlacement(exec.PlaceRoundRobin), exec.WithLaunchTiming(true)), dev.ID(), argAlign(dev)})
	}
	for seed := range uint64(seeds) {
		for _, m := range machines {
			if seed%m.every != 0 {
				continue
			}
			rng := rand.New(rand.NewPCG(seed, seed))
			prog := randomProgram(rng)
			want := runProgram(t, ref, prog, nil)
			require.NoError(t, want.planErr, "seed %d", seed)
			prog.cancelAt = rng.IntN(len(prog.kernels))
			prog.code = func(i int) (dag.KernelOption, bool, bool) {
				if i == prog.cancelAt {
					return nil, false, false // it cancels from Go
				}
				opt, ok := prog.hashVariant(i, m.align)
				return opt, i%3 != 0, ok
			}
			ctx, cancel := context.WithCancel(t.Context())
			var at time.Time
			prog.cancel = func() { at = time.Now(); cancel() }
			got := runProgramCtx(t, ctx, m.e, prog, nil)
			cancel()
			prog.cancel, prog.code = nil, nil
			what := fmt.Sprintf("seed %d on cpu + %s, k%d cancels", seed, m.name, prog.cancelAt)
			cancelled += checkCancelled(t, what, prog, want, got)
			ran += got.ran[m.id]
			for _, l := range got.reports {
				// Settled after the cancel: it was on the device's queue
				// (or running) when the cancel came, and ran on.
				if l.Device == m.id && l.Status == exec.StatusOK && !at.IsZero() && l.End.After(at) {
					queued[m.name]++
				}
			}
		}
	}
	t.Logf("%d kernels cancelled, %d launches ran on code devices, of them settled after the cancel: %v", cancelled, ran, queued)
	if seeds >= 50 {
		require.Positive(t, cancelled)
		require.Positive(t, ran)
		// How many launches were on a device's queue at the cancel
		// depends on timing (logged above, not asserted);
		// TestCodeDeviceCancelStopsQueuedLaunches holds launches queued
		// at a cancel on purpose.
	}
}

// checkCancelled checks got, a run of prog that a kernel cancelled,
// against want, the uncancelled run on the CPU device: every launch
// settled (none is left pending), a launch that succeeded or failed did
// what it does in want, and every buffer the result lets a caller read
// holds want's bytes. It returns how many kernels ended cancelled.
func checkCancelled(t *testing.T, what string, prog *program, want, got *outcome) (cancelled int) {
	t.Helper()
	require.NoError(t, got.planErr, what)
	for k, w := range want.status {
		g := got.status[k]
		switch {
		case strings.HasPrefix(g, "ok"), strings.HasPrefix(g, "failed"):
			require.Equal(t, w, g, "%s: kernel %s ran\nprogram:\n%s", what, k, prog.describe())
		case strings.HasPrefix(g, "cancelled"):
			cancelled++
		case strings.HasPrefix(g, "skipped"):
		default:
			t.Fatalf("%s: kernel %s ended %q\nprogram:\n%s", what, k, g, prog.describe())
		}
	}
	for b, g := range got.buffers {
		if !strings.HasPrefix(g, "unreadable") {
			require.Equal(t, want.buffers[b], g, "%s: buffer %d is readable\nprogram:\n%s", what, b, prog.describe())
		}
	}
	return cancelled
}

// argAlign returns the multiple of which a kernel argument's offset must
// be on device d: an OpenCL device's base address alignment, 0 (any) on
// others.
func argAlign(d gpu.Device) int64 {
	if info, ok := opencl.InfoOf(d); ok {
		return info.BaseAlignBytes
	}
	return 0
}
