package exec_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/sim"
	"github.com/streamdag/streamdag/topology"
)

// traceGraph is a fan-out/fan-in over two streams with one failing branch:
// src → w0..w3 → sink, plus bad → after (skipped).
func traceGraph() *dag.Graph {
	g := dag.New()
	src := g.AddBuffer("src", 64)
	g.AddKernel("source", nop, dag.Writes(src))
	var outs []dag.BufferID
	for i := range 4 {
		o := g.AddBuffer(fmt.Sprintf("w%d", i), 8)
		outs = append(outs, o)
		g.AddKernel(fmt.Sprintf("work%d", i), nop, dag.Reads(src), dag.Writes(o))
	}
	sum := g.AddBuffer("sum", 8)
	g.AddKernel("sink", nop, dag.Reads(outs...), dag.Writes(sum))
	bad := dag.AddValue[any](g, "bad").ID()
	g.AddKernel("fails", func(context.Context, dag.Launch) error { return errors.New("boom\nsecond line") }, dag.Writes(bad))
	g.AddKernel("after", nop, dag.Reads(bad), dag.Writes(dag.AddValue[any](g, "after_out").ID()))
	return g
}

// traceFile is the JSON object WriteTrace writes.
type traceFile struct {
	DisplayTimeUnit string           `json:"displayTimeUnit"`
	TraceEvents     []map[string]any `json:"traceEvents"`
	OtherData       map[string]any   `json:"otherData"`
}

// checkTraceFormat checks events against the trace-event format: the
// fields each phase requires, time order per track, and flow ids that
// pair one "s" with one "f", each bound to a launch event of its track.
// It returns the number of flows.
func checkTraceFormat(t *testing.T, tf traceFile) int {
	t.Helper()
	type track struct{ pid, tid float64 }
	last := map[track]float64{}
	slices := map[track][][2]float64{} // [ts, end] of "X" and "i" events
	starts, finishes := map[float64]int{}, map[float64]int{}
	num := func(e map[string]any, key string) float64 {
		v, ok := e[key].(float64)
		require.True(t, ok, "event %v: %q must be a number", e, key)
		return v
	}
	str := func(e map[string]any, key string) string {
		v, ok := e[key].(string)
		require.True(t, ok, "event %v: %q must be a string", e, key)
		return v
	}
	metaDone := false
	for _, e := range tf.TraceEvents {
		ph := str(e, "ph")
		str(e, "name")
		num(e, "pid")
		if ph == "M" {
			require.False(t, metaDone, "metadata events come first")
			args, ok := e["args"].(map[string]any)
			require.True(t, ok, "metadata %v has args", e)
			switch e["name"] {
			case "process_name", "thread_name":
				assert.NotEmpty(t, args["name"])
			case "process_sort_index", "thread_sort_index":
				assert.Contains(t, args, "sort_index")
			default:
				t.Errorf("unknown metadata %v", e)
			}
			if e["name"] == "thread_name" || e["name"] == "thread_sort_index" {
				num(e, "tid")
			}
			continue
		}
		metaDone = true
		tr := track{num(e, "pid"), num(e, "tid")}
		ts := num(e, "ts")
		assert.GreaterOrEqual(t, ts, last[tr], "ts is monotonic on track %v: %v", tr, e)
		last[tr] = ts
		switch ph {
		case "X":
			dur := num(e, "dur")
			assert.GreaterOrEqual(t, dur, 0.0)
			args := e["args"].(map[string]any)
			for _, k := range []string{"kernel", "status", "failure", "error"} {
				assert.Contains(t, args, k, "X event %v", e)
			}
			slices[tr] = append(slices[tr], [2]float64{ts, ts + dur})
		case "i":
			if e["cat"] == "device-lost" {
				assert.Equal(t, "p", str(e, "s"), "the device-lost marker spans its process")
				continue
			}
			assert.Equal(t, "t", str(e, "s"), "instant events are thread-scoped")
			slices[tr] = append(slices[tr], [2]float64{ts, ts})
		case "s", "f":
			id := num(e, "id")
			str(e, "cat")
			if ph == "s" {
				starts[id]++
			} else {
				finishes[id]++
				assert.Equal(t, "e", e["bp"], "f binds to its enclosing slice")
			}
			enclosed := false
			for _, s := range slices[tr] {
				enclosed = enclosed || (s[0] <= ts && ts <= s[1])
			}
			assert.True(t, enclosed, "flow event %v lies on a launch of its track", e)
		default:
			t.Errorf("unexpected phase %q in %v", ph, e)
		}
	}
	assert.Equal(t, len(starts), len(finishes), "every flow has both ends")
	for id, n := range starts {
		assert.Equal(t, 1, n, "flow %v starts once", id)
		assert.Equal(t, 1, finishes[id], "flow %v finishes once", id)
	}
	return len(starts)
}

