package main

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/topology"

	"github.com/streamdag/streamdag/internal/cli"
)

func TestMain(m *testing.M) { leaktest.Main(m) }

// runArgs runs the command line with args as main does (the same exit
// statuses and error lines) and returns its exit status, stdout and
// stderr.
func runArgs(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), args, strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

func TestRunFlightsEmbedded(t *testing.T) {
	dir := t.TempDir()
	csvPath := filepath.Join(dir, "out.csv")
	code, out, errs := runArgs(t, "run", "flights", "--top", "0", "--streams", "3", "--out", csvPath)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, out, "hour")
	assert.Contains(t, errs, "200000 rows")
	f, err := os.Open(csvPath)
	require.NoError(t, err)
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	require.NoError(t, err)
	assert.Equal(t, []string{"key", "count", "delay_sum", "delay_mean", "delay_max"}, recs[0])
	assert.Len(t, recs, 1+24, "one row per hour of day")
}

func TestRunFlightsJSONAndDOT(t *testing.T) {
	dir := t.TempDir()
	jsonPath, dotPath := filepath.Join(dir, "out.json"), filepath.Join(dir, "f.dot")
	code, _, errs := runArgs(t, "run", "flights", "--top", "3", "--out", jsonPath, "--dot", dotPath)
	require.Equal(t, 0, code, errs)
	b, err := os.ReadFile(jsonPath)
	require.NoError(t, err)
	var doc struct {
		Partial bool
		Lost    []any
		Rows    []map[string]any
	}
	require.NoError(t, json.Unmarshal(b, &doc))
	assert.False(t, doc.Partial)
	assert.Empty(t, doc.Lost)
	rows := doc.Rows
	require.Len(t, rows, 3)
	assert.Equal(t, "17", rows[0]["key"])
	assert.EqualValues(t, 6888, rows[0]["count"])
	dot, err := os.ReadFile(dotPath)
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(string(dot), "digraph plan {"), "--dot writes the plan")
	assert.Contains(t, string(dot), `label="filter[0]\n`)
}

