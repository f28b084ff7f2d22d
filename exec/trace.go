package exec

import (
	"bufio"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/topology"
)

// TraceEvent is one event of the Chrome trace-event format ("JSON Array
// Format" inside a {"traceEvents": [...]} object; see Google's "Trace Event
// Format" document, which Perfetto's UI and chrome://tracing both read).
// WriteTrace emits these phases:
//
//   - "M" metadata: process_name (one process per device), thread_name (one
//     thread per stream, named like "cpu stream 0"), and their sort indices;
//   - "X" complete events: one per launch whose kernel ran, Ts and Dur in
//     microseconds since the run's first launch started;
//   - "i" instant events (thread scope): launches that were skipped or
//     cancelled, at the time their stream reached them;
//   - "s"/"f" flow events: one arrow per event wait of the plan, from the
//     launch waited for to the launch that waited (same ID on both ends).
type TraceEvent struct {
	Name  string         `json:"name"`
	Cat   string         `json:"cat,omitempty"`
	Ph    string         `json:"ph"`
	Ts    float64        `json:"ts"`
	Dur   *float64       `json:"dur,omitempty"` // "X" only
	Pid   int            `json:"pid"`
	Tid   int            `json:"tid"`
	ID    uint64         `json:"id,omitempty"` // "s" and "f": the flow id
	Bp    string         `json:"bp,omitempty"` // "f": "e" binds to the enclosing slice
	S     string         `json:"s,omitempty"`  // "i": scope, "t" (thread)
	Cname string         `json:"cname,omitempty"`
	Args  map[string]any `json:"args,omitempty"`
}

// Trace categories and colours (Chrome's reserved colour names, which
// Perfetto's legacy importer also honours).
const (
	traceCatLaunch     = "launch"
	traceCatFailed     = "launch,failed"
	traceCatSkipped    = "launch,skipped"
	traceCatCancelled  = "launch,cancelled"
	traceCatCopy       = "launch,copy"
	traceCatLost       = "launch,lost"
	traceCatWait       = "event-wait"
	traceCatLostDevice = "device-lost"
	cnameCopy          = "olive"
	cnameLost          = "bad"
	cnameFailed        = "terrible"
	cnameSkipped       = "grey"
	cnameCancelled     = "yellow"
)

// WriteTrace writes r as a Chrome/Perfetto trace without flow arrows; it is
// WriteTrace(w, nil, r).
func (r *Report) WriteTrace(w io.Writer) error { return WriteTrace(w, nil, r) }

