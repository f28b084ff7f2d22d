package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/internal/testdata"
)

// The done-when run: the 3-million-row file on 8 simulated V100s, gpu3
// lost half-way, writes all five files; the trace shows the loss and both
// phases, the report the lost launches and the copies, the result is the
// CPU device's, and the plan renders.
func TestRunFlightsLoseDeviceWritesEveryFile(t *testing.T) {
	input := testdata.File(t, "flights-3m.parquet")
	dir := t.TempDir()
	path := func(name string) string { return filepath.Join(dir, name) }
	code, _, errs := runArgs(t, "run", "flights", "--input", input, "--top", "0", "--out", path("cpu.csv"), "--quiet")
	require.Equal(t, 0, code, errs)
	code, out, errs := runArgs(t, "run", "flights", "--input", input, "--top", "0", "--topology", "sim:dgx1-v100",
		"--lose-device", "gpu3@50%", "--trace", path("t.json"), "--dot", path("p.dot"), "--report", path("r.json"),
		"--out", path("o.csv"))
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "DFW")
	assert.Contains(t, errs, "lost gpu3:")

	want, err := os.ReadFile(path("cpu.csv"))
	require.NoError(t, err)
	got, err := os.ReadFile(path("o.csv"))
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got), "the same result as on the CPU device")

	var tf struct {
		TraceEvents []struct {
			Name, Ph, Cat string
			Args          map[string]any
		} `json:"traceEvents"`
		OtherData map[string]any `json:"otherData"`
	}
	b, err := os.ReadFile(path("t.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &tf))
	var rep struct {
		Launches   []struct{ Kernel, Status string }
		Counts     map[string]int
		Devices    []string
		LostDevice string `json:"lost_device"`
		Copies     []struct {
			Buffer, From, To, Link string
			Bytes                  int64
			ModeledNs              int64 `json:"modeled_ns"`
		}
		Migrations []map[string]string
	}
	b, err = os.ReadFile(path("r.json"))
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &rep))
	assert.Equal(t, "gpu3", rep.LostDevice)
	assert.Positive(t, rep.Counts["lost"], "first-phase launches were redone")
	assert.Equal(t, len(rep.Launches), rep.Counts["ok"]+rep.Counts["failed"]+rep.Counts["skipped"]+rep.Counts["cancelled"]+rep.Counts["lost"])
	assert.Greater(t, len(rep.Devices), 1)
	require.NotEmpty(t, rep.Copies)
	for _, c := range rep.Copies {
		assert.NotEmpty(t, c.Link, "copy of %s", c.Buffer)
	}

	launches, marks, lostEvents := 0, 0, 0
	procs := map[string]bool{}
	for _, e := range tf.TraceEvents {
		switch {
		case e.Name == "process_name":
			procs[e.Args["name"].(string)] = true
		case e.Cat == "device-lost":
			marks++
		case e.Ph == "X" || e.Ph == "i":
			launches++
			if e.Args["status"] == "lost" {
				lostEvents++
			}
		}
	}
	assert.Equal(t, len(rep.Launches), launches, "the trace has every launch of both phases")
	assert.Equal(t, rep.Counts["lost"], lostEvents)
	assert.Equal(t, 1, marks)
	assert.True(t, procs["gpu3 (lost)"], "%v", procs)
	assert.Equal(t, "gpu3", tf.OtherData["lost_device"])

	needDot(t)
	code, _, errs = runArgs(t, "graph", "--in", path("p.dot"), "--out", path("p.svg"))
	require.Equal(t, 0, code, errs)
	svg, err := os.ReadFile(path("p.svg"))
	require.NoError(t, err)
	assert.Contains(t, string(svg), "gpu7 stream 1")
}

