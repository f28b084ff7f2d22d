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
// A run that lost a device (WithDeviceLoss) is traced with both phases:
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
// streams_per_device, launches, waits, wall_ns, and lost_device after a
// loss.
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
		"waits": r.Waits, "wall_ns": r.Wall.Nanoseconds()}
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
	// Processes: the report's first device, and every device with a
	// launch, in the report's device order; pid = position+1. Every
	// stream of those devices gets a track.
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
	pids := map[topology.DeviceID]int{}
	tracks := map[traceTrack]bool{}
	for i, d := range devs {
		pids[d] = i + 1
		if k := slices.Index(r.Devices, d); k >= 0 && k < len(r.Streams) {
			for s := range r.Streams[k] {
				tracks[traceTrack{d, s}] = true
			}
		}
	}
	for i := range ls {
		tracks[traceTrack{ls[i].Device, ls[i].Stream}] = true
	}

	var events []TraceEvent
	for _, d := range devs {
		pid := pids[d]
		name := d.String()
		if r.Lost != nil && *r.Lost == d {
			name += " (lost)"
		}
		events = append(events,
			TraceEvent{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": name}},
			TraceEvent{Name: "process_sort_index", Ph: "M", Pid: pid, Args: map[string]any{"sort_index": pid}})
	}
	keys := make([]traceTrack, 0, len(tracks))
	for k := range tracks {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b traceTrack) int {
		return cmp.Or(cmp.Compare(pids[a.dev], pids[b.dev]), cmp.Compare(a.stream, b.stream))
	})
	for _, k := range keys {
		pid, tid := pids[k.dev], k.stream+1
		events = append(events,
			TraceEvent{Name: "thread_name", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"name": fmt.Sprintf("%s stream %d", k.dev, k.stream)}},
			TraceEvent{Name: "thread_sort_index", Ph: "M", Pid: pid, Tid: tid, Args: map[string]any{"sort_index": tid}})
	}
	meta := len(events)

	var t0 time.Time
	for i := range ls {
		if s := ls[i].Start; !s.IsZero() && (t0.IsZero() || s.Before(t0)) {
			t0 = s
		}
	}
	us := func(t time.Time) float64 { return float64(t.Sub(t0).Nanoseconds()) / 1e3 }

	// What the recovery did, by kernel: moved off the lost device, or run
	// again although it had succeeded.
	movedFrom := map[string]string{}
	for _, m := range r.Migrations {
		movedFrom[m.Kernel] = m.From.String()
	}
	rerun := map[string]bool{}
	for _, k := range r.Reruns {
		rerun[k] = true
	}

	// at[i] is where launch i sits on its track: its start, or for a launch
	// that never ran, the end of the last launch its stream ran before it.
	at := make([]float64, len(ls))
	cursor := map[traceTrack]float64{}
	recovery := 0.0 // the end of the first phase: where the recovery began
	for ph, phase := range phases {
		n := len(r.phases[ph].status)
		if ph > 0 { // a phase's streams start after the previous phase
			for k := range cursor {
				cursor[k] = max(cursor[k], recovery)
			}
		}
		for j := range n {
			i := phase.first + j
			l := &ls[i]
			tr := traceTrack{l.Device, l.Stream}
			pid, tid := pids[l.Device], l.Stream+1
			args := map[string]any{"kernel": l.Kernel, "status": l.Status.String(), "failure": uint64(l.Failure),
				"error": traceError(l.Err), "stream": l.Stream, "launch": i}
			if r.Lost != nil {
				args["phase"] = ph + 1
				if ph > 0 {
					if from, ok := movedFrom[l.Kernel]; ok {
						args["moved_from"] = from
					}
					if rerun[l.Kernel] {
						args["rerun"] = true
					}
				}
			}
			isCopy := false
			if p != nil {
				pl := &phase.plan.launches[j]
				// Raw bytes only: a value buffer's size is not known here.
				if n := phase.plan.rawBytes(pl.Reads); n > 0 {
					args["read_bytes"] = n
				}
				if n := phase.plan.rawBytes(pl.Writes); n > 0 {
					args["write_bytes"] = n
				}
				if c := pl.Copy; c != nil {
					isCopy = true
					args["copy_from"], args["copy_to"] = phase.plan.devices[c.From].String(), phase.plan.devices[c.To].String()
					args["copy_bytes"] = c.Bytes
				}
			}
			if !l.Start.IsZero() {
				ts, dur := us(l.Start), float64(l.End.Sub(l.Start).Nanoseconds())/1e3
				ev := TraceEvent{Name: l.Kernel, Cat: traceCatLaunch, Ph: "X", Ts: ts, Dur: &dur, Pid: pid, Tid: tid, Args: args}
				switch {
				case l.Status == StatusFailed:
					ev.Cat, ev.Cname = traceCatFailed, cnameFailed
				case l.Status == StatusLost: // ran, but its work was redone
					ev.Cat, ev.Cname = traceCatLost, cnameLost
				case isCopy:
					ev.Cat, ev.Cname = traceCatCopy, cnameCopy
				}
				events = append(events, ev)
				at[i] = ts
				cursor[tr] = max(cursor[tr], ts+dur)
				if ph == 0 {
					recovery = max(recovery, ts+dur)
				}
				continue
			}
			at[i] = cursor[tr]
			ev := TraceEvent{Name: l.Kernel, Ph: "i", S: "t", Ts: at[i], Pid: pid, Tid: tid, Args: args}
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
			events = append(events, ev)
		}
	}
	if r.Lost != nil {
		if _, ok := pids[*r.Lost]; !ok { // no launch on it: give it a process
			pids[*r.Lost] = len(devs) + 1
			events = slices.Insert(events, meta,
				TraceEvent{Name: "process_name", Ph: "M", Pid: pids[*r.Lost], Args: map[string]any{"name": r.Lost.String() + " (lost)"}},
				TraceEvent{Name: "process_sort_index", Ph: "M", Pid: pids[*r.Lost], Args: map[string]any{"sort_index": pids[*r.Lost]}})
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
	}

	if p != nil {
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
					// "s" at the start of the source slice (inside it, so it binds
					// to it), "f" bound to the enclosing slice of the waiting launch.
					events = append(events,
						TraceEvent{Name: "wait", Cat: traceCatWait, Ph: "s", Ts: at[w], Pid: pids[src.Device], Tid: src.Stream + 1, ID: id, Args: args},
						TraceEvent{Name: "wait", Cat: traceCatWait, Ph: "f", Bp: "e", Ts: at[i], Pid: pids[dst.Device], Tid: dst.Stream + 1, ID: id, Args: args})
				}
			}
		}
	}
	// Time order per track; metadata stays first.
	body := events[meta:]
	slices.SortStableFunc(body, func(a, b TraceEvent) int {
		return cmp.Or(cmp.Compare(a.Pid, b.Pid), cmp.Compare(a.Tid, b.Tid), cmp.Compare(a.Ts, b.Ts))
	})
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
