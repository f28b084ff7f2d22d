package flights_test

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/kvio"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// reference computes the flights result with one plain loop over the
// columns as arrow-go reads them, independently of the pipeline.
func reference(t *testing.T, recs []arrow.RecordBatch, minDelay int64) map[string]flights.Row {
	t.Helper()
	out := map[string]flights.Row{}
	for _, rec := range recs {
		sc := rec.Schema()
		delay := rec.Column(sc.FieldIndices("delay")[0])
		var key func(i int) string
		if idx := sc.FieldIndices("origin"); len(idx) > 0 {
			switch a := rec.Column(idx[0]).(type) {
			case *array.String:
				key = a.Value
			case *array.LargeString:
				key = a.Value
			default:
				t.Fatalf("origin is %s", a.DataType())
			}
		} else {
			tm := rec.Column(sc.FieldIndices("time")[0]).(*array.Float32)
			key = func(i int) string { return strconv.Itoa(int(math.Floor(float64(tm.Value(i))))) }
		}
		for i := range int(rec.NumRows()) {
			var d int64
			switch a := delay.(type) {
			case *array.Int64:
				d = a.Value(i)
			case *array.Int16:
				d = int64(a.Value(i))
			default:
				t.Fatalf("delay is %s", a.DataType())
			}
			if d <= minDelay {
				continue
			}
			k := key(i)
			r := out[k]
			if r.Count == 0 || d > r.DelayMax {
				r.DelayMax = d
			}
			r.Key = k
			r.Count++
			r.DelaySum += d
			out[k] = r
		}
	}
	return out
}

func readParquet(t *testing.T, path string) []arrow.RecordBatch {
	f, err := file.OpenParquetFile(path, false)
	require.NoError(t, err)
	defer f.Close()
	fr, err := pqarrow.NewFileReader(f, pqarrow.ArrowReadProperties{BatchSize: 1 << 20}, memory.DefaultAllocator)
	require.NoError(t, err)
	rr, err := fr.GetRecordReader(context.Background(), nil, nil)
	require.NoError(t, err)
	defer rr.Release()
	var recs []arrow.RecordBatch
	for rr.Next() {
		rec := rr.RecordBatch()
		rec.Retain()
		recs = append(recs, rec)
	}
	return recs
}

func readIPC(t *testing.T, path string) []arrow.RecordBatch {
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	r, err := ipc.NewFileReader(f)
	require.NoError(t, err)
	defer r.Close()
	var recs []arrow.RecordBatch
	for i := range r.NumRecords() {
		rec, err := r.RecordBatch(i)
		require.NoError(t, err)
		rec.Retain()
		recs = append(recs, rec)
	}
	return recs
}

func TestFlightsMatchesReference(t *testing.T) {
	inputs := []struct {
		name    string
		read    func(*testing.T, string) []arrow.RecordBatch
		streams []int
	}{
		{"flights-3m.parquet", readParquet, []int{1, 4}},
		{"flights-231k-multibatch.arrow", readIPC, []int{1, 3, 8}},
		{"flights-200k.arrow", readIPC, []int{1, 3, 8}},
	}
	for _, in := range inputs {
		t.Run(in.name, func(t *testing.T) {
			path := testdata.File(t, in.name)
			recs := in.read(t, path)
			defer func() {
				for _, r := range recs {
					r.Release()
				}
			}()
			testAgainstReference(t, path, recs, in.streams)
		})
	}
}

func testAgainstReference(t *testing.T, path string, recs []arrow.RecordBatch, streamCounts []int) {
	for _, minDelay := range []int64{0, 30, -1000} {
		want := reference(t, recs, minDelay)
		for _, streams := range streamCounts {
			t.Run(fmt.Sprintf("min=%d/streams=%d", minDelay, streams), func(t *testing.T) {
				dev, err := cpu.New(cpu.WithStreams(streams))
				require.NoError(t, err)
				defer dev.Close()
				mem := leaktest.Allocator(t)
				e, err := exec.New(dev, exec.WithAllocator(mem))
				require.NoError(t, err)
				f, err := kvio.Open(path)
				require.NoError(t, err)
				defer f.Close()
				src, err := kvio.OpenAuto(t.Context(), f)
				require.NoError(t, err)
				defer src.Close()
				out, err := flights.Run(t.Context(), e, src, flights.WithMinDelay(minDelay))
				require.NoError(t, err)
				require.NoError(t, out.Report.Err())
				if streams > 1 {
					assert.Positive(t, out.Report.Waits, "partitions on several streams need event waits")
				}
				require.NotNil(t, out.Table)
				require.Empty(t, out.Table.Lost)
				require.Len(t, out.Table.Rows, len(want))
				for i, r := range out.Table.Rows {
					w := want[r.Key]
					assert.Equal(t, w.Count, r.Count, r.Key)
					assert.Equal(t, w.DelaySum, r.DelaySum, r.Key)
					assert.Equal(t, w.DelayMax, r.DelayMax, r.Key)
					assert.InDelta(t, float64(w.DelaySum)/float64(w.Count), r.DelayMean, 1e-9, r.Key)
					if i > 0 {
						assert.GreaterOrEqual(t, out.Table.Rows[i-1].Count, r.Count, "sorted by count")
					}
				}
			})
		}
	}
}

// WriteTable left-aligns text columns (airport codes, names, cities) and
// right-aligns numbers.
func TestWriteTableAlignment(t *testing.T) {
	rows := []flights.Row{
		{Key: "DFW", Count: 75889, DelaySum: 2002951, DelayMean: 26.393, DelayMax: 867, Name: "Dallas-Fort Worth International", City: "Dallas-Fort Worth"},
		{Key: "ORD", Count: 758, DelaySum: 25351, DelayMean: 3.4165, DelayMax: 94, Name: "Chicago O'Hare International", City: "Chicago"},
	}
	var b strings.Builder
	require.NoError(t, flights.WriteTable(&b, rows, flights.KeyOrigin, true))
	assert.Equal(t, ""+
		"origin  count  delay_sum  delay_mean  delay_max  name                             city\n"+
		"DFW     75889    2002951       26.39        867  Dallas-Fort Worth International  Dallas-Fort Worth\n"+
		"ORD       758      25351        3.42         94  Chicago O'Hare International     Chicago\n", b.String())

	b.Reset()
	require.NoError(t, flights.WriteTable(&b, []flights.Row{{Key: "17", Count: 6888}, {Key: "8", Count: 5}}, flights.KeyHour, false))
	assert.Equal(t, ""+
		"hour  count  delay_sum  delay_mean  delay_max\n"+
		"  17   6888          0        0.00          0\n"+
		"   8      5          0        0.00          0\n", b.String())
}