// WriteTrace writes the run report r as Chrome trace-event JSON that
// Perfetto's UI (ui.perfetto.dev, "Open trace file") and chrome://tracing
// open: one process per device that ran a launch (and the report's first
// device), one track per stream of it ("cpu stream 0", "gpu3 stream 1"),
// one slice per launch that ran, named after its kernel, with args
// kernel, status, failure, error, stream, launch (the index in
// r.Launches()) and read_bytes and write_bytes, the bytes of raw
// buffers it reads and writes (when p is given, each left out when 0:
// value buffers are not counted). Copy launches between devices are
// "launch,copy" slices (olive) on the destination's stream, with
// copy_from, copy_to and copy_bytes. Failed launches are coloured
// "terrible" (red) with category "launch,failed"; skipped and cancelled
// launches, which never ran, are instant events (category
// "launch,skipped" / "launch,cancelled") placed where their stream
// reached them, with the chain back to the root failure in args.
//
// A run that lost a device (see Executor.Execute) is traced with both phases:
// the lost device's process is named "gpu3 (lost)"; a process-wide
// instant "gpu3 lost" (category "device-lost", args device, migrations,
// moved, reruns) marks the end of the first phase, where the recovery
// began; every launch has arg phase (1 or 2); first-phase launches whose
// work the recovery redid have status lost (category "launch,lost",
// coloured "bad": a slice when they had run, an instant when not); and
// the recovery's launches carry moved_from (the lost device) for kernels
// the migration plan moved, and rerun: true for kernels that had
// succeeded and ran again.
//
// When p is the plan r was run from (the plan given to Execute; each
// later phase's plan is taken from r), every event wait of every phase
// becomes a flow arrow ("s" on the launch waited for, "f" bound to the
// waiting launch), so the trace shows why a stream stalled. A p whose
// launch count differs from the first phase's is an error; a nil p gives
// no arrows and no byte counts. Events of one track are written in time
// order. The object's otherData holds devices (Report.DevicesUsed),
// streams_per_device, launches, waits, wall_ns, ran (Report.Ran: "ran
// plan" or "replayed capture"), and lost_device after a loss.
//
// The run must have had launch timing (WithLaunchTiming(true)): a report
// without it has no start or end to place a launch at, and is
// ErrNoLaunchTiming, with nothing written. WriteTrace buffers its output
// and returns the first write error.
// It is O(L log L) in the number of launches.
func WriteTrace(w io.Writer, p *Plan, r *Report) error {
	events, err := TraceEvents(p, r)
	if err != nil {
		return err
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	if _, err := bw.WriteString(`{"displayTimeUnit":"ns","traceEvents":[`); err != nil {
		return err
	}
	for i := range events {
		if i > 0 {
			bw.WriteByte(',')
		}
		bw.WriteString("\n")
		b, err := json.Marshal(&events[i])
		if err != nil {
			return fmt.Errorf("exec: trace event %d: %w", i, err)
		}
		bw.Write(b)
	}
	used := r.DevicesUsed()
	names := make([]string, len(used))
	for i, d := range used {
		names[i] = d.String()
	}
	other := map[string]any{"devices": names, "streams_per_device": r.Streams, "launches": r.NumLaunches(),
		"waits": r.Waits, "wall_ns": r.Wall.Nanoseconds(), "ran": r.Ran.String()}
	if r.Lost != nil {
		other["lost_device"] = r.Lost.String()
	}
	otherJSON, err := json.Marshal(other)
	if err != nil {
		return err
	}
	bw.WriteString("\n],\"otherData\":")
	bw.Write(otherJSON)
	bw.WriteString("}\n")
	return bw.Flush()
}

// traceTrack is one (device, stream) pair.
type traceTrack struct {
	dev    topology.DeviceID
	stream int
}

// tracePhase is one phase of a run as the trace sees it: its plan, and
// where its launches start in Report.Launches.
type tracePhase struct {
	plan  *Plan
	first int
}

// tracePhases returns r's phases. A non-nil p stands for the first
// phase's plan and must have as many launches; a report built without
// phases (a zero Report) has none.
func tracePhases(p *Plan, r *Report) ([]tracePhase, error) {
	var phases []tracePhase
	n := 0
	for _, o := range r.phases {
		phases = append(phases, tracePhase{plan: o.plan, first: n})
		n += len(o.status)
	}
	if p == nil {
		return phases, nil
	}
	first := 0
	if len(phases) > 0 {
		first = len(r.phases[0].status)
	}
	if len(p.launches) != first {
		return nil, fmt.Errorf("exec: trace: plan has %d launches, report %d", len(p.launches), first)
	}
	if len(phases) > 0 {
		phases[0].plan = p
	}
	return phases, nil
}

// ErrNoLaunchTiming is returned by WriteTrace and TraceEvents for the
// report of a run without launch timing (see WithLaunchTiming).
var ErrNoLaunchTiming = errors.New("exec: trace needs launch times: run with WithLaunchTiming(true)")

// TraceEvents returns the events WriteTrace writes, metadata first, then
// every track's events in time order (tracks ordered by device, then
// stream). See WriteTrace for p. A report of a run without launch timing
// is ErrNoLaunchTiming.
func TraceEvents(p *Plan, r *Report) ([]TraceEvent, error) {
	if len(r.phases) > 0 && !r.LaunchTiming {
		return nil, ErrNoLaunchTiming
	}
	phases, err := tracePhases(p, r)
	if err != nil {
		return nil, err
	}
	ls := r.Launches()
	devs := traceDevices(r, ls)
	pids := make(map[topology.DeviceID]int, len(devs))
	for i, d := range devs {
		pids[d] = i + 1
	}
	events := traceMetadata(r, devs, traceTracks(r, ls, devs, pids), pids)
	meta := len(events)

	tl := newTraceLaunches(r, ls, pids)
	for ph, phase := range phases {
		events = tl.phase(events, ph, phase, p != nil)
	}
	if r.Lost != nil {
		events, meta = traceLostDevice(events, meta, r, pids, tl.recovery)
	}
	if p != nil {
		flows, err := traceFlows(phases, ls, tl.at, pids)
		if err != nil {
			return nil, err
		}
		events = append(events, flows...)
	}
	// Time order per track; metadata stays first.
	body := events[meta:]
	slices.SortStableFunc(body, func(a, b TraceEvent) int {
		return cmp.Or(cmp.Compare(a.Pid, b.Pid), cmp.Compare(a.Tid, b.Tid), cmp.Compare(a.Ts, b.Ts))
	})
	return events, nil
}

// traceDevices returns the trace's processes in pid order (pid =
// position+1): the report's first device and every device of ls, in the
// report's device order (r.Device, then r.Devices), then the devices of
// ls that the report does not list, in launch order. Each appears once.
func traceDevices(r *Report, ls []LaunchReport) []topology.DeviceID {
	used := map[topology.DeviceID]bool{r.Device: true}
	for i := range ls {
		used[ls[i].Device] = true
	}
	var devs []topology.DeviceID
	for _, d := range append([]topology.DeviceID{r.Device}, r.Devices...) {
		if used[d] && !slices.Contains(devs, d) {
			devs = append(devs, d)
		}
	}
	for i := range ls { // devices the report does not list
		if d := ls[i].Device; !slices.Contains(devs, d) {
			devs = append(devs, d)
		}
	}
	return devs
}

// traceTracks returns the trace's threads, ordered by pid, then stream:
// every stream the report gives a device of devs (r.Streams), and the
// stream of every launch of ls. Each appears once; pids must hold every
// device of devs and ls.
func traceTracks(r *Report, ls []LaunchReport, devs []topology.DeviceID, pids map[topology.DeviceID]int) []traceTrack {
	tracks := map[traceTrack]bool{}
	for _, d := range devs {
		if k := slices.Index(r.Devices, d); k >= 0 && k < len(r.Streams) {
			for s := range r.Streams[k] {
				tracks[traceTrack{d, s}] = true
			}
		}
	}
	for i := range ls {
		tracks[traceTrack{ls[i].Device, ls[i].Stream}] = true
	}
	keys := make([]traceTrack, 0, len(tracks))
	for k := range tracks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b traceTrack) int {
		return cmp.Or(cmp.Compare(pids[a.dev], pids[b.dev]), cmp.Compare(a.stream, b.stream))
	})
	return keys
}

