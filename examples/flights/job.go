package flights

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/internal/outfile"
	"github.com/streamdag/streamdag/kvio"
	"github.com/streamdag/streamdag/lease"
)

// ErrSamePath is matched (errors.Is) by Job's error for two of its
// Files naming one path; the error reads "NAME and NAME both name PATH".
var ErrSamePath = outfile.ErrSamePath

// Fault makes the kernel named Kernel ("filter[3]") fail when it runs: by
// returning an error, or by panicking when Panic is set
// (dag.Graph.InjectFailure).
type Fault struct {
	Kernel string
	Panic  bool
}

// FaultError is Job.Run's error for a Fault it cannot inject: Index is
// its position in Job.Fail, Err dag.Graph.InjectFailure's error (no such
// kernel).
type FaultError struct {
	Index int
	Fault Fault
	Err   error
}

func (e *FaultError) Error() string {
	return fmt.Sprintf("flights: fault %s: %v", e.Fault.Kernel, e.Err)
}

// Unwrap returns Err.
func (e *FaultError) Unwrap() error { return e.Err }

// OutputFile is one file a Job writes: Path ("" writes none), and Name,
// which names it in errors (a command line's flag, "--out"); with no Name
// the errors read "flights: KIND file PATH: detail".
type OutputFile struct{ Path, Name string }

// Files are the files a Job writes, each whole or not at all: prepared
// (a temporary file beside the path) before the run, renamed over the
// path when its content is written, so a path holds either its old
// content or the whole new one. Each is written whether or not the others
// could be.
type Files struct {
	// Result is the result table, by WriteResult, in the format of its
	// extension (ResultFormat). Not written when the run has no result.
	Result OutputFile
	// Plan is the plan as Graphviz DOT (exec.Plan.MarshalDOT), written
	// before the run.
	Plan OutputFile
	// Trace is the run's Chrome/Perfetto trace (exec.WriteTrace).
	Trace OutputFile
	// Report is the run's exec.Report as indented JSON.
	Report OutputFile
	// Metrics is Job.Backend's metrics snapshot after the run, as
	// indented JSON; it needs a Backend.
	Metrics OutputFile
	// Errors is the run's error graph (failures, skipped kernels,
	// tainted buffers) as DOT.
	Errors OutputFile
}

// all lists the files with the kind that names them by default, in the
// order they are prepared.
func (f *Files) all() [6]struct {
	kind string
	f    OutputFile
} {
	return [6]struct {
		kind string
		f    OutputFile
	}{{"result", f.Result}, {"plan", f.Plan}, {"trace", f.Trace}, {"report", f.Report}, {"metrics", f.Metrics}, {"errors", f.Errors}}
}

// Job is one run of the pipeline as `streamdag run flights` makes it:
// the input opened through kvio, the pipeline built over it with its
// faults injected, planned and run on an executor, and the files written.
// Its fields are set before Prepare or Run; a Job runs once, and is not
// safe for concurrent use.
type Job struct {
	// Input is the Parquet or Arrow IPC file (kvio.Open); "" runs on the
	// embedded Sample.
	Input string
	// Options build the pipeline (Build); without WithPartitions, one
	// partition per stream of every device of the executor.
	Options []Option
	// Fail are the faults injected into the pipeline before it runs.
	Fail []Fault
	// Files are the files written.
	Files Files
	// Backend, when not nil, is the lease backend of the executor's
	// devices: its "kvio" process configuration is set to the input
	// file's description (kvio.File.Describe) when the file is opened and
	// again after the run, and Files.Metrics is its snapshot.
	Backend *lease.Backend
	// Replays, when positive, captures the run (exec.Executor.Capture)
	// and replays the capture that many times (exec.Capture.Replay): the
	// Output is the last replay's, its Report.Ran exec.ReplayedCapture.
	// A doomed capture (a launch failed, was skipped or cancelled) is not
	// replayed: the Output is the captured run's, and Output.Capture says
	// why. 0 runs the plan once, with no capture.
	Replays int
	// CheckPlan, when not nil, is called with the plan before the plan
	// file is written and before anything runs: an error from it stops
	// Run, which returns it as it is, with a nil Output.
	CheckPlan func(*exec.Plan) error
	// OnRun, when not nil, is called with the planned pipeline just
	// before it runs; the function it returns is called when the run
	// ends (a progress display).
	OnRun func(*Pipeline) (stop func())

	outs     outfile.Set
	files    [6]*outfile.File
	prepared bool
	prepErr  error // Prepare's error, returned again by each later call
}

