// Package shard runs streamdag pipelines as shards on Apache Beam: the
// input is split into shards (ranges of a file's parts, or of its rows
// when it has fewer parts than shards: [Range]), each shard's
// graph runs as an ordinary streamdag DAG inside a Beam DoFn on a worker,
// and Beam moves the shards' partial results between stages and merges
// them. It lives in a module of its own, so that the streamdag module
// never depends on Beam.
//
// # Graphs cross processes as descriptions
//
// Kernels are Go closures, which no runner can send to a worker. A shard
// therefore travels as a [Task]: the name of a [Template] registered in
// every process of the job (Register, from an init function) and its
// parameters as JSON. The worker looks the template up and rebuilds the
// graph from the parameters. The flights job registers "flights.partial"
// (FlightsTemplate): one shard's filter and partial group-by over its
// Range of the input (flights.BuildParts with flights.WithRows).
//
// # Partials cross stages as Arrow IPC
//
// A shard's partial aggregates are a [Partial], whose Beam coder writes
// them as an Arrow IPC stream (EncodePartial, DecodePartial), so what
// crosses a stage is Arrow bytes, never a Go value's encoding. The merge
// is a Beam combine per group key (CombinePerKey) whose accumulator keeps
// one row per shard id, and the finish keeps one report per shard (its
// latest attempt's): a shard whose output reached them from more than
// one attempt is counted once.
//
// # One backend per process
//
// Each worker process has one lease.Backend (a process may hold only
// one); the DoFns share it through a reference-counted handle
// (OpenBackend, opened in Setup and released in Teardown): the first
// open creates it, the last release closes it. Shards run on the CPU
// device it hands out (lease.Backend.Acquire with no GPU configured).
// Beam's Go harness does not call Teardown when a loopback worker stops,
// so under Prism's loopback workers the backend stays open until the
// process exits, shared by every later run's DoFns.
//
// # Failures
//
// A failed kernel in a shard does not fail the Beam job: the shard's
// lost partitions come back as [Failure] records (shard, partition,
// parts and rows, the kernel, the root error's text and the chain), and
// the result is marked partial as `streamdag run flights` marks it.
//
// A failure that stops a shard (its template's error: the input cannot
// be opened or read, the device cannot be acquired) fails that attempt
// only. Attempt n of every shard is a stage of the pipeline
// (Config.Attempts stages); a failed attempt sends its Task, with the
// error added to Task.Failed, to the next stage, through a Reshuffle so
// that the next attempt runs in a bundle of its own. The pipeline stays
// bounded: a batch job on every runner. When the last attempt fails, the
// job fails with an error naming the shard, the attempts and the last
// error (a *JobError). A fault naming no kernel of its shard's graph is
// an error before the job starts (a *flights.FaultError).
//
// Layer: above examples/flights and the streamdag packages it uses; only
// commands and tests import it.
package shard
