// Command streamdag-beam runs streamdag pipelines as shards on Apache
// Beam's Prism runner, in this process.
//
//	streamdag-beam run flights --input FILE --shards N [--min-delay D] [--top K]
//	                           [--airports FILE] [--streams N] [--attempts N]
//	                           [--out FILE.csv|FILE.json] [--fail KERNEL[:panic]@SHARD]...
//	                           [--quiet] [--beam-log off|error|warn|info|debug]
//
// A shard whose attempt fails (its input cannot be read, its device
// cannot be acquired) is run again, up to --attempts times (0: 3); a
// kernel that fails inside a shard's graph loses its partitions instead.
//
// Exit status: 0 on success; 2 on a usage error; 1 when the run failed or
// its result is partial.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/apache/beam/sdks/v2/go/pkg/beam"
	"github.com/spf13/cobra"

	"github.com/streamdag/streamdag/beam/shard"
	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/internal/cli"
	"github.com/streamdag/streamdag/internal/outfile"
	"github.com/streamdag/streamdag/kvio"
)

func main() {
	// A Beam worker binary's own flags come first; loopback workers run
	// in this process, so there are none to parse here.
	flag.CommandLine.Parse(nil)
	beam.Init()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// errPartial reports a run whose result is partial; the command has
// printed the lost partitions.
var errPartial = errors.New("partial result")

// run runs the command line args and returns its exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := &cobra.Command{Use: "streamdag-beam", Short: "Run streamdag pipelines as shards on Apache Beam (Prism)"}
	runCmd := &cobra.Command{Use: "run PIPELINE", Short: "Run a pipeline (flights)",
		Args: func(_ *cobra.Command, args []string) error {
			return cli.Usagef("name a pipeline to run (known: flights)")
		},
		RunE: func(*cobra.Command, []string) error { return nil }}
	runCmd.AddCommand(newFlightsCmd())
	root.AddCommand(runCmd)
	return cli.Execute(ctx, root, args, strings.NewReader(""), stdout, stderr, errPartial)
}

type flightsFlags struct {
	input, airports, out string
	fail                 []string
	minDelay             int64
	shards, top, streams int
	attempts             int
	quiet                bool
	beamLog              string
}

