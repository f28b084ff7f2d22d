package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
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
	"github.com/streamdag/streamdag/kvio"
	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"
)

func newRunCmd() *cobra.Command {
	run := &cobra.Command{
		Use:   "run PIPELINE",
		Short: "Run a pipeline (flights)",
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usagef("name a pipeline to run (known: flights)")
			}
			return usagef("unknown pipeline %q (known: flights)", args[0])
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
	top, streams                int
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
	fl.StringArrayVar(&f.fail, "fail", nil, "make kernel KERNEL fail (KERNEL:panic to panic), e.g. 'filter[3]'; repeatable")
	return cmd
}

// fault is a --fail flag: the kernel to fail, and whether by a panic.
type fault struct {
	spec, kernel string
	panic        bool
}

// checkFlightsFlags checks the flags that need no device or file: stream
// counts, --top, --out's format (returned: "csv", "json" or "" without
// --out) and the --fail specs (returned). Every error is a usage error.
func checkFlightsFlags(f flightsFlags) (format string, faults []fault, err error) {
	if f.streams < 0 || f.streams > cpu.MaxStreams {
		return "", nil, usagef("--streams %d: want 1 to %d, or 0 for GOMAXPROCS", f.streams, cpu.MaxStreams)
	}
	if f.device == deviceOpenCL && f.streams > opencl.MaxStreams {
		return "", nil, usagef("--streams %d with --device opencl: an OpenCL device opens at most %d streams; want 1 to %d, or 0", f.streams, opencl.MaxStreams, opencl.MaxStreams)
	}
	if f.top < 0 {
		return "", nil, usagef("--top %d: must be 0 (all) or more", f.top)
	}
	switch {
	case f.device != deviceAuto && f.device != deviceCPU && f.device != deviceOpenCL:
		return "", nil, usagef("--device %s: want cpu, opencl or auto", f.device)
	case f.topology != "" && f.device == deviceOpenCL:
		return "", nil, usagef("--device opencl and --topology: simulated GPUs run host code only; choose one")
	}
	if f.out != "" {
		switch strings.ToLower(filepath.Ext(f.out)) {
		case ".csv":
			format = "csv"
		case ".json":
			format = "json"
		default:
			return "", nil, usagef("--out %s: want a .csv or .json file name", f.out)
		}
	}
	for _, spec := range f.fail {
		name, mode, _ := strings.Cut(spec, ":")
		if name == "" || mode != "" && mode != "panic" {
			return "", nil, usagef("--fail %s: want KERNEL or KERNEL:panic", spec)
		}
		faults = append(faults, fault{spec, name, mode == "panic"})
	}
	return format, faults, nil
}

