package flights

import (
	"maps"
	"slices"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/exec"
)

// The values the pipeline's kernels pass implement exec.Copier, so that a
// multi-device executor can move them between (simulated) GPUs with a
// real copy into the destination's memory.

var (
	_ exec.Copier = batchList(nil)
	_ exec.Copier = selection(nil)
	_ exec.Copier = (*groups)(nil)
	_ exec.Copier = (*Table)(nil)
	_ exec.Copier = airportMap(nil)
)

// CopyTo deep-copies every record batch into mem (a nil one, a part not
// read, stays nil).
func (b batchList) CopyTo(mem memory.Allocator) (any, int64, error) {
	out := make(batchList, 0, len(b))
	var n int64
	for _, rec := range b {
		if rec == nil {
			out = append(out, nil)
			continue
		}
		c, m, err := exec.CopyRecord(rec, mem)
		if err != nil {
			out.Release()
			return nil, 0, err
		}
		out, n = append(out, c), n+m
	}
	return out, n, nil
}

// CopyTo copies the row sets (a bit a row).
func (s selection) CopyTo(memory.Allocator) (any, int64, error) {
	out := make(selection, len(s))
	var n int64
	for i, rs := range s {
		out[i] = rowSet{base: rs.base, words: slices.Clone(rs.words)}
		n += int64(len(rs.words)) * 8
	}
	return out, n, nil
}

// CopyTo copies the aggregates (24 bytes each plus the key).
func (g *groups) CopyTo(memory.Allocator) (any, int64, error) {
	out := newGroups()
	var n int64
	for k, a := range g.byCode {
		c := *a
		out.byCode[k], n = &c, n+24+int64(len(k))
	}
	for k, a := range g.byHour {
		c := *a
		out.byHour[k], n = &c, n+32
	}
	out.lost = slices.Clone(g.lost)
	return out, n, nil
}

// CopyTo copies the rows.
func (t *Table) CopyTo(memory.Allocator) (any, int64, error) {
	out := &Table{Rows: slices.Clone(t.Rows), Lost: slices.Clone(t.Lost)}
	var n int64
	for _, r := range t.Rows {
		n += 64 + int64(len(r.Key)+len(r.Name)+len(r.City))
	}
	return out, n, nil
}

// CopyTo copies the airports.
func (m airportMap) CopyTo(memory.Allocator) (any, int64, error) {
	var n int64
	for k, a := range m {
		n += int64(len(k) + len(a.name) + len(a.city))
	}
	return maps.Clone(m), n, nil
}