func newFlightsCmd() *cobra.Command {
	var f flightsFlags
	cmd := &cobra.Command{
		Use:   "flights",
		Short: "The flights job, its input split into shards by row-group, record-batch or row ranges",
		Long: `Runs the flights job of 'streamdag run flights' on Apache Beam's Prism runner:
the input's parts (Parquet row groups, Arrow IPC record batches) are cut into
--shards ranges (an input with fewer parts than shards is cut into --shards
row ranges instead); each shard's filter (delay > --min-delay) and partial
group-by run as a streamdag graph inside a Beam DoFn on the CPU device; the
partials cross to the merge as Arrow IPC, merge in a combine per group key,
and sort, top-k, the join with --airports and the CSV run on one worker. The
result is the single-node result, byte for byte. A shard whose attempt fails
(its input cannot be read, its device cannot be acquired) is run again, up to
--attempts times; a kernel that fails inside a shard's graph loses that
shard's partitions, and the result is partial.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runFlights(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.input, "input", "", "Parquet or Arrow IPC file (default: the embedded 200k-row sample)")
	fl.IntVar(&f.shards, "shards", 2, "shards to cut the input's parts, or its rows when it has fewer parts, into")
	fl.Int64Var(&f.minDelay, "min-delay", 0, "keep flights with delay > N minutes")
	fl.IntVar(&f.top, "top", 10, "print the K groups with the most flights; 0 prints all")
	fl.StringVar(&f.airports, "airports", "", "airports.csv (iata,name,city,…) to add names and cities")
	fl.IntVar(&f.streams, "streams", 0, fmt.Sprintf("CPU streams of each shard's graph, 1 to %d (0: GOMAXPROCS / shards)", cpu.MaxStreams))
	fl.IntVar(&f.attempts, "attempts", 0, fmt.Sprintf("attempts of each shard before its failure fails the run (0: %d)", shard.DefaultAttempts))
	fl.StringVar(&f.out, "out", "", "also write the result to FILE.csv or FILE.json (as streamdag run flights --out writes it)")
	fl.StringArrayVar(&f.fail, "fail", nil, "make kernel KERNEL of shard SHARD's graph fail (KERNEL:panic to panic), e.g. 'filter[0]@1'; repeatable")
	fl.BoolVar(&f.quiet, "quiet", false, "print only the result table and errors (no run summary)")
	fl.StringVar(&f.beamLog, "beam-log", "off", "what Prism and the Beam SDK log on stderr: off, error, warn, info or debug")
	return cmd
}

// parseFault parses a --fail KERNEL[:panic]@SHARD.
func parseFault(spec string) (shard.Fault, error) {
	at := strings.LastIndex(spec, "@")
	if at < 0 {
		return shard.Fault{}, cli.Usagef("--fail %s: want KERNEL@SHARD or KERNEL:panic@SHARD", spec)
	}
	n, err := strconv.Atoi(spec[at+1:])
	name, mode, _ := strings.Cut(spec[:at], ":")
	if err != nil || n < 0 || name == "" || mode != "" && mode != "panic" {
		return shard.Fault{}, cli.Usagef("--fail %s: want KERNEL@SHARD or KERNEL:panic@SHARD", spec)
	}
	return shard.Fault{Shard: n, Fault: flights.Fault{Kernel: name, Panic: mode == "panic"}}, nil
}

func runFlights(cmd *cobra.Command, f flightsFlags) error {
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	switch {
	case f.shards < 1:
		return cli.Usagef("--shards %d: want 1 or more", f.shards)
	case f.top < 0:
		return cli.Usagef("--top %d: must be 0 (all) or more", f.top)
	case f.streams < 0 || f.streams > cpu.MaxStreams:
		return cli.Usagef("--streams %d: want 1 to %d, or 0", f.streams, cpu.MaxStreams)
	case f.out != "" && flights.ResultFormat(f.out) == "":
		return cli.Usagef("--out %s: want a .csv or .json file name", f.out)
	case f.attempts < 0:
		return cli.Usagef("--attempts %d: want 1 or more, or 0 (%d)", f.attempts, shard.DefaultAttempts)
	}
	level, ok := beamLevels[f.beamLog]
	if !ok {
		return cli.Usagef("--beam-log %s: want off, error, warn, info or debug", f.beamLog)
	}
	// Prism and the SDK log through slog's default logger. The command
	// reports what a run says itself: a shard's failed attempts in its
	// summary line, the job's error as its DoFn's.
	slog.SetDefault(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})))
	cfg := shard.Config{Input: f.input, Shards: f.shards, MinDelay: f.minDelay, TopK: f.top, Airports: f.airports, Streams: f.streams, Attempts: f.attempts}
	for _, spec := range f.fail {
		x, err := parseFault(spec)
		if err != nil {
			return err
		}
		cfg.Fail = append(cfg.Fail, x)
	}
	if f.airports != "" {
		if err := checkAirports(f.airports); err != nil {
			return err
		}
	}
	var outs outfile.Set
	defer outs.Discard()
	outs.Keep("--input", f.input)
	if f.airports != "" {
		outs.Keep("--airports", f.airports)
	}
	out, err := outs.Add("--out", f.out)
	if errors.Is(err, outfile.ErrSamePath) {
		return cli.UsageError{Err: err}
	}
	if err != nil {
		return err
	}
	start := time.Now()
	res, err := shard.Run(cmd.Context(), cfg)
	if _, ok := errors.AsType[*flights.FaultError](err); ok {
		return cli.UsageError{Err: err}
	}
	if err != nil {
		return err
	}
	wall := time.Since(start)
	if err := flights.WriteTable(stdout, res.Table.Rows, res.Key, res.Names); err != nil {
		return err
	}
	werr := out.Commit(func(w io.Writer) error {
		if flights.ResultFormat(f.out) == "json" {
			return flights.WriteResult(w, "json", res.Table, res.Names, res.Partitions, res.Rows)
		}
		_, err := w.Write(res.CSV)
		return err
	})
	if !f.quiet {
		fmt.Fprintf(stderr, "%s: %d rows in %s, %s, on Prism (loopback workers), %s\n",
			inputName(f.input), res.Rows, plural(len(res.Reports), "shard"), plural(res.Partitions, "partition"), wall.Round(time.Millisecond))
		for _, r := range res.Reports {
			fmt.Fprintf(stderr, "  %s\n", shardLine(r))
		}
	}
	if res.Complete() {
		return werr
	}
	if res.Table.NamesErr != nil {
		fmt.Fprintf(stderr, "no airport names or cities: %s\n", res.Table.NamesErr)
	}
	if n := len(res.Table.Lost); n > 0 {
		var lost int64
		for _, l := range res.Table.Lost {
			lost += l.Rows
		}
		fmt.Fprintf(stderr, "PARTIAL RESULT: %d of %d partitions lost (%d of %d rows are not counted above):\n", n, res.Partitions, lost, res.Rows)
		for _, l := range res.Table.Lost {
			fmt.Fprintf(stderr, "  %s\n", l)
		}
	}
	if werr != nil {
		return werr
	}
	return errPartial
}

// checkAirports fails for an --airports path that does not exist, and
// for a device, pipe or socket (kvio.Open's error), whose reading might
// never end (/dev/zero has no line end to stop the header at). A
// directory is left to the finish, which reports it as the missing
// names, as `streamdag run flights` does.
func checkAirports(path string) error {
	fi, err := os.Stat(path)
	switch {
	case err != nil:
		return fmt.Errorf("--airports: %w", err)
	case fi.Mode().IsRegular() || fi.IsDir():
		return nil
	}
	f, err := kvio.Open(path)
	if err != nil {
		return fmt.Errorf("--airports: %w", err)
	}
	return f.Close()
}

// beamLevels are the --beam-log levels; off is above every level Beam
// logs at.
var beamLevels = map[string]slog.Level{"off": slog.LevelError + 100, "error": slog.LevelError, "warn": slog.LevelWarn, "info": slog.LevelInfo, "debug": slog.LevelDebug}

// shardLine is r's line of the summary: its range, rows and partitions,
// and, when it took more than one attempt, its attempts and the errors
// of those that failed.
func shardLine(r shard.Report) string {
	g := r.Range
	s := fmt.Sprintf("shard %d: rows [%d, %d) of parts [%d, %d), %d rows, %s", r.Shard, g.RowLo, g.RowHi, g.PartLo, g.PartHi, r.Rows, plural(r.Partitions, "partition"))
	if r.Attempt > 1 {
		failed := make([]string, len(r.Failed))
		for i, e := range r.Failed {
			failed[i] = fmt.Sprintf("attempt %d: %s", i+1, e)
		}
		s += fmt.Sprintf(", %d attempts (%s)", r.Attempt, strings.Join(failed, "; "))
	}
	return s
}

// inputName names the input in the summary.
func inputName(input string) string {
	if input == "" {
		return flights.SampleName
	}
	return input
}

// plural returns "1 shard", "2 shards".
func plural(n int, word string) string {
	if n == 1 {
		return "1 " + word
	}
	return fmt.Sprintf("%d %ss", n, word)
}