// Summary is a run's input figures.
type Summary struct {
	Input       string // the source's name (kvio.Source.Name)
	Rows        int64  // rows of the input
	SkippedRows int64  // rows of the source parts not read
	Partitions  int    // the pipeline's partitions
	Skipped     int    // source parts not read: their delay statistics rule out every row (Pipeline.Skipped)
	SourceParts int    // the source's parts (row groups or batch ranges)
}

// Prepare checks the Job's files and prepares them (see Files), so that
// a path that cannot be written fails before the run; Run calls it when
// it was not called. Errors: an OutputFile's, as "NAME PATH: detail"; two
// naming one path, or one whose rename would replace the Input
// (ErrSamePath: "the input and --out both name PATH"); a Result path
// with neither .csv nor .json. A later call returns the first one's
// error. Call Close when done, on every path.
func (j *Job) Prepare() error {
	if !j.prepared {
		j.prepared = true
		j.prepErr = j.prepare()
	}
	return j.prepErr
}

// prepare is Prepare's work, done once.
func (j *Job) prepare() error {
	if p := j.Files.Result.Path; p != "" && ResultFormat(p) == "" {
		return fmt.Errorf("%s %s: want a .csv or .json file name", j.name("result", j.Files.Result), p)
	}
	if j.Input != "" {
		j.outs.Keep("the input", j.Input)
	}
	for i, x := range j.Files.all() {
		var err error
		if j.files[i], err = j.outs.Add(j.name(x.kind, x.f), x.f.Path); err != nil {
			return err
		}
	}
	return nil
}

// name names an output file in errors.
func (j *Job) name(kind string, f OutputFile) string {
	if f.Name != "" {
		return f.Name
	}
	return "flights: " + kind + " file"
}

// Close removes the temporary files of the Files not written, leaving
// their paths as they were. It is idempotent.
func (j *Job) Close() { j.outs.Discard() }

// Run prepares the files (Prepare), opens the input, builds the pipeline
// with the faults injected, plans it on e, writes Files.Plan, runs it,
// and writes the other files. A launch failure is not an error of Run:
// the output's Report says what failed and Table what is left (or
// ReadErr why there is none). Errors that stop the job before the run
// (Files.Metrics without a Backend, Prepare's, the input's, Build's, a
// *FaultError, the plan's, CheckPlan's, the run's) come with a nil
// Output; errors writing the files after the run are joined and come with
// the Output.
func (j *Job) Run(ctx context.Context, e *exec.Executor) (*Output, error) {
	if j.Files.Metrics.Path != "" && j.Backend == nil {
		return nil, fmt.Errorf("%s %s: no Backend to take the metrics of", j.name("metrics", j.Files.Metrics), j.Files.Metrics.Path)
	}
	if err := j.Prepare(); err != nil {
		return nil, err
	}
	file, err := j.open()
	if err != nil {
		return nil, err
	}
	defer file.Close()
	j.describe(file)
	src, err := kvio.OpenAuto(ctx, file)
	if err != nil {
		return nil, err
	}
	defer src.Close()
	return j.run(ctx, e, src, file)
}

// run is Run after the input is open: file, when not nil, is src's file,
// described after the run. The files are those Prepare made (none
// without it).
func (j *Job) run(ctx context.Context, e *exec.Executor, src kvio.Source, file *kvio.File) (*Output, error) {
	p, plan, err := j.plan(src, e)
	if err != nil {
		return nil, err
	}
	stop := func() {}
	if j.OnRun != nil {
		stop = j.OnRun(p)
	}
	res, c, err := j.execute(ctx, e, plan)
	stop()
	if err != nil {
		return nil, err
	}
	defer res.Close()
	out := &Output{Pipeline: p, Plan: plan, Report: res.Report, Summary: summarize(src, p), Capture: c}
	out.Table, out.ReadErr = p.Result(res)
	out.Names = p.opts.Airports != nil && out.Table != nil && out.Table.NamesErr == nil
	if file != nil {
		j.describe(file) // what the input file used in the run
		out.Reads = file.Describe()
	}
	return out, j.commit(out, res)
}