// An output path that cannot be written fails the command before the run
// starts, once, naming the flag; an existing --out is left untouched and
// no temporary file is left behind.
func TestRunFlightsUnwritableOutputFailsBeforeRun(t *testing.T) {
	for _, flag := range []string{"--trace", "--report", "--metrics", "--errors-dot", "--dot", "--out"} {
		t.Run(flag, func(t *testing.T) {
			dir := t.TempDir()
			out := filepath.Join(dir, "old.csv")
			require.NoError(t, os.WriteFile(out, []byte("old result\n"), 0o644))
			// A path under a regular file cannot be created, even by root.
			bad := filepath.Join(out, "x.json")
			if flag == "--out" {
				bad = filepath.Join(out, "x.csv")
			}
			args := []string{"run", "flights", "--topology", "sim:dgx1-v100", "--lose-device", "gpu3@50%", flag, bad}
			if flag != "--out" {
				args = append(args, "--out", out)
			}
			code, stdout, errs := runArgs(t, args...)
			assert.Equal(t, 1, code, errs)
			assert.Equal(t, 1, strings.Count(errs, flag+" "+bad), "the error once, naming the flag: %q", errs)
			assert.NotContains(t, errs, "rows in", "the run did not start")
			assert.Empty(t, stdout, "no table: nothing ran")
			b, err := os.ReadFile(out)
			require.NoError(t, err)
			assert.Equal(t, "old result\n", string(b), "--out untouched")
			entries, err := os.ReadDir(dir)
			require.NoError(t, err)
			assert.Len(t, entries, 1, "no temporary files left: %v", entries)
		})
	}
	t.Run("two flags, one file", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "x.json")
		code, _, errs := runArgs(t, "run", "flights", "--trace", p, "--report", p)
		assert.Equal(t, 2, code, errs)
		assert.Contains(t, errs, "--trace and --report both name")
	})
	t.Run("a directory", func(t *testing.T) {
		dir := t.TempDir()
		code, _, errs := runArgs(t, "run", "flights", "--report", dir)
		assert.Equal(t, 1, code, errs)
		assert.Contains(t, errs, "is a directory")
	})
}

// A partial result (a lost partition) is marked in the file itself, as a
// CSV comment line or JSON fields with numbers, and the exit status is 1;
// no result at all leaves an existing --out as it was.
func TestRunFlightsPartialResultMarked(t *testing.T) {
	dir := t.TempDir()
	csvPath, jsonPath := filepath.Join(dir, "o.csv"), filepath.Join(dir, "o.json")
	require.NoError(t, os.WriteFile(csvPath, []byte("old\n"), 0o600))

	code, _, errs := runArgs(t, "run", "flights", "--fail", "filter[1]", "--out", csvPath, "--quiet")
	require.Equal(t, 1, code, errs)
	b, err := os.ReadFile(csvPath)
	require.NoError(t, err)
	first, _, _ := strings.Cut(string(b), "\n")
	assert.Equal(t, "# PARTIAL RESULT: 1 of 2 partitions lost (100000 of 200000 input rows not counted)", first)
	r := csv.NewReader(strings.NewReader(string(b)))
	r.Comment = '#'
	recs, err := r.ReadAll()
	require.NoError(t, err)
	assert.Equal(t, "key", recs[0][0])
	st, err := os.Stat(csvPath)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "an existing file keeps its mode")

	code, _, errs = runArgs(t, "run", "flights", "--fail", "filter[1]", "--out", jsonPath, "--quiet")
	require.Equal(t, 1, code, errs)
	b, err = os.ReadFile(jsonPath)
	require.NoError(t, err)
	var doc struct {
		Partial bool
		Lost    []flights.LostPartition
		Rows    []map[string]any
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	assert.True(t, doc.Partial)
	require.Len(t, doc.Lost, 1)
	assert.Equal(t, flights.LostPartition{Partition: 1, Rows: 100000, RowLo: 100000, RowHi: 200000, PartLo: 0, PartHi: 1, Failure: 1,
		Error: `exec: kernel "filter[1]": dag: injected failure`}, doc.Lost[0])
	assert.NotEmpty(t, doc.Rows)

	code, _, errs = runArgs(t, "run", "flights", "--fail", "write", "--out", csvPath, "--quiet")
	require.Equal(t, 1, code, errs)
	assert.Contains(t, errs, "not written (no result)")
	b, err = os.ReadFile(csvPath)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), "# PARTIAL RESULT"), "the previous file is left as it was")
}

