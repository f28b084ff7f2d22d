package shard

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/register"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/runners/prism"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/kvio"
	"github.com/streamdag/streamdag/lease"
)

// Fault is a flights.Fault injected into one shard's graph: Fault.Kernel
// names a kernel of that shard's graph ("filter[0]").
type Fault struct {
	Shard int
	Fault flights.Fault
}

// Config is one sharded run of the flights job.
type Config struct {
	// Input is the Parquet or Arrow IPC file; "" is the embedded sample.
	Input string
	// Shards is the number of shards wanted, 1 or more: the input's
	// parts (Parquet row groups, IPC record batches) are cut into that
	// many ranges of consecutive parts, as even in parts as they go, or,
	// when it has fewer parts, its rows into that many row ranges (Split).
	Shards int
	// MinDelay keeps flights with delay > MinDelay minutes.
	MinDelay int64
	// TopK keeps the first TopK groups; 0 keeps all.
	TopK int
	// Airports is an airports.csv to join the names and cities from; ""
	// joins none.
	Airports string
	// Streams is the number of streams of each shard's CPU device, 1 to
	// cpu.MaxStreams; 0 is GOMAXPROCS divided by the shards, at least 1
	// and at most cpu.MaxStreams.
	Streams int
	// Fail are the faults injected into the shards' graphs.
	Fail []Fault
	// Attempts is how many times a shard is run before its failure
	// fails the job, 1 or more; 0 is DefaultAttempts. An attempt fails
	// when its template returns an error (the input cannot be opened or
	// read, the device cannot be acquired); a launch failure inside the
	// graph does not fail it (its partitions are lost).
	Attempts int
	// flaky are shards whose first attempts fail with an injected
	// transient error (tests).
	flaky []flake
}

// DefaultAttempts is the number of attempts of a shard when
// Config.Attempts is 0.
const DefaultAttempts = 3

// flake makes the first Attempts attempts of shard Shard fail with
// errTransient: before the template runs, or, with AfterEmit, after the
// attempt has emitted its partial and report.
type flake struct {
	Shard, Attempts int
	AfterEmit       bool
}

// attemptHook, when set (tests), is called as each attempt starts.
var attemptHook atomic.Pointer[func()]

// errTransient is the failure a flake injects.
var errTransient = errors.New("injected transient failure")

// Outcome is a sharded run's result.
type Outcome struct {
	// CSV is the result as `streamdag run flights --out FILE.csv` writes
	// it (flights.WriteResult): a partial result begins with its
	// "# PARTIAL RESULT: …" line.
	CSV []byte
	// Table has the rows, the lost partitions (each Loss.Err a *Failure)
	// and, when the airports could not be read, NamesErr.
	Table *flights.Table
	// Key is what the rows are grouped by; Names whether they have the
	// airports' names and cities.
	Key   flights.KeyKind
	Names bool
	// Reports are the shards' reports, in shard order.
	Reports []Report
	// Partitions and Rows are those of all the shards.
	Partitions int
	Rows       int64
}

// Complete reports whether o is a whole result: no partition lost, and
// the airports' names when asked for.
func (o *Outcome) Complete() bool { return len(o.Table.Lost) == 0 && o.Table.NamesErr == nil }

// Range is one shard's input: rows [RowLo, RowHi) of the concatenated
// parts [PartLo, PartHi) of the input, counted from the first row of
// part PartLo.
type Range struct {
	PartLo, PartHi int
	RowLo, RowHi   int64
}

