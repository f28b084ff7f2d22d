package flights_test

import (
	"bytes"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/kvio"
)

// runPipeline plans and runs p on a 2-stream CPU executor and returns
// its result table.
func runPipeline(t *testing.T, p *flights.Pipeline) *flights.Table {
	t.Helper()
	e := cpuExecutor(t)
	plan, err := e.Plan(p.Graph)
	require.NoError(t, err)
	res, err := e.Execute(t.Context(), plan)
	require.NoError(t, err)
	defer res.Close()
	require.NoError(t, res.Report.Err())
	table, err := p.Result(res)
	require.NoError(t, err)
	return table
}

// TestBuildPartsFinish: the pipelines of BuildParts over shards of a
// source's parts (TopK 0), their rows merged and finished with Finish
// (TopK 5, with the airports join), give the CSV of Build over the whole
// source, byte for byte; each shard's partitions and skipped parts name
// parts of the source.
func TestBuildPartsFinish(t *testing.T) {
	data := nullableParquet(t, 20000, 1500, 30, true, 7)
	src := openParquet(t, "sharded.parquet", bytes.NewReader(data), int64(len(data)))
	require.Equal(t, 14, src.NumParts())
	airports := func() (io.ReadCloser, error) {
		return io.NopCloser(strings.NewReader("iata,name,city\nK0028,Twenty-eight,Vingt-huit\nK0011,Eleven,Onze\n")), nil
	}
	opts := []flights.Option{flights.WithMinDelay(15), flights.WithTopK(5), flights.WithPartitions(2), flights.WithAirports(airports)}
	whole := runOnCPU(t, src, 2, opts...)
	var want bytes.Buffer
	require.NoError(t, flights.WriteCSV(&want, whole.Table.Rows, true))

	var rows []flights.Row
	for _, r := range [][2]int{{0, 5}, {5, 6}, {6, 14}} {
		p, err := flights.BuildParts(src, r[0], r[1], flights.WithMinDelay(15), flights.WithPartitions(2))
		require.NoError(t, err)
		for _, part := range p.Partitions {
			assert.True(t, part.PartLo >= r[0] && part.PartHi <= r[1], "partition %+v outside parts %v", part, r)
		}
		for _, i := range p.Skipped {
			assert.True(t, i >= r[0] && i < r[1], "skipped part %d outside parts %v", i, r)
		}
		rows = append(rows, runPipeline(t, p).Rows...)
	}
	fin, err := flights.Finish(whole.Pipeline.Key, rows, nil, opts...)
	require.NoError(t, err)
	table := runPipeline(t, fin)
	assert.Empty(t, table.Lost)
	var got bytes.Buffer
	require.NoError(t, flights.WriteCSV(&got, table.Rows, true))
	assert.Equal(t, want.String(), got.String())
	assert.Contains(t, got.String(), "Twenty-eight,Vingt-huit")
}

// TestFinishByHourAndErrors: Finish of hour groups sorts them
// numerically and keeps the lost partitions; bad ranges and rows are
// errors naming what is wrong.
func TestFinishByHourAndErrors(t *testing.T) {
	rows := []flights.Row{{Key: "9", Count: 2, DelaySum: 10, DelayMax: 7}, {Key: "10", Count: 2, DelaySum: 4, DelayMax: 3}, {Key: "9", Count: 1, DelaySum: 9, DelayMax: 9}}
	lost := []flights.Loss{{Partition: 3, Rows: 100}}
	p, err := flights.Finish(flights.KeyHour, rows, lost)
	require.NoError(t, err)
	table := runPipeline(t, p)
	var got bytes.Buffer
	require.NoError(t, flights.WriteCSV(&got, table.Rows, false))
	assert.Equal(t, "key,count,delay_sum,delay_mean,delay_max\n9,3,19,6.333333,9\n10,2,4,2.000000,3\n", got.String())
	assert.Equal(t, lost, table.Lost)

	_, err = flights.Finish(flights.KeyHour, []flights.Row{{Key: "x", Count: 1}}, nil)
	assert.EqualError(t, err, `flights: finish: row 0: hour key "x" is not an integer`)
	_, err = flights.Finish(flights.KeyOrigin, []flights.Row{{Key: "SFO"}}, nil)
	assert.EqualError(t, err, `flights: finish: row 0 (key "SFO"): count 0, want 1 or more`)

	src := openSample(t)
	_, err = flights.BuildParts(src, 0, 2)
	assert.EqualError(t, err, "flights: parts [0, 2) of flights-200k.arrow (embedded): want 0 <= lo <= hi <= 1")
}

