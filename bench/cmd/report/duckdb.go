package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Duck is the flights job (filter delay > 0, group by origin: count,
// sum, mean, max; top 10) on one Parquet file, run as whole processes
// in alternation by `streamdag run flights` and by bench/duckdb's
// flightsduck (DuckDB through its Go module, a separate module so the
// core module never depends on it).
type Duck struct {
	Input    string // the file's base name
	Runs     int    // timed runs of each, after one warm-up run of each
	Date     string // the day it was measured (UTC), YYYY-MM-DD
	Recorded string // empty when this report measured it; else why not, and the figures are an earlier report's
	// Whole process, start to exit: wall ms and peak RSS in MiB.
	DuckWallMs, StreamWallMs   Spread
	DuckPeakMiB, StreamPeakMiB Spread
	// In process, as each prints it: DuckDB's query (SQL submitted to the
	// last row fetched) and opening its database; streamdag's run (its
	// summary line: plan, reads and launches).
	DuckQueryMs, DuckOpenMs, StreamRunMs Spread
	Identical                            bool // the two CSVs are byte-identical
}

// Spread is the median of some runs and their range.
type Spread struct{ Median, Min, Max float64 }

// spread returns the median, min and max of xs (not empty).
func spread(xs []float64) Spread {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	return Spread{Median: (s[(n-1)/2] + s[n/2]) / 2, Min: s[0], Max: s[n-1]}
}

// String renders s as "median [min–max]", one decimal each.
func (s Spread) String() string { return fmt.Sprintf("%.1f [%.1f–%.1f]", s.Median, s.Min, s.Max) }

// duckHowTo says how to measure the DuckDB comparison.
const duckHowTo = "it needs STREAMDAG_DATA (the folder of flights-3m.parquet) and the bench/duckdb module's dependencies " +
	"(`go -C bench/duckdb mod download`, about 145 MB); `bench/duckdb/compare.sh` runs the same comparison from the shell"

// measureDuck builds streamdag and flightsduck into a temporary folder
// (flightsduck from the module cache alone, downloading nothing) and runs
// each runs times in alternation on input, after one warm-up run each (so
// both find the file in the page cache). root is the repository root. It
// returns an error when either cannot be built or run, or their outputs
// cannot be read.
func measureDuck(root, input string, runs int, logw io.Writer) (Duck, error) {
	if _, err := os.Stat(input); err != nil {
		return Duck{}, err
	}
	tmp, err := os.MkdirTemp("", "streamdag-duck")
	if err != nil {
		return Duck{}, err
	}
	defer os.RemoveAll(tmp)
	duck, sd := filepath.Join(tmp, "flightsduck"), filepath.Join(tmp, "streamdag")
	env := os.Environ()
	if os.Getenv("CGO_CFLAGS") == "" {
		env = append(env, "CGO_CFLAGS=-Wno-deprecated-declarations")
	}
	// The DuckDB module builds from the module cache only (GOPROXY=off):
	// the report does not download its 145 MB of prebuilt libraries.
	for _, b := range []struct {
		dir, out, pkg string
		env           []string
	}{
		{filepath.Join(root, "bench", "duckdb"), duck, "./cmd/flightsduck", append(slices.Clip(env), "GOPROXY=off")},
		{root, sd, "./cmd/streamdag", env},
	} {
		cmd := osexec.Command("go", "build", "-o", b.out, b.pkg)
		cmd.Dir, cmd.Env = b.dir, b.env
		if out, err := cmd.CombinedOutput(); err != nil {
			return Duck{}, fmt.Errorf("report: go build %s in %s: %w: %s", b.pkg, b.dir, err, firstLines(out, 3))
		}
	}
	dcsv, scsv := filepath.Join(tmp, "d.csv"), filepath.Join(tmp, "s.csv")
	duckArgs := []string{duck, "--input", input, "--out", dcsv}
	sdArgs := []string{sd, "run", "flights", "--input", input, "--out", scsv}
	var dw, sw, dp, sp, dq, do, sr []float64
	for i := -1; i < runs; i++ { // run -1 warms up
		d, err := runProcess(tmp, duckArgs)
		if err != nil {
			return Duck{}, err
		}
		s, err := runProcess(tmp, sdArgs)
		if err != nil {
			return Duck{}, err
		}
		open, query, err := duckTimes(d.stderr)
		if err != nil {
			return Duck{}, err
		}
		run, err := streamdagRunTime(s.stderr)
		if err != nil {
			return Duck{}, err
		}
		if i < 0 {
			continue
		}
		dw, sw = append(dw, ms(d.wall)), append(sw, ms(s.wall))
		dp, sp = append(dp, float64(d.peakBytes)/(1<<20)), append(sp, float64(s.peakBytes)/(1<<20))
		dq, do, sr = append(dq, ms(query)), append(do, ms(open)), append(sr, ms(run))
		fmt.Fprintf(logw, "duckdb run %d: streamdag %.1f ms %.0f MiB, DuckDB %.1f ms %.0f MiB\n", i+1, sw[i], sp[i], dw[i], dp[i])
	}
	a, err := os.ReadFile(dcsv)
	if err != nil {
		return Duck{}, err
	}
	b, err := os.ReadFile(scsv)
	if err != nil {
		return Duck{}, err
	}
	return Duck{Input: filepath.Base(input), Runs: runs, Date: time.Now().UTC().Format("2006-01-02"),
		DuckWallMs: spread(dw), StreamWallMs: spread(sw), DuckPeakMiB: spread(dp), StreamPeakMiB: spread(sp),
		DuckQueryMs: spread(dq), DuckOpenMs: spread(do), StreamRunMs: spread(sr), Identical: bytes.Equal(a, b)}, nil
}

// ms returns d in milliseconds.
func ms(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// process is one finished run of a command.
type process struct {
	wall      time.Duration
	peakBytes int64 // peak resident set; 0 where it cannot be read
	stderr    string
}

// timeCmd is GNU time, which reads a child's peak RSS after its exec;
// without it runProcess falls back to the child's rusage, which on Linux
// counts the pages it shared with the report before its exec (see
// peakRSS).
const timeCmd = "/usr/bin/time"

// runProcess runs args (the program first) in dir and returns its wall
// time, start to exit, its peak RSS and its stderr. The peak comes from
// timeCmd when it exists (its start is in the wall time: about a
// millisecond), else from the child's rusage.
func runProcess(dir string, args []string) (process, error) {
	var errb bytes.Buffer
	rss := ""
	if _, err := os.Stat(timeCmd); err == nil {
		f, err := os.CreateTemp(dir, "rss")
		if err != nil {
			return process{}, err
		}
		f.Close()
		rss = f.Name()
		defer os.Remove(rss)
		args = append([]string{timeCmd, "-f", "%M", "-o", rss}, args...)
	}
	cmd := osexec.Command(args[0], args[1:]...)
	cmd.Dir, cmd.Stdout, cmd.Stderr = dir, io.Discard, &errb
	t := time.Now()
	err := cmd.Run()
	wall := time.Since(t)
	name := filepath.Base(args[0])
	if rss != "" {
		name = filepath.Base(args[5])
	}
	if err != nil {
		return process{}, fmt.Errorf("report: %s: %w: %s", name, err, firstLines(errb.Bytes(), 3))
	}
	p := process{wall: wall, peakBytes: peakRSS(cmd.ProcessState), stderr: errb.String()}
	if rss != "" {
		b, err := os.ReadFile(rss)
		if err != nil {
			return process{}, err
		}
		kib, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil {
			return process{}, fmt.Errorf("report: %s of %s: %q: %w", timeCmd, name, b, err)
		}
		p.peakBytes = kib << 10
	}
	return p, nil
}

var (
	duckLine   = regexp.MustCompile(`open ([0-9.]+[µnm]?s), query ([0-9.]+[µnm]?s) \(in process\)`)
	streamLine = regexp.MustCompile(`event waits?, ([0-9.]+ [µm]?s) \(`)
)

// duckTimes reads flightsduck's in-process times from its stderr.
func duckTimes(stderr string) (open, query time.Duration, err error) {
	m := duckLine.FindStringSubmatch(stderr)
	if m == nil {
		return 0, 0, fmt.Errorf("report: flightsduck printed no times: %q", firstLines([]byte(stderr), 2))
	}
	if open, err = time.ParseDuration(m[1]); err == nil {
		query, err = time.ParseDuration(m[2])
	}
	return open, query, err
}

// streamdagRunTime reads the run's time from the summary line `streamdag
// run` prints on stderr ("…, 1 event wait, 132.798 ms (22.6 M rows/s)").
func streamdagRunTime(stderr string) (time.Duration, error) {
	m := streamLine.FindStringSubmatch(stderr)
	if m == nil {
		return 0, fmt.Errorf("report: streamdag printed no summary line: %q", firstLines([]byte(stderr), 2))
	}
	return time.ParseDuration(strings.ReplaceAll(m[1], " ", ""))
}

// recordedDuck returns the DuckDB comparison of the report in
// results.json under dir, if it has one.
func recordedDuck(dir string) (Duck, bool) {
	b, err := os.ReadFile(filepath.Join(dir, "results.json"))
	if err != nil {
		return Duck{}, false
	}
	var old struct{ DuckDB *Duck }
	if json.Unmarshal(b, &old) != nil || old.DuckDB == nil || old.DuckDB.Runs == 0 {
		return Duck{}, false
	}
	return *old.DuckDB, true
}

// repoRoot returns the folder, from the working directory up, whose
// go.mod declares the streamdag module.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.HasPrefix(b, []byte("module github.com/streamdag/streamdag\n")) {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("report: not inside the streamdag repository (no go.mod of module github.com/streamdag/streamdag above the working directory)")
		}
		dir = up
	}
}

// firstLines returns the first n lines of b, for error messages.
func firstLines(b []byte, n int) string {
	lines := strings.SplitN(strings.TrimSpace(string(b)), "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], " / ")
}

// duckInput is the Parquet file the comparison reads:
// $STREAMDAG_DATA/flights-3m.parquet, else ../shared/data beside root.
func duckInput(root string) string {
	dir := os.Getenv("STREAMDAG_DATA")
	if dir == "" {
		dir = filepath.Join(filepath.Dir(root), "shared", "data")
	}
	return filepath.Join(dir, "flights-3m.parquet")
}
