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
	Rows     []Row        // nil when the result could not be computed
	Report   *exec.Report // every launch's outcome
}

// Run builds the pipeline over src with opts.Partitions defaulting to the
// executor device's stream count, runs it on e, and returns the rows and
// the report. A launch failure is not an error of Run: the Report says
// what failed and Rows is nil with err set to the read error that names
// the root cause. Errors that stop the run before any launch (a bad
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
	out.Rows, err = p.Rows(res)
	return out, err
}
