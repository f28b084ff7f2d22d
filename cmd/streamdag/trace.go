package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"sync/atomic"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
)

// progressDelay is how long a run goes on before its progress bar shows:
// shorter runs print no bar at all.
const progressDelay = time.Second

// showProgress reports whether a progress bar belongs on w: never with
// --quiet, never when CI is set or TERM is "dumb", and only when w is a
// terminal (not a pipe or a file).
func showProgress(w io.Writer, quiet bool, getenv func(string) string) bool {
	if quiet || getenv("CI") != "" || getenv("TERM") == "dumb" {
		return false
	}
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// progress counts finished launches and, after a delay, draws them as a
// bar. The zero value is not usable; call countLaunches and start.
type progress struct {
	done  atomic.Int64
	total int
	stop  chan struct{}
	exit  chan struct{}
}

// countLaunches wraps every kernel function of g so that progress counts
// the launches that ran (a skipped launch is counted when the bar
// finishes). Call it before planning: a plan may copy the functions.
func countLaunches(g *dag.Graph) *progress {
	p := &progress{total: g.NumKernels()}
	for id, k := range g.Kernels() {
		fn := k.Fn
		g.SetFunc(id, func(ctx context.Context, l dag.Launch) error {
			defer p.done.Add(1)
			return fn(ctx, l)
		})
	}
	return p
}

// start draws a bar of the launches on w once delay has passed, updated
// ten times a second, until Stop. Its goroutine is waited for by Stop. On
// a nil progress it does nothing.
func (p *progress) start(w io.Writer, desc string, delay time.Duration) {
	if p == nil {
		return
	}
	p.stop, p.exit = make(chan struct{}), make(chan struct{})
	go func() {
		defer close(p.exit)
		if delay > 0 {
			timer := time.NewTimer(delay)
			defer timer.Stop()
			select {
			case <-p.stop:
				return
			case <-timer.C:
			}
		}
		bar := progressbar.NewOptions(p.total,
			progressbar.OptionSetWriter(w),
			progressbar.OptionSetDescription(desc),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString("launches"),
			progressbar.OptionShowIts(),
			progressbar.OptionSetElapsedTime(true),
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionThrottle(50*time.Millisecond),
			progressbar.OptionClearOnFinish(),
		)
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			_ = bar.Set(int(p.done.Load()))
			select {
			case <-p.stop:
				_ = bar.Finish()
				return
			case <-tick.C:
			}
		}
	}()
}

// Stop finishes and clears the bar, if one was drawn, and returns once
// the drawing goroutine has exited. Stop on a progress never started is a
// no-op.
func (p *progress) Stop() {
	if p == nil || p.stop == nil {
		return
	}
	close(p.stop)
	<-p.exit
	p.stop = nil
}

// runSummary is what --json writes on stdout: the result rows, whether
// the result is partial and which partitions it lacks, and the run's
// figures.
type runSummary struct {
	Pipeline string                  `json:"pipeline"`
	Input    string                  `json:"input"`
	Partial  bool                    `json:"partial"` // some partitions' rows are missing from rows
	Rows     []flights.Row           `json:"rows"`
	Lost     []flights.LostPartition `json:"lost"`
	Error    string                  `json:"error,omitempty"` // no result at all: why
	Summary  runFigures              `json:"summary"`
	Problems []launchResult          `json:"problems"` // launches that failed, were skipped or cancelled
}

// runFigures are the run's counts: launches of every status (over both
// phases after a device loss: ok + failed + skipped + cancelled + lost =
// launches), the devices used and the time.
type runFigures struct {
	InputRows        int64    `json:"input_rows"`
	Partitions       int      `json:"partitions"`
	Launches         int      `json:"launches"`
	Devices          []string `json:"devices"`            // the devices that held launches
	StreamsPerDevice []int    `json:"streams_per_device"` // by device of the executor, in its order
	LostDevice       string   `json:"lost_device,omitempty"`
	EventWaits       int      `json:"event_waits"`
	WallNs           int64    `json:"wall_ns"`
	RowsPerSecond    float64  `json:"rows_per_second"`
	OK               int      `json:"ok"`
	Failed           int      `json:"failed"`
	Skipped          int      `json:"skipped"`
	Cancelled        int      `json:"cancelled"`
	Lost             int      `json:"lost"` // first-phase launches redone after a device loss
}

type launchResult struct {
	Kernel  string   `json:"kernel"`
	Status  string   `json:"status"`
	Failure uint64   `json:"failure"`
	Error   string   `json:"error"`
	Chain   []string `json:"chain"`
}

// writeRunJSON writes the --json document for a finished flights job.
func writeRunJSON(w io.Writer, out *flights.Output) error {
	input, nrows, partitions, table, readErr, rep := out.Summary.Input, out.Summary.Rows, out.Summary.Partitions, out.Table, out.ReadErr, out.Report
	s := runSummary{Pipeline: "flights", Input: input, Rows: []flights.Row{}, Lost: flights.LostPartitions(table), Problems: []launchResult{},
		Summary: runFigures{InputRows: nrows, Partitions: partitions, Launches: rep.NumLaunches(), Devices: []string{},
			StreamsPerDevice: rep.Streams, EventWaits: rep.Waits, WallNs: rep.Wall.Nanoseconds(),
			OK: rep.Count(exec.StatusOK), Failed: rep.Count(exec.StatusFailed), Skipped: rep.Count(exec.StatusSkipped),
			Cancelled: rep.Count(exec.StatusCancelled), Lost: rep.Count(exec.StatusLost)}}
	for _, d := range rep.DevicesUsed() {
		s.Summary.Devices = append(s.Summary.Devices, d.String())
	}
	if rep.Lost != nil {
		s.Summary.LostDevice = rep.Lost.String()
	}
	if rep.Wall > 0 {
		s.Summary.RowsPerSecond = float64(nrows) / rep.Wall.Seconds()
	}
	if table != nil {
		s.Rows = append(s.Rows, table.Rows...)
		s.Partial = len(table.Lost) > 0
	}
	if readErr != nil {
		s.Error = flights.FirstLine(readErr)
	}
	for _, l := range rep.Launches() {
		if l.Status == exec.StatusOK || l.Status == exec.StatusLost {
			continue
		}
		lr := launchResult{Kernel: l.Kernel, Status: l.Status.String(), Failure: uint64(l.Failure), Error: flights.FirstLine(l.Err), Chain: l.Chain}
		if lr.Chain == nil {
			lr.Chain = []string{}
		}
		s.Problems = append(s.Problems, lr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}
