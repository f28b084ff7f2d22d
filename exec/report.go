package exec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"
)

// LaunchReport is the outcome of one launch.
type LaunchReport struct {
	Kernel string
	Device topology.DeviceID
	Stream int
	Status Status
	// Start and End are when the kernel ran, with launch timing
	// (WithLaunchTiming(true)); zero without it, and zero when the kernel
	// did not run (a lost launch may have run before its work was
	// superseded).
	Start   time.Time
	End     time.Time
	Failure failgraph.FailureID
	// Err is the launch's error: the kernel's own error for a failed
	// launch, the root failure's error for a skipped one, the cause for a
	// cancelled one; nil when ok.
	Err error
	// Chain names, for a skipped launch, the kernels from the one that
	// left its input unwritten back to the root kernel (newest first).
	Chain []string
}

// CopyReport is one copy launch of a run: a buffer moved to a replica on
// another device, with the time the topology models for it.
type CopyReport struct {
	Buffer   string
	From, To topology.DeviceID
	Bytes    int64         // bytes actually copied (0 when the copy did not run)
	Modeled  time.Duration // topology.TransferCost of Bytes; 0 without a topology
	Route    string        // "direct", "via gpuN" or "via host"
	Link     string        // the link kind of the pair: "NV2", "SYS", … ("" without a topology)
	ViaHost  bool          // the copy is staged through host memory (no P2P path)
	Status   Status
}

// Report is the outcome of one run.
//
// Per-launch outcomes are kept compactly while the run goes (a status
// byte per launch, plus a start and an end with launch timing) and
// expanded into LaunchReports on the first call of Launches, so a run
// whose caller only counts statuses pays for nothing else.
type Report struct {
	Device  topology.DeviceID // the first device
	Devices []topology.DeviceID
	Streams []int         // by device (an index into Devices): its stream count
	Waits   int           // event waits inserted by the plan
	Wall    time.Duration // from the start of Execute until every launch returned; measured with or without launch timing
	// LaunchTiming says whether the run recorded each launch's Start and
	// End (WithLaunchTiming(true)); without it they are zero.
	LaunchTiming bool
	// Copies lists the copy launches between devices; BytesByLink sums
	// their bytes by link kind ("NV2", "PIX", "SYS", "host" when staged).
	Copies      []CopyReport
	BytesByLink map[string]int64
	// Makespan is the modeled finish time of the placement (compute
	// estimates and modeled transfers), for multi-device runs.
	Makespan  time.Duration
	Placement string
	// Lost is the device that reported its loss during the run (see
	// Executor.Execute), or nil;
	// Migrations lists the kernels moved off it and Reruns the kernels
	// that had succeeded but ran again because their output was lost with
	// the device. Launches then holds both phases: the first phase's
	// superseded launches have status lost.
	Lost       *topology.DeviceID
	Migrations []Migration
	Reruns     []string
	// Backend is the GPU backend's metrics snapshot at the end of the run,
	// when the executor was given one (WithBackend).
	Backend *lease.MetricsSnapshot
	// Ran says how the run was submitted: RanPlan ("ran plan": Execute,
	// Run, and the run Executor.Capture records) or ReplayedCapture
	// ("replayed capture": Capture.Replay).
	Ran RunKind

	phases []*outcomes // the run's phases, in order
	once   sync.Once
	built  []LaunchReport
}

// NumLaunches returns how many launches the run had (both phases after a
// device loss), without building Launches.
func (r *Report) NumLaunches() int {
	n := 0
	for _, o := range r.phases {
		n += len(o.status)
	}
	return n
}

// Launches returns every launch's outcome in plan order (after a device
// loss: the first phase's launches, then the recovery's). It is built on
// the first call and shared by later ones: callers must not modify it.
// Safe for concurrent use.
func (r *Report) Launches() []LaunchReport {
	r.once.Do(func() {
		r.built = make([]LaunchReport, 0, r.NumLaunches())
		for _, o := range r.phases {
			for i := range o.status {
				r.built = append(r.built, o.report(i)) // by plan index
			}
		}
	})
	return r.built
}

