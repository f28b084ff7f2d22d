package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/failgraph"
	"github.com/streamdag/streamdag/gpu/cpu"
	"github.com/streamdag/streamdag/gpu/opencl"

	"github.com/streamdag/streamdag/internal/cli"
)

func newRunCmd() *cobra.Command {
	run := &cobra.Command{
		Use:   "run PIPELINE",
		Short: "Run a pipeline (flights)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cli.Usagef("name a pipeline to run (known: flights)")
			}
			return cli.Usagef("unknown pipeline %q (known: flights)", args[0])
		},
		RunE: func(*cobra.Command, []string) error { return nil }, // Args refuses every call
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
	device                      string
	minDelay                    int64
	top, streams, replays       int
}

func newFlightsCmd() *cobra.Command {
	var f flightsFlags
	cmd := &cobra.Command{
		Use:   "flights",
		Short: "Flight delays by origin airport (or hour of day): filter, group, top-k",
		Long: fmt.Sprintf(`Runs the flights pipeline: one source kernel per Parquet row group or Arrow IPC
batch range, then filter (delay > --min-delay), partial group-by, merge, sort,
top-k and write, spread over --streams streams of the CPU device.

--device opencl leases an OpenCL device from the GPU backend (a GPU of any
vendor, or PoCL's OpenCL on the CPU cores) and holds it until the run ends:
filter and partial group-by then run there as OpenCL C over the delay and
key columns copied into device buffers, the rest on the CPU device; the
result is the same, byte for byte. The device must offer 64-bit atomics
(cl_khr_int64_base_atomics and cl_khr_int64_extended_atomics). --device
auto (the default) does so when the backend leases an OpenCL GPU that has
them, and otherwise runs on the CPU device and says why. The OpenCL
device opens as many streams as the CPU device, at most %d: --device
opencl refuses a larger --streams, and where --device auto lands on
OpenCL with more CPU streams than that, the summary says so.

With no --input it runs on the 200,000-row sample embedded in the binary
(vega-datasets flights-200k.arrow, grouped by hour of day).`, opencl.MaxStreams),
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runFlights(cmd, f) },
	}
	fl := cmd.Flags()
	fl.StringVar(&f.input, "input", "", "Parquet or Arrow IPC file (default: the embedded 200k-row sample)")
	fl.StringVar(&f.airports, "airports", "", "airports.csv (iata,name,city,…) to add names and cities")
	fl.Int64Var(&f.minDelay, "min-delay", 0, "keep flights with delay > N minutes")
	fl.IntVar(&f.top, "top", 10, "print the K groups with the most flights; 0 prints all")
	fl.IntVar(&f.streams, "streams", 0, fmt.Sprintf("CPU streams, 1 to %d (0: GOMAXPROCS); an OpenCL device gets as many, at most %d (--device opencl refuses more)", cpu.MaxStreams, opencl.MaxStreams))
	fl.StringVar(&f.device, "device", deviceAuto, "where filter and partial group-by run: cpu (nothing leased), opencl (an OpenCL device leased from the backend, beside the CPU device; an error when there is none) or auto (opencl when the backend leases an OpenCL GPU, else cpu; OpenCL is probed only on a host with a GPU device node)")
	fl.StringVar(&f.out, "out", "", "also write the result to FILE.csv or FILE.json")
	fl.StringVar(&f.dot, "dot", "", "write the plan (devices, streams, kernels, buffers, event waits) as Graphviz DOT to FILE; render it with 'streamdag graph'")
	fl.StringVar(&f.trace, "trace", "", "write a Chrome/Perfetto trace of the run (a track per stream) as JSON to FILE")
	fl.BoolVar(&f.jsonOut, "json", false, "write the result and a run summary as JSON on stdout instead of the table")
	fl.StringVar(&f.report, "report", "", "write the run report (every launch: status, failure, error, chain, start and end; status counts, devices used, copies with bytes, link and modeled time) as JSON to FILE")
	fl.StringVar(&f.topology, "topology", "", "run on simulated GPUs of a machine: sim:NAME (dgx1-v100, dgx-a100, …) or an nvidia-smi topo -m / JSON file")
	fl.StringVar(&f.loseDevice, "lose-device", "", "with --topology: a simulated GPU reports its loss part-way, after that share of its own launches, e.g. gpu3@50% (after half the launches queued on gpu3), and the run recovers")
	fl.BoolVar(&f.quiet, "quiet", false, "print only the result table and errors (no run summary)")
	fl.StringVar(&f.metrics, "metrics", "", "write the GPU backend's metrics snapshot as JSON to FILE")
	fl.StringVar(&f.errorsDot, "errors-dot", "", "write the error graph (failures, skipped kernels, tainted buffers) as DOT to FILE")
	fl.IntVar(&f.replays, "replay", 0, "capture the run and replay the capture N times (the result and report are the last replay's); a capture during which a launch failed is not replayed, and the summary says why")
	fl.StringArrayVar(&f.fail, "fail", nil, "make kernel KERNEL fail (KERNEL:panic to panic), e.g. 'filter[3]'; repeatable")
	return cmd
}

