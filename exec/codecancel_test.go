package exec_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	osexec "os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/opencl"
)

// spinCL: out[0] = in[0] + 1 after n steps of an LCG whose result goes to
// out[1], so the loop is not optimised away: a kernel of about a
// millisecond per 10^5 steps on a CPU device.
const spinCL = `__kernel void spin(__global const ulong *in, __global ulong *out, ulong n) {
	ulong v = in[0];
	for (ulong i = 0; i < n; i++)
		v = v * 6364136223846793005UL + 1442695040888963407UL;
	out[0] = in[0] + 1;
	out[1] = v;
}`

// spinSteps makes each spin launch take some milliseconds on PoCL.
const spinSteps = 5_000_000

// spinChains builds chains chains of n spin kernels each (chain c's
// kernel i writes buffer c<c>.<i>, reading c<c>.<i-1>, or the source's),
// and a host kernel "stop" that reads chain 0's first output and calls
// stop, followed by a chain of host kernels ("tail…"): with the chains on
// a code device, stop runs once the device has run that kernel, while the
// rest of the chains are (or would be) queued on the device. It returns
// the graph and each chain's buffers.
func spinChains(chains, n int, stop func()) (*dag.Graph, [][]dag.BufferID) {
	g := dag.New()
	src := g.AddBuffer("src", 16)
	g.AddKernel("source", put(src, 0), dag.Writes(src))
	bufs := make([][]dag.BufferID, chains)
	for c := range chains {
		prev := src
		for i := range n {
			next := g.AddBuffer(fmt.Sprintf("c%d.%d", c, i), 16)
			g.AddKernel(fmt.Sprintf("spin%d.%d", c, i), nil, dag.Reads(prev), dag.Writes(next),
				dag.OpenCL(spinCL, "spin", func([]int64) dag.Shape { return dag.Shape{Global: []int{1}} },
					dag.BufferArg(prev), dag.BufferArg(next), dag.ScalarArg(uint64(spinSteps))))
			bufs[c] = append(bufs[c], next)
			prev = next
			if c == 0 && i == 0 {
				// With a longer tail of host kernels than the chains, so
				// that the plan copies stop's input home right after the
				// kernel that writes it.
				done := g.AddBuffer("stopped", 8)
				g.AddKernel("stop", func(context.Context, dag.Launch) error { stop(); return nil },
					dag.Reads(next), dag.Writes(done))
				for j := range n + 1 {
					after := g.AddBuffer(fmt.Sprint("t", j), 8)
					g.AddKernel(fmt.Sprint("tail", j), put(after, uint64(j)), dag.Reads(done), dag.Writes(after))
					done = after
				}
			}
		}
	}
	return g, bufs
}

// Cancelling a run stops the launches a code stream has not yet handed to
// the device, also when they are long: the driver keeps only about a
// kernel's time queued ahead, so a chain of long kernels stops within a
// few launches of the cancel; what did not run is cancelled with ctx's
// error, and whatever ran has the right bytes.
func TestCodeDeviceCancelStopsQueuedLaunches(t *testing.T) {
	const n = 60
	for _, streams := range []int{1, 4} {
		t.Run(fmt.Sprintf("streams=%d", streams), func(t *testing.T) {
			e := cpuAnd(t, 1, openCLDevice(t, streams))
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			g, bufs := spinChains(streams, n, cancel)
			res, err := e.Run(ctx, g)
			require.NoError(t, err)
			defer res.Close()
			assert.ErrorIs(t, res.Err(), context.Canceled)
			ok, cancelled := 0, 0
			for _, l := range res.Report.Launches() {
				switch {
				case !strings.HasPrefix(l.Kernel, "spin"): // the host kernels and the copies
				case l.Status == exec.StatusOK:
					ok++
				case l.Status == exec.StatusCancelled:
					cancelled++
					assert.ErrorIs(t, l.Err, context.Canceled, "%s", l.Kernel)
				default:
					t.Errorf("%s: %v: %v", l.Kernel, l.Status, l.Err)
				}
			}
			t.Logf("%d spin kernels ran, %d cancelled", ok, cancelled)
			assert.Equal(t, streams*n, ok+cancelled)
			assert.Less(t, ok, streams*n/2, "the chains stop soon after the cancel: %d ran, %d cancelled", ok, cancelled)
			for c := range bufs {
				for i, b := range bufs[c] {
					buf, err := res.Buffer(b)
					if err != nil {
						assert.ErrorIs(t, err, context.Canceled)
						continue
					}
					assert.Equal(t, uint64(i+1), binary.LittleEndian.Uint64(buf.Bytes()), "chain %d link %d", c, i)
				}
			}
		})
	}
}

