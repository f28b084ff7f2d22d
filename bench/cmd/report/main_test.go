package main

import (
	"crypto/sha256"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/bench"
)

// TestMarkdownProfiles: a profile's breakdown is rendered as a table of
// ns per unit and shares, with the other goroutines' time stated for a
// labelled profile.
func TestMarkdownProfiles(t *testing.T) {
	rep := Report{
		Machine: map[string]string{"cpu": "test"},
		Builds:  []Build{{Shape: "chain-10k", Kernels: 10_000, BuildNsPerKernel: 200}},
		Profiles: []Profile{{
			What: "graph build, chain-10k", Unit: "kernel", Labelled: true,
			Breakdown: bench.Breakdown{Runs: 4, Units: 40_000_000, Wall: 8 * time.Second, Total: 8_000_000_000, Elsewhere: 50,
				Shares: []bench.Share{
					{Category: "dag: AddKernel, AddValue", Ns: 6_000_000_000, Fraction: 0.75, PerUnit: 150},
					{Category: "caller: formatting names", Ns: 2_000_000_000, Fraction: 0.25, PerUnit: 50},
				}},
		}},
	}
	md := markdown(rep)
	assert.Contains(t, md, "| graph build, worst shape | ≤ 150 ns/kernel | 200 ns/kernel (build floor")
	assert.Contains(t, md, "CPU profile of graph build, chain-10k: 4 runs over 8s, 200 ns/kernel of wall time")
	assert.Contains(t, md, "mostly the collector's mark workers on the core the build leaves idle, took 50 ns/kernel more")
	assert.Contains(t, md, "| dag: AddKernel, AddValue | 150.0 | 75% |\n")
	assert.Contains(t, md, "| caller: formatting names | 50.0 | 25% |\n")
	assert.True(t, strings.HasSuffix(md, "| total | 200.0 | |\n"), md)
}

// TestMarkdownOneShotAndDuckDB: the summary table gives each shape's
// reused plan, one-shot run and go-taskflow, and the flights job against
// DuckDB; the targets say whether they are met; recorded DuckDB figures
// say so and how to measure them.
func TestMarkdownOneShotAndDuckDB(t *testing.T) {
	rep := Report{
		Machine: map[string]string{"cpu": "test"},
		Results: []Result{
			{Shape: "chain-10k", Work: "empty", Runner: "streamdag", Kernels: 10_000, NsPerLaunch: 8},
			{Shape: "chain-10k", Work: "empty", Runner: "streamdag-timed", Kernels: 10_000, NsPerLaunch: 40},
			{Shape: "chain-10k", Work: "empty", Runner: "taskflow", Kernels: 10_000, NsPerLaunch: 1600},
		},
		Builds:   []Build{{Shape: "chain-10k", Kernels: 10_000, BuildNsPerKernel: 90, ValidateNsPerKernel: 50, PlanNsPerKernel: 180}},
		OneShots: []OneShot{{Shape: "chain-10k", Kernels: 10_000, Runs: 30, NsPerKernel: 360, CPUNsPerKernel: 500, AllocsPerKernel: 0.01, VsReused: 45}},
		DuckDB: &Duck{Input: "flights-3m.parquet", Runs: 5, Date: "2026-12-01", Recorded: "no data", Identical: true,
			StreamWallMs: Spread{80, 78, 90}, DuckWallMs: Spread{40, 39, 41}, StreamPeakMiB: Spread{150, 140, 152}, DuckPeakMiB: Spread{50, 50, 51},
			StreamRunMs: Spread{70, 65, 74}, DuckQueryMs: Spread{22, 21, 23}, DuckOpenMs: Spread{8, 8, 9}},
	}
	md := markdown(rep)
	assert.Contains(t, md, "| one-shot Run (build + plan + run), worst of the four shapes | ≤ 400 ns/kernel | 360 ns/kernel (chain-10k) | met |\n")
	assert.Contains(t, md, "| planning (Plan less its Validate: launch order, hazards, streams, event waits), worst of the four shapes | ≤ 200 ns/kernel | 180 ns/kernel (chain-10k) | met |\n")
	assert.Contains(t, md, "1.0×: the default is launch timing off (with it on, streamdag-timed, 5.0× on average) | met |\n")
	assert.Contains(t, md, "| `streamdag run flights` ÷ DuckDB on flights-3m.parquet, whole process: wall time | ≤ 1.0× | 2.00× (80.0 ms against 40.0, recorded 2026-12-01) | **not met** |\n")
	assert.Contains(t, md, "| the same: peak memory | ≤ 2.0× | 3.00× (150 MiB against 50) | **not met** |\n")
	assert.Contains(t, md, "| chain-10k, 10000 empty kernels, ns/kernel | 8 | 360 (45×) | go-taskflow, reused graph: 1600 | reused 0.005×, one-shot 0.23× |\n")
	assert.Contains(t, md, "| flights job on flights-3m.parquet, whole process: wall ms, peak MiB | — | 80.0 ms, 150 MiB | DuckDB: 40.0 ms, 50 MiB | 2.00×, 3.00× |\n")
	assert.Contains(t, md, "| chain-10k | 10000 | 360 | 500 | 0.01 | 90 | 50 | 180 | 8.0 | 45× |\n")
	assert.Contains(t, md, "recorded on 2026-12-01 by an earlier report; this one could not measure them (no data)")
	assert.Contains(t, md, "| whole process, wall ms | 80.0 [78.0–90.0] | 40.0 [39.0–41.0] | 2.00× |\n")
	assert.Contains(t, md, "byte-identical")

	rep.DuckDB = nil
	assert.Contains(t, markdown(rep), "The flights job against DuckDB was not measured, and no earlier report recorded it: it needs STREAMDAG_DATA")
}