func TestWriteTrace(t *testing.T) {
	e := newExecutor(t, 2, exec.WithLaunchTiming(true))
	g := traceGraph()
	p, err := e.Plan(g)
	require.NoError(t, err)
	require.Positive(t, p.Waits(), "the fan-in crosses streams")
	res, err := e.Execute(t.Context(), p)
	require.NoError(t, err)
	defer res.Close()

	var buf bytes.Buffer
	require.NoError(t, exec.WriteTrace(&buf, p, res.Report))
	var tf traceFile
	require.NoError(t, json.Unmarshal(buf.Bytes(), &tf), buf.String())
	assert.Equal(t, p.Waits(), checkTraceFormat(t, tf), "one flow arrow per event wait")
	assert.EqualValues(t, p.NumLaunches(), tf.OtherData["launches"])

	names := map[string]bool{}
	byKernel := map[string]map[string]any{}
	for _, ev := range tf.TraceEvents {
		if ev["name"] == "thread_name" {
			names[ev["args"].(map[string]any)["name"].(string)] = true
		}
		if ev["ph"] == "X" || ev["ph"] == "i" {
			byKernel[ev["name"].(string)] = ev
		}
	}
	assert.Equal(t, map[string]bool{"cpu stream 0": true, "cpu stream 1": true}, names)
	require.Len(t, byKernel, p.NumLaunches(), "one event per launch")

	fails := byKernel["fails"]
	assert.Equal(t, "X", fails["ph"])
	assert.Equal(t, "terrible", fails["cname"])
	assert.Equal(t, "launch,failed", fails["cat"])
	fargs := fails["args"].(map[string]any)
	assert.Equal(t, "failed", fargs["status"])
	assert.Equal(t, `exec: kernel "fails": boom`, fargs["error"], "first line only")
	assert.NotZero(t, fargs["failure"])

	after := byKernel["after"]
	assert.Equal(t, "i", after["ph"], "a skipped launch is an instant")
	assert.Equal(t, "launch,skipped", after["cat"])
	aargs := after["args"].(map[string]any)
	assert.Equal(t, "skipped", aargs["status"])
	assert.Equal(t, fargs["failure"], aargs["failure"], "the skip carries the root failure")
	assert.Equal(t, "fails", aargs["chain"])

	ok := byKernel["sink"]
	assert.Equal(t, "launch", ok["cat"])
	assert.EqualValues(t, 32, ok["args"].(map[string]any)["read_bytes"])
	assert.EqualValues(t, 8, ok["args"].(map[string]any)["write_bytes"])
}

func TestWriteTraceWithoutPlan(t *testing.T) {
	e := newExecutor(t, 2, exec.WithLaunchTiming(true))
	res, err := e.Run(t.Context(), traceGraph())
	require.NoError(t, err)
	defer res.Close()
	var buf bytes.Buffer
	require.NoError(t, res.Report.WriteTrace(&buf))
	var tf traceFile
	require.NoError(t, json.Unmarshal(buf.Bytes(), &tf))
	assert.Equal(t, 0, checkTraceFormat(t, tf), "no plan, no arrows")
}

func TestWriteTraceCancelled(t *testing.T) {
	e := newExecutor(t, 1, exec.WithLaunchTiming(true))
	ctx, cancel := context.WithCancel(t.Context())
	g := dag.New()
	a, b := dag.AddValue[any](g, "a").ID(), dag.AddValue[any](g, "b").ID()
	g.AddKernel("cancels", func(context.Context, dag.Launch) error { cancel(); return nil }, dag.Writes(a))
	g.AddKernel("next", nop, dag.Reads(a), dag.Writes(b))
	g.AddKernel("last", nop, dag.Reads(b), dag.Writes(dag.AddValue[any](g, "c").ID()))
	res, err := e.Run(ctx, g)
	require.NoError(t, err)
	defer res.Close()
	evs, err := exec.TraceEvents(nil, res.Report)
	require.NoError(t, err)
	n := 0
	for _, ev := range evs {
		if ev.Ph == "i" {
			n++
			assert.Equal(t, "launch,cancelled", ev.Cat)
			assert.Equal(t, "cancelled", ev.Args["status"])
		}
	}
	assert.Equal(t, 2, n, "the launches after the cancel are instants")
}

