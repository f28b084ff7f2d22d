package flights_test

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/kvio"
)

// ipcSource is an Arrow IPC source over one record batch of sc whose
// rows fill makes (row i of n), named name.
func ipcSource(t *testing.T, name string, sc *arrow.Schema, n int, fill func(b *array.RecordBuilder, i int)) kvio.Source {
	t.Helper()
	b := array.NewRecordBuilder(memory.NewGoAllocator(), sc)
	defer b.Release()
	for i := range n {
		fill(b, i)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(sc))
	require.NoError(t, err)
	require.NoError(t, w.Write(rec))
	require.NoError(t, w.Close())
	f, err := kvio.NewFile(name, bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	require.NoError(t, err)
	src, err := kvio.OpenIPC(t.Context(), f)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, src.Close()) })
	return src
}

// failures returns the errors of the failed launches of rep, by kernel.
func failures(rep *exec.Report) map[string]string {
	m := map[string]string{}
	for _, l := range rep.Launches() {
		if l.Status == exec.StatusFailed {
			m[l.Kernel] = l.Err.Error()
		}
	}
	return m
}

// A "time" that is no hour of day (negative, 24 or more, NaN, too large
// for an integer) fails its partition, naming the row and the value,
// rather than adding a group of a key outside 0–23: partial[p] on the
// CPU graph, columns[p] on the device graph (WithOpenCL, run here with
// its Go variants). A row the filter drops (its delay is not above
// --min-delay, or null) is not grouped, so its time is not checked, on
// either graph.
func TestTimeOutsideTheDayFailsItsPartition(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{{Name: "delay", Type: arrow.PrimitiveTypes.Int16, Nullable: true}, {Name: "time", Type: arrow.PrimitiveTypes.Float64}}, nil)
	source := func(bad float64, delay6 int16, null6 bool) kvio.Source {
		return ipcSource(t, "hours.arrow", sc, 8, func(b *array.RecordBuilder, i int) {
			d, tm := int16(30), 13.5
			if i == 6 {
				d, tm = delay6, bad
			}
			if i == 6 && null6 {
				b.Field(0).(*array.Int16Builder).AppendNull()
			} else {
				b.Field(0).(*array.Int16Builder).Append(d)
			}
			b.Field(1).(*array.Float64Builder).Append(tm)
		})
	}
	for _, graph := range []struct {
		name, kernel string
		opts         []flights.Option
	}{{"cpu", "partial", nil}, {"device", "columns", []flights.Option{flights.WithOpenCL()}}} {
		opts := append([]flights.Option{flights.WithPartitions(2)}, graph.opts...)
		for _, bad := range []float64{-0.5, 24, math.NaN(), 1e300} {
			out := runOnCPU(t, source(bad, 30, false), 2, opts...)
			require.NotNil(t, out.Table)
			require.Len(t, out.Table.Rows, 1, "%s, time %v", graph.name, bad)
			r := out.Table.Rows[0]
			assert.Equal(t, [4]int64{13, 4, 120, 30}, [4]int64{mustAtoi(t, r.Key), r.Count, r.DelaySum, r.DelayMax}, "%s, time %v", graph.name, bad)
			k := graph.kernel + "[1]"
			assert.Equal(t, map[string]string{k: `exec: kernel "` + k + `": flights: row 6: time ` + fmt.Sprint(bad) + ` is not an hour of day, want [0, 24)`}, failures(out.Report))

			for _, null := range []bool{false, true} {
				out = runOnCPU(t, source(bad, 0, null), 2, opts...)
				require.NotNil(t, out.Table)
				require.Len(t, out.Table.Rows, 1, "%s, time %v, null delay %v", graph.name, bad, null)
				r = out.Table.Rows[0]
				assert.Equal(t, [4]int64{13, 7, 210, 30}, [4]int64{mustAtoi(t, r.Key), r.Count, r.DelaySum, r.DelayMax}, "%s, time %v, null delay %v", graph.name, bad, null)
				assert.Empty(t, failures(out.Report), "%s, time %v, null delay %v", graph.name, bad, null)
			}
		}
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}