// TestBuildPartsRowRanges: BuildParts with WithRows over row ranges of
// the embedded sample's one record batch (SplitRows into 3), their rows
// merged and finished, give the CSV of Build over the whole sample; the
// partitions cover exactly the kept rows; bad row ranges are errors.
func TestBuildPartsRowRanges(t *testing.T) {
	src := openSample(t)
	require.Equal(t, 1, src.NumParts())
	opts := []flights.Option{flights.WithMinDelay(15), flights.WithTopK(5)}
	whole := runOnCPU(t, src, 2, opts...)
	var want bytes.Buffer
	require.NoError(t, flights.WriteCSV(&want, whole.Table.Rows, false))

	cuts := flights.SplitRows(0, 200000, 3)
	assert.Equal(t, [][2]int64{{0, 66666}, {66666, 133333}, {133333, 200000}}, cuts)
	var rows []flights.Row
	for _, c := range cuts {
		p, err := flights.BuildParts(src, 0, 1, flights.WithMinDelay(15), flights.WithPartitions(2), flights.WithRows(c[0], c[1]))
		require.NoError(t, err)
		require.Len(t, p.Partitions, 2)
		assert.Equal(t, c[0], p.Partitions[0].RowLo)
		assert.Equal(t, p.Partitions[0].RowHi, p.Partitions[1].RowLo)
		assert.Equal(t, c[1], p.Partitions[1].RowHi)
		rows = append(rows, runPipeline(t, p).Rows...)
	}
	fin, err := flights.Finish(whole.Pipeline.Key, rows, nil, opts...)
	require.NoError(t, err)
	var got bytes.Buffer
	require.NoError(t, flights.WriteCSV(&got, runPipeline(t, fin).Rows, false))
	assert.Equal(t, want.String(), got.String())

	_, err = flights.BuildParts(src, 0, 1, flights.WithRows(0, 200001))
	assert.EqualError(t, err, "flights: rows [0, 200001) of parts [0, 1) of flights-200k.arrow (embedded): the parts have 200000 rows")
	_, err = flights.Build(src, flights.WithRows(5, 4))
	assert.EqualError(t, err, "flights: WithRows(5, 4): want 0 <= lo <= hi")
}

// openSample opens the embedded sample, closed at the test's end.
func openSample(t *testing.T) kvio.Source {
	t.Helper()
	f, err := flights.Sample()
	require.NoError(t, err)
	t.Cleanup(func() { f.Close() })
	src, err := kvio.OpenAuto(t.Context(), f)
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	return src
}

// endless is an airports.csv header followed by bytes that never end,
// as a device gives them.
type endless struct{ head string }

func (e *endless) Read(b []byte) (int, error) {
	n := copy(b, e.head)
	e.head = e.head[n:]
	for i := n; i < len(b); i++ {
		b[i] = 'x'
	}
	return len(b), nil
}

// TestAirportsThatNeverEnd: an airports source that gives more than an
// airports.csv could hold ends the join's read with an error naming it,
// and the result goes on without the names.
func TestAirportsThatNeverEnd(t *testing.T) {
	airports := func() (io.ReadCloser, error) { return io.NopCloser(&endless{head: "iata,name,city\n"}), nil }
	fin, err := flights.Finish(flights.KeyOrigin, []flights.Row{{Key: "SFO", Count: 1, DelaySum: 20, DelayMax: 20}}, nil, flights.WithAirports(airports))
	require.NoError(t, err)
	e := cpuExecutor(t)
	res, err := e.Run(t.Context(), fin.Graph)
	require.NoError(t, err)
	defer res.Close()
	table, err := fin.Result(res)
	require.NoError(t, err)
	require.Len(t, table.Rows, 1)
	assert.ErrorContains(t, table.NamesErr, "flights: airports: more than 64 MiB: not an airports.csv")
}
