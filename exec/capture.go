package exec

import (
	"context"
	"fmt"
	"slices"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/failgraph"
)

// RunKind says how a run was submitted (Report.Ran).
type RunKind uint8

const (
	// RanPlan: the run submitted its plan's lists (Execute, Run, and the
	// run Capture records).
	RanPlan RunKind = iota
	// ReplayedCapture: the run replayed a capture's recorded lists
	// (Capture.Replay).
	ReplayedCapture
)

// String returns "ran plan" or "replayed capture".
func (k RunKind) String() string {
	switch k {
	case RanPlan:
		return "ran plan"
	case ReplayedCapture:
		return "replayed capture"
	}
	return fmt.Sprintf("run kind(%d)", uint8(k))
}

// MarshalText encodes the kind as its String.
func (k RunKind) MarshalText() ([]byte, error) { return []byte(k.String()), nil }

// ReplayEngineLists is Capture.ReplayMode's answer when a replay hands
// each device stream its recorded list again through the engine, as
// Execute hands a plan's lists: no driver of the gpu contract offers a
// graph or command buffer that the engine records into.
const ReplayEngineLists = "engine lists"

// Capture is one run of a plan recorded for replay: the engine's
// operation list of each device stream (every launch of the plan on that
// stream, in the order the stream runs them), whether the run may be
// replayed, and the bytes its launches wrote. It is made by
// Executor.Capture, whose run settles each launch inside a capture window
// of its error graph (failgraph.Store.BeginCapture):
//
//   - a launch that fails (an error, a panic, a device's failure, a soft
//     failure through a status word), is cancelled (ctx done, a device
//     that refused work or was lost) or is skipped (a read tainted, a
//     buffer that could not be reserved) dooms the capture, which keeps
//     the first such launch's failure (Err);
//   - a launch that succeeds records exactly the byte ranges it wrote
//     (Writes);
//   - nothing outside the captured run (reads of its Result, fetches of
//     device bytes, other runs, replays) dooms it or adds to it.
//
// A run that loses a device dooms its capture too (its launches there
// are lost, and the recovery's lists are not the plan's), as does a run
// that returns an error after it started (a device refused work).
//
// A doomed capture is never replayed. A Capture is immutable and safe for
// concurrent use; it holds no memory of the run (its Result does).
type Capture struct {
	e      *Executor
	plan   *Plan
	lists  [][]int           // by global stream: plan launch indices, in stream order
	writes []buffers.Binding // the window's write set
	err    error             // why it is doomed; nil: replayable
}

// Capture runs plan p as Execute does, with opts, and records the run
// for replay. It returns the run's Result and error as Execute does,
// and the Capture, which is nil when the run could not start (the error
// then says why, as Execute's does; nothing is reserved). A run that
// returns an error after it started (a device refused work) gives a
// doomed Capture. Capturing costs the run its clean fast path: every
// launch is settled through the error graph, under its lock.
func (e *Executor) Capture(ctx context.Context, p *Plan, opts ...RunOption) (*Capture, *Result, error) {
	c := &Capture{e: e, plan: p}
	res, err := e.execute(ctx, p, true, c, opts...)
	if res == nil {
		return nil, nil, err
	}
	return c, res, err
}

// record takes the capture's lists, write set and doom from the run's
// window, once every launch of the run settled; runErr (a refusal, a
// device's loss) dooms a capture no launch doomed.
func (c *Capture) record(w *failgraph.Window, runErr error) {
	comp := c.plan.compiled()
	c.lists = make([][]int, len(comp.lists))
	for gs, l := range comp.lists {
		for _, h := range l {
			c.lists[gs] = append(c.lists[gs], int(h.idx))
		}
	}
	c.writes = w.Writes()
	switch {
	case w.Err() != nil:
		c.err = fmt.Errorf("exec: capture doomed: %w", w.Err())
	case runErr != nil:
		c.err = fmt.Errorf("exec: capture doomed: %w", runErr)
	}
}

// Plan returns the plan the capture ran.
func (c *Capture) Plan() *Plan { return c.plan }

