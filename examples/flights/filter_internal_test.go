package flights

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/kvio"
)

// delayArray returns an array of type dt (a signed integer type) of the
// values, null where valid is false.
func delayArray(dt arrow.DataType, vals []int64, valid []bool) arrow.Array {
	b := array.NewBuilder(memory.DefaultAllocator, dt)
	defer b.Release()
	for i, v := range vals {
		switch {
		case !valid[i]:
			b.AppendNull()
		case dt.ID() == arrow.INT8:
			b.(*array.Int8Builder).Append(int8(v))
		case dt.ID() == arrow.INT16:
			b.(*array.Int16Builder).Append(int16(v))
		case dt.ID() == arrow.INT32:
			b.(*array.Int32Builder).Append(int32(v))
		default:
			b.(*array.Int64Builder).Append(v)
		}
	}
	return b.NewArray()
}

// randomDelays returns n delays in [-100, 120) (fits every width), null
// with probability nullPct/100.
func randomDelays(rng *rand.Rand, n, nullPct int) ([]int64, []bool) {
	vals, valid := make([]int64, n), make([]bool, n)
	for i := range n {
		vals[i], valid[i] = int64(rng.IntN(220)-100), rng.IntN(100) >= nullPct
	}
	return vals, valid
}

// TestKeepRows checks the filter's row selection against a plain loop
// on every delay width, with and without nulls, on sliced arrays (a
// non-zero offset), at thresholds that keep all, some or no rows, and
// that the selection takes a bit a row.
func TestKeepRows(t *testing.T) {
	const seed = 15
	types := []arrow.DataType{arrow.PrimitiveTypes.Int8, arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int32, arrow.PrimitiveTypes.Int64}
	tests := []struct {
		name     string
		nullPct  int
		off, n   int // the slice of the array the filter sees
		lo, hi   int // the rows of the partition within it
		minDelay int64
	}{
		{name: "no nulls", n: 1000, hi: 1000},
		{name: "nulls", nullPct: 10, n: 1000, hi: 1000},
		{name: "all null", nullPct: 100, n: 100, hi: 100},
		{name: "offset and range", nullPct: 10, off: 37, n: 900, lo: 13, hi: 801},
		{name: "offset no nulls", off: 5, n: 900, lo: 100, hi: 899, minDelay: 20},
		{name: "keeps every row", n: 500, hi: 500, minDelay: -1 << 40},
		{name: "keeps no row", nullPct: 10, n: 500, hi: 500, minDelay: 1 << 40},
		{name: "empty range", n: 500, lo: 250, hi: 250},
	}
	for _, dt := range types {
		for ci, tc := range tests {
			t.Run(dt.String()+"/"+tc.name, func(t *testing.T) {
				rng := rand.New(rand.NewPCG(seed, uint64(ci)))
				vals, valid := randomDelays(rng, tc.off+tc.n, tc.nullPct)
				whole := delayArray(dt, vals, valid)
				defer whole.Release()
				a := array.NewSlice(whole, int64(tc.off), int64(tc.off+tc.n))
				defer a.Release()
				var want []int32
				for i := tc.lo; i < tc.hi; i++ {
					if valid[tc.off+i] && vals[tc.off+i] > tc.minDelay {
						want = append(want, int32(i))
					}
				}
				var rs rowSet
				switch x := a.(type) {
				case *array.Int8:
					rs = keepRows(x.Int8Values(), x, tc.lo, tc.hi, tc.minDelay)
				case *array.Int16:
					rs = keepRows(x.Int16Values(), x, tc.lo, tc.hi, tc.minDelay)
				case *array.Int32:
					rs = keepRows(x.Int32Values(), x, tc.lo, tc.hi, tc.minDelay)
				case *array.Int64:
					rs = keepRows(x.Int64Values(), x, tc.lo, tc.hi, tc.minDelay)
				}
				assert.Equal(t, want, setRows(rs), "seed %d", seed)
				assert.Equal(t, len(want), rs.len(), "seed %d", seed)
				assert.Equal(t, len(want) == 0, rs.empty(), "seed %d", seed)
				assert.LessOrEqual(t, len(rs.words), (tc.hi-tc.lo)/64+2, "seed %d: more than a bit a row", seed)
			})
		}
	}
}