// execute runs plan on e: once (Replays 0; no capture), or captured and
// replayed Replays times while the capture is not doomed. It returns
// the last run's Result and the capture (nil without Replays).
func (j *Job) execute(ctx context.Context, e *exec.Executor, plan *exec.Plan) (*exec.Result, *exec.Capture, error) {
	if j.Replays <= 0 {
		res, err := e.Execute(ctx, plan)
		return res, nil, err
	}
	c, res, err := e.Capture(ctx, plan)
	for i := 0; err == nil && c.Err() == nil && i < j.Replays; i++ {
		res.Close()
		res, err = c.Replay(ctx)
	}
	return res, c, err
}

// open opens the Input, or the embedded sample without one.
func (j *Job) open() (*kvio.File, error) {
	if j.Input == "" {
		return Sample()
	}
	return kvio.Open(j.Input)
}

// describe sets the Backend's "kvio" process configuration to file's
// description.
func (j *Job) describe(file *kvio.File) {
	if j.Backend != nil {
		j.Backend.SetProcessConfig("kvio", file.Describe())
	}
}

// plan builds the pipeline over src, injects the faults, plans it on e
// and writes the plan file.
func (j *Job) plan(src kvio.Source, e *exec.Executor) (*Pipeline, *exec.Plan, error) {
	opts, err := newSettings(j.Options)
	if err != nil {
		return nil, nil, err
	}
	if opts.Partitions == 0 {
		for _, d := range e.Devices() {
			opts.Partitions += d.NumStreams()
		}
	}
	p, err := build(src, 0, src.NumParts(), opts)
	if err != nil {
		return nil, nil, err
	}
	for i, x := range j.Fail {
		if err := p.Graph.InjectFailure(x.Kernel, x.Panic); err != nil {
			return nil, nil, &FaultError{Index: i, Fault: x, Err: err}
		}
	}
	plan, err := e.Plan(p.Graph)
	if err != nil {
		return nil, nil, err
	}
	if j.CheckPlan != nil {
		if err := j.CheckPlan(plan); err != nil {
			return nil, nil, err
		}
	}
	// The plan is known now: write it before the run.
	if err := j.files[1].Commit(func(w io.Writer) error {
		b, err := plan.MarshalDOT()
		if err == nil {
			_, err = w.Write(b)
		}
		return err
	}); err != nil {
		return nil, nil, err
	}
	return p, plan, nil
}

// summarize counts the input's rows and parts.
func summarize(src kvio.Source, p *Pipeline) Summary {
	s := Summary{Input: src.Name(), Partitions: len(p.Partitions), Skipped: len(p.Skipped), SourceParts: src.NumParts()}
	for i := range src.NumParts() {
		s.Rows += src.PartRows(i)
	}
	for _, i := range p.Skipped {
		s.SkippedRows += src.PartRows(i)
	}
	return s
}

// commit writes the files after the run, each whether or not the others
// could be.
func (j *Job) commit(out *Output, res *exec.Result) error {
	rep := out.Report
	var result error
	if out.Table != nil {
		result = j.files[0].Commit(func(w io.Writer) error {
			return WriteResult(w, ResultFormat(j.Files.Result.Path), out.Table, out.Names, out.Summary.Partitions, out.Summary.Rows)
		})
	}
	return errors.Join(
		j.files[2].Commit(func(w io.Writer) error { return exec.WriteTrace(w, out.Plan, rep) }),
		j.files[3].Commit(func(w io.Writer) error { return writeIndentedJSON(w, rep) }),
		j.files[4].Commit(func(w io.Writer) error { return writeIndentedJSON(w, j.Backend.MetricsSnapshot()) }),
		j.files[5].Commit(func(w io.Writer) error {
			b, err := res.Failures().MarshalDOT()
			if err == nil {
				_, err = w.Write(append(b, '\n'))
			}
			return err
		}),
		result)
}