// fault is a --fail flag: as given, and the fault it injects.
type fault struct {
	spec  string
	fault flights.Fault
}

// checkFlightsFlags checks the flags that need no device or file: stream
// counts, --top, --out's format and the --fail specs (returned). Every
// error is a usage error.
func checkFlightsFlags(f flightsFlags) (faults []fault, err error) {
	if f.streams < 0 || f.streams > cpu.MaxStreams {
		return nil, cli.Usagef("--streams %d: want 1 to %d, or 0 for GOMAXPROCS", f.streams, cpu.MaxStreams)
	}
	if f.device == deviceOpenCL && f.streams > opencl.MaxStreams {
		return nil, cli.Usagef("--streams %d with --device opencl: an OpenCL device opens at most %d streams; want 1 to %d, or 0", f.streams, opencl.MaxStreams, opencl.MaxStreams)
	}
	if f.top < 0 {
		return nil, cli.Usagef("--top %d: must be 0 (all) or more", f.top)
	}
	if f.replays < 0 {
		return nil, cli.Usagef("--replay %d: must be 0 (no capture) or more", f.replays)
	}
	switch {
	case f.device != deviceAuto && f.device != deviceCPU && f.device != deviceOpenCL:
		return nil, cli.Usagef("--device %s: want cpu, opencl or auto", f.device)
	case f.topology != "" && f.device == deviceOpenCL:
		return nil, cli.Usagef("--device opencl and --topology: simulated GPUs run host code only; choose one")
	}
	if f.out != "" && flights.ResultFormat(f.out) == "" {
		return nil, cli.Usagef("--out %s: want a .csv or .json file name", f.out)
	}
	for _, spec := range f.fail {
		name, mode, _ := strings.Cut(spec, ":")
		if name == "" || mode != "" && mode != "panic" {
			return nil, cli.Usagef("--fail %s: want KERNEL or KERNEL:panic", spec)
		}
		faults = append(faults, fault{spec, flights.Fault{Kernel: name, Panic: mode == "panic"}})
	}
	return faults, nil
}

// flightsJob is the job the flags ask for, its files prepared, before
// its devices are known; it sets the collector's target (flightsGC).
// Flags are checked first (usage errors, exit status 2), then the
// --lose-device spec (returned), then every output path. The caller
// closes the job, on every path.
func flightsJob(f flightsFlags) (*flights.Job, []fault, *lossSpec, error) {
	faults, err := checkFlightsFlags(f)
	if err != nil {
		return nil, nil, nil, err
	}
	flightsGC(os.Getenv)
	var loss *lossSpec
	if f.loseDevice != "" {
		if f.topology == "" {
			return nil, nil, nil, cli.Usagef("--lose-device needs --topology: only simulated GPUs can be lost")
		}
		spec, err := parseLoss(f.loseDevice)
		if err != nil {
			return nil, nil, nil, err
		}
		loss = &spec
	}
	opts := []flights.Option{flights.WithMinDelay(f.minDelay)}
	if f.top > 0 { // 0 keeps every group
		opts = append(opts, flights.WithTopK(f.top))
	}
	job := &flights.Job{
		Input:   f.input,
		Options: opts,
		Replays: f.replays,
		Files: flights.Files{
			Result: flights.OutputFile{Path: f.out, Name: "--out"}, Plan: flights.OutputFile{Path: f.dot, Name: "--dot"},
			Trace: flights.OutputFile{Path: f.trace, Name: "--trace"}, Report: flights.OutputFile{Path: f.report, Name: "--report"},
			Metrics: flights.OutputFile{Path: f.metrics, Name: "--metrics"}, Errors: flights.OutputFile{Path: f.errorsDot, Name: "--errors-dot"},
		},
	}
	for _, x := range faults {
		job.Fail = append(job.Fail, x.fault)
	}
	err = job.Prepare()
	if errors.Is(err, flights.ErrSamePath) {
		err = cli.UsageError{Err: err}
	}
	return job, faults, loss, err
}