// Split cuts an input whose parts have partRows rows into at most shards
// Ranges, in order, covering its rows. With at least as many parts as
// shards, each Range is whole consecutive parts, as even in parts as
// they go. With fewer, the input's rows are cut as even as they go
// (flights.SplitRows; at most one shard per row) and each Range names
// the parts its rows touch. With no rows and fewer parts than shards
// it returns one Range of all the parts. It panics for shards below 1.
func Split(partRows []int64, shards int) []Range {
	if shards < 1 {
		panic("shard: Split needs 1 or more shards")
	}
	n := len(partRows)
	start := make([]int64, n+1) // start[i]: the input's row of part i's first row
	for i, r := range partRows {
		start[i+1] = start[i] + r
	}
	total := start[n]
	if total == 0 && n < shards {
		return []Range{{PartHi: n}}
	}
	if n >= shards {
		k := max(shards, 1)
		out := make([]Range, k)
		for s := range k {
			lo, hi := s*n/k, (s+1)*n/k
			out[s] = Range{PartLo: lo, PartHi: hi, RowHi: start[hi] - start[lo]}
		}
		return out
	}
	cuts := flights.SplitRows(0, total, int(min(int64(shards), total)))
	out := make([]Range, len(cuts))
	for s, c := range cuts {
		lo := 0
		for start[lo+1] <= c[0] {
			lo++
		}
		hi := lo + 1
		for hi < n && start[hi] < c[1] {
			hi++
		}
		out[s] = Range{PartLo: lo, PartHi: hi, RowLo: c[0] - start[lo], RowHi: c[1] - start[lo]}
	}
	return out
}

// Run runs cfg's flights job on Beam's Prism runner, in this process
// (Prism's loopback workers): one FlightsTemplate task per shard, each
// run up to cfg.Attempts times until an attempt succeeds, the partials
// merged by a combine per group key, and the finish (sort, top-k, join,
// CSV) on one worker. Runs in one process run one at a time; a run
// leaves nothing in the temporary directory. A launch failure in a shard
// gives a partial Outcome, not an error. Errors: a bad Config, the
// input's (one the flights job cannot run on, such as a delay column
// that is not an integer or Airports with an input grouped by hour, is
// flights.BuildParts's error, before the job starts), ctx's ("shard: run
// stopped: context canceled", wrapping ctx.Err()), and the Beam job's (a
// shard whose last attempt failed, naming it, the attempts and the last
// error; or the finish), each naming what and where.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	if cfg.Shards < 1 {
		return nil, fmt.Errorf("shard: %d shards: want 1 or more", cfg.Shards)
	}
	if cfg.TopK < 0 {
		return nil, fmt.Errorf("shard: top %d: want 0 (all) or more", cfg.TopK)
	}
	if cfg.Streams < 0 || cfg.Streams > cpu.MaxStreams {
		return nil, fmt.Errorf("shard: %d streams: want 1 to %d, or 0", cfg.Streams, cpu.MaxStreams)
	}
	if cfg.Attempts < 0 {
		return nil, fmt.Errorf("shard: %d attempts: want 1 or more, or 0 (%d)", cfg.Attempts, DefaultAttempts)
	}
	attempts := cfg.Attempts
	if attempts == 0 {
		attempts = DefaultAttempts
	}
	tasks, streams, err := flightsTasks(ctx, cfg)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "streamdag-beam-")
	if err != nil {
		return nil, fmt.Errorf("shard: %w", err)
	}
	defer os.RemoveAll(dir)
	outPath := filepath.Join(dir, "outcome.json")

	p, s := beam.NewPipelineWithRoot()
	// Attempt n of every shard is a stage of its own; the tasks whose
	// attempt failed flow to the next stage, through a Reshuffle so that
	// the next attempt runs in a bundle of its own, not fused with the
	// failed one.
	pending := beam.Create(s, tasks...)
	var partials, reports []beam.PCollection
	for n := 1; n <= attempts; n++ {
		scope := s.Scope(fmt.Sprintf("attempt %d", n))
		if n > 1 {
			pending = beam.Reshuffle(scope, pending)
		}
		part, rep, retry := beam.ParDo3(scope, &shardFn{Streams: streams, Attempt: n, Attempts: attempts, Flaky: cfg.flaky}, pending)
		partials, reports, pending = append(partials, part), append(reports, rep), retry
	}
	merged := beam.CombinePerKey(s.Scope("merge"), &mergeFn{}, beam.ParDo(s, &keyFn{}, beam.Flatten(s, partials...)))
	beam.ParDo0(s.Scope("finish"), &finishFn{TopK: cfg.TopK, Airports: cfg.Airports, Streams: min(max(runtime.GOMAXPROCS(0), 1), cpu.MaxStreams), Out: outPath},
		beam.Impulse(s), beam.SideInput{Input: merged}, beam.SideInput{Input: beam.Flatten(s, reports...)})
	if err := execute(ctx, p, dir); err != nil {
		if ctx.Err() != nil {
			// The runner's error is its own RPCs cancelled; what
			// stopped the run is ctx.
			return nil, fmt.Errorf("shard: run stopped: %w", ctx.Err())
		}
		return nil, jobError(err)
	}
	b, err := os.ReadFile(outPath)
	if err != nil {
		return nil, fmt.Errorf("shard: the finish wrote no outcome: %w", err)
	}
	var doc outcomeDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("shard: outcome: %w", err)
	}
	return doc.outcome(), nil
}