func TestWriteTracePlanMismatch(t *testing.T) {
	e := newExecutor(t, 2, exec.WithLaunchTiming(true))
	res, err := e.Run(t.Context(), traceGraph())
	require.NoError(t, err)
	defer res.Close()
	other, err := e.Plan(bench1())
	require.NoError(t, err)
	err = exec.WriteTrace(&bytes.Buffer{}, other, res.Report)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "plan has 1 launches, report 8")
}

func bench1() *dag.Graph {
	g := dag.New()
	g.AddKernel("only", nop, dag.Writes(dag.AddValue[any](g, "v").ID()))
	return g
}

// On several (simulated) GPUs, a copy launch is its own slice on the
// destination device, and the wait that orders it after its producer
// crosses processes.
func TestWriteTraceAndDOTAcrossDevices(t *testing.T) {
	e, _ := simMachine(t, "dgx1-v100", 2, exec.WithLaunchTiming(true))
	g := dag.New()
	x := g.AddBuffer("x", 4096)
	g.AddKernel("produce", nop, dag.Writes(x), dag.OnDevice(topology.GPU(0)))
	g.AddKernel("consume", nop, dag.Reads(x), dag.Writes(g.AddBuffer("y", 8)), dag.OnDevice(topology.GPU(3)))
	p, err := e.Plan(g)
	require.NoError(t, err)
	require.Equal(t, 1, p.Copies())
	res, err := e.Execute(t.Context(), p)
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())

	var buf bytes.Buffer
	require.NoError(t, exec.WriteTrace(&buf, p, res.Report))
	var tf traceFile
	require.NoError(t, json.Unmarshal(buf.Bytes(), &tf))
	flows := checkTraceFormat(t, tf)
	assert.Equal(t, p.Waits(), flows)
	procs := map[string]bool{}
	var copyEv map[string]any
	for _, ev := range tf.TraceEvents {
		if ev["name"] == "process_name" {
			procs[ev["args"].(map[string]any)["name"].(string)] = true
		}
		if ev["cat"] == "launch,copy" {
			copyEv = ev
		}
	}
	assert.Equal(t, map[string]bool{"gpu0": true, "gpu3": true}, procs, "only devices that ran launches")
	require.NotNil(t, copyEv, "the copy is a slice")
	args := copyEv["args"].(map[string]any)
	assert.Equal(t, "gpu0", args["copy_from"])
	assert.Equal(t, "gpu3", args["copy_to"])
	assert.EqualValues(t, 4096, args["copy_bytes"])

	dot, err := p.MarshalDOT()
	require.NoError(t, err)
	s := string(dot)
	assert.Contains(t, s, `subgraph "cluster_gpu0" {`)
	assert.Contains(t, s, `subgraph "cluster_gpu3_s0" {`)
	assert.Contains(t, s, "shape=cds", "the copy launch")
	assert.Contains(t, s, `label="x@gpu3\n4096 B"`, "the replica lives on gpu3")
}

