package flights

import (
	"context"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/kvio"
)

// Output is the outcome of a run of the pipeline (Run, Job.Run).
type Output struct {
	Pipeline *Pipeline
	Plan     *exec.Plan
	Report   *exec.Report // every launch's outcome
	// Table is the result (the rows of the partitions that ran, with
	// Table.Lost naming the others), nil when no result could be
	// computed at all: ReadErr then is the error graph's read error
	// naming the root cause.
	Table   *Table
	ReadErr error
	// Names: the rows have airport names and cities (WithAirports was
	// given and could be read).
	Names bool
	// Summary has the input's figures.
	Summary Summary
	// Reads describes the input file's reads in the run
	// (kvio.File.Describe) for Job.Run; "" for Run.
	Reads string
	// Capture is the run Job.Replays captured (its Err says why it was
	// not replayed), nil without Replays.
	Capture *exec.Capture
}

// Complete reports whether out is a whole result: no launch failed, and
// a table with no lost partition and, when asked for, the airport names.
func (out *Output) Complete() bool {
	return out.Report.Err() == nil && out.ReadErr == nil && len(out.Table.Lost) == 0 && out.Table.NamesErr == nil
}

// Run builds the pipeline over src with opts (without WithPartitions, one
// partition per stream of every device of e), runs it on e, and returns the rows and
// the report: it is Job.Run of a Job with only Options, over a source
// the caller opened (and closes). A launch failure is not an error of
// Run: the Report says what failed, and the Table holds the rows of the
// partitions that ran with Table.Lost naming the others; when no result
// could be computed at all, Table is nil and err is Output.ReadErr.
// Errors that stop the run before any launch (an option's, a bad schema,
// an over-budget buffer) are returned with a nil Output.
func Run(ctx context.Context, e *exec.Executor, src kvio.Source, opts ...Option) (*Output, error) {
	j := Job{Options: opts}
	out, err := j.run(ctx, e, src, nil)
	if err != nil {
		return nil, err
	}
	return out, out.ReadErr
}
