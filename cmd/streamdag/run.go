package main

import (
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
	input, airports, out, dot string
	minDelay                  int64
	top, streams              int
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
	fl.IntVar(&f.streams, "streams", 0, "CPU streams (default GOMAXPROCS)")
	fl.StringVar(&f.out, "out", "", "also write the result to FILE.csv or FILE.json")
	fl.StringVar(&f.dot, "dot", "", "write the pipeline DAG as Graphviz DOT to FILE")
	return cmd
}

func runFlights(cmd *cobra.Command, f flightsFlags) error {
	ctx := cmd.Context()
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
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
	dev, err := gpu.NewCPU(copts...)
	if err != nil {
		return err
	}
	defer dev.Close()

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
	src, err := kvio.OpenAuto(ctx, file)
	if err != nil {
		return err
	}
	defer src.Close()

	opts := flights.Options{MinDelay: f.minDelay, TopK: f.top, Partitions: dev.NumStreams()}
	if f.airports != "" {
		path := f.airports
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("--airports: %w", err)
		}
		opts.Airports = func() (io.ReadCloser, error) { return os.Open(path) }
	}
	if format != "" {
		opts.Sink = func(rows []flights.Row) error { return writeOut(f.out, format, rows, f.airports != "") }
	}
	p, err := flights.Build(src, opts)
	if err != nil {
		return err
	}
	if f.dot != "" {
		dot, err := p.Graph.MarshalDOT("flights")
		if err != nil {
			return err
		}
		if err := os.WriteFile(f.dot, append(dot, '\n'), 0o644); err != nil {
			return err
		}
	}
	e := exec.New(dev)
	res, err := e.Run(ctx, p.Graph)
	if err != nil {
		return err
	}
	defer res.Close()
	rep := res.Report
	rows, readErr := p.Rows(res)
	if readErr == nil {
		if err := flights.WriteTable(stdout, rows, p.Key, f.airports != ""); err != nil {
			return err
		}
	}
	var nrows int64
	for i := range src.NumParts() {
		nrows += src.PartRows(i)
	}
	fmt.Fprintf(stderr, "%s: %d rows in %d partitions, %d launches on %d streams of %s, %d event waits, %v (%.1f M rows/s)\n",
		src.Name(), nrows, len(p.Partitions), len(rep.Launches), rep.Streams, rep.Device, rep.Waits,
		rep.Wall.Round(time.Microsecond), float64(nrows)/rep.Wall.Seconds()/1e6)
	if err := rep.Err(); err != nil {
		for _, l := range rep.Launches {
			if l.Status == exec.StatusFailed || l.Status == exec.StatusSkipped {
				fmt.Fprintf(stderr, "  %s: %s (failure #%d)", l.Kernel, l.Status, l.Failure)
				if len(l.Chain) > 0 {
					fmt.Fprintf(stderr, " ← %s", strings.Join(l.Chain, " ← "))
				}
				fmt.Fprintf(stderr, ": %v\n", firstLine(l.Err))
			}
		}
		if readErr != nil {
			fmt.Fprintf(stderr, "no result: %v\n", firstLine(readErr))
		}
		return errLaunchesFailed
	}
	return readErr
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