// traceMetadata returns the "M" events: a name and sort index for each
// process of devs (the lost device's name says so), then for each thread
// of tracks (tid = stream+1), in the order given.
func traceMetadata(r *Report, devs []topology.DeviceID, tracks []traceTrack, pids map[topology.DeviceID]int) []TraceEvent {
	var events []TraceEvent
	for _, d := range devs {
		name := d.String()
		if r.Lost != nil && *r.Lost == d {
			name += " (lost)"
		}
		events = append(events, traceProcess(pids[d], name)...)
	}
	for _, k := range tracks {
		pid, tid := pids[k.dev], k.stream+1
		events = append(events,
			TraceEvent{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": fmt.Sprintf("%s stream %d", k.dev, k.stream)}},
			TraceEvent{Name: "thread_sort_index", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"sort_index": tid}})
	}
	return events
}

// traceProcess returns the two "M" events of process pid: its name and
// its sort index (pid).
func traceProcess(pid int, name string) []TraceEvent {
	return []TraceEvent{
		{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": name}},
		{Name: "process_sort_index", Ph: "M", Pid: pid, Args: map[string]any{"sort_index": pid}},
	}
}

// traceLaunches places a report's launches on their tracks, one phase
// after another (see phase); the zero value is not usable: use
// newTraceLaunches.
type traceLaunches struct {
	r    *Report
	ls   []LaunchReport
	pids map[topology.DeviceID]int
	// t0 is the earliest start of ls: time 0 of the trace (zero when no
	// launch ran).
	t0 time.Time
	// movedFrom and rerun are what the recovery did, by kernel: moved off
	// the lost device (its name), or run again although it had succeeded.
	movedFrom map[string]string
	rerun     map[string]bool
	// at[i] is where launch i sits on its track, in microseconds: its
	// start, or for a launch that never ran, the end of the last launch
	// its stream ran before it.
	at []float64
	// cursor is, by track, the end of the last launch that ran on it.
	cursor map[traceTrack]float64
	// recovery is the end of the first phase's last launch: where the
	// recovery began.
	recovery float64
}

// newTraceLaunches returns the placer of launches ls of r; pids must hold
// the device of every launch.
func newTraceLaunches(r *Report, ls []LaunchReport, pids map[topology.DeviceID]int) *traceLaunches {
	tl := &traceLaunches{r: r, ls: ls, pids: pids, movedFrom: map[string]string{}, rerun: map[string]bool{},
		at: make([]float64, len(ls)), cursor: map[traceTrack]float64{}}
	for i := range ls {
		if s := ls[i].Start; !s.IsZero() && (tl.t0.IsZero() || s.Before(tl.t0)) {
			tl.t0 = s
		}
	}
	for _, m := range r.Migrations {
		tl.movedFrom[m.Kernel] = m.From.String()
	}
	for _, k := range r.Reruns {
		tl.rerun[k] = true
	}
	return tl
}

// us is t in microseconds since the trace's time 0.
func (tl *traceLaunches) us(t time.Time) float64 { return float64(t.Sub(tl.t0).Nanoseconds()) / 1e3 }

// phase appends to events one event per launch of phase number ph (0 for
// the first) and returns them: a slice for a launch that ran (see ran),
// an instant for one that did not (see notRun). Phases must come in
// order: a later phase's tracks start after the first phase ended. With
// withPlan, the launches' args carry their plan's byte counts and copies
// (see planArgs).
func (tl *traceLaunches) phase(events []TraceEvent, ph int, phase tracePhase, withPlan bool) []TraceEvent {
	if ph > 0 { // a phase's streams start after the previous phase
		for k := range tl.cursor {
			tl.cursor[k] = max(tl.cursor[k], tl.recovery)
		}
	}
	for j := range len(tl.r.phases[ph].status) {
		i := phase.first + j
		args := tl.args(i, ph)
		isCopy := false
		if withPlan {
			isCopy = planArgs(args, phase.plan, j)
		}
		if tl.ls[i].Start.IsZero() {
			events = append(events, tl.notRun(i, args))
		} else {
			events = append(events, tl.ran(i, ph, isCopy, args))
		}
	}
	return events
}

// args returns the args of launch i of phase ph: its kernel, status,
// failure, error, stream and index; after a device loss also its phase
// (1-based) and, in the recovery, moved_from and rerun where they apply.
func (tl *traceLaunches) args(i, ph int) map[string]any {
	l := &tl.ls[i]
	args := map[string]any{"kernel": l.Kernel, "status": l.Status.String(), "failure": uint64(l.Failure),
		"error": traceError(l.Err), "stream": l.Stream, "launch": i}
	if tl.r.Lost == nil {
		return args
	}
	args["phase"] = ph + 1
	if ph > 0 {
		if from, ok := tl.movedFrom[l.Kernel]; ok {
			args["moved_from"] = from
		}
		if tl.rerun[l.Kernel] {
			args["rerun"] = true
		}
	}
	return args
}

// planArgs adds to args what plan says of its launch j: read_bytes and
// write_bytes (raw buffers only: a value buffer's size is not known here;
// each left out when 0) and, for a copy, copy_from, copy_to and
// copy_bytes. It reports whether the launch is a copy.
func planArgs(args map[string]any, plan *Plan, j int) bool {
	pl := &plan.launches[j]
	if n := plan.rawBytes(pl.Reads); n > 0 {
		args["read_bytes"] = n
	}
	if n := plan.rawBytes(pl.Writes); n > 0 {
		args["write_bytes"] = n
	}
	c := pl.Copy
	if c == nil {
		return false
	}
	args["copy_from"], args["copy_to"] = plan.devices[c.From].String(), plan.devices[c.To].String()
	args["copy_bytes"] = c.Bytes
	return true
}

// ran returns the "X" slice of launch i of phase ph, which ran, with
// args, categorised failed, lost (it ran, but its work was redone), copy
// (isCopy) or a plain launch, and moves its track's cursor (and, in the
// first phase, the recovery's start) to its end.
func (tl *traceLaunches) ran(i, ph int, isCopy bool, args map[string]any) TraceEvent {
	l := &tl.ls[i]
	tr := traceTrack{l.Device, l.Stream}
	ts, dur := tl.us(l.Start), float64(l.End.Sub(l.Start).Nanoseconds())/1e3
	ev := TraceEvent{Name: l.Kernel, Cat: traceCatLaunch, Ph: "X", Ts: ts, Dur: &dur, Pid: tl.pids[l.Device], Tid: l.Stream + 1, Args: args}
	switch {
	case l.Status == StatusFailed:
		ev.Cat, ev.Cname = traceCatFailed, cnameFailed
	case l.Status == StatusLost: // ran, but its work was redone
		ev.Cat, ev.Cname = traceCatLost, cnameLost
	case isCopy:
		ev.Cat, ev.Cname = traceCatCopy, cnameCopy
	}
	tl.at[i] = ts
	tl.cursor[tr] = max(tl.cursor[tr], ts+dur)
	if ph == 0 {
		tl.recovery = max(tl.recovery, ts+dur)
	}
	return ev
}

// notRun returns the thread-scoped instant of launch i, which never ran,
// at its track's cursor, with args (plus the chain for a skipped one),
// categorised skipped, failed, lost or cancelled by its status.
func (tl *traceLaunches) notRun(i int, args map[string]any) TraceEvent {
	l := &tl.ls[i]
	tl.at[i] = tl.cursor[traceTrack{l.Device, l.Stream}]
	ev := TraceEvent{Name: l.Kernel, Ph: "i", S: "t", Ts: tl.at[i], Pid: tl.pids[l.Device], Tid: l.Stream + 1, Args: args}
	switch l.Status {
	case StatusSkipped:
		ev.Cat, ev.Cname = traceCatSkipped, cnameSkipped
		args["chain"] = strings.Join(l.Chain, " ← ")
	case StatusFailed: // failed without running: mark it like a failure
		ev.Cat, ev.Cname = traceCatFailed, cnameFailed
	case StatusLost:
		ev.Cat, ev.Cname = traceCatLost, cnameLost
	default:
		ev.Cat, ev.Cname = traceCatCancelled, cnameCancelled
	}
	return ev
}

// traceLostDevice returns events with the marks of r's lost device
// (r.Lost must be non-nil) and the new count of metadata events at their
// start: a process for the device inserted after the meta metadata
// events when no launch gave it one (its pid added to pids, after the
// others), and the process-wide "device-lost" instant at recovery (the
// first phase's end) appended, with the migrations and reruns in its
// args.
func traceLostDevice(events []TraceEvent, meta int, r *Report, pids map[topology.DeviceID]int, recovery float64) ([]TraceEvent, int) {
	if _, ok := pids[*r.Lost]; !ok { // no launch on it: give it a process
		pids[*r.Lost] = len(pids) + 1
		events = slices.Insert(events, meta, traceProcess(pids[*r.Lost], r.Lost.String()+" (lost)")...)
		meta += 2
	}
	moves := make([]string, 0, len(r.Migrations))
	for _, m := range r.Migrations {
		moves = append(moves, fmt.Sprintf("%s→%s", m.Kernel, m.To))
	}
	events = append(events, TraceEvent{Name: r.Lost.String() + " lost", Cat: traceCatLostDevice, Ph: "i", S: "p",
		Ts: recovery, Pid: pids[*r.Lost], Cname: cnameFailed, Args: map[string]any{
			"device": r.Lost.String(), "migrations": len(r.Migrations), "moved": strings.Join(moves, ", "),
			"reruns": strings.Join(r.Reruns, ", ")}})
	return events, meta
}

// traceFlows returns an "s"/"f" flow pair for every event wait of every
// phase's plan, with ids from 1 in phase and launch order: "s" at the
// start of the launch waited for (inside its slice, so it binds to it),
// "f" bound to the enclosing slice of the waiting launch; at holds each
// launch's place on its track (see traceLaunches). A wait on a launch
// outside its phase's plan or the report is an error.
func traceFlows(phases []tracePhase, ls []LaunchReport, at []float64, pids map[topology.DeviceID]int) ([]TraceEvent, error) {
	var events []TraceEvent
	var id uint64
	for _, phase := range phases {
		for j := range phase.plan.launches {
			i := phase.first + j
			for _, wt := range phase.plan.launches[j].Waits {
				w := phase.first + wt.Launch
				if wt.Launch < 0 || wt.Launch >= len(phase.plan.launches) || w >= len(ls) {
					return nil, fmt.Errorf("exec: trace: launch %d waits on launch %d of %d", i, w, len(ls))
				}
				id++
				src, dst := &ls[w], &ls[i]
				args := map[string]any{"stream": wt.Stream, "seq": wt.Seq}
				events = append(events,
					TraceEvent{Name: "wait", Cat: traceCatWait, Ph: "s", Ts: at[w], Pid: pids[src.Device], Tid: src.Stream + 1, ID: id, Args: args},
					TraceEvent{Name: "wait", Cat: traceCatWait, Ph: "f", Bp: "e", Ts: at[i], Pid: pids[dst.Device], Tid: dst.Stream + 1, ID: id, Args: args})
			}
		}
	}
	return events, nil
}

// rawBytes sums the lengths of bindings of raw buffers of the plan
// (value buffers hold a Go value, not bytes, and count 0).
func (p *Plan) rawBytes(bs []buffers.Binding) int64 {
	var n int64
	for _, b := range bs {
		if int(b.Buffer) < len(p.bufs) && !p.bufs[b.Buffer].Value {
			n += b.Length
		}
	}
	return n
}

// traceError is the first line of err, or "" when nil.
func traceError(err error) string {
	if err == nil {
		return ""
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}