// runFlights runs the flights pipeline. Flags are checked first (usage
// errors, exit status 2), then every output path (a temporary file is
// created beside each), then the run; outputs are committed after it,
// each on its own, so one that fails leaves the others written.
func runFlights(cmd *cobra.Command, f flightsFlags) error {
	ctx := cmd.Context()
	stdout, stderr := cmd.OutOrStdout(), cmd.ErrOrStderr()
	format, faults, err := checkFlightsFlags(f)
	if err != nil {
		return err
	}
	flightsGC(os.Getenv)
	var runOpts []exec.RunOption
	var loss *lossSpec
	if f.loseDevice != "" {
		if f.topology == "" {
			return usagef("--lose-device needs --topology: only simulated GPUs can be lost")
		}
		spec, err := parseLoss(f.loseDevice)
		if err != nil {
			return err
		}
		loss = &spec
	}

	var outs outputs
	defer outs.discard()
	files, err := outs.addAll(f)
	if err != nil {
		return err
	}
	dotFile := files[1]

	// The run's devices come from the backend: it leases what --device
	// asks for, and the lease is held (the device open) until the run
	// ends, on every path.
	lp := planLease(f.device, f.topology != "")
	backend, err := newBackend(ctx, lp.backend)
	if err != nil {
		return err
	}
	defer backend.CloseAndWait(context.WithoutCancel(ctx))
	setup, err := runDevices(ctx, backend, lp, f.topology, f.streams, loss)
	if err != nil {
		return err
	}
	defer setup.release()
	devs, topo := setup.devs, setup.topo

	file, err := openFlightsInput(f.input)
	if err != nil {
		return err
	}
	defer file.Close()
	backend.SetProcessConfig("kvio", file.Describe()) // updated after the run with what its reads used
	src, err := kvio.OpenAuto(ctx, file)
	if err != nil {
		return err
	}
	defer src.Close()
	p, err := buildFlights(src, f, setup, faults)
	if err != nil {
		return err
	}
	var bar *progress
	if showProgress(stderr, f.quiet, os.Getenv) {
		bar = countLaunches(p.Graph)
	}
	// Launch times cost a clock reading per launch: only the outputs that
	// show them turn them on.
	timed := exec.WithLaunchTiming(f.trace != "" || f.report != "")
	e, err := exec.NewMulti(devs, topo, exec.WithBackend(backend), timed)
	if err != nil {
		return err
	}
	plan, err := e.Plan(p.Graph)
	if err != nil {
		return err
	}
	// The plan is known now: write it before the run.
	if err := dotFile.commit(func(w io.Writer) error {
		b, err := plan.MarshalDOT()
		if err == nil {
			_, err = w.Write(b)
		}
		return err
	}); err != nil {
		return err
	}
	bar.start(stderr, "flights", progressDelay)
	res, err := e.Execute(ctx, plan, runOpts...)
	bar.Stop()
	if err != nil {
		return err
	}
	defer res.Close()
	return finishFlights(flightsRun{stdout: stdout, stderr: stderr, f: f, format: format, p: p, res: res,
		plan: plan, src: src, file: file, backend: backend, setup: setup, files: files})
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

// flightsRun is what a finished flights run reports from.
type flightsRun struct {
	stdout, stderr io.Writer
	f              flightsFlags
	format         string
	p              *flights.Pipeline
	res            *exec.Result
	plan           *exec.Plan
	src            kvio.Source
	file           *kvio.File
	backend        *lease.Backend
	setup          *runSetup
	files          [6]*outputFile
}

// finishFlights prints the result table (or the run's JSON), the
// summaries, writes the output files, each whether or not the others could
// be, and returns errLaunchesFailed (after the problems) when the run had
// failures.
func finishFlights(x flightsRun) error {
	stdout, stderr, f, p, res, plan, src, file, backend, setup := x.stdout, x.stderr, x.f, x.p, x.res, x.plan, x.src, x.file, x.backend, x.setup
	format := x.format
	outFile, traceFile, reportFile, metricsFile, errorsFile := x.files[0], x.files[2], x.files[3], x.files[4], x.files[5]
	rep := res.Report
	table, readErr := p.Result(res)
	withNames := f.airports != "" && table != nil && table.NamesErr == nil
	if table != nil && !f.jsonOut {
		if err := flights.WriteTable(stdout, table.Rows, p.Key, withNames); err != nil {
			return err
		}
	}
	var nrows, skippedRows int64
	for i := range src.NumParts() {
		nrows += src.PartRows(i)
	}
	for _, i := range p.Skipped {
		skippedRows += src.PartRows(i)
	}
	if f.jsonOut {
		if err := writeRunJSON(stdout, src.Name(), nrows, len(p.Partitions), table, readErr, rep); err != nil {
			return err
		}
	}
	backend.SetProcessConfig("kvio", file.Describe()) // what the input file used in the run
	if !f.quiet {
		fmt.Fprintln(stderr, runLine(src.Name(), nrows, skippedRows, len(p.Partitions), len(p.Skipped), src.NumParts(), rep))
		printDevices(stderr, setup, plan, rep)
		fmt.Fprintln(stderr, file.Describe())
	}

	// The files: each written whether or not the others could be.
	werr := errors.Join(
		traceFile.commit(func(w io.Writer) error { return exec.WriteTrace(w, plan, rep) }),
		reportFile.commit(func(w io.Writer) error { return writeIndentedJSON(w, rep) }),
		metricsFile.commit(func(w io.Writer) error { return writeIndentedJSON(w, backend.MetricsSnapshot()) }),
		errorsFile.commit(func(w io.Writer) error { return writeFailuresDOT(w, res) }),
		commitResult(outFile, format, table, withNames, len(p.Partitions), nrows))

	if rep.Err() == nil && readErr == nil && len(table.Lost) == 0 && table.NamesErr == nil {
		return werr
	}
	printProblems(stderr, rep, table, readErr, len(p.Partitions), nrows)
	if outFile != nil && table == nil {
		fmt.Fprintf(stderr, "--out %s: not written (no result); the file is left as it was\n", f.out)
	}
	if werr != nil {
		return werr
	}
	return errLaunchesFailed
}

// openFlightsInput opens --input, or the embedded sample without one.
func openFlightsInput(input string) (*kvio.File, error) {
	if input == "" {
		return flights.Sample()
	}
	return kvio.Open(input)
}

// buildFlights builds the pipeline over src: a partition per stream of
// every device, filter and partial on the OpenCL device when the run has
// one, airport names from --airports, and the --fail faults injected.
func buildFlights(src kvio.Source, f flightsFlags, setup *runSetup, faults []fault) (*flights.Pipeline, error) {
	devs := setup.devs
	parts := 0
	for _, d := range devs {
		parts += d.NumStreams()
	}
	opts := flights.Options{MinDelay: f.minDelay, TopK: f.top, Partitions: parts, OpenCL: setup.openCL}
	if setup.openCL {
		id := devs[len(devs)-1].ID()
		opts.Device = &id // filter and partial on the OpenCL device
	}
	if f.airports != "" {
		path := f.airports
		if _, err := os.Stat(path); err != nil {
			return nil, fmt.Errorf("--airports: %w", err)
		}
		opts.Airports = func() (io.ReadCloser, error) { return os.Open(path) }
	}
	p, err := flights.Build(src, opts)
	if err != nil {
		return nil, err
	}
	for _, x := range faults {
		if err := p.Graph.InjectFailure(x.kernel, x.panic); err != nil {
			return nil, usagef("--fail %s: %w", x.spec, err)
		}
	}
	return p, nil
}

// addAll adds the run's output files, in the order --out, --dot, --trace,
// --report, --metrics, --errors-dot (nil for a flag not given).
func (o *outputs) addAll(f flightsFlags) ([6]*outputFile, error) {
	var files [6]*outputFile
	for i, x := range []struct{ flag, path string }{
		{"--out", f.out}, {"--dot", f.dot}, {"--trace", f.trace},
		{"--report", f.report}, {"--metrics", f.metrics}, {"--errors-dot", f.errorsDot},
	} {
		var err error
		if files[i], err = o.add(x.flag, x.path); err != nil {
			return files, err
		}
	}
	return files, nil
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

// writeFailuresDOT writes the run's error graph as DOT.
func writeFailuresDOT(w io.Writer, res *exec.Result) error {
	b, err := res.Failures().MarshalDOT()
	if err == nil {
		_, err = w.Write(append(b, '\n'))
	}
	return err
}

// commitResult writes the result table to --out (nothing without --out,
// or without a table).
func commitResult(out *outputFile, format string, table *flights.Table, withNames bool, parts int, nrows int64) error {
	if out == nil || table == nil {
		return nil
	}
	return out.commit(func(w io.Writer) error { return writeResult(w, format, table, withNames, parts, nrows) })
}

// lossSpec is what --lose-device (flag, as given) asks for: simulated GPU
// dev reports its loss after the fraction after (0–1) of its own launches
// (sim.WithLoss).
type lossSpec struct {
	flag  string
	dev   topology.DeviceID
	after float64
}

// parseLoss parses --lose-device DEVICE@P% (or DEVICE@F with F a fraction
// 0–1); every error is a usage error that says what to write.
func parseLoss(s string) (lossSpec, error) {
	dev, at, ok := strings.Cut(s, "@")
	if !ok {
		return lossSpec{}, usagef("--lose-device %s: want DEVICE@PERCENT, e.g. gpu3@50%%", s)
	}
	id, err := topology.ParseDeviceID(dev)
	if err != nil {
		return lossSpec{}, usagef("--lose-device %s: %w", s, err)
	}
	pct, isPct := strings.CutSuffix(at, "%")
	f, err := strconv.ParseFloat(pct, 64)
	if !isPct && err == nil && f > 1 && f <= 100 {
		return lossSpec{}, usagef("--lose-device %s: the point %s has no %%: write %s@%s%% (a percentage of the launches) or a fraction 0–1", s, at, dev, at)
	}
	if isPct {
		f /= 100
	}
	if err != nil || math.IsNaN(f) || f < 0 || f > 1 {
		return lossSpec{}, usagef("--lose-device %s: the point must be 0–100%% of the device's launches", s)
	}
	return lossSpec{flag: s, dev: id, after: f}, nil
}

// runLine is the run summary's first line: input, partitions, source
// parts not read (skipped of nsrc, holding skippedRows of the nrows rows,
// ruled out by their statistics), launches (and those lost with a device
// and redone), streams, devices used, waits, wall time and the rate of
// the rows read.
func runLine(input string, nrows, skippedRows int64, parts, skipped, nsrc int, rep *exec.Report) string {
	launches := plural(rep.NumLaunches(), "launch")
	if n := rep.Count(exec.StatusLost); n > 0 {
		launches += fmt.Sprintf(" (%d lost with %s and redone)", n, *rep.Lost)
	}
	rate := 0.0
	if rep.Wall > 0 {
		rate = float64(nrows-skippedRows) / rep.Wall.Seconds() / 1e6
	}
	partitions := plural(parts, "partition")
	if skipped > 0 {
		partitions += fmt.Sprintf(" (%d of %d source parts, %d rows, not read: their delay statistics rule out every row)", skipped, nsrc, skippedRows)
	}
	return fmt.Sprintf("%s: %d rows in %s, %s on %s of %s, %s, %s (%.1f M rows/s)",
		input, nrows, partitions, launches, streamsLabel(rep.Streams),
		devicesLabel(rep.DevicesUsed()), plural(rep.Waits, "event wait"), fmtDuration(rep.Wall), rate)
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
			fmt.Fprintf(w, "  %s: %s (failure %s): %s\n", l.Kernel, l.Status, l.Failure, firstLine(l.Err))
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
		return firstLine(err)
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

// partialNote is the line that marks a partial result (partitions lost,
// or airport names missing), or "" for a complete one.
func partialNote(table *flights.Table, parts int, nrows int64) string {
	var notes []string
	if len(table.Lost) > 0 {
		var lost int64
		for _, l := range table.Lost {
			lost += l.Rows
		}
		notes = append(notes, fmt.Sprintf("%d of %d partitions lost (%d of %d input rows not counted)", len(table.Lost), parts, lost, nrows))
	}
	if table.NamesErr != nil {
		notes = append(notes, "no airport names or cities (airports.csv could not be read)")
	}
	if len(notes) == 0 {
		return ""
	}
	return "PARTIAL RESULT: " + strings.Join(notes, "; ")
}

// writeResult writes the --out file. A partial result is marked in the
// file itself: a first line "# PARTIAL RESULT: …" in CSV (read it with a
// reader that skips # comments, such as Go's csv.Reader with Comment
// '#'), and in JSON, which is always {"partial", "lost", "names_error",
// "rows"}, "partial": true with the lost partitions (numbers, see
// lostPartition) or why the names are missing.
func writeResult(w io.Writer, format string, table *flights.Table, withNames bool, parts int, nrows int64) error {
	note := partialNote(table, parts, nrows)
	if format == "csv" {
		if note != "" {
			if _, err := fmt.Fprintf(w, "# %s\n", note); err != nil {
				return err
			}
		}
		return flights.WriteCSV(w, table.Rows, withNames)
	}
	doc := struct {
		Partial    bool            `json:"partial"`
		Lost       []lostPartition `json:"lost"`
		NamesError string          `json:"names_error,omitempty"`
		Rows       []flights.Row   `json:"rows"`
	}{Partial: note != "", Lost: lostPartitions(table), NamesError: firstLine(table.NamesErr), Rows: table.Rows}
	if doc.Rows == nil {
		doc.Rows = []flights.Row{}
	}
	return writeIndentedJSON(w, doc)
}

// writeIndentedJSON writes v as indented JSON and a newline.
func writeIndentedJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
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