// executing serialises the runs of this process: execute points the
// process's temporary directory at the run's own while the runner runs.
var executing sync.Mutex

// execute runs p on Prism with $TMPDIR set to dir, then restores it. In
// loopback mode the Beam SDK creates an empty "beamloopbackworker-*"
// file in os.TempDir() for each job and never removes it; under dir it
// goes when the run removes dir. Runs in one process wait for each other.
func execute(ctx context.Context, p *beam.Pipeline, dir string) error {
	executing.Lock()
	defer executing.Unlock()
	old, had := os.LookupEnv("TMPDIR")
	if err := os.Setenv("TMPDIR", dir); err != nil {
		return fmt.Errorf("shard: %w", err)
	}
	defer func() {
		if had {
			os.Setenv("TMPDIR", old)
		} else {
			os.Unsetenv("TMPDIR")
		}
	}()
	_, err := prism.Execute(ctx, p)
	return err
}

// JobError is the error of a Beam job that failed in one of this
// package's DoFns: its text is the DoFn's error ("shard: shard 1: 3
// attempts failed; the last: …", "shard: finish: …"), found in the
// runner's report of the failed bundle, which Unwrap returns whole.
type JobError struct {
	Msg string // the DoFn's error text
	Job error  // the runner's error
}

// Error returns Msg.
func (e *JobError) Error() string { return e.Msg }

// Unwrap returns Job.
func (e *JobError) Unwrap() error { return e.Job }

// jobError is a failed job's error: a *JobError when the runner's error
// carries one of this package's DoFn errors (the text from its last line
// that begins "shard: "), else the runner's error.
func jobError(err error) error {
	lines := strings.Split(err.Error(), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.HasPrefix(lines[i], "shard: ") {
			return &JobError{Msg: strings.Join(lines[i:], "\n"), Job: err}
		}
	}
	return fmt.Errorf("shard: beam job: %w", err)
}