// A run that loses a device traces both phases: every launch of the
// report is an event, the lost device's process says so, a device-lost
// marker sits where the recovery began, superseded launches are marked
// lost, and the recovery's launches name what moved and what re-ran; the
// event waits of both plans are flow arrows.
func TestWriteTraceDeviceLoss(t *testing.T) {
	for _, at := range []float64{0, 0.5} {
		t.Run(fmt.Sprint("after=", at), func(t *testing.T) {
			e, _ := lossyMachine(t, "dgx1-v100", 2, sim.WithLoss(topology.GPU(3), at), exec.WithPlacement(exec.PlaceRoundRobin), exec.WithLaunchTiming(true))
			g, _ := sumGraph(nil)
			p, err := e.Plan(g)
			require.NoError(t, err)
			res, err := e.Execute(t.Context(), p)
			require.NoError(t, err)
			defer res.Close()
			rep := res.Report
			require.NotNil(t, rep.Lost)
			require.Greater(t, rep.NumLaunches(), p.NumLaunches(), "the recovery's launches are in the report")

			var buf bytes.Buffer
			require.NoError(t, exec.WriteTrace(&buf, p, rep))
			var tf traceFile
			require.NoError(t, json.Unmarshal(buf.Bytes(), &tf))
			assert.Equal(t, rep.Waits, checkTraceFormat(t, tf), "a flow per event wait of both phases")

			procs := map[string]bool{}
			launches, lost, marks := 0, 0, 0
			moved, reran, ranLost := map[string]string{}, map[string]bool{}, map[string]bool{}
			for _, ev := range tf.TraceEvents {
				args, _ := ev["args"].(map[string]any)
				switch {
				case ev["name"] == "process_name":
					procs[args["name"].(string)] = true
				case ev["cat"] == "device-lost":
					marks++
					assert.Equal(t, "gpu3", args["device"])
					assert.EqualValues(t, len(rep.Migrations), args["migrations"])
				case ev["ph"] == "X" || ev["ph"] == "i":
					launches++
					if args["status"] == "lost" {
						lost++
						assert.EqualValues(t, 1, args["phase"], "only first-phase launches are superseded")
						assert.Equal(t, "launch,lost", ev["cat"])
						if ev["ph"] == "X" {
							ranLost[args["kernel"].(string)] = true
						}
					}
					if from, ok := args["moved_from"].(string); ok {
						moved[args["kernel"].(string)] = from
					}
					if args["rerun"] == true {
						reran[args["kernel"].(string)] = true
					}
				}
			}
			assert.True(t, procs["gpu3 (lost)"], "the lost device's process is marked: %v", procs)
			assert.Equal(t, 1, marks, "one device-lost marker")
			assert.Equal(t, rep.NumLaunches(), launches, "every launch of both phases")
			assert.Equal(t, rep.Count(exec.StatusLost), lost)
			for _, m := range rep.Migrations {
				assert.Equal(t, "gpu3", moved[m.Kernel], "%s moved off gpu3", m.Kernel)
			}
			assert.Len(t, moved, len(rep.Migrations))
			for _, k := range rep.Reruns {
				assert.True(t, reran[k], "%s re-ran", k)
				assert.True(t, ranLost[k], "%s's superseded first run is a slice", k)
			}
			assert.Equal(t, []any{"gpu0", "gpu1", "gpu2", "gpu3", "gpu4", "gpu5", "gpu6", "gpu7"}, tf.OtherData["devices"],
				"round-robin used every GPU")
			assert.Equal(t, "gpu3", tf.OtherData["lost_device"])
			assert.Len(t, reran, len(rep.Reruns))
			if at == 0 {
				assert.NotEmpty(t, rep.Migrations, "round-robin placed kernels on gpu3")
			}
		})
	}
}

// The report's JSON names the devices the run used and, for a run across
// devices, every copy (buffer, devices, bytes, link, route, modeled time),
// the bytes by link, the placement and the status counts.
func TestReportJSONCopiesAndDevices(t *testing.T) {
	e, _ := simMachine(t, "dgx1-v100", 2)
	g := dag.New()
	x := g.AddBuffer("x", 4096)
	g.AddKernel("produce", nop, dag.Writes(x), dag.OnDevice(topology.GPU(0)))
	g.AddKernel("consume", nop, dag.Reads(x), dag.Writes(g.AddBuffer("y", 8)), dag.OnDevice(topology.GPU(3)))
	res, err := e.Run(t.Context(), g)
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Err())
	require.Len(t, res.Report.Copies, 1)

	b, err := json.Marshal(res.Report)
	require.NoError(t, err)
	var got struct {
		Devices          []string `json:"devices"`
		StreamsPerDevice []int    `json:"streams_per_device"`
		Placement        string   `json:"placement"`
		Copies           []struct {
			Buffer, From, To, Link, Route, Status string
			Bytes                                 int64
			ModeledNs                             int64 `json:"modeled_ns"`
			ViaHost                               bool  `json:"via_host"`
		} `json:"copies"`
		BytesByLink map[string]int64 `json:"bytes_by_link"`
		Counts      map[string]int   `json:"counts"`
	}
	require.NoError(t, json.Unmarshal(b, &got), "%s", b)
	assert.Equal(t, []string{"gpu0", "gpu3"}, got.Devices, "the devices used, not the first one")
	require.NotEmpty(t, got.StreamsPerDevice)
	for _, n := range got.StreamsPerDevice {
		assert.Equal(t, 2, n, "%v", got.StreamsPerDevice)
	}
	assert.NotEmpty(t, got.Placement)
	require.Len(t, got.Copies, 1)
	c := got.Copies[0]
	want := res.Report.Copies[0]
	assert.Equal(t, "x", c.Buffer)
	assert.Equal(t, "gpu0", c.From)
	assert.Equal(t, "gpu3", c.To)
	assert.EqualValues(t, 4096, c.Bytes)
	assert.Equal(t, want.Link, c.Link)
	assert.NotEmpty(t, c.Link)
	assert.Equal(t, want.Route, c.Route)
	assert.Equal(t, want.Modeled.Nanoseconds(), c.ModeledNs)
	assert.Positive(t, c.ModeledNs)
	assert.Equal(t, "ok", c.Status)
	assert.Equal(t, map[string]int64{want.Link: 4096}, got.BytesByLink)
	assert.Equal(t, map[string]int{"ok": 3, "failed": 0, "skipped": 0, "cancelled": 0, "lost": 0}, got.Counts)
}