// TestDuckDBFigures: the in-process times are read from the lines the
// two programs print, medians are of the middle runs, and a report that
// cannot measure shows what results.json recorded, saying why.
func TestDuckDBFigures(t *testing.T) {
	open, query, err := duckTimes("flightsduck: 10 groups; open 15.616ms, query 62.591ms (in process)\n")
	require.NoError(t, err)
	assert.Equal(t, 15616*time.Microsecond, open)
	assert.Equal(t, 62591*time.Microsecond, query)
	run, err := streamdagRunTime("/d/flights-3m.parquet: 3000000 rows in 11 partitions, 37 launches on 2 streams of cpu, 1 event wait, 132.798 ms (22.6 M rows/s)\ndevices: cpu\n")
	require.NoError(t, err)
	assert.Equal(t, 132798*time.Microsecond, run)
	run, err = streamdagRunTime("x: 10 rows in 1 partitions, 3 launches on 1 streams of cpu, 0 event waits, 812.000 µs (0.0 M rows/s)\n")
	require.NoError(t, err)
	assert.Equal(t, 812*time.Microsecond, run)
	_, _, err = duckTimes("flightsduck: boom\n")
	assert.ErrorContains(t, err, "flightsduck printed no times")
	_, err = streamdagRunTime("")
	assert.ErrorContains(t, err, "no summary line")
	assert.Equal(t, Spread{Median: 2.5, Min: 1, Max: 9}, spread([]float64{9, 1, 2, 3}))
	assert.Equal(t, Spread{Median: 3, Min: 3, Max: 3}, spread([]float64{3}))

	dir := t.TempDir()
	var log strings.Builder
	assert.Nil(t, duckComparison(dir, 0, &log), "nothing recorded")
	assert.Contains(t, log.String(), "DuckDB comparison not measured (-duckdb-runs 0)")
	d := Duck{Input: "flights-3m.parquet", Runs: 5, Date: "2026-12-01", StreamWallMs: Spread{80, 78, 90}, DuckWallMs: Spread{40, 39, 41}}
	require.NoError(t, writeJSON(filepath.Join(dir, "results.json"), Report{DuckDB: &d}))
	got := duckComparison(dir, 0, &log)
	require.NotNil(t, got)
	assert.Equal(t, "-duckdb-runs 0", got.Recorded)
	assert.Equal(t, d.StreamWallMs, got.StreamWallMs)
}

