package shard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu"
	_ "github.com/streamdag/streamdag/gpu/cpu" // the CPU driver lease.Backend.Acquire opens
	"github.com/streamdag/streamdag/kvio"
)

// FlightsTemplate names the template of one shard of the flights job:
// its parameters are FlightsParams.
const FlightsTemplate = "flights.partial"

func init() { Register(FlightsTemplate, flightsPartial) }

// FlightsParams are the parameters of a FlightsTemplate task: the
// flights pipeline of flights.BuildParts over Range of Input (its parts,
// and flights.WithRows of its rows), keeping flights with delay >
// MinDelay minutes, with Fail injected into its kernels (names of the
// shard's own graph, such as "filter[0]").
type FlightsParams struct {
	Input    string // a Parquet or Arrow IPC file; "" is the embedded sample (flights.Sample)
	Range    Range
	MinDelay int64
	Fail     []flights.Fault
}

// Report is what a shard's run says besides its partials: the attempt
// that produced it and the errors of the attempts that failed before it,
// the group key, its range of the input, its
// partitions, its input rows, its rows of parts not read (their
// statistics rule out every row), and the partitions lost to failed
// launches.
type Report struct {
	Shard       int
	Attempt     int      // 1 up, set by the DoFn (a Template leaves it 0)
	Failed      []string // the earlier attempts' errors, first lines (Task.Failed)
	Key         flights.KeyKind
	Range       Range // the rows of the input the shard ran over
	Partitions  int
	Rows        int64
	SkippedRows int64
	Lost        []Failure
}

// Failure is the serializable record of one partition a shard lost:
// where it is (the shard, its partition index in the shard's graph, its
// parts of the input and its rows, [RowLo, RowHi) of those parts), the
// buffer that was not written, the kernel that raised the root error,
// the root error's text and the chain of kernels from the unwritten
// buffer's writer back to that kernel (failgraph.UnwrittenError's). It
// is the error of the result's flights.Loss.
type Failure struct {
	Shard, Partition int
	PartLo, PartHi   int
	RowLo, RowHi     int64
	Buffer           string
	Kernel           string
	Root             string
	Chain            []string
}

// Error reads "shard S partition P: BUFFER was not written: A ← B ←
// KERNEL: ROOT".
func (f *Failure) Error() string {
	chain := f.Kernel
	if len(f.Chain) > 0 {
		chain = strings.Join(f.Chain, " ← ")
	}
	return fmt.Sprintf("shard %d partition %d: %s was not written: %s: %s", f.Shard, f.Partition, f.Buffer, chain, f.Root)
}

// flightsPartial is the FlightsTemplate: it opens the input, builds the
// shard's graph (flights.BuildParts, all groups kept), runs it on the
// device env's backend hands out, and returns its groups as a Partial.
func flightsPartial(ctx context.Context, env Env, task Task) (Partial, Report, error) {
	var prm FlightsParams
	if err := json.Unmarshal(task.Params, &prm); err != nil {
		return Partial{}, Report{}, fmt.Errorf("shard: shard %d: %s parameters: %w", task.Shard, FlightsTemplate, err)
	}
	fail := func(err error) (Partial, Report, error) {
		r := prm.Range
		return Partial{}, Report{}, fmt.Errorf("shard: shard %d (rows [%d, %d) of parts [%d, %d)): %w", task.Shard, r.RowLo, r.RowHi, r.PartLo, r.PartHi, err)
	}
	file, err := openInput(prm.Input)
	if err != nil {
		return fail(err)
	}
	defer file.Close()
	src, err := kvio.OpenAuto(ctx, file)
	if err != nil {
		return fail(err)
	}
	defer src.Close()
	r := prm.Range
	p, err := buildShard(src, prm, env.Streams)
	if err != nil {
		return fail(err)
	}
	table, err := runGraph(ctx, env, p)
	if _, ok := errors.AsType[*failgraph.UnwrittenError](err); ok {
		// A kernel past the partitions (merge, sort, top-k, write)
		// failed: the shard has no result, and each of its partitions
		// is lost to that failure, as a launch failure loses them, not
		// retried.
		table = &flights.Table{}
		for i, part := range p.Partitions {
			table.Lost = append(table.Lost, flights.Loss{Partition: i, Part: part, Rows: part.RowHi - part.RowLo, Err: err})
		}
	} else if err != nil {
		return fail(err)
	}
	rep := Report{Shard: task.Shard, Key: p.Key, Range: r, Partitions: len(p.Partitions), Rows: r.RowHi - r.RowLo}
	var off int64 // the first row of part i, counted from part r.PartLo's
	for i := r.PartLo; i < r.PartHi; i++ {
		n := src.PartRows(i)
		if slices.Contains(p.Skipped, i) {
			rep.SkippedRows += max(min(off+n, r.RowHi)-max(off, r.RowLo), 0)
		}
		off += n
	}
	for _, l := range table.Lost {
		f := Failure{Shard: task.Shard, Partition: l.Partition, PartLo: l.Part.PartLo, PartHi: l.Part.PartHi,
			RowLo: l.Part.RowLo, RowHi: l.Part.RowHi, Root: flights.FirstLine(l.Err)}
		var u *failgraph.UnwrittenError
		if errors.As(l.Err, &u) {
			f.Buffer, f.Kernel, f.Chain = u.Buffer, u.Kernel, u.Chain
			if u.Root != nil {
				f.Root = flights.FirstLine(u.Root)
			}
		}
		rep.Lost = append(rep.Lost, f)
	}
	var part Partial
	for _, r := range table.Rows {
		part.add(int32(task.Shard), r.Key, r.Count, r.DelaySum, r.DelayMax)
	}
	return part, rep, nil
}