func TestRunFlightsMultibatch(t *testing.T) {
	code, out, errs := runArgs(t, "run", "flights", "--input", testdata.File(t, "flights-231k-multibatch.arrow"),
		"--top", "2", "--streams", "4")
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "231083 rows")
	assert.Contains(t, out, "hour")
}

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.parquet")
	require.NoError(t, os.WriteFile(garbage, []byte("this is not a parquet file at all"), 0o644))
	empty := filepath.Join(dir, "empty.arrow")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"missing file", []string{"run", "flights", "--input", filepath.Join(dir, "nope.parquet")}, 1, "nope.parquet"},
		{"garbage file", []string{"run", "flights", "--input", garbage}, 1, "garbage.parquet"},
		{"empty file", []string{"run", "flights", "--input", empty}, 1, "empty.arrow"},
		{"bad out extension", []string{"run", "flights", "--out", "x.txt"}, 2, "want a .csv or .json"},
		{"negative top", []string{"run", "flights", "--top", "-1"}, 2, "--top -1"},
		{"negative replay", []string{"run", "flights", "--replay", "-1"}, 2, "--replay -1: must be 0 (no capture) or more"},
		{"negative streams", []string{"run", "flights", "--streams", "-2"}, 2, "stream"},
		{"missing airports", []string{"run", "flights", "--airports", filepath.Join(dir, "none.csv")}, 1, "none.csv"},
		{"unknown flag", []string{"run", "flights", "--bogus"}, 2, "unknown flag"},
		{"unknown pipeline", []string{"run", "nosuch"}, 2, `unknown pipeline "nosuch"`},
		{"no pipeline", []string{"run"}, 2, "name a pipeline to run (known: flights)"},
		{"unknown command", []string{"nosuch"}, 2, `unknown command "nosuch"`},
		{"stray argument", []string{"run", "flights", "extra"}, 2, "extra"},
		{"bad fail spec", []string{"run", "flights", "--fail", "merge:explode"}, 2, "KERNEL:panic"},
		{"unknown fail kernel", []string{"run", "flights", "--fail", "nosuch"}, 2, `no kernel "nosuch"`},
		{"lose-device without topology", []string{"run", "flights", "--lose-device", "gpu3@50%"}, 2, "needs --topology"},
		{"lose-device without %", []string{"run", "flights", "--topology", "sim:dgx1-v100", "--lose-device", "gpu3@50"}, 2,
			"the point 50 has no %: write gpu3@50% (a percentage of the launches) or a fraction 0–1"},
		{"lose-device out of range", []string{"run", "flights", "--topology", "sim:dgx1-v100", "--lose-device", "gpu3@150%"}, 2, "0–100%"},
		{"lose-device of no such GPU", []string{"run", "flights", "--topology", "sim:dgx1-v100", "--lose-device", "gpu9@50%"}, 2,
			"gpu9 is not a device of sim:dgx1-v100 (gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu7)"},
		{"trace under a file", []string{"run", "flights", "--trace", filepath.Join(garbage, "t.json")}, 1, "garbage.parquet is not a directory"},
		{"lose-device without point", []string{"run", "flights", "--topology", "sim:dgx1-v100", "--lose-device", "gpu3"}, 2, "DEVICE@PERCENT"},
		// On the sample, with 2 streams per GPU, the placement leaves gpu5 and gpu6 idle.
		{"lose-device of a GPU the placement does not use", []string{"run", "flights", "--topology", "sim:dgx1-v100", "--lose-device", "gpu5@50%"}, 2,
			"--lose-device gpu5@50%: the placement puts no kernel on gpu5, so its loss would change nothing (it uses gpu0, gpu1, gpu2, gpu3, gpu4, gpu7)"},
		{"lose-device of the CPU", []string{"run", "flights", "--topology", "sim:dgx1-v100", "--lose-device", "cpu@50%"}, 2,
			"--lose-device cpu@50%: cpu is not a device of sim:dgx1-v100 (gpu0, gpu1, gpu2, gpu3, gpu4, gpu5, gpu6, gpu7)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runArgs(t, c.args...)
			assert.Equal(t, c.code, code, errs)
			assert.Contains(t, errs, c.want)
			assert.Equal(t, 1, strings.Count(errs, "streamdag: "), "one error line: %q", errs)
			if c.code == 2 {
				assert.Contains(t, errs, "--help')", "a usage error says where help is")
			}
		})
	}
}