// report expands launch i of o.
func (o *outcomes) report(i int) LaunchReport {
	p := o.plan
	op := &p.launches[i]
	x := o.detail(i)
	lr := LaunchReport{Kernel: op.Name, Device: p.devices[op.Device], Stream: op.Stream, Status: o.get(i),
		Failure: x.failure, Err: x.err, Chain: x.chain}
	// A lost launch ran when it has an end: its work was superseded by
	// the recovery after it finished.
	if k := int(o.slot[i]); o.times != nil && (lr.Status == StatusOK || lr.Status == StatusFailed ||
		lr.Status == StatusLost && o.times[2*k+1] != 0) {
		lr.Start, lr.End = o.base.Add(time.Duration(o.times[2*k])), o.base.Add(time.Duration(o.times[2*k+1]))
	}
	return lr
}

// DevicesUsed returns the devices that hold at least one launch of the
// run (of either phase after a device loss, the lost device included), in
// the order of Devices. It is O(L) in the number of launches.
func (r *Report) DevicesUsed() []topology.DeviceID {
	used := make([]bool, len(r.Devices))
	var extra []topology.DeviceID
	for _, o := range r.phases {
		for i := range o.plan.launches {
			d := o.plan.devices[o.plan.launches[i].Device]
			if j := slices.Index(r.Devices, d); j >= 0 {
				used[j] = true
			} else if !slices.Contains(extra, d) {
				extra = append(extra, d)
			}
		}
	}
	var out []topology.DeviceID
	for j, u := range used {
		if u {
			out = append(out, r.Devices[j])
		}
	}
	return append(out, extra...)
}

// Count returns how many launches ended with status s.
func (r *Report) Count(s Status) int {
	n := 0
	for _, o := range r.phases {
		n += bytes.Count(o.status, []byte{byte(s)})
	}
	return n
}

// Err returns nil when every launch is ok (a launch lost with its device
// was redone by the recovery phase, which says how it ended) and no
// buffer is left unreadable, else every root failure of the run, each
// once, joined: the error of each failed launch; the root error of each
// other failure that skipped or cancelled launches (a reservation over the
// budget, a kernel pinned to a lost device, ctx's error), in plan order;
// the root of each other failure left in the run's final error graph,
// but a cancellation (a reservation nobody needed, a kernel that could
// not follow a lost device, whose output nobody read), in id order; and
// last one error counting the skipped and cancelled
// launches. errors.Is and errors.As see each root.
func (r *Report) Err() error {
	var errs []error
	for k, o := range r.phases {
		seen := map[failgraph.FailureID]bool{} // failure ids are per phase
		for i := range o.status {
			if o.get(i) == StatusFailed {
				x := o.detail(i)
				seen[x.failure] = true
				errs = append(errs, x.err)
			}
		}
		for i := range o.status {
			if s := o.get(i); s != StatusSkipped && s != StatusCancelled {
				continue
			}
			x := o.detail(i)
			if x.err == nil || x.failure != 0 && seen[x.failure] {
				continue
			}
			seen[x.failure] = true
			errs = append(errs, fmt.Errorf("exec: kernel %q %s: %w", o.plan.launches[i].Name, o.get(i), x.err))
		}
		if k < len(r.phases)-1 {
			continue // a recovery phase followed: its graph is the run's
		}
		for _, f := range o.roots {
			// A cancellation is told by its cancelled launches; one that
			// no launch met holds what a lost device took.
			if !seen[f.ID] && !errors.Is(f.Root, failgraph.ErrCancelled) {
				seen[f.ID] = true
				errs = append(errs, f.Root)
			}
		}
	}
	if n, c := r.Count(StatusSkipped), r.Count(StatusCancelled); n+c > 0 { // lost launches were redone
		errs = append(errs, fmt.Errorf("exec: %s skipped%s, %d cancelled", plural(n, "launch", "launches"), r.skippedNames(3), c))
	}
	return errors.Join(errs...)
}