// runFlights runs the flights job (flights.Job) the flags ask for, on
// the devices they ask for, and prints its result and summary. The
// output files are prepared before the devices are set up.
func runFlights(cmd *cobra.Command, f flightsFlags) error {
	ctx := cmd.Context()
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	job, faults, loss, err := flightsJob(f)
	if job != nil {
		defer job.Close()
	}
	if err != nil {
		return err
	}

	// The run's devices come from the backend: it leases what --device
	// asks for, and the lease is held (the device open) until the run
	// ends, on every path.
	lp := planLease(f.device, f.topology != "")
	backend, err := newBackend(ctx, lp)
	if err != nil {
		return err
	}
	defer backend.CloseAndWait(context.WithoutCancel(ctx))
	setup, err := runDevices(ctx, backend, lp, f.topology, f.streams, loss)
	if err != nil {
		return err
	}
	defer setup.release()
	job.Backend = backend
	if loss != nil {
		job.CheckPlan = loss.checkPlan
	}
	if setup.openCL {
		id := setup.devs[len(setup.devs)-1].ID()
		job.Options = append(job.Options, flights.WithOpenCL(), flights.WithDevice(id)) // filter and partial on the OpenCL device
	}
	if f.airports != "" {
		path := f.airports
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf("--airports: %w", err)
		}
		job.Options = append(job.Options, flights.WithAirports(func() (io.ReadCloser, error) { return os.Open(path) }))
	}
	if showProgress(stderr, f.quiet, os.Getenv) {
		job.OnRun = func(p *flights.Pipeline) func() {
			bar := countLaunches(p.Graph)
			bar.start(stderr, "flights", progressDelay)
			return bar.Stop
		}
	}
	// Launch times cost a clock reading per launch: only the outputs that
	// show them turn them on.
	timed := exec.WithLaunchTiming(f.trace != "" || f.report != "")
	e, err := exec.NewMulti(setup.devs, setup.topo, exec.WithBackend(backend), timed)
	if err != nil {
		return err
	}
	out, err := job.Run(ctx, e)
	if out == nil {
		var fe *flights.FaultError
		if errors.As(err, &fe) {
			return cli.Usagef("--fail %s: %w", faults[fe.Index].spec, fe.Err)
		}
		return err
	}
	return printFlights(stdout, stderr, f, setup, out, err)
}

// flightsGCPercent is the garbage collector's target percentage
// (runtime/debug.SetGCPercent) during a flights run. The run keeps every
// column it decodes until it ends and makes little garbage besides, so
// at Go's default of 100 (a first collection at a 4 MiB heap, then one
// each time the heap doubles) each collection marks columns that are all
// still live and frees almost nothing, and its work and the fresh pages
// its bookkeeping touches cost a run on the 3-million-row flights file
// about a tenth of its CPU time. At 1000 the heap may grow to 11 times
// what was live at the last collection before the next, the first at
// 40 MiB: no collection at all in that run.
const flightsGCPercent = 1000

// flightsGC sets the collector's target to flightsGCPercent, for the
// rest of the process (a flights run is the last work of the command),
// unless the GOGC environment variable (read with getenv) sets one.
func flightsGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(flightsGCPercent)
	}
}

// printFlights prints a finished job's result table (or the run's JSON)
// and summaries, and returns werr (the job's errors writing its files)
// or, when the run had failures, errLaunchesFailed after the problems.
func printFlights(stdout, stderr io.Writer, f flightsFlags, setup *runSetup, out *flights.Output, werr error) error {
	table, rep, s := out.Table, out.Report, out.Summary
	if table != nil && !f.jsonOut {
		if err := flights.WriteTable(stdout, table.Rows, out.Pipeline.Key, out.Names); err != nil {
			return err
		}
	}
	if f.jsonOut {
		if err := writeRunJSON(stdout, out); err != nil {
			return err
		}
	}
	if !f.quiet {
		fmt.Fprintln(stderr, runLine(s, rep))
		if out.Capture != nil {
			fmt.Fprintln(stderr, captureLine(out.Capture, rep, f.replays))
		}
		printDevices(stderr, setup, out.Plan, rep)
		fmt.Fprintln(stderr, out.Reads)
	}
	if out.Complete() {
		return werr
	}
	printProblems(stderr, rep, table, out.ReadErr, s.Partitions, s.Rows)
	if f.out != "" && table == nil {
		fmt.Fprintf(stderr, "--out %s: not written (no result); the file is left as it was\n", f.out)
	}
	if werr != nil {
		return werr
	}
	return errLaunchesFailed
}

// printDevices prints the devices line, and the summary of the device
// work (OpenCL), of the placement (several devices) and of a loss.
func printDevices(w io.Writer, setup *runSetup, plan *exec.Plan, rep *exec.Report) {
	fmt.Fprintf(w, "devices: %s\n", setup.why)
	if setup.openCL {
		fmt.Fprintln(w, deviceSummary(rep))
	} else if len(setup.devs) > 1 {
		fmt.Fprintln(w, placementSummary(plan, rep))
	}
	if rep.Lost != nil {
		fmt.Fprintln(w, lossSummary(rep))
	}
}

