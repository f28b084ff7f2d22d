package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/kvio"
)

func newRunCmd() *cobra.Command {
	run := &cobra.Command{
		Use:   "run PIPELINE",
		Short: "Run a pipeline (flights)",
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return fmt.Errorf("unknown pipeline %q (known: flights)", args[0])
		},
	}
	run.AddCommand(newFlightsCmd())
	return run
}

type flightsFlags struct {
	input, airports, out, dot   string
	report, errorsDot, metrics  string
	fail                        []string
	quiet, jsonOut              bool
	trace, topology, loseDevice string
	minDelay                    int64
	top, streams                int
}

func newFlightsCmd() *cobra.Command {
	var f flightsFlags
	cmd := &cobra.Command{
		Use:   "flights",
		Short: "Flight delays by origin airport (or hour of day): filter, group, top-k",
		Long: `Runs the flights pipeline: one source kernel per Parquet row group or Arrow IPC
batch range, then filter (delay > --min-delay), partial group-by, merge, sort,
top-k and write, spread over --streams streams of the CPU device.

With no --input it runs on the 200,000-row sample embedded in the binary
(vega-datasets flights-200k.arrow, grouped by hour of day).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runFlights(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.input, "input", "", "Parquet or Arrow IPC file (default: the embedded 200k-row sample)")
	fl.StringVar(&f.airports, "airports", "", "airports.csv (iata,name,city,…) to add names and cities")
	fl.Int64Var(&f.minDelay, "min-delay", 0, "keep flights with delay > N minutes")
	fl.IntVar(&f.top, "top", 10, "print the K groups with the most flights; 0 prints all")
	fl.IntVar(&f.streams, "streams", 0, "CPU streams, 1 to 1024 (0: GOMAXPROCS)")
	fl.StringVar(&f.out, "out", "", "also write the result to FILE.csv or FILE.json")
	fl.StringVar(&f.dot, "dot", "", "write the plan (devices, streams, kernels, buffers, event waits) as Graphviz DOT to FILE; render it with 'streamdag graph'")
	fl.StringVar(&f.trace, "trace", "", "write a Chrome/Perfetto trace of the run (a track per stream) as JSON to FILE")
	fl.BoolVar(&f.jsonOut, "json", false, "write the result and a run summary as JSON on stdout instead of the table")
	fl.StringVar(&f.report, "report", "", "write the run report (every launch: status, failure, error, chain) as JSON to FILE")
	fl.StringVar(&f.topology, "topology", "", "run on simulated GPUs of a machine: sim:NAME (dgx1-v100, dgx-a100, …) or an nvidia-smi topo -m / JSON file")
	fl.StringVar(&f.loseDevice, "lose-device", "", "with --topology: lose a simulated GPU part-way, e.g. gpu3@50% (after half the launches), and recover")
	fl.BoolVar(&f.quiet, "quiet", false, "print only the result table and errors (no run summary)")
	fl.StringVar(&f.metrics, "metrics", "", "write the GPU backend's metrics snapshot as JSON to FILE")
	fl.StringVar(&f.errorsDot, "errors-dot", "", "write the error graph (failures, skipped kernels, tainted buffers) as DOT to FILE")
	fl.StringArrayVar(&f.fail, "fail", nil, "make kernel KERNEL fail (KERNEL:panic to panic), e.g. 'filter[3]'; repeatable")
	return cmd
}

func runFlights(cmd *cobra.Command, f flightsFlags) error {
	ctx := cmd.Context()
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	if f.streams < 0 || f.streams > gpu.MaxCPUStreams {
		return fmt.Errorf("--streams %d: want 1 to %d, or 0 for GOMAXPROCS", f.streams, gpu.MaxCPUStreams)
	}
	if f.out != "" {
		if st, err := os.Stat(filepath.Dir(f.out)); err != nil || !st.IsDir() {
			return fmt.Errorf("--out %s: no directory %s", f.out, filepath.Dir(f.out))
		}
	}
	if f.top < 0 {
		return fmt.Errorf("--top %d: must be 0 (all) or more", f.top)
	}
	format := ""
	if f.out != "" {
		switch strings.ToLower(filepath.Ext(f.out)) {
		case ".csv":
			format = "csv"
		case ".json":
			format = "json"
		default:
			return fmt.Errorf("--out %s: want a .csv or .json file name", f.out)
		}
	}
	var copts []gpu.CPUOption
	if f.streams != 0 {
		copts = append(copts, gpu.WithStreams(f.streams))
	}
	backend, err := gpu.Open(ctx, gpu.OpenConfig{})
	if err != nil {
		return err
	}
	defer backend.CloseAndWait(context.WithoutCancel(ctx))
	devs, topo, why, release, err := runDevices(ctx, backend, f.topology, f.streams, copts)
	if err != nil {
		return err
	}
	defer release()
	dev := devs[0]

	var file *kvio.File
	if f.input == "" {
		file, err = flights.Sample()
	} else {
		file, err = kvio.Open(f.input)
	}
	if err != nil {
		return err
	}
	defer file.Close()
	backend.SetProcessConfig("kvio", file.Describe()) // again after the run
	src, err := kvio.OpenAuto(ctx, file)
	if err != nil {
		return err
	}
	defer src.Close()

	opts := flights.Options{MinDelay: f.minDelay, TopK: f.top, Partitions: len(devs) * dev.NumStreams()}
	if f.airports != "" {
		path := f.airports
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("--airports: %w", err)
		}
		opts.Airports = func() (io.ReadCloser, error) { return os.Open(path) }
	}
	if format != "" {
		opts.Sink = func(t *flights.Table) error { return writeOut(f.out, format, t.Rows, f.airports != "") }
	}
	p, err := flights.Build(src, opts)
	if err != nil {
		return err
	}
	for _, spec := range f.fail {
		name, mode, _ := strings.Cut(spec, ":")
		if mode != "" && mode != "panic" {
			return fmt.Errorf("--fail %s: want KERNEL or KERNEL:panic", spec)
		}
		if err := p.Graph.InjectFailure(name, mode == "panic"); err != nil {
			return fmt.Errorf("--fail %s: %w", spec, err)
		}
	}
	var bar *progress
	if showProgress(stderr, f.quiet, os.Getenv) {
		bar = countLaunches(p.Graph)
	}
	e, err := exec.NewMulti(devs, topo, exec.WithBackend(backend))
	if err != nil {
		return err
	}
	plan, err := e.Plan(p.Graph)
	if err != nil {
		return err
	}
	if f.dot != "" {
		if err := writePlanDOT(f.dot, plan); err != nil {
			return err
		}
	}
	bar.start(stderr, "flights", progressDelay)
	var runOpts []exec.RunOption
	if f.loseDevice != "" {
		if f.topology == "" {
			return errors.New("--lose-device needs --topology: only simulated GPUs can be lost")
		}
		spec, err := exec.ParseLossSpec(f.loseDevice)
		if err != nil {
			return fmt.Errorf("--lose-device: %w", err)
		}
		runOpts = append(runOpts, exec.WithDeviceLoss(spec.Device, spec.After))
	}
	res, err := e.Execute(ctx, plan, runOpts...)
	bar.Stop()
	if err != nil {
		return err
	}
	defer res.Close()
	rep := res.Report
	table, readErr := p.Result(res)
	if readErr == nil && !f.jsonOut {
		if err := flights.WriteTable(stdout, table.Rows, p.Key, f.airports != ""); err != nil {
			return err
		}
	}
	var nrows int64
	for i := range src.NumParts() {
		nrows += src.PartRows(i)
	}
	if f.jsonOut {
		if err := writeRunJSON(stdout, src.Name(), nrows, len(p.Partitions), table, readErr, rep); err != nil {
			return err
		}
	}
	if f.trace != "" {
		if err := writeTraceFile(f.trace, plan, rep); err != nil {
			return err
		}
	}
	backend.SetProcessConfig("kvio", file.Describe()) // what the input file used in the run
	if !f.quiet {
		fmt.Fprintf(stderr, "%s: %d rows in %s, %s on %s of %s, %s, %v (%.1f M rows/s)\n",
			src.Name(), nrows, plural(len(p.Partitions), "partition"), plural(len(rep.Launches()), "launch"),
			plural(rep.Streams, "stream"), devicesLabel(rep.Devices), plural(rep.Waits, "event wait"),
			rep.Wall.Round(time.Microsecond), float64(nrows)/rep.Wall.Seconds()/1e6)
		fmt.Fprintf(stderr, "devices: %s\n", why)
		if len(devs) > 1 {
			fmt.Fprintln(stderr, placementSummary(plan, rep))
		}
		if rep.Lost != nil {
			fmt.Fprintln(stderr, lossSummary(rep))
		}
		fmt.Fprintln(stderr, file.Describe())
	}
	if f.report != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.report, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if f.metrics != "" {
		b, err := json.MarshalIndent(backend.MetricsSnapshot(), "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.metrics, append(b, '\n'), 0o644); err != nil {
			return err
		}
	}
	if f.errorsDot != "" {
		dot, err := res.Failures().MarshalDOT()
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.errorsDot, append(dot, '\n'), 0o644); err != nil {
			return err
		}
	}
	if rep.Err() == nil && readErr == nil && len(table.Lost) == 0 {
		return nil
	}
	for _, l := range rep.Launches() {
		if l.Status == exec.StatusFailed || l.Status == exec.StatusSkipped || l.Status == exec.StatusCancelled {
			fmt.Fprintf(stderr, "  %s: %s (failure %s)", l.Kernel, l.Status, l.Failure)
			if l.Status == exec.StatusSkipped {
				fmt.Fprintf(stderr, " ← %s", strings.Join(l.Chain, " ← "))
			}
			fmt.Fprintf(stderr, ": %v\n", firstLine(l.Err))
		}
	}
	switch {
	case readErr != nil:
		fmt.Fprintf(stderr, "no result: %v\n", firstLine(readErr))
	case len(table.Lost) > 0:
		var lost int64
		for _, l := range table.Lost {
			lost += l.Rows
		}
		fmt.Fprintf(stderr, "PARTIAL RESULT: %d of %d partitions lost (%d of %d rows are not counted above):\n",
			len(table.Lost), len(p.Partitions), lost, nrows)
		for _, l := range table.Lost {
			fmt.Fprintf(stderr, "  %s\n", l)
		}
	}
	return errLaunchesFailed
}

func writeOut(path, format string, rows []flights.Row, withNames bool) error {
	out, err := os.Create(path)
	if err != nil {
		return err
	}
	if format == "csv" {
		err = flights.WriteCSV(out, rows, withNames)
	} else {
		err = flights.WriteJSON(out, rows)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// firstLine returns err's text up to its first newline (panic errors carry
// a stack after it).
func firstLine(err error) string {
	if err == nil {
		return ""
	}
	s, _, _ := strings.Cut(err.Error(), "\n")
	return s
}

// plural returns "1 stream", "2 streams", "3 launches", "4 copies".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	switch {
	case strings.HasSuffix(word, "ch") || strings.HasSuffix(word, "s"):
		return fmt.Sprintf("%d %ses", n, word)
	case strings.HasSuffix(word, "py"): // copy → copies
		return fmt.Sprintf("%d %sies", n, strings.TrimSuffix(word, "y"))
	}
	return fmt.Sprintf("%d %ss", n, word)
}