// flightsTasks cuts cfg's input into shards and returns their tasks,
// with the streams of each shard's device. It builds the graph of each
// shard that cfg.Fail names, and shard 0's with cfg.Airports, so that an
// input the job cannot run on (flights.BuildParts's error) and a fault
// naming no shard of the run or no kernel of its shard's graph (a
// *flights.FaultError, Index its position in cfg.Fail) are errors here,
// before the job starts. Errors: the input's, and a fault's.
func flightsTasks(ctx context.Context, cfg Config) (tasks []any, streams int, err error) {
	file, err := openInput(cfg.Input)
	if err != nil {
		return nil, 0, fmt.Errorf("shard: %w", err)
	}
	defer file.Close()
	src, err := kvio.OpenAuto(ctx, file)
	if err != nil {
		return nil, 0, fmt.Errorf("shard: %w", err)
	}
	defer src.Close()
	partRows := make([]int64, src.NumParts())
	for i := range partRows {
		partRows[i] = src.PartRows(i)
	}
	ranges := Split(partRows, cfg.Shards)
	// The input's schema is every shard's: an input the job cannot run
	// on fails here, as it fails `streamdag run flights`, not in each
	// attempt of each shard.
	check := []flights.Option{flights.WithRows(ranges[0].RowLo, ranges[0].RowHi)}
	if cfg.Airports != "" {
		check = append(check, flights.WithAirports(func() (io.ReadCloser, error) { return os.Open(cfg.Airports) }))
	}
	if _, err := flights.BuildParts(src, ranges[0].PartLo, ranges[0].PartHi, check...); err != nil {
		return nil, 0, fmt.Errorf("shard: %w", err)
	}
	streams = cfg.Streams
	if streams == 0 {
		streams = min(max(runtime.GOMAXPROCS(0)/len(ranges), 1), cpu.MaxStreams)
	}
	index := make([][]int, len(ranges)) // index[s]: the positions in cfg.Fail of shard s's faults
	for i, f := range cfg.Fail {
		if f.Shard < 0 || f.Shard >= len(ranges) {
			return nil, 0, fmt.Errorf("shard: %w", &flights.FaultError{Index: i, Fault: f.Fault, Err: fmt.Errorf("no shard %d (the run has %d)", f.Shard, len(ranges))})
		}
		index[f.Shard] = append(index[f.Shard], i)
	}
	tasks = make([]any, len(ranges))
	for s, r := range ranges {
		prm := FlightsParams{Input: cfg.Input, Range: r, MinDelay: cfg.MinDelay}
		for _, i := range index[s] {
			prm.Fail = append(prm.Fail, cfg.Fail[i].Fault)
		}
		if len(prm.Fail) > 0 {
			if _, err := buildShard(src, prm, streams); err != nil {
				if fe, ok := errors.AsType[*flights.FaultError](err); ok {
					fe.Index = index[s][fe.Index]
				}
				return nil, 0, fmt.Errorf("shard: shard %d: %w", s, err)
			}
		}
		b, err := json.Marshal(prm)
		if err != nil {
			return nil, 0, fmt.Errorf("shard: %w", err)
		}
		tasks[s] = Task{Shard: s, Template: FlightsTemplate, Params: b}
	}
	return tasks, streams, nil
}

// outcomeDoc is the Outcome as the finish writes it for the launcher.
type outcomeDoc struct {
	CSV      []byte
	Rows     []flights.Row
	Key      flights.KeyKind
	Names    bool
	NamesErr string
	Reports  []Report
}

// outcome rebuilds the Outcome.
func (d *outcomeDoc) outcome() *Outcome {
	lost, parts, rows := losses(d.Reports)
	t := &flights.Table{Rows: d.Rows, Lost: lost}
	if d.NamesErr != "" {
		t.NamesErr = fmt.Errorf("%s", d.NamesErr)
	}
	return &Outcome{CSV: d.CSV, Table: t, Key: d.Key, Names: d.Names, Reports: d.Reports, Partitions: parts, Rows: rows}
}

func init() {
	beam.RegisterType(reflect.TypeOf(Task{}))
	beam.RegisterType(reflect.TypeOf(Report{}))
	register.DoFn5x1[context.Context, Task, func(Partial), func(Report), func(Task), error](&shardFn{})
	register.Emitter1[Task]()
	register.Emitter1[Partial]()
	register.Emitter1[Report]()
	register.DoFn2x0[Partial, func(string, Partial)](&keyFn{})
	register.Emitter2[string, Partial]()
	register.Combiner3[Partial, Partial, Partial](&mergeFn{})
	register.DoFn4x1[context.Context, []byte, func(*string, *Partial) bool, func(*Report) bool, error](&finishFn{})
	register.Iter2[string, Partial]()
	register.Iter1[Report]()
}

