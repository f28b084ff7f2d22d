package exec

import (
	"bufio"
	"cmp"
	"encoding/json"
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
	traceCatLaunch    = "launch"
	traceCatFailed    = "launch,failed"
	traceCatSkipped   = "launch,skipped"
	traceCatCancelled = "launch,cancelled"
	traceCatCopy      = "launch,copy"
	traceCatWait      = "event-wait"
	cnameCopy         = "olive"
	cnameFailed       = "terrible"
	cnameSkipped      = "grey"
	cnameCancelled    = "yellow"
)

// WriteTrace writes r as a Chrome/Perfetto trace without flow arrows; it is
// WriteTrace(w, nil, r).
func (r *Report) WriteTrace(w io.Writer) error { return WriteTrace(w, nil, r) }

// WriteTrace writes the run report r as Chrome trace-event JSON that
// Perfetto's UI (ui.perfetto.dev, "Open trace file") and chrome://tracing
// open: one process per device that ran a launch (and the report's first
// device), one track per stream of it ("cpu stream 0", "gpu3 stream 1"),
// one slice per launch that ran, named after its kernel, with args
// kernel, status, failure, error, stream, plan index and the bytes of raw
// buffers it reads and writes (the latter two when p is given). Copy
// launches between devices are "launch,copy" slices (olive) on the
// destination's stream, with copy_from, copy_to and copy_bytes. Failed
// launches are coloured "terrible" (red) with category "launch,failed";
// skipped and cancelled launches, which never ran, are instant events
// (category "launch,skipped" / "launch,cancelled") placed where their
// stream reached them, with the chain back to the root failure in args.
//
// When p is the plan r was run from (len(p.Launches) == len(r.Launches())),
// every event wait of the plan becomes a flow arrow ("s" on the launch
// waited for, "f" bound to the waiting launch), so the trace shows why a
// stream stalled. A p of another length is an error; a nil p gives no
// arrows. Events of one track are written in time order.
//
// WriteTrace buffers its output and returns the first write error.
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
	other, err := json.Marshal(map[string]any{
		"device": r.Device.String(), "streams": r.Streams, "launches": len(r.Launches()),
		"waits": r.Waits, "wall_ns": r.Wall.Nanoseconds(),
	})
	if err != nil {
		return err
	}
	bw.WriteString("\n],\"otherData\":")
	bw.Write(other)
	bw.WriteString("}\n")
	return bw.Flush()
}

// traceTrack is one (device, stream) pair.
type traceTrack struct {
	dev    topology.DeviceID
	stream int
}

// TraceEvents returns the events WriteTrace writes, metadata first, then
// every track's events in time order (tracks ordered by device, then
// stream). See WriteTrace for p.
func TraceEvents(p *Plan, r *Report) ([]TraceEvent, error) {
	if p != nil && len(p.Launches) != len(r.Launches()) {
		return nil, fmt.Errorf("exec: trace: plan has %d launches, report %d", len(p.Launches), len(r.Launches()))
	}
	// Processes: the report's first device, and every device with a
	// launch, in the report's device order; pid = position+1. Every
	// stream of those devices gets a track.
	used := map[topology.DeviceID]bool{r.Device: true}
	for i := range r.Launches() {
		used[r.Launches()[i].Device] = true
	}
	var devs []topology.DeviceID
	for _, d := range append([]topology.DeviceID{r.Device}, r.Devices...) {
		if used[d] && !slices.Contains(devs, d) {
			devs = append(devs, d)
		}
	}
	for i := range r.Launches() { // devices the report does not list
		if d := r.Launches()[i].Device; !slices.Contains(devs, d) {
			devs = append(devs, d)
		}
	}
	pids := map[topology.DeviceID]int{}
	tracks := map[traceTrack]bool{}
	for i, d := range devs {
		pids[d] = i + 1
		for s := range r.Streams {
			tracks[traceTrack{d, s}] = true
		}
	}
	for i := range r.Launches() {
		tracks[traceTrack{r.Launches()[i].Device, r.Launches()[i].Stream}] = true
	}

	var events []TraceEvent
	for _, d := range devs {
		pid := pids[d]
		events = append(events,
			TraceEvent{Name: "process_name", Ph: "M", Pid: pid, Args: map[string]any{"name": d.String()}},
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
	for i := range r.Launches() {
		if s := r.Launches()[i].Start; !s.IsZero() && (t0.IsZero() || s.Before(t0)) {
			t0 = s
		}
	}
	us := func(t time.Time) float64 { return float64(t.Sub(t0).Nanoseconds()) / 1e3 }

	// at[i] is where launch i sits on its track: its start, or for a launch
	// that never ran, the end of the last launch its stream ran before it.
	at := make([]float64, len(r.Launches()))
	cursor := map[traceTrack]float64{}
	for i := range r.Launches() {
		l := &r.Launches()[i]
		tr := traceTrack{l.Device, l.Stream}
		pid, tid := pids[l.Device], l.Stream+1
		args := map[string]any{"kernel": l.Kernel, "status": l.Status.String(), "failure": uint64(l.Failure),
			"error": traceError(l.Err), "stream": l.Stream, "launch": i}
		isCopy := false
		if p != nil {
			pl := &p.Launches[i]
			args["read_bytes"], args["write_bytes"] = p.rawBytes(pl.Reads), p.rawBytes(pl.Writes)
			if c := pl.Copy; c != nil {
				isCopy = true
				args["copy_from"], args["copy_to"] = p.Devices[c.From].String(), p.Devices[c.To].String()
				args["copy_bytes"] = c.Bytes
			}
		}
		if !l.Start.IsZero() {
			ts, dur := us(l.Start), float64(l.End.Sub(l.Start).Nanoseconds())/1e3
			ev := TraceEvent{Name: l.Kernel, Cat: traceCatLaunch, Ph: "X", Ts: ts, Dur: &dur, Pid: pid, Tid: tid, Args: args}
			if isCopy {
				ev.Cat, ev.Cname = traceCatCopy, cnameCopy
			}
			if l.Status == StatusFailed {
				ev.Cat, ev.Cname = traceCatFailed, cnameFailed
			}
			events = append(events, ev)
			at[i] = ts
			cursor[tr] = max(cursor[tr], ts+dur)
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
		default:
			ev.Cat, ev.Cname = traceCatCancelled, cnameCancelled
		}
		events = append(events, ev)
	}

	if p != nil {
		var id uint64
		for i := range p.Launches {
			for _, wt := range p.Launches[i].Waits {
				if wt.Launch < 0 || wt.Launch >= len(r.Launches()) {
					return nil, fmt.Errorf("exec: trace: launch %d waits on launch %d of %d", i, wt.Launch, len(r.Launches()))
				}
				id++
				src, dst := &r.Launches()[wt.Launch], &r.Launches()[i]
				args := map[string]any{"stream": wt.Stream, "seq": wt.Seq}
				// "s" at the start of the source slice (inside it, so it binds
				// to it), "f" bound to the enclosing slice of the waiting launch.
				sts := at[wt.Launch]
				events = append(events,
					TraceEvent{Name: "wait", Cat: traceCatWait, Ph: "s", Ts: sts, Pid: pids[src.Device], Tid: src.Stream + 1, ID: id, Args: args},
					TraceEvent{Name: "wait", Cat: traceCatWait, Ph: "f", Bp: "e", Ts: at[i], Pid: pids[dst.Device], Tid: dst.Stream + 1, ID: id, Args: args})
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
		if int(b.Buffer) < len(p.Buffers) && !p.Buffers[b.Buffer].Value {
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