// A bad --airports file still gives the table (without names), the error
// once, a marked --out and exit status 1.
func TestRunFlightsBadAirports(t *testing.T) {
	input := testdata.File(t, "flights-3m.parquet")
	dir := t.TempDir()
	bad, out := filepath.Join(dir, "airports.csv"), filepath.Join(dir, "o.csv")
	require.NoError(t, os.WriteFile(bad, []byte("foo,bar\n1,2\n"), 0o644))
	code, stdout, errs := runArgs(t, "run", "flights", "--input", input, "--airports", bad, "--top", "3", "--out", out, "--quiet")
	assert.Equal(t, 1, code, errs)
	assert.True(t, strings.HasPrefix(stdout, "origin  count"), "the table is printed: %q", stdout)
	assert.Contains(t, stdout, "DFW")
	assert.NotContains(t, stdout, "name", "no names column")
	assert.Equal(t, 1, strings.Count(errs, `header "foo,bar" lacks iata`), "the error once: %q", errs)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(b), "# PARTIAL RESULT: no airport names"), "%q", b)
}

// The summary after a device loss counts every launch, names the devices
// used, and prints times one way; --json gives the same counts.
func TestRunFlightsSummaryAfterLoss(t *testing.T) {
	code, out, errs := runArgs(t, "run", "flights", "--topology", "sim:dgx1-v100", "--lose-device", "gpu3@50%", "--json")
	require.Equal(t, 0, code, errs)
	var s runSummary
	require.NoError(t, json.Unmarshal([]byte(out), &s))
	f := s.Summary
	assert.Equal(t, f.Launches, f.OK+f.Failed+f.Skipped+f.Cancelled+f.Lost, "%+v", f)
	assert.Positive(t, f.Lost)
	assert.Equal(t, "gpu3", f.LostDevice)
	assert.Greater(t, len(f.Devices), 1, "an 8-GPU run names the devices it used: %v", f.Devices)
	assert.Contains(t, f.Devices, "gpu3")
	require.NotEmpty(t, f.StreamsPerDevice)
	for _, n := range f.StreamsPerDevice {
		assert.Equal(t, 2, n, "streams of each simulated GPU: %v", f.StreamsPerDevice)
	}
	assert.False(t, s.Partial)
	assert.Empty(t, s.Problems, "lost launches were redone: no problem")

	assert.Regexp(t, regexp.MustCompile(`launches \(\d+ lost with gpu3 and redone\)`), errs)
	goDuration := regexp.MustCompile(`\d(ms|µs|s)\b`) // time.Duration's String: "20.935ms"
	assert.NotRegexp(t, goDuration, errs, "times are printed one way")
	assert.Regexp(t, regexp.MustCompile(`makespan \d+\.\d{3} ms`), errs)
	assert.Regexp(t, regexp.MustCompile(`copy time \d+\.\d{3} (ms|µs)`), errs)
	assert.Regexp(t, regexp.MustCompile(`\d+ copies over both phases`), errs, "after a loss the copies count the recovery's too")
}

func TestFmtDuration(t *testing.T) {
	cases := []struct {
		d    time.Duration
		want string
	}{
		{0, "0.000 µs"},
		{845, "0.845 µs"},
		{2686355, "2.686 ms"},
		{20935 * time.Microsecond, "20.935 ms"},
		{2500 * time.Millisecond, "2.500 s"},
	}
	for _, c := range cases {
		t.Run(c.want, func(t *testing.T) { assert.Equal(t, c.want, fmtDuration(c.d)) })
	}
}

// A run whose row groups the delay statistics rule out reads none of
// them, and the summary says so; the rate counts only rows read.
func TestRunFlightsSummarySkippedParts(t *testing.T) {
	input := testdata.File(t, "flights-3m.parquet")
	code, out, errs := runArgs(t, "run", "flights", "--input", input, "--min-delay", "2000")
	require.Equal(t, 0, code, errs)
	assert.Equal(t, "origin  count  delay_sum  delay_mean  delay_max\n", out, "no group passes the filter")
	assert.Regexp(t, regexp.MustCompile(`3000000 rows in \d+ partitions \((\d+) of \d+ source parts, 3000000 rows, not read: their delay statistics rule out every row\)`), errs)
	assert.Contains(t, errs, "(0.0 M rows/s)")
}
