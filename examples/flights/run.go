package flights

import (
	"context"
	"fmt"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/kvio"
)

// Output is the outcome of Run.
type Output struct {
	Pipeline *Pipeline
	Table    *Table       // nil when no result could be computed
	Report   *exec.Report // every launch's outcome
}

// Run builds the pipeline over src with opts.Partitions defaulting to the
// executor device's stream count, runs it on e, and returns the rows and
// the report. A launch failure is not an error of Run: the Report says
// what failed, and the Table holds the rows of the partitions that ran
// with Table.Lost naming the others; when no result could be computed
// at all, Table is nil and err is the read error naming the root cause. Errors that stop the run before any launch (a bad
// schema, an over-budget buffer) are returned with a nil Output.
func Run(ctx context.Context, e *exec.Executor, src kvio.Source, opts Options) (*Output, error) {
	if opts.Partitions == 0 {
		opts.Partitions = e.Device().NumStreams()
	}
	p, err := Build(src, opts)
	if err != nil {
		return nil, err
	}
	res, err := e.Run(ctx, p.Graph)
	if err != nil {
		return nil, fmt.Errorf("flights: %w", err)
	}
	defer res.Close()
	out := &Output{Pipeline: p, Report: res.Report}
	out.Table, err = p.Result(res)
	return out, err
}
