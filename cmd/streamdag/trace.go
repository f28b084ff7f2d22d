package main

import (
	"context"
	"encoding/json"
	"fmt"
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

// writeTraceFile writes the run as a Chrome/Perfetto trace (see
// exec.WriteTrace) to path.
func writeTraceFile(path string, p *exec.Plan, r *exec.Report) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--trace: %w", err)
	}
	err = exec.WriteTrace(f, p, r)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("--trace %s: %w", path, err)
	}
	return nil
}

// writePlanDOT writes the plan (devices and streams as clusters, waits as
// dashed edges; see exec.Plan.MarshalDOT) to path.
func writePlanDOT(path string, p *exec.Plan) error {
	b, err := p.MarshalDOT()
	if err != nil {
		return fmt.Errorf("--dot: %w", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("--dot: %w", err)
	}
	return nil
}

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

// runSummary is what --json writes on stdout: the result rows, what was
// lost, and the run's figures.
type runSummary struct {
	Pipeline string         `json:"pipeline"`
	Input    string         `json:"input"`
	Rows     []flights.Row  `json:"rows"`
	Lost     []string       `json:"lost"`
	Error    string         `json:"error,omitempty"` // no result at all: why
	Summary  runFigures     `json:"summary"`
	Problems []launchResult `json:"problems"` // launches that failed, were skipped or cancelled
}

type runFigures struct {
	InputRows     int64   `json:"input_rows"`
	Partitions    int     `json:"partitions"`
	Launches      int     `json:"launches"`
	Streams       int     `json:"streams"`
	Device        string  `json:"device"`
	EventWaits    int     `json:"event_waits"`
	WallNs        int64   `json:"wall_ns"`
	RowsPerSecond float64 `json:"rows_per_second"`
	OK            int     `json:"ok"`
	Failed        int     `json:"failed"`
	Skipped       int     `json:"skipped"`
	Cancelled     int     `json:"cancelled"`
}

type launchResult struct {
	Kernel  string   `json:"kernel"`
	Status  string   `json:"status"`
	Failure uint64   `json:"failure"`
	Error   string   `json:"error"`
	Chain   []string `json:"chain"`
}

// writeRunJSON writes the --json document for a flights run: table may be
// nil when readErr says why there is no result.
func writeRunJSON(w io.Writer, input string, nrows int64, partitions int, table *flights.Table, readErr error, rep *exec.Report) error {
	s := runSummary{Pipeline: "flights", Input: input, Rows: []flights.Row{}, Lost: []string{}, Problems: []launchResult{},
		Summary: runFigures{InputRows: nrows, Partitions: partitions, Launches: len(rep.Launches()), Streams: rep.Streams,
			Device: rep.Device.String(), EventWaits: rep.Waits, WallNs: rep.Wall.Nanoseconds(),
			OK: rep.Count(exec.StatusOK), Failed: rep.Count(exec.StatusFailed), Skipped: rep.Count(exec.StatusSkipped),
			Cancelled: rep.Count(exec.StatusCancelled)}}
	if rep.Wall > 0 {
		s.Summary.RowsPerSecond = float64(nrows) / rep.Wall.Seconds()
	}
	if table != nil {
		s.Rows = append(s.Rows, table.Rows...)
		for _, l := range table.Lost {
			s.Lost = append(s.Lost, l.String())
		}
	}
	if readErr != nil {
		s.Error = firstLine(readErr)
	}
	for _, l := range rep.Launches() {
		if l.Status == exec.StatusOK {
			continue
		}
		lr := launchResult{Kernel: l.Kernel, Status: l.Status.String(), Failure: uint64(l.Failure), Error: firstLine(l.Err), Chain: l.Chain}
		if lr.Chain == nil {
			lr.Chain = []string{}
		}
		s.Problems = append(s.Problems, lr)
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}