func TestDevicesJSON(t *testing.T) {
	code, out, errs := runArgs(t, "devices", "--json")
	require.Equal(t, 0, code, errs)
	var inv struct {
		NVML struct {
			Available bool   `json:"available"`
			Reason    string `json:"reason"`
		} `json:"nvml"`
		Devices []struct {
			ID, Kind string
		} `json:"devices"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &inv))
	require.NotEmpty(t, inv.Devices)
	assert.Equal(t, "cpu", inv.Devices[0].ID)
	if !inv.NVML.Available {
		assert.NotEmpty(t, inv.NVML.Reason, "an unavailable NVML says why")
	}
}

func TestVersion(t *testing.T) {
	code, out, _ := runArgs(t, "version")
	require.Equal(t, 0, code)
	assert.True(t, strings.HasPrefix(out, "streamdag "+version))
}

func TestRunFlightsFailInjection(t *testing.T) {
	for _, mode := range []string{"", ":panic"} {
		t.Run("mode="+mode, func(t *testing.T) {
			dir := t.TempDir()
			rep, edot := filepath.Join(dir, "r.json"), filepath.Join(dir, "e.dot")
			code, out, errs := runArgs(t, "run", "flights", "--streams", "3", "--top", "0", "--fail", "filter[1]"+mode,
				"--report", rep, "--errors-dot", edot)
			require.Equal(t, 1, code, errs)
			assert.Contains(t, out, "hour", "the partial result is printed")
			assert.Contains(t, errs, "PARTIAL RESULT: 1 of 3 partitions lost")
			var r struct {
				Launches []struct {
					Kernel, Status, Error string
					Failure               uint64
					Chain                 []string
				}
				Waits int `json:"waits"`
			}
			b, err := os.ReadFile(rep)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &r))
			byName := map[string]int{}
			for i, l := range r.Launches {
				byName[l.Kernel] = i
			}
			root := r.Launches[byName["filter[1]"]]
			assert.Equal(t, "failed", root.Status)
			assert.NotZero(t, root.Failure)
			assert.Contains(t, root.Error, "dag: injected failure")
			skipped := r.Launches[byName["partial[1]"]]
			assert.Equal(t, "skipped", skipped.Status)
			assert.Equal(t, root.Failure, skipped.Failure)
			assert.Equal(t, []string{"filter[1]"}, skipped.Chain)
			for _, k := range []string{"filter[0]", "partial[0]", "filter[2]", "partial[2]", "merge", "sort", "topk", "write"} {
				assert.Equal(t, "ok", r.Launches[byName[k]].Status, k)
			}
			dot, err := os.ReadFile(edot)
			require.NoError(t, err)
			assert.Contains(t, string(dot), `"kernel partial[1]"`)
		})
	}
}

func TestRunFlightsMetricsAndQuiet(t *testing.T) {
	dir := t.TempDir()
	metrics, rep := filepath.Join(dir, "m.json"), filepath.Join(dir, "r.json")
	code, out, errs := runArgs(t, "run", "flights", "--quiet", "--top", "1", "--metrics", metrics, "--report", rep)
	require.Equal(t, 0, code, errs)
	assert.Empty(t, errs, "--quiet prints no summary")
	assert.Contains(t, out, "17")
	var m struct {
		Generation    uint64            `json:"generation"`
		Leases        []any             `json:"leases"`
		ProcessConfig map[string]string `json:"process_config"`
		Close         struct {
			Closing bool `json:"closing"`
		} `json:"close"`
	}
	b, err := os.ReadFile(metrics)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &m))
	assert.Empty(t, m.Leases, "no GPU on a CPU-only host")
	assert.Contains(t, m.ProcessConfig["kvio"], "compat mode auto", "kvio's settings are recorded with the backend")
	var r struct {
		Backend  *json.RawMessage `json:"backend"`
		Timing   bool             `json:"launch_timing"`
		Launches []struct {
			Kernel  string `json:"kernel"`
			Status  string `json:"status"`
			StartNs int64  `json:"start_ns"`
			EndNs   int64  `json:"end_ns"`
		} `json:"launches"`
	}
	b, err = os.ReadFile(rep)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &r))
	assert.NotNil(t, r.Backend, "the run report carries the backend's metrics")
	// --report turns launch timing on: every launch that ran has its times.
	assert.True(t, r.Timing, "--report asks for launch times")
	require.NotEmpty(t, r.Launches)
	var last int64
	for _, l := range r.Launches {
		require.Equal(t, "ok", l.Status, l.Kernel)
		assert.GreaterOrEqual(t, l.EndNs, l.StartNs, l.Kernel)
		assert.GreaterOrEqual(t, l.StartNs, int64(0), l.Kernel)
		last = max(last, l.EndNs)
	}
	assert.Positive(t, last, "the launches' ends are recorded")
}

// The flights pipeline on 8 simulated V100s of a DGX-1 gives the same
// result as on the CPU device, with copies between GPUs in the report.
func TestRunFlightsOnSimulatedGPUs(t *testing.T) {
	dir := t.TempDir()
	cpu, sim, rep := filepath.Join(dir, "cpu.csv"), filepath.Join(dir, "sim.csv"), filepath.Join(dir, "r.json")
	code, _, errs := runArgs(t, "run", "flights", "--top", "0", "--out", cpu)
	require.Equal(t, 0, code, errs)
	code, _, errs = runArgs(t, "run", "flights", "--top", "0", "--out", sim, "--topology", "sim:dgx1-v100", "--report", rep)
	require.Equal(t, 0, code, errs)
	assert.Contains(t, errs, "8 simulated V100 GPUs")
	assert.Contains(t, errs, "placement heft")
	a, err := os.ReadFile(cpu)
	require.NoError(t, err)
	b, err := os.ReadFile(sim)
	require.NoError(t, err)
	assert.Equal(t, string(a), string(b))
	var r struct {
		Launches []struct{ Kernel, Device string }
	}
	raw, err := os.ReadFile(rep)
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(raw, &r))
	devices := map[string]bool{}
	for _, l := range r.Launches {
		devices[l.Device] = true
	}
	assert.Greater(t, len(devices), 1, "work spread over several simulated GPUs")

	code, _, errs = runArgs(t, "run", "flights", "--topology", "sim:nosuch")
	assert.Equal(t, 2, code, "an unknown machine is a usage error")
	assert.Contains(t, errs, `no machine "nosuch"`)
}

// A run that needs no copy (two GPUs that share no P2P, and enough
// streams on one for the whole pipeline) has a placement line with no
// empty list of links.
func TestRunFlightsPlacementWithoutCopies(t *testing.T) {
	topo := filepath.Join(t.TempDir(), "two-sys.json")
	require.NoError(t, os.WriteFile(topo, []byte(`{"matrix": [["X", "SYS"], ["SYS", "X"]]}`), 0o644))
	code, _, errs := runArgs(t, "run", "flights", "--topology", topo, "--streams", "8", "--top", "1")
	require.Equal(t, 0, code, errs)
	var line string
	for l := range strings.SplitSeq(errs, "\n") {
		if strings.HasPrefix(l, "placement ") {
			line = l
		}
	}
	require.Contains(t, line, "1 of 2 GPUs used", "the placement keeps the run on one GPU: %s", errs)
	assert.Contains(t, line, ", 0 copies, 0 through the host, modeled copy time 0.000 µs")
	assert.NotContains(t, line, "()")
}

// --lose-device DEVICE@P% (or a fraction 0–1) is parsed here, and each
// bad form is a usage error that says what to write.
func TestParseLoss(t *testing.T) {
	for s, want := range map[string]lossSpec{
		"gpu3@50%":  {flag: "gpu3@50%", dev: topology.GPU(3), after: 0.5},
		"gpu0@0.25": {flag: "gpu0@0.25", dev: topology.GPU(0), after: 0.25},
		"gpu7@100%": {flag: "gpu7@100%", dev: topology.GPU(7), after: 1},
		"gpu1@0":    {flag: "gpu1@0", dev: topology.GPU(1), after: 0},
	} {
		got, err := parseLoss(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	for s, msg := range map[string]string{
		"gpu3":      "--lose-device gpu3: want DEVICE@PERCENT, e.g. gpu3@50%",
		"gpu3@150%": "--lose-device gpu3@150%: the point must be 0–100% of the device's launches",
		"gpu3@-1%":  "--lose-device gpu3@-1%: the point must be 0–100% of the device's launches",
		"gpu3@x":    "--lose-device gpu3@x: the point must be 0–100% of the device's launches",
		"gpu3@NaN":  "--lose-device gpu3@NaN: the point must be 0–100% of the device's launches",
		"gpu3@50":   "--lose-device gpu3@50: the point 50 has no %: write gpu3@50% (a percentage of the launches) or a fraction 0–1",
		"tpu1@50%":  "--lose-device tpu1@50%: ",
	} {
		_, err := parseLoss(s)
		var ue cli.UsageError
		require.ErrorAs(t, err, &ue, s)
		assert.ErrorContains(t, err, msg, s)
	}
}

// Losing a simulated GPU half-way through the run recovers: the result is
// the same as on the CPU device, and the summary names the migrations.
func TestRunFlightsLoseDevice(t *testing.T) {
	dir := t.TempDir()
	cpu, lost := filepath.Join(dir, "cpu.csv"), filepath.Join(dir, "lost.csv")
	code, _, errs := runArgs(t, "run", "flights", "--top", "0", "--out", cpu)
	require.Equal(t, 0, code, errs)
	for _, at := range []string{"0%", "50%"} {
		code, _, errs = runArgs(t, "run", "flights", "--top", "0", "--out", lost, "--topology", "sim:dgx1-v100", "--lose-device", "gpu3@"+at)
		require.Equal(t, 0, code, errs)
		assert.Contains(t, errs, "lost gpu3:")
		a, err := os.ReadFile(cpu)
		require.NoError(t, err)
		b, err := os.ReadFile(lost)
		require.NoError(t, err)
		assert.Equal(t, string(a), string(b), "lost at %s", at)
	}
}