// newReport builds the report of one run phase. Skipped launches got
// their root error and chain when they were skipped (failgraph's
// CheckReads).
func newReport(p *Plan, o *outcomes, store *failgraph.Store, topo *topology.Topology) *Report {
	rep := &Report{Device: p.devices[0], Devices: p.devices, Streams: slices.Clone(p.streams),
		Waits: p.waits, LaunchTiming: o.times != nil, BytesByLink: map[string]int64{}, phases: []*outcomes{o}}
	if len(p.devices) > 1 {
		rep.Makespan, rep.Placement = p.placement.Makespan, p.placement.Strategy.String()
	}
	if p.copies > 0 {
		for i := range p.launches {
			if c := p.launches[i].Copy; c != nil {
				cr := copyReport(p, topo, c, o.detail(i).copied, o.get(i))
				rep.Copies = append(rep.Copies, cr)
				link := cr.Link
				if cr.ViaHost {
					link = "host"
				}
				rep.BytesByLink[link] += cr.Bytes
			}
		}
	}
	return rep
}

func copyReport(p *Plan, topo *topology.Topology, c *Copy, copied int64, status Status) CopyReport {
	from, to := p.devices[c.From], p.devices[c.To]
	cr := CopyReport{Buffer: p.graph.Buffer(c.Buffer).Name, From: from, To: to, Bytes: copied, Status: status, Route: "direct"}
	if topo == nil {
		return cr
	}
	if link, ok := topo.Link(from, to); ok {
		cr.Link = link.Kind.String()
		if link.Kind == topology.LinkNVLink {
			cr.Link = fmt.Sprintf("NV%d", link.NVLinks)
		}
	}
	if r, err := topo.Route(cr.Bytes, from, to); err == nil {
		cr.Modeled = r.Cost
		switch r.Kind {
		case topology.RouteViaHost:
			cr.Route, cr.ViaHost = "via host", true
		case topology.RouteViaGPU:
			cr.Route = "via " + r.Path[1].String()
		}
	}
	return cr
}

// Result holds a finished run's buffers and report. Buffers are read only
// through the error graph's read check. Close releases them; a Result is
// safe for concurrent reads.
type Result struct {
	Report *Report
	graph  *dag.Graph
	run    *run
	store  *failgraph.Store
}

// Err is Report.Err.
func (r *Result) Err() error { return r.Report.Err() }

// Buffer returns buffer id when every byte of it was last written by work
// that succeeded (or it is an input nobody overwrote). Otherwise it
// returns a *failgraph.UnwrittenError per failure found (joined with
// errors.Join when the buffer's bytes hold several failures, else the
// one error itself), naming the root error and the chain of kernels back
// to it; errors.Unwrap walks that chain one link at a time, through a
// *failgraph.SkipError per skipped kernel, to the root kernel's error
// (see the package doc). After Close it returns an error matching
// ErrResultClosed. An unknown id is an error, and so is one the graph
// gained after it was planned.
// Bytes the run left on a code device alone (written by device code there
// and read by no launch elsewhere, so no run copies them back) are copied
// home, with their taint, by the first Buffer or Value of the buffer; the
// run's device memory is held until Close for that.
func (r *Result) Buffer(id dag.BufferID) (*buffers.Buffer, error) {
	if id < 0 || int(id) >= r.run.plan.nbuffers {
		return nil, fmt.Errorf("exec: result has no buffer id %d", id)
	}
	if r.run.bufs == nil {
		return nil, fmt.Errorf("%w: cannot read buffer %q", ErrResultClosed, r.graph.Buffer(id).Name)
	}
	if r.run.plan.fetch != nil {
		r.run.fetch(id)
	}
	if err := r.store.EnsureWritten(r.graph.Buffer(id).Whole()); err != nil {
		return nil, err
	}
	return r.run.buffer(buffers.ID(id)), nil
}