// A code device closed while a run has launches queued for it refuses
// them: they are cancelled with one failure saying it was closed (not
// failed, each a root of its own), their consumers elsewhere are skipped
// with that failure as the root, and Execute returns the closing as its
// error, wrapping gpu.ErrClosed.
func TestCodeDeviceClosedMidRun(t *testing.T) {
	const n = 60
	dev := openCLDevice(t, 1)
	e := cpuAnd(t, 1, dev)
	closeErr := make(chan error, 1)
	g, bufs := spinChains(1, n, func() { closeErr <- dev.Close() })
	sink := g.AddBuffer("sunk", 8)
	g.AddKernel("sink", put(sink, 1), dag.Reads(bufs[0][n-1]), dag.Writes(sink))
	res, err := e.Run(t.Context(), g)
	require.NotNil(t, res, "%v", err)
	defer res.Close()
	assert.ErrorIs(t, err, gpu.ErrClosed)
	assert.ErrorContains(t, err, "opencl0 refused the run's work")
	require.NoError(t, <-closeErr)
	var failures []failgraph.FailureID
	ran, cancelled := 0, 0
	for _, l := range res.Report.Launches() {
		switch l.Status {
		case exec.StatusOK:
			if strings.HasPrefix(l.Kernel, "spin") {
				ran++
			}
			continue
		case exec.StatusCancelled:
			cancelled++
			assert.ErrorIs(t, l.Err, gpu.ErrClosed, "%s", l.Kernel)
		case exec.StatusSkipped:
			assert.Equal(t, "sink", l.Kernel)
		default:
			t.Errorf("%s: %v: %v", l.Kernel, l.Status, l.Err)
		}
		if !slices.Contains(failures, l.Failure) {
			failures = append(failures, l.Failure)
		}
	}
	assert.Positive(t, cancelled, "%d spin kernels ran", ran)
	assert.Len(t, failures, 1, "one failure: the closing")
	assert.Equal(t, exec.StatusSkipped, launchByName(t, res, "sink").Status)
	require.Error(t, res.Err())
	assert.Equal(t, 1, strings.Count(res.Err().Error(), "refused the run's work"), "one root: %v", res.Err())
}

// stuckEnv makes TestCodeDeviceStuckKernel run its scenario (in the
// subprocess it starts: the stuck kernel's device thread and the device's
// goroutines are leaked there, on purpose).
const stuckEnv = "STREAMDAG_EXEC_STUCK_CHILD"

// stuckCL never ends: nothing sets flag[0].
const stuckCL = `__kernel void stuck(volatile __global const ulong *flag, __global ulong *out) {
	while (flag[0] == 0) {}
	out[0] = 1;
}`