// TestReportWritesWhereOutSays: by default the report writes a new folder
// under the system's temporary folder, names it, and leaves the committed
// bench/results as it was; -out names the folder it writes instead. The
// measurements are a fake: the test is of where the files go.
func TestReportWritesWhereOutSays(t *testing.T) {
	root, err := repoRoot()
	require.NoError(t, err)
	committed := filepath.Join(root, "bench", "results")
	before := folderDigest(t, committed)
	require.NotEmpty(t, before)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	fake := Report{
		Machine: map[string]string{"cpu": "test"},
		Results: []Result{
			{Shape: "chain-10k", Work: "empty", Runner: "sequential", Kernels: 10_000, NsPerLaunch: 2, VsSequential: 1},
			{Shape: "chain-10k", Work: "empty", Runner: "streamdag", Kernels: 10_000, NsPerLaunch: 8, VsSequential: 4},
			{Shape: "chain-10k", Work: "spin-0.5us", Runner: "sequential", Kernels: 10_000, NsPerLaunch: 500, VsSequential: 1},
			{Shape: "chain-10k", Work: "spin-0.5us", Runner: "streamdag", Kernels: 10_000, NsPerLaunch: 520, VsSequential: 1.04},
		},
		Builds: []Build{{Shape: "chain-10k", Kernels: 10_000, BuildNsPerKernel: 90, ValidateNsPerKernel: 50, PlanNsPerKernel: 180}},
	}
	var got []config
	measure := func(cfg config, _ io.Writer) (Report, error) {
		got = append(got, cfg)
		return fake, nil
	}
	files := []string{"results.json", "results.md", "ns-per-launch-empty.png", "ns-per-launch-spin.png", "build.png"}

	var log strings.Builder
	dir, err := report(nil, &log, measure)
	require.NoError(t, err, log.String())
	assert.Equal(t, tmp, filepath.Dir(dir), "a new folder under the temporary folder")
	assert.Contains(t, log.String(), "report: writing to "+dir+"\n")
	assert.Contains(t, log.String(), "wrote "+dir+" in ")
	for _, f := range files {
		assert.FileExists(t, filepath.Join(dir, f))
	}
	assert.Equal(t, before, folderDigest(t, committed), "the committed results are as they were")
	require.Len(t, got, 1)
	assert.Equal(t, config{out: dir, minTime: 300 * time.Millisecond, duckRuns: 5, recorded: committed}, got[0])

	out := filepath.Join(tmp, "chosen", "folder")
	log.Reset()
	dir, err = report([]string{"-out", out, "-min-time", "1ms", "-skip-1m", "-duckdb-runs", "0"}, &log, measure)
	require.NoError(t, err, log.String())
	assert.Equal(t, out, dir)
	for _, f := range files {
		assert.FileExists(t, filepath.Join(out, f))
	}
	require.Len(t, got, 2)
	assert.Equal(t, config{out: out, minTime: time.Millisecond, skip1M: true, recorded: committed}, got[1])
	assert.Equal(t, before, folderDigest(t, committed))

	_, err = report([]string{"extra"}, &log, measure)
	assert.ErrorContains(t, err, `report: unexpected argument "extra"`)
	assert.Len(t, got, 2, "nothing measured")
}

// folderDigest returns the SHA-256 of every file in dir, by name.
func folderDigest(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	es, err := os.ReadDir(dir)
	require.NoError(t, err)
	m := map[string][32]byte{}
	for _, e := range es {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		require.NoError(t, err)
		m[e.Name()] = sha256.Sum256(b)
	}
	return m
}