// Err returns nil for a capture that can be replayed, else why it is
// doomed: an error reading "exec: capture doomed: " and the first
// launch's doom (a *failgraph.DoomError: `kernel "K" failed: ROOT`, or
// `kernel "K" skipped: failure #N: ROOT`), which errors.Is and errors.As
// walk to the root failure's error (a kernel's own error, a
// *failgraph.KernelPanicError, a device's *gpu.CommandError, ctx's error
// for a cancelled run, ...).
func (c *Capture) Err() error { return c.err }

// Writes returns the capture's write set: the byte ranges the captured
// run's successful launches wrote, by plan buffer id (Plan.Buffers: the
// graph's buffers, then their replicas on other devices), sorted by
// buffer and offset, touching ranges fused. A new slice each call.
func (c *Capture) Writes() []buffers.Binding { return slices.Clone(c.writes) }

// Lists returns the recorded operation lists: by global stream
// (Plan.StreamOf), the plan launch indices (Plan.Launch) that stream
// runs, in order; a stream with no launch has none. New slices each call.
func (c *Capture) Lists() [][]int {
	out := make([][]int, len(c.lists))
	for i, l := range c.lists {
		out[i] = slices.Clone(l)
	}
	return out
}

// ReplayMode says how Replay submits the recorded lists: always
// ReplayEngineLists ("engine lists"). The gpu contract has no graph or
// command-buffer operation (a CUDA graph, OpenCL's cl_khr_command_buffer),
// and a code stream's list holds host work between its device commands
// (copies between host and device memory, waits on other devices'
// progress, status-word reads) that such a buffer cannot hold; so a
// replay hands each device stream its recorded list again, as one
// gpu.List (host streams) or one enqueue window (code streams).
func (c *Capture) ReplayMode() string { return ReplayEngineLists }

// String summarises the capture: its launches and streams, how it
// replays, and whether it is doomed.
func (c *Capture) String() string {
	n, streams := 0, 0
	for _, l := range c.lists {
		n += len(l)
		if len(l) > 0 {
			streams++
		}
	}
	state := "replayable"
	if c.err != nil {
		state = c.err.Error()
	}
	return fmt.Sprintf("capture of %s on %s (replays %s): %s", plural(n, "launch", "launches"), plural(streams, "stream", "streams"), c.ReplayMode(), state)
}

// Replay runs the capture's recorded lists again on the executor that
// captured them, and returns the run's Result (Report.Ran is
// ReplayedCapture) and error as Execute does.
//
// A doomed capture is never replayed: Replay returns a nil Result and
// Err's error, and runs nothing (the inputs opts give are released).
//
// A replay keeps the capture's lists, not its data. The captured run's
// buffers took over its inputs' references, so the capture holds no
// input value: a replay stores the inputs opts give it (WithInput), as
// Execute does, and replays the same lists on them, as a CUDA graph
// replays on whatever its input memory holds. Those inputs are checked
// as Execute checks them (an input for a buffer the graph does not have
// or the run could not reserve is an error, and the replay does not
// start), but not compared with the captured run's: a replay given other
// inputs computes on them. A buffer given no input reads as it would in
// Execute (nil, or zero bytes).
//
// A replay is settled like any run: a launch that fails at replay time
// (on new inputs, a device that fails) fails, taints what it left
// unwritten and is in the Result's Report, and unrelated branches run
// on. Replays run outside any capture window: a failed replay dooms
// nothing, and the capture stays replayable. Replay is safe for
// concurrent use; concurrent replays run like concurrent Executes of
// the plan.
func (c *Capture) Replay(ctx context.Context, opts ...RunOption) (*Result, error) {
	if c.err != nil {
		rc, _ := runOptions(opts) // the doom comes first
		releaseInputs(rc.inputs)
		return nil, c.err
	}
	res, err := c.e.execute(ctx, c.plan, true, nil, opts...)
	if res != nil {
		res.Report.Ran = ReplayedCapture
	}
	return res, err
}