// ResultFormat is the format WriteResult writes to path: "csv" or "json"
// by its extension (any case), "" for any other.
func ResultFormat(path string) string {
	switch strings.ToLower(filepath.Ext(path)) {
	case ".csv":
		return "csv"
	case ".json":
		return "json"
	}
	return ""
}

// PartialNote is the line that marks a partial result (partitions lost,
// or airport names missing) of a run over nrows input rows in parts
// partitions, or "" for a complete one.
func PartialNote(table *Table, parts int, nrows int64) string {
	var notes []string
	if len(table.Lost) > 0 {
		var lost int64
		for _, l := range table.Lost {
			lost += l.Rows
		}
		notes = append(notes, fmt.Sprintf("%d of %d partitions lost (%d of %d input rows not counted)", len(table.Lost), parts, lost, nrows))
	}
	if table.NamesErr != nil {
		notes = append(notes, "no airport names or cities (airports.csv could not be read)")
	}
	if len(notes) == 0 {
		return ""
	}
	return "PARTIAL RESULT: " + strings.Join(notes, "; ")
}

// WriteResult writes table (of a run over nrows input rows in parts
// partitions) in format "csv" (WriteCSV) or "json"; withNames adds the
// airport names and cities. A partial result is marked in the output
// itself: a first line "# PARTIAL RESULT: …" (PartialNote) in CSV (read
// it with a reader that skips # comments, such as Go's csv.Reader with
// Comment '#'), and in JSON, which is always {"partial", "lost",
// "names_error", "rows"}, "partial": true with the lost partitions
// (LostPartitions) or why the names are missing. Errors are w's.
func WriteResult(w io.Writer, format string, table *Table, withNames bool, parts int, nrows int64) error {
	note := PartialNote(table, parts, nrows)
	if format == "csv" {
		if note != "" {
			if _, err := fmt.Fprintf(w, "# %s\n", note); err != nil {
				return err
			}
		}
		return WriteCSV(w, table.Rows, withNames)
	}
	doc := struct {
		Partial    bool            `json:"partial"`
		Lost       []LostPartition `json:"lost"`
		NamesError string          `json:"names_error,omitempty"`
		Rows       []Row           `json:"rows"`
	}{Partial: note != "", Lost: LostPartitions(table), NamesError: FirstLine(table.NamesErr), Rows: table.Rows}
	if doc.Rows == nil {
		doc.Rows = []Row{}
	}
	return writeIndentedJSON(w, doc)
}

// LostPartition is one partition whose rows are missing from a partial
// result, as JSON: its index, its rows ([row_lo, row_hi) of the source
// parts [part_lo, part_hi)), and the failure behind it.
type LostPartition struct {
	Partition int    `json:"partition"`
	Rows      int64  `json:"rows"`
	RowLo     int64  `json:"row_lo"`
	RowHi     int64  `json:"row_hi"`
	PartLo    int    `json:"part_lo"`
	PartHi    int    `json:"part_hi"`
	Failure   uint64 `json:"failure"` // the error graph's failure id, 0 when unknown
	Error     string `json:"error"`   // its root error, first line
}

// LostPartitions lists table's lost partitions ([] when none, or when
// table is nil).
func LostPartitions(table *Table) []LostPartition {
	out := []LostPartition{}
	if table == nil {
		return out
	}
	for _, l := range table.Lost {
		lp := LostPartition{Partition: l.Partition, Rows: l.Rows, RowLo: l.Part.RowLo, RowHi: l.Part.RowHi,
			PartLo: l.Part.PartLo, PartHi: l.Part.PartHi, Error: FirstLine(l.Err)}
		var u *failgraph.UnwrittenError
		if errors.As(l.Err, &u) {
			lp.Failure = uint64(u.Failure)
			if u.Root != nil {
				lp.Error = FirstLine(u.Root)
			}
		}
		out = append(out, lp)
	}
	return out
}

// FirstLine returns err's text up to its first newline (a panic's error
// carries a stack after it); "" for a nil err.
func FirstLine(err error) string {
	if err == nil {
		return ""
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// writeIndentedJSON writes v as indented JSON and a newline.
func writeIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