// holder is the process's backend as a DoFn holds it, from Setup to
// Teardown.
type holder struct{ backend *lease.Backend }

// open takes the process's backend (OpenBackend).
func (h *holder) open() error {
	b, err := OpenBackend()
	h.backend = b
	return err
}

// release gives it back, once.
func (h *holder) release() error {
	if h.backend == nil {
		return nil
	}
	h.backend = nil
	return ReleaseBackend(context.Background())
}

// shardFn makes attempt Attempt (of Attempts, numbered from 1) of each
// Task: it runs the task's template on this worker and emits its Partial
// and Report. A failed attempt that is not the last sends the task, with
// the failure added to Task.Failed, to its retry output, the next
// attempt's input; the last fails the bundle, and with it the job.
type shardFn struct {
	Streams           int
	Attempt, Attempts int
	Flaky             []flake
	h                 holder
}

// Setup takes the process's backend.
func (f *shardFn) Setup() error { return f.h.open() }

// Teardown gives it back.
func (f *shardFn) Teardown() error { return f.h.release() }

// ProcessElement makes t's attempt. A failure of the last attempt, or
// one after ctx is done, is its error, naming the shard, the attempts
// and the last error.
func (f *shardFn) ProcessElement(ctx context.Context, t Task, partials func(Partial), reports func(Report), retry func(Task)) error {
	err := f.attempt(ctx, t, partials, reports)
	switch {
	case err == nil:
		return nil
	case f.Attempt < f.Attempts && ctx.Err() == nil:
		t.Failed = append(slices.Clip(t.Failed), flights.FirstLine(err))
		retry(t)
		return nil
	case f.Attempt == 1:
		return fmt.Errorf("shard: shard %d: 1 attempt failed: %w", t.Shard, err)
	}
	return fmt.Errorf("shard: shard %d: %d attempts failed; the last: %w", t.Shard, f.Attempt, err)
}

// attempt runs t's template and emits its partial and its report (with
// Attempt and Failed set), failing as f.Flaky says.
func (f *shardFn) attempt(ctx context.Context, t Task, partials func(Partial), reports func(Report)) error {
	if h := attemptHook.Load(); h != nil {
		(*h)()
	}
	i := slices.IndexFunc(f.Flaky, func(x flake) bool { return x.Shard == t.Shard && f.Attempt <= x.Attempts })
	if i >= 0 && !f.Flaky[i].AfterEmit {
		return errTransient
	}
	tmpl, err := lookup(t.Template)
	if err != nil {
		return err
	}
	part, rep, err := tmpl(ctx, Env{Backend: f.h.backend, Streams: f.Streams}, t)
	if err != nil {
		return err
	}
	rep.Attempt, rep.Failed = f.Attempt, t.Failed
	partials(part)
	reports(rep)
	if i >= 0 {
		return errTransient
	}
	return nil
}

// keyFn emits each row of a Partial under its group key, as a Partial
// of that one row.
type keyFn struct{}

// ProcessElement splits p.
func (keyFn) ProcessElement(p Partial, emit func(string, Partial)) {
	for i := range p.Len() {
		var one Partial
		one.add(p.Shard[i], p.Key[i], p.Count[i], p.Sum[i], p.Max[i])
		emit(p.Key[i], one)
	}
}

// mergeFn merges the partials of one group key: its accumulator is a
// Partial of at most one row per shard (the first one seen: the rows of
// a shard's attempts are the same, and a shard whose output reached the
// merge from more than one attempt is counted once), its output that
// key's one merged row (shard -1).
type mergeFn struct{}

// CreateAccumulator returns an empty Partial.
func (mergeFn) CreateAccumulator() Partial { return Partial{} }

// AddInput adds v's rows of shards a has no row of.
func (mergeFn) AddInput(a, v Partial) Partial { return union(a, v) }

// MergeAccumulators adds b's rows of shards a has no row of.
func (mergeFn) MergeAccumulators(a, b Partial) Partial { return union(a, b) }

