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
// for an integer) fails the partition's partial group-by, naming the row
// and the value, rather than adding a group of a key outside 0–23; the
// other partition's groups are the result.
func TestTimeOutsideTheDayFailsItsPartition(t *testing.T) {
	sc := arrow.NewSchema([]arrow.Field{{Name: "delay", Type: arrow.PrimitiveTypes.Int16}, {Name: "time", Type: arrow.PrimitiveTypes.Float64}}, nil)
	for _, bad := range []float64{-0.5, 24, math.NaN(), 1e300} {
		src := ipcSource(t, "hours.arrow", sc, 8, func(b *array.RecordBuilder, i int) {
			b.Field(0).(*array.Int16Builder).Append(30)
			tm := 13.5
			if i == 6 {
				tm = bad
			}
			b.Field(1).(*array.Float64Builder).Append(tm)
		})
		out, err := flights.Run(t.Context(), cpuExecutor(t), src, flights.WithPartitions(2))
		require.NoError(t, err)
		require.NotNil(t, out.Table)
		require.Len(t, out.Table.Rows, 1, "time %v", bad)
		r := out.Table.Rows[0]
		assert.Equal(t, [4]int64{13, 4, 120, 30}, [4]int64{mustAtoi(t, r.Key), r.Count, r.DelaySum, r.DelayMax}, "time %v", bad)
		assert.Equal(t, map[string]string{"partial[1]": `exec: kernel "partial[1]": flights: row 6: time ` + fmt.Sprint(bad) + ` is not an hour of day, want [0, 24)`}, failures(out.Report))
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	t.Helper()
	n, err := strconv.ParseInt(s, 10, 64)
	require.NoError(t, err)
	return n
}
