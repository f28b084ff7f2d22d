// Package flights is streamdag's main example pipeline: US flight delays
// grouped by origin airport (or by hour of day), as a DAG of kernels.
//
// The DAG, with P partitions:
//
//	source[s] ─▶ filter[p] ─▶ partial[p] ─┐
//	   (one per row group or batch range)  ├─▶ merge ─▶ sort ─▶ topk ─▶ [join ◀─ airports] ─▶ write
//	source[s] ─▶ filter[q] ─▶ partial[q] ─┘
//
// source[s] reads one Parquet row group, or a range of Arrow IPC record
// batches, through kvio: only the columns the pipeline uses (delay and the
// key column, Pipeline.Columns), through kvio.Select, so a Parquet file's
// other columns are neither read nor decoded. A Parquet row group whose
// delay statistics prove that no row has delay > MinDelay is not read
// (Pipeline.Skipped; kvio.IntRanger), and an origin column the file
// stores dictionary-encoded is read as a dictionary array
// (Pipeline.Dictionary; kvio.Dictionary), which partial[p] groups by
// index, decoding each distinct code once per batch; source[s] keeps a
// batch's indices as uint8 (or uint16) where they fit, a byte a row. filter[p] selects the rows of its row range with
// delay > MinDelay, as a bitmap (a bit a row). partial[p] groups them by
// key: count, delay sum and delay max. merge adds the partial groups up, sort orders them by count
// descending then key ascending, topk keeps the first TopK (all when 0),
// join adds each airport's name and city from airports.csv when it is
// given (a second source; when it cannot be read, the rows go on without
// names and Table.NamesErr says why), and write hands the rows to
// WithSink.
// A source with a single large batch is split into several row ranges, so
// its partitions run on several streams even then. Otherwise the sources
// form P lanes (source s on lane s%P): each source waits for the partials
// of the previous source of its lane (an optional read, so a failure
// there loses only that partition), which keeps a lane on one stream in
// the order source, filter, partial, next source.
//
// With WithOpenCL the partitions run as the device graph instead:
// columns[p] copies the partition's delay values and one int32 group code
// per row into raw buffers, filter[p] and partial[p] run over those
// bytes in Go or as OpenCL C on an OpenCL device (the group-by in
// per-work-group tables of count, sum and max), and decode[p] turns the
// tables into the groups merge reads; the result is the same, byte for
// byte (see device.go).
//
// Kernel names are those above with the partition index in brackets
// ("filter[3]"), which is what `streamdag run flights --fail` takes.
//
// Run runs the pipeline over a source the caller opened. Job is the whole
// job `streamdag run flights` runs: the input opened through kvio (the
// embedded Sample without one), faults injected, the plan, the run, and
// the result, plan, trace, report, metrics and error graph files, each
// written whole or not at all; the command only maps its flags to a Job
// and its devices to an executor, and prints the Output.
//
// Key: the "origin" column (utf8 or large_utf8) when the file has one,
// else the hour of day, floor of the "time" column (float32 or float64),
// as an integer 0–23; a time outside [0, 24) or NaN fails its partition
// (partial[p], or columns[p] with WithOpenCL), naming the row and the
// value. delay may be any signed integer column. Rows whose delay or key
// is null are left out.
package flights