// ExtractOutput adds a's rows up into one.
func (mergeFn) ExtractOutput(a Partial) Partial {
	var out Partial
	if a.Len() == 0 {
		return out
	}
	count, sum, mx := int64(0), int64(0), a.Max[0]
	for i := range a.Len() {
		count += a.Count[i]
		sum += a.Sum[i]
		mx = max(mx, a.Max[i])
	}
	out.add(-1, a.Key[0], count, sum, mx)
	return out
}

// union returns a with the rows of b whose shard a has no row of.
func union(a, b Partial) Partial {
	for i := range b.Len() {
		if !slices.Contains(a.Shard, b.Shard[i]) {
			a.add(b.Shard[i], b.Key[i], b.Count[i], b.Sum[i], b.Max[i])
		}
	}
	return a
}

// finishFn finishes the merged groups on one worker (flights.Finish:
// sort, top-k, join and the CSV) and writes the outcome to Out for the
// launcher.
type finishFn struct {
	TopK     int
	Airports string
	Streams  int
	Out      string
	h        holder
}

// Setup takes the process's backend.
func (f *finishFn) Setup() error { return f.h.open() }

// Teardown gives it back.
func (f *finishFn) Teardown() error { return f.h.release() }

// ProcessElement finishes the merged groups with the shards' reports.
func (f *finishFn) ProcessElement(ctx context.Context, _ []byte, merged func(*string, *Partial) bool, reports func(*Report) bool) error {
	var rows []flights.Row
	var key string
	var part Partial
	for merged(&key, &part) {
		for i := range part.Len() {
			rows = append(rows, flights.Row{Key: part.Key[i], Count: part.Count[i], DelaySum: part.Sum[i], DelayMax: part.Max[i]})
		}
	}
	var reps []Report // one per shard: its latest attempt's
	var r Report
	for reports(&r) {
		switch i := slices.IndexFunc(reps, func(x Report) bool { return x.Shard == r.Shard }); {
		case i < 0:
			reps = append(reps, r)
		case r.Attempt > reps[i].Attempt:
			reps[i] = r
		}
	}
	slices.SortFunc(reps, func(a, b Report) int { return a.Shard - b.Shard })
	if len(reps) == 0 {
		return fmt.Errorf("shard: finish: no shard reported")
	}
	lost, parts, nrows := losses(reps)
	var opts []flights.Option
	if f.TopK > 0 {
		opts = append(opts, flights.WithTopK(f.TopK))
	}
	if f.Airports != "" {
		path := f.Airports
		opts = append(opts, flights.WithAirports(func() (io.ReadCloser, error) { return os.Open(path) }))
	}
	fin, err := flights.Finish(reps[0].Key, rows, lost, opts...)
	if err != nil {
		return fmt.Errorf("shard: finish: %w", err)
	}
	table, err := runGraph(ctx, Env{Backend: f.h.backend, Streams: f.Streams}, fin)
	if err != nil {
		return fmt.Errorf("shard: finish: %w", err)
	}
	doc := outcomeDoc{Rows: table.Rows, Key: reps[0].Key, Names: f.Airports != "" && table.NamesErr == nil,
		NamesErr: flights.FirstLine(table.NamesErr), Reports: reps}
	var csv bytes.Buffer
	if err := flights.WriteResult(&csv, "csv", table, doc.Names, parts, nrows); err != nil {
		return fmt.Errorf("shard: finish: %w", err)
	}
	doc.CSV = csv.Bytes()
	b, err := json.Marshal(doc)
	if err != nil {
		return fmt.Errorf("shard: finish: %w", err)
	}
	tmp := f.Out + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return fmt.Errorf("shard: finish: %w", err)
	}
	if err := os.Rename(tmp, f.Out); err != nil {
		return fmt.Errorf("shard: finish: %w", err)
	}
	return nil
}