// A kernel that never ends does not hold its run past ctx: the run
// returns codeGrace after ctx's deadline with the launch failed as
// abandoned (exec.ErrAbandoned) and what follows it cancelled; the device
// is then unusable, refusing later work with an error that says so; and
// its Close returns an error after its close wait instead of hanging. The
// scenario runs in a subprocess, bounded by a deadline, since the stuck
// kernel's thread and the device's goroutines are leaked.
func TestCodeDeviceStuckKernel(t *testing.T) {
	if os.Getenv(stuckEnv) != "" {
		stuckScenario(t)
		// Exit before the leak checks: the leaks are the point.
		if t.Failed() {
			os.Exit(1)
		}
		fmt.Println("stuck scenario: ok")
		os.Exit(0)
	}
	openCLDevice(t, 1) // skips without OpenCL
	// The deadline only stops a hung child; it decides nothing.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := osexec.CommandContext(ctx, os.Args[0], "-test.run=^TestCodeDeviceStuckKernel$", "-test.v")
	cmd.Env = append(os.Environ(), stuckEnv+"=1")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	assert.Contains(t, string(out), "stuck scenario: ok")
}

// stuckScenario is TestCodeDeviceStuckKernel's subprocess.
func stuckScenario(t *testing.T) {
	ds, err := opencl.Devices()
	require.NoError(t, err)
	require.NotEmpty(t, ds)
	dev, err := opencl.NewDevice(ds[0], opencl.WithCloseWait(100*time.Millisecond))
	require.NoError(t, err)
	host, err := cpu.New(cpu.WithStreams(1))
	require.NoError(t, err)
	e, err := exec.NewMulti([]gpu.Device{host, dev}, nil)
	require.NoError(t, err)

	one := func([]int64) dag.Shape { return dag.Shape{Global: []int{1}} }
	g := dag.New()
	flag, out, next, sum := g.AddBuffer("flag", 8), g.AddBuffer("out", 8), g.AddBuffer("next", 8), g.AddBuffer("sum", 8)
	g.AddKernel("source", put(flag, 0), dag.Writes(flag))
	g.AddKernel("stuck", nil, dag.Reads(flag), dag.Writes(out),
		dag.OpenCL(stuckCL, "stuck", one, dag.BufferArg(flag), dag.BufferArg(out)))
	g.AddKernel("after", nil, dag.Reads(out), dag.Writes(next),
		dag.OpenCL(scaleCL, "scale", ulongs, dag.BufferArg(out), dag.BufferArg(next), dag.ScalarArg(uint64(1)), dag.ScalarArg(uint64(1))))
	g.AddKernel("sink", put(sum, 1), dag.Reads(next), dag.Writes(sum))
	for _, src := range []string{stuckCL, scaleCL} { // built before the run's deadline starts
		_, err := dev.Program("prebuilt", src, "")
		require.NoError(t, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	defer cancel()
	res, err := e.Run(ctx, g)
	require.NoError(t, err)
	stuck := launchByName(t, res, "stuck")
	assert.Equal(t, exec.StatusFailed, stuck.Status)
	assert.ErrorIs(t, stuck.Err, exec.ErrAbandoned)
	assert.ErrorIs(t, stuck.Err, context.DeadlineExceeded)
	assert.Equal(t, exec.StatusCancelled, launchByName(t, res, "after").Status)
	assert.Contains(t, []exec.Status{exec.StatusSkipped, exec.StatusCancelled}, launchByName(t, res, "sink").Status)
	assert.ErrorIs(t, res.Err(), exec.ErrAbandoned)
	res.Close()

	// The device refuses later work, saying why.
	_, err = dev.Alloc(8)
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
	assert.ErrorIs(t, err, exec.ErrAbandoned)
	g2, total, _ := scaleGraph(1, 1, 4, false)
	res, _ = e.Run(t.Context(), g2)
	require.NotNil(t, res)
	scale := launchByName(t, res, "scale0")
	assert.NotEqual(t, exec.StatusOK, scale.Status)
	assert.ErrorIs(t, scale.Err, exec.ErrAbandoned)
	_, err = res.Buffer(total)
	assert.ErrorIs(t, err, exec.ErrAbandoned)
	res.Close()

	// Close gives up after its close wait.
	err = dev.Close()
	assert.ErrorIs(t, err, gpu.ErrDeviceLost)
	assert.ErrorContains(t, err, "leaked")
}