// TestFilterSelection runs the pipeline over a Parquet file of
// several row groups with null delays and origins, split into more
// partitions than row groups, and checks every selected[p] value: per
// batch, exactly the rows of the partition whose delay is valid and
// above MinDelay, in at most a bit a row of the partition's range (the
// selections are alive until the run ends, so their size is memory the
// run holds), and the result against a plain loop.
func TestFilterSelection(t *testing.T) {
	const seed, rows, groupRows = 7, 5000, 1500
	for _, dt := range []arrow.DataType{arrow.PrimitiveTypes.Int16, arrow.PrimitiveTypes.Int64} {
		t.Run(dt.String(), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, seed))
			vals, valid := randomDelays(rng, rows, 10)
			delay := delayArray(dt, vals, valid)
			defer delay.Release()
			ob := array.NewStringBuilder(memory.DefaultAllocator)
			defer ob.Release()
			origins := make([]string, rows)
			for i := range rows {
				if rng.IntN(20) == 0 {
					ob.AppendNull()
					continue
				}
				origins[i] = fmt.Sprintf("A%02d", rng.IntN(20))
				ob.Append(origins[i])
			}
			origin := ob.NewArray()
			defer origin.Release()
			sc := arrow.NewSchema([]arrow.Field{{Name: "delay", Type: dt, Nullable: true}, {Name: "origin", Type: arrow.BinaryTypes.String, Nullable: true}}, nil)
			rec := array.NewRecordBatch(sc, []arrow.Array{delay, origin}, rows)
			defer rec.Release()
			tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
			defer tbl.Release()
			var buf bytes.Buffer
			require.NoError(t, pqarrow.WriteTable(tbl, &buf, groupRows, parquet.NewWriterProperties(), pqarrow.DefaultWriterProps()))
			f, err := kvio.NewFile("sel.parquet", bytes.NewReader(buf.Bytes()), int64(buf.Len()))
			require.NoError(t, err)
			defer func() { assert.NoError(t, f.Close()) }()
			src, err := kvio.OpenParquet(t.Context(), f)
			require.NoError(t, err)
			defer func() { assert.NoError(t, src.Close()) }()

			const minDelay = 5
			p, err := Build(src, WithMinDelay(minDelay), WithPartitions(8))
			require.NoError(t, err)
			dev, err := cpu.New(cpu.WithStreams(2))
			require.NoError(t, err)
			defer func() { assert.NoError(t, dev.Close()) }()
			e, err := exec.New(dev)
			require.NoError(t, err)
			res, err := e.Run(t.Context(), p.Graph)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Report.Err())

			sels := map[string]selection{}
			for _, b := range p.Graph.Buffers() {
				if v, err := res.Value(b.ID); err == nil {
					if s, ok := v.(selection); ok {
						sels[b.Name] = s
					}
				}
			}
			require.Len(t, sels, len(p.Partitions))
			want := map[string]Row{}
			for i := range rows {
				if valid[i] && vals[i] > minDelay && origins[i] != "" {
					r := want[origins[i]]
					r.Count++
					r.DelaySum += vals[i]
					r.DelayMax = max(r.DelayMax, vals[i])
					want[origins[i]] = r
				}
			}
			for i, part := range p.Partitions {
				sel := sels[fmt.Sprintf("selected[%d]", i)]
				require.Len(t, sel, part.PartHi-part.PartLo, "partition %d", i)
				base := int64(0)
				for j := range part.PartLo {
					base += src.PartRows(j)
				}
				var off int64
				for b := range sel {
					n := src.PartRows(part.PartLo + b)
					var wantSel []int32
					for r := max(part.RowLo-off, 0); r < min(part.RowHi-off, n); r++ {
						if g := base + off + r; valid[g] && vals[g] > minDelay {
							wantSel = append(wantSel, int32(r))
						}
					}
					lo, hi := max(part.RowLo-off, 0), min(part.RowHi-off, n)
					assert.Equal(t, wantSel, setRows(sel[b]), "seed %d partition %d batch %d", seed, i, b)
					assert.LessOrEqual(t, int64(len(sel[b].words)), max(hi-lo, 0)/64+2, "seed %d partition %d batch %d: more than a bit a row", seed, i, b)
					off += n
				}
			}
			v, err := res.Value(p.Output.ID())
			require.NoError(t, err)
			got := v.(*Table).Rows
			require.Len(t, got, len(want), "seed %d", seed)
			for _, r := range got {
				w := want[r.Key]
				assert.Equal(t, [3]int64{w.Count, w.DelaySum, w.DelayMax}, [3]int64{r.Count, r.DelaySum, r.DelayMax}, "seed %d key %s", seed, r.Key)
			}
		})
	}
}

// setRows returns the rows of s as int32s, nil when there are none.
func setRows(s rowSet) []int32 {
	var out []int32
	for r := range s.rows {
		out = append(out, int32(r))
	}
	return out
}

// parquetSource writes rows rows of random delays (type int16, 10% null)
// and 20 origins to Parquet in row groups of groupRows rows and opens it,
// closed when the test ends; it returns the delays too.
func parquetSource(t *testing.T, rows, groupRows int, seed uint64) kvio.Source {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	vals, valid := randomDelays(rng, rows, 10)
	delay := delayArray(arrow.PrimitiveTypes.Int16, vals, valid)
	defer delay.Release()
	ob := array.NewStringBuilder(memory.DefaultAllocator)
	defer ob.Release()
	for range rows {
		ob.Append(fmt.Sprintf("A%02d", rng.IntN(20)))
	}
	origin := ob.NewArray()
	defer origin.Release()
	sc := arrow.NewSchema([]arrow.Field{{Name: "delay", Type: delay.DataType(), Nullable: true}, {Name: "origin", Type: arrow.BinaryTypes.String}}, nil)
	rec := array.NewRecordBatch(sc, []arrow.Array{delay, origin}, int64(rows))
	defer rec.Release()
	tbl := array.NewTableFromRecords(sc, []arrow.RecordBatch{rec})
	defer tbl.Release()
	var buf bytes.Buffer
	require.NoError(t, pqarrow.WriteTable(tbl, &buf, int64(groupRows), parquet.NewWriterProperties(), pqarrow.DefaultWriterProps()))
	f, err := kvio.NewFile("lanes.parquet", bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, f.Close()) })
	src, err := kvio.OpenParquet(t.Context(), f)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, src.Close()) })
	return src
}