// runLine is the run summary's first line: input, partitions, source
// parts not read (ruled out by their statistics), launches (and those
// lost with a device and redone), streams, devices used, waits, wall time
// and the rate of the rows read.
func runLine(s flights.Summary, rep *exec.Report) string {
	launches := plural(rep.NumLaunches(), "launch")
	if n := rep.Count(exec.StatusLost); n > 0 {
		launches += fmt.Sprintf(" (%d lost with %s and redone)", n, *rep.Lost)
	}
	rate := 0.0
	if rep.Wall > 0 {
		rate = float64(s.Rows-s.SkippedRows) / rep.Wall.Seconds() / 1e6
	}
	partitions := plural(s.Partitions, "partition")
	if s.Skipped > 0 {
		partitions += fmt.Sprintf(" (%d of %d source parts, %d rows, not read: their delay statistics rule out every row)", s.Skipped, s.SourceParts, s.SkippedRows)
	}
	return fmt.Sprintf("%s: %d rows in %s, %s on %s of %s, %s, %s (%.1f M rows/s)",
		s.Input, s.Rows, partitions, launches, streamsLabel(rep.Streams),
		devicesLabel(rep.DevicesUsed()), plural(rep.Waits, "event wait"), fmtDuration(rep.Wall), rate)
}

// captureLine says what --replay did: "replayed capture N times
// (engine lists)", or why the capture was not replayed (the run shown
// then ran the plan).
func captureLine(c *exec.Capture, rep *exec.Report, replays int) string {
	if err := c.Err(); err != nil {
		return fmt.Sprintf("%s, not replayed: %s", rep.Ran, flights.FirstLine(err))
	}
	return fmt.Sprintf("%s %s (%s)", rep.Ran, plural(replays, "time"), c.ReplayMode())
}

// printProblems lists on w what went wrong: each failed or cancelled
// launch with its error, each skipped launch with its chain (the error is
// its root's, printed once with the root), then what is missing from the
// result.
func printProblems(w io.Writer, rep *exec.Report, table *flights.Table, readErr error, parts int, nrows int64) {
	shown := map[failgraph.FailureID]bool{}
	for _, l := range rep.Launches() {
		switch l.Status {
		case exec.StatusFailed, exec.StatusCancelled:
			fmt.Fprintf(w, "  %s: %s (failure %s): %s\n", l.Kernel, l.Status, l.Failure, flights.FirstLine(l.Err))
			shown[l.Failure] = true
		case exec.StatusSkipped:
			fmt.Fprintf(w, "  %s: skipped (failure %s) ← %s\n", l.Kernel, l.Failure, strings.Join(l.Chain, " ← "))
		}
	}
	// cause names the failure behind err, or gives its text when it was
	// not printed above.
	cause := func(err error) string {
		var u *failgraph.UnwrittenError
		if errors.As(err, &u) && shown[u.Failure] {
			return fmt.Sprintf("%s was not written (failure %s, above)", u.Buffer, u.Failure)
		}
		return flights.FirstLine(err)
	}
	switch {
	case readErr != nil:
		fmt.Fprintf(w, "no result: %s\n", cause(readErr))
	default:
		if table.NamesErr != nil {
			fmt.Fprintf(w, "no airport names or cities: %s\n", cause(table.NamesErr))
		}
		if len(table.Lost) > 0 {
			var lost int64
			for _, l := range table.Lost {
				lost += l.Rows
			}
			fmt.Fprintf(w, "PARTIAL RESULT: %d of %d partitions lost (%d of %d rows are not counted above):\n",
				len(table.Lost), parts, lost, nrows)
			for _, l := range table.Lost {
				fmt.Fprintf(w, "  partition %d: %d rows lost (rows [%d, %d) of %s): %s\n",
					l.Partition, l.Rows, l.Part.RowLo, l.Part.RowHi, partsLabel(l.Part), cause(l.Err))
			}
		}
	}
}

// partsLabel names the source parts of a partition: "part 3", "parts 3–5".
func partsLabel(p flights.Partition) string {
	if p.PartHi-p.PartLo > 1 {
		return fmt.Sprintf("parts %d–%d", p.PartLo, p.PartHi-1)
	}
	return fmt.Sprintf("part %d", p.PartLo)
}

// streamsLabel says how many streams each device has: "3 streams" when
// every device has as many, else "2, 4 streams" by device.
func streamsLabel(streams []int) string {
	if len(streams) > 0 && slices.Min(streams) == slices.Max(streams) {
		return plural(streams[0], "stream")
	}
	ns := make([]string, len(streams))
	for i, n := range streams {
		ns[i] = strconv.Itoa(n)
	}
	return strings.Join(ns, ", ") + " streams"
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
