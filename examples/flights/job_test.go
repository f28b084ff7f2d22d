package flights_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/leaktest"
)

// ExampleJob runs the job `streamdag run flights --top 3 --streams 2
// --out result.csv` runs, on the embedded sample, and prints its figures
// and the table.
func ExampleJob() {
	dev, err := cpu.New(cpu.WithStreams(2))
	if err != nil {
		log.Fatal(err)
	}
	defer dev.Close()
	dir, err := os.MkdirTemp("", "flights")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	job := flights.Job{
		Options: []flights.Option{flights.WithTopK(3)},
		Files:   flights.Files{Result: flights.OutputFile{Path: filepath.Join(dir, "result.csv")}},
	}
	defer job.Close()
	e, err := exec.New(dev)
	if err != nil {
		log.Fatal(err)
	}
	out, err := job.Run(context.Background(), e)
	if err != nil {
		log.Fatal(err)
	}
	s := out.Summary
	fmt.Printf("%s: %d rows, %d partitions, complete: %v\n", s.Input, s.Rows, s.Partitions, out.Complete())
	if err := flights.WriteTable(os.Stdout, out.Table.Rows, out.Pipeline.Key, out.Names); err != nil {
		log.Fatal(err)
	}
	csv, err := os.ReadFile(filepath.Join(dir, "result.csv"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(string(csv))
	// Output:
	// flights-200k.arrow (embedded): 200000 rows, 2 partitions, complete: true
	// hour  count  delay_sum  delay_mean  delay_max
	//   17   6888     191942       27.87        638
	//   19   6283     193423       30.79        391
	//   13   6091     143993       23.64       1327
	// key,count,delay_sum,delay_mean,delay_max
	// 17,6888,191942,27.866144,638
	// 19,6283,193423,30.785134,391
	// 13,6091,143993,23.640289,1327
}

// TestOptionErrors checks that Build and Job.Run refuse bad options,
// naming the option, and build or run nothing.
func TestOptionErrors(t *testing.T) {
	e := cpuExecutor(t)
	for _, tc := range []struct {
		name string
		opt  flights.Option
		want string
	}{
		{"zero top", flights.WithTopK(0), "flights: WithTopK(0): want at least 1 group"},
		{"negative partitions", flights.WithPartitions(-1), "flights: WithPartitions(-1): want at least 1 partition"},
		{"nil airports", flights.WithAirports(nil), "flights: WithAirports: nil open function"},
		{"nil sink", flights.WithSink(nil), "flights: WithSink: nil sink"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, err := flights.Build(nil, tc.opt)
			assert.EqualError(t, err, tc.want)
			assert.Nil(t, p)
			job := flights.Job{Options: []flights.Option{tc.opt}}
			defer job.Close()
			out, err := job.Run(t.Context(), e)
			assert.EqualError(t, err, tc.want)
			assert.Nil(t, out)
		})
	}
}

// TestJobRefusesToWriteOverItsInput: an output file naming the input
// file is an ErrSamePath before anything runs, and the input is left as
// it was (the rename of the output would have replaced it).
func TestJobRefusesToWriteOverItsInput(t *testing.T) {
	e := cpuExecutor(t)
	sample, err := flights.Sample()
	require.NoError(t, err)
	data := make([]byte, sample.Size())
	_, err = sample.ReadAt(data, 0)
	require.NoError(t, err)
	require.NoError(t, sample.Close())
	in := filepath.Join(t.TempDir(), "in.json")
	require.NoError(t, os.WriteFile(in, data, 0o600))

	job := flights.Job{Input: in, Files: flights.Files{Result: flights.OutputFile{Path: in, Name: "--out"}}}
	out, err := job.Run(t.Context(), e)
	job.Close()
	assert.Nil(t, out)
	require.ErrorIs(t, err, flights.ErrSamePath)
	assert.EqualError(t, err, "the input and --out both name "+in)
	got, err := os.ReadFile(in)
	require.NoError(t, err)
	assert.Equal(t, data, got, "the input is left as it was")
}

// TestJobErrors checks the errors that stop a job before its run: two
// files naming one path, a fault naming no kernel, a metrics file with no
// backend; and that the files prepared are removed, their paths left as
// they were.
func TestJobErrors(t *testing.T) {
	e := cpuExecutor(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "x.json")

	same := flights.Job{Files: flights.Files{Trace: flights.OutputFile{Path: p, Name: "--trace"}, Report: flights.OutputFile{Path: p}}}
	require.ErrorIs(t, same.Prepare(), flights.ErrSamePath)
	out, err := same.Run(t.Context(), e)
	same.Close()
	assert.Nil(t, out, "Run after a failed Prepare runs nothing")
	require.ErrorIs(t, err, flights.ErrSamePath)
	assert.EqualError(t, err, "--trace and flights: report file both name "+p)

	fault := flights.Job{Fail: []flights.Fault{{Kernel: "merge"}, {Kernel: "nosuch"}}, Files: flights.Files{Report: flights.OutputFile{Path: p}}}
	out, err = fault.Run(t.Context(), e)
	fault.Close()
	assert.Nil(t, out)
	var fe *flights.FaultError
	require.ErrorAs(t, err, &fe)
	assert.Equal(t, 1, fe.Index)
	assert.Equal(t, "nosuch", fe.Fault.Kernel)

	metrics := flights.Job{Files: flights.Files{Metrics: flights.OutputFile{Path: p}}}
	out, err = metrics.Run(t.Context(), e)
	assert.Nil(t, out)
	assert.EqualError(t, err, "flights: metrics file "+p+": no Backend to take the metrics of")

	// CheckPlan sees the plan before the plan file is written: its error
	// stops the job, returned as it is.
	refused := errors.New("refused")
	var planned int
	check := flights.Job{Files: flights.Files{Plan: flights.OutputFile{Path: p}},
		CheckPlan: func(plan *exec.Plan) error { planned = len(plan.Devices()); return refused }}
	out, err = check.Run(t.Context(), e)
	check.Close()
	assert.Nil(t, out)
	assert.Equal(t, refused, err)
	assert.Equal(t, 1, planned, "CheckPlan sees the plan on the executor's one device")

	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Empty(t, left, "no file written, no temporary file left")
}

// TestJobPartial checks a job whose filter[1] fails: the output is
// partial, not an error, and the result file says so in its first line.
func TestJobPartial(t *testing.T) {
	p := filepath.Join(t.TempDir(), "r.csv")
	job := flights.Job{Options: []flights.Option{flights.WithTopK(1)}, Fail: []flights.Fault{{Kernel: "filter[1]"}},
		Files: flights.Files{Result: flights.OutputFile{Path: p}}}
	defer job.Close()
	out, err := job.Run(t.Context(), cpuExecutor(t))
	require.NoError(t, err)
	assert.False(t, out.Complete())
	require.Len(t, out.Table.Lost, 1)
	assert.Equal(t, 1, out.Table.Lost[0].Partition)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	lines := strings.SplitN(string(b), "\n", 3)
	require.Len(t, lines, 3)
	assert.Equal(t, "# PARTIAL RESULT: 1 of 2 partitions lost (100000 of 200000 input rows not counted)", lines[0])
	assert.Equal(t, "key,count,delay_sum,delay_mean,delay_max", lines[1])
}

// cpuExecutor is an executor on a CPU device of 2 streams, with a
// leak-checked allocator.
func cpuExecutor(t *testing.T) *exec.Executor {
	t.Helper()
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, dev.Close()) })
	e, err := exec.New(dev, exec.WithAllocator(leaktest.Allocator(t)))
	require.NoError(t, err)
	return e
}
