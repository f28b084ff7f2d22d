package flights

import (
	"context"
	"fmt"
	"strconv"

	"github.com/streamdag/streamdag/dag"
)

// Finish returns the pipeline that finishes merged groups as Build's
// pipeline does after its merge kernel: a "groups" kernel holds rows,
// then sort, topk, join (with WithAirports) and write run as in
// Build. rows are the aggregates of the groups: Key (an airport code, or
// for KeyHour the hour as a decimal integer), Count, DelaySum and
// DelayMax; rows of one key are added up, and DelayMean, Name and City
// are not read. lost becomes the result's Table.Lost. Run the pipeline
// on an executor and read its result with Pipeline.Result: it is the
// table Build's pipeline gives over a source whose groups are rows, so
// the merged results of BuildParts over shards that cover a source
// (each without WithTopK) finish to the table of Build over the whole
// source. WithMinDelay, WithPartitions, WithOpenCL and WithDevice are
// not used; the pipeline has no Partitions. Errors: an option's error,
// WithAirports with KeyHour, a KeyHour row whose Key is not an integer
// (naming the row), or a Count below 1.
func Finish(key KeyKind, rows []Row, lost []Loss, opts ...Option) (*Pipeline, error) {
	s, err := newSettings(opts)
	if err != nil {
		return nil, err
	}
	if key == KeyHour && s.Airports != nil {
		return nil, fmt.Errorf("flights: finish: groups by hour have no airport codes to join airports.csv on")
	}
	merged := newGroups()
	merged.lost = lost
	for i, r := range rows {
		if r.Count < 1 {
			return nil, fmt.Errorf("flights: finish: row %d (key %q): count %d, want 1 or more", i, r.Key, r.Count)
		}
		a := agg{count: r.Count, sum: r.DelaySum, max: r.DelayMax}
		if key == KeyHour {
			h, err := strconv.ParseInt(r.Key, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("flights: finish: row %d: hour key %q is not an integer", i, r.Key)
			}
			addAgg(merged.byHour, h, a)
			continue
		}
		addAgg(merged.byCode, r.Key, a)
	}
	p := &Pipeline{Graph: dag.New(), Key: key, opts: s}
	v := dag.AddValue[*groups](p.Graph, "merged")
	p.Graph.AddKernel("groups", func(_ context.Context, l dag.Launch) error {
		return dag.Put(l, v, merged)
	}, dag.Writes(v.ID()))
	p.addFinish(v)
	return p, p.Graph.Validate()
}

// addAgg adds a to m[k].
func addAgg[K comparable](m map[K]*agg, k K, a agg) {
	if o := m[k]; o != nil {
		o.merge(a)
		return
	}
	m[k] = &a
}