// TestPlanDepthFirst checks the CPU graph's run order: on each stream,
// a source's filters and partials come right after it, before the
// stream's next source (so a stream holds the batches of one source
// while it filters and groups them, not every source's at once), and
// the sources are spread over the streams. (Where there are fewer
// sources than partitions wanted, a source's partitions are meant to run
// on several streams at once: no lane order applies.)
func TestPlanDepthFirst(t *testing.T) {
	const seed = 3
	src := parquetSource(t, 5*minSourceRows+5, minSourceRows+1, seed)
	require.Equal(t, 5, src.NumParts())
	tests := []struct {
		name             string
		streams, parts   int
		wantSources      int
		wantSourceStream int // streams that run a source
	}{
		{name: "2 streams", streams: 2, parts: 2, wantSources: 5, wantSourceStream: 2},
		{name: "3 streams", streams: 3, parts: 3, wantSources: 5, wantSourceStream: 3},
		{name: "1 stream", streams: 1, parts: 1, wantSources: 5, wantSourceStream: 1},
		{name: "4 streams", streams: 4, parts: 4, wantSources: 5, wantSourceStream: 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Build(src, WithPartitions(tc.parts))
			require.NoError(t, err)
			dev, err := cpu.New(cpu.WithStreams(tc.streams))
			require.NoError(t, err)
			defer func() { assert.NoError(t, dev.Close()) }()
			e, err := exec.New(dev)
			require.NoError(t, err)
			plan, err := e.Plan(p.Graph)
			require.NoError(t, err)
			byStream := map[int][]exec.PlannedLaunch{}
			for _, l := range plan.Launches() {
				byStream[l.Stream] = append(byStream[l.Stream], l)
			}
			sources, sourceStreams := 0, 0
			for s, ls := range byStream {
				slices.SortFunc(ls, func(a, b exec.PlannedLaunch) int { return a.Seq - b.Seq })
				cur, ran := -1, false // the source whose batches the stream works on
				for _, l := range ls {
					name, idx, ok := strings.Cut(strings.TrimSuffix(l.Name, "]"), "[")
					if !ok {
						continue
					}
					n, err := strconv.Atoi(idx)
					require.NoError(t, err, l.Name)
					switch name {
					case "source":
						cur, ran = n, true
						sources++
					case "filter", "partial":
						assert.Equal(t, cur, p.Partitions[n].Source, "stream %d: %s runs after source[%d], not after its own source", s, l.Name, cur)
					}
				}
				if ran {
					sourceStreams++
				}
			}
			assert.Equal(t, tc.wantSources, sources)
			assert.Equal(t, tc.wantSourceStream, sourceStreams)

			res, err := e.Execute(t.Context(), plan)
			require.NoError(t, err)
			defer res.Close()
			require.NoError(t, res.Report.Err())
		})
	}
}

// TestLaneFailure checks that the lane order carries no data: when a
// source's partial (or the source itself) fails, the next source of its
// lane still runs, and only the failed source's partition is lost.
func TestLaneFailure(t *testing.T) {
	src := parquetSource(t, 5*minSourceRows+5, minSourceRows+1, 4)
	for _, kernel := range []string{"partial[0]", "source[0]", "filter[0]"} {
		t.Run(kernel, func(t *testing.T) {
			p, err := Build(src, WithPartitions(2))
			require.NoError(t, err)
			require.NoError(t, p.Graph.InjectFailure(kernel, false))
			dev, err := cpu.New(cpu.WithStreams(2))
			require.NoError(t, err)
			defer func() { assert.NoError(t, dev.Close()) }()
			e, err := exec.New(dev)
			require.NoError(t, err)
			res, err := e.Run(t.Context(), p.Graph)
			require.NoError(t, err)
			defer res.Close()
			status := map[string]exec.Status{}
			for _, l := range res.Report.Launches() {
				status[l.Kernel] = l.Status
			}
			assert.Equal(t, exec.StatusOK, status["source[2]"], "the next source of lane 0")
			assert.Equal(t, exec.StatusOK, status["partial[2]"])
			tbl, err := p.Result(res)
			require.NoError(t, err)
			require.Len(t, tbl.Lost, 1)
			assert.Equal(t, 0, tbl.Lost[0].Partition)
			var count int64
			for _, r := range tbl.Rows {
				count += r.Count
			}
			assert.Positive(t, count)
		})
	}
}