// Value returns the value held by buffer id, through the same read check
// as Buffer.
func (r *Result) Value(id dag.BufferID) (any, error) {
	b, err := r.Buffer(id)
	if err != nil {
		return nil, err
	}
	return b.Value(), nil
}

// Get returns the value of h's buffer in r as the handle's type T,
// through the same read check as Result.Buffer: the read's
// *failgraph.UnwrittenError when failed or skipped work left it
// unwritten, ErrResultClosed after Close, and an error naming the buffer
// when it holds nothing or a value of another type. Like Result.Value it
// must not run concurrently with Close.
func Get[T any](r *Result, h dag.Value[T]) (T, error) {
	var zero T
	v, err := r.Value(h.ID())
	if err != nil {
		return zero, err
	}
	if t, ok := v.(T); ok {
		return t, nil
	}
	held := "nothing"
	if v != nil {
		held = fmt.Sprintf("%T", v)
	}
	return zero, fmt.Errorf("exec: buffer %q holds %s, not %v", r.graph.Buffer(h.ID()).Name, held, reflect.TypeFor[T]())
}

// Failures returns a read-only view of the run's error graph: its
// failures, the read check and the exported graph. Nothing done through it
// can clear a taint, so Buffer and Value keep refusing bytes that failed
// work left unwritten.
func (r *Result) Failures() failgraph.View { return r.store.View() }

// Close releases every buffer of the run; Buffer and Value then return
// ErrResultClosed. It returns nil, on the first call and on every later
// one (it is idempotent), and must not run concurrently with Buffer or
// Value.
func (r *Result) Close() error {
	r.run.release()
	return nil
}

// ErrResultClosed is returned (wrapped, naming the buffer: "exec: result
// closed: cannot read buffer "x"") by Buffer and Value after Close.
var ErrResultClosed = errors.New("exec: result closed")