// buildShard builds the graph of prm's shard of src, in as many
// partitions as the shard's device has streams (at least 1), with
// prm.Fail injected. Errors: flights.BuildParts's, and a
// *flights.FaultError for a fault naming no kernel of the graph (Index
// its position in prm.Fail).
func buildShard(src kvio.Source, prm FlightsParams, streams int) (*flights.Pipeline, error) {
	r := prm.Range
	p, err := flights.BuildParts(src, r.PartLo, r.PartHi, flights.WithRows(r.RowLo, r.RowHi),
		flights.WithMinDelay(prm.MinDelay), flights.WithPartitions(max(streams, 1)))
	if err != nil {
		return nil, err
	}
	for i, f := range prm.Fail {
		if err := p.Graph.InjectFailure(f.Kernel, f.Panic); err != nil {
			return nil, &flights.FaultError{Index: i, Fault: f, Err: err}
		}
	}
	return p, nil
}

// openInput opens path, or the embedded sample for "".
func openInput(path string) (*kvio.File, error) {
	if path == "" {
		return flights.Sample()
	}
	return kvio.Open(path)
}

// runGraph runs p's graph on a device of env's backend (env.Streams
// streams) and returns its result table. Errors: the lease's, the
// plan's, the run's, and the error graph's read error when no result
// could be computed at all.
func runGraph(ctx context.Context, env Env, p *flights.Pipeline) (*flights.Table, error) {
	var opts []gpu.Option
	if env.Streams > 0 {
		opts = append(opts, gpu.WithStreams(env.Streams))
	}
	acq, err := env.Backend.Acquire(ctx, opts...)
	if err != nil {
		return nil, err
	}
	defer acq.Release()
	e, err := exec.New(acq.Device, exec.WithBackend(env.Backend))
	if err != nil {
		return nil, err
	}
	plan, err := e.Plan(p.Graph)
	if err != nil {
		return nil, err
	}
	res, err := e.Execute(ctx, plan)
	if err != nil {
		return nil, err
	}
	defer res.Close()
	return p.Result(res)
}

// losses are the result's lost partitions of reports (one per shard, in
// shard order), numbered across shards in shard order, each with its
// Failure as the error; with the partitions and input rows of all the
// shards.
func losses(reports []Report) (lost []flights.Loss, parts int, rows int64) {
	for _, r := range reports {
		for i := range r.Lost {
			f := r.Lost[i]
			lost = append(lost, flights.Loss{
				Partition: parts + f.Partition,
				Part:      flights.Partition{PartLo: f.PartLo, PartHi: f.PartHi, RowLo: f.RowLo, RowHi: f.RowHi},
				Rows:      f.RowHi - f.RowLo,
				Err:       &f,
			})
		}
		parts += r.Partitions
		rows += r.Rows
	}
	return lost, parts, rows
}