// MarshalJSON writes the report as
//
//	{"launches":[{"kernel","device","stream","status","failure","error","chain":[...],"start_ns","end_ns"}],
//	 "counts":{"ok","failed","skipped","cancelled","lost"},
//	 "waits":N,"wall_ns":N,"launch_timing":B,"devices":["gpu0",…],"streams_per_device":N,
//	 "copies":[{"buffer","from","to","bytes","modeled_ns","route","link","via_host","status"}],
//	 "bytes_by_link":{"NV2":N,…},"placement":"heft","makespan_ns":N,
//	 "lost_device","migrations":[{"kernel","from","to"}],"reruns":[...],"backend":{…},
//	 "ran":"ran plan"|"replayed capture"}
//
// failure is 0 and error "" for ok launches; error is the first line of
// the launch's error (a panic's stack is left out); start_ns and end_ns
// count from the run's first start, 0 for a launch that did not run and
// for every launch when launch_timing is false (see WithLaunchTiming).
// devices are DevicesUsed. copies, bytes_by_link, placement and
// makespan_ns are left out of single-device runs (which copy nothing),
// lost_device, migrations and reruns out of runs that lost no device.
// counts covers every launch of both phases after a device loss.
func (r *Report) MarshalJSON() ([]byte, error) {
	type launch struct {
		Kernel  string   `json:"kernel"`
		Device  string   `json:"device"`
		Stream  int      `json:"stream"`
		Status  Status   `json:"status"`
		Failure uint64   `json:"failure"`
		Error   string   `json:"error"`
		Chain   []string `json:"chain"`
		StartNs int64    `json:"start_ns"`
		EndNs   int64    `json:"end_ns"`
	}
	type copyJSON struct {
		Buffer    string `json:"buffer"`
		From      string `json:"from"`
		To        string `json:"to"`
		Bytes     int64  `json:"bytes"`
		ModeledNs int64  `json:"modeled_ns"`
		Route     string `json:"route"`
		Link      string `json:"link"`
		ViaHost   bool   `json:"via_host"`
		Status    Status `json:"status"`
	}
	out := struct {
		Launches    []launch               `json:"launches"`
		Counts      map[string]int         `json:"counts"`
		Waits       int                    `json:"waits"`
		WallNs      int64                  `json:"wall_ns"`
		Timing      bool                   `json:"launch_timing"`
		Devices     []string               `json:"devices"`
		Streams     []int                  `json:"streams_per_device"`
		Copies      []copyJSON             `json:"copies,omitempty"`
		BytesByLink map[string]int64       `json:"bytes_by_link,omitempty"`
		Placement   string                 `json:"placement,omitempty"`
		MakespanNs  int64                  `json:"makespan_ns,omitempty"`
		Lost        string                 `json:"lost_device,omitempty"`
		Migrate     []map[string]string    `json:"migrations,omitempty"`
		Reruns      []string               `json:"reruns,omitempty"`
		Backend     *lease.MetricsSnapshot `json:"backend,omitempty"`
		Ran         RunKind                `json:"ran"`
	}{Ran: r.Ran, Launches: make([]launch, r.NumLaunches()), Counts: map[string]int{}, Waits: r.Waits, WallNs: r.Wall.Nanoseconds(), Timing: r.LaunchTiming,
		Devices: []string{}, Streams: r.Streams, BytesByLink: r.BytesByLink, Placement: r.Placement,
		MakespanNs: r.Makespan.Nanoseconds(), Backend: r.Backend}
	for _, s := range []Status{StatusOK, StatusFailed, StatusSkipped, StatusCancelled, StatusLost} {
		out.Counts[s.String()] = r.Count(s)
	}
	for _, d := range r.DevicesUsed() {
		out.Devices = append(out.Devices, d.String())
	}
	for _, c := range r.Copies {
		out.Copies = append(out.Copies, copyJSON{Buffer: c.Buffer, From: c.From.String(), To: c.To.String(), Bytes: c.Bytes,
			ModeledNs: c.Modeled.Nanoseconds(), Route: c.Route, Link: c.Link, ViaHost: c.ViaHost, Status: c.Status})
	}
	if r.Lost != nil {
		out.Lost = r.Lost.String()
	}
	for _, m := range r.Migrations {
		out.Migrate = append(out.Migrate, map[string]string{"kernel": m.Kernel, "from": m.From.String(), "to": m.To.String()})
	}
	out.Reruns = r.Reruns
	ls := r.Launches()
	var t0 time.Time
	for i := range ls {
		if s := ls[i].Start; !s.IsZero() && (t0.IsZero() || s.Before(t0)) {
			t0 = s
		}
	}
	for i := range ls {
		l := &ls[i]
		j := launch{Kernel: l.Kernel, Device: l.Device.String(), Stream: l.Stream, Status: l.Status,
			Failure: uint64(l.Failure), Chain: l.Chain}
		if j.Chain == nil {
			j.Chain = []string{}
		}
		if l.Err != nil {
			j.Error, _, _ = strings.Cut(l.Err.Error(), "\n")
		}
		if !l.Start.IsZero() {
			j.StartNs, j.EndNs = l.Start.Sub(t0).Nanoseconds(), l.End.Sub(t0).Nanoseconds()
		}
		out.Launches[i] = j
	}
	return json.Marshal(out)
}

// plural returns "1 launch" or "n launches".
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}

// skippedNames returns " (a, b, c, …)": the kernels of the first max
// skipped launches of the last phase, in plan order, or "" when none.
func (r *Report) skippedNames(max int) string {
	var names []string
	more := false
	for _, l := range r.Launches() {
		if l.Status != StatusSkipped {
			continue
		}
		if len(names) == max {
			more = true
			break
		}
		names = append(names, l.Kernel)
	}
	if len(names) == 0 {
		return ""
	}
	if more {
		names = append(names, "…")
	}
	return " (" + strings.Join(names, ", ") + ")"
}
