// Package arrow is a runnable example of a pipeline over Arrow record
// batches read from a Parquet file with kvio.
//
// The file's two row groups are read into two typed record-batch buffers
// (dag.AddValue[arrow.RecordBatch]), filtered and aggregated by one kernel
// each on a CPU device of two streams, and merged; the result is read with
// exec.Get. The pipeline then runs again with a failure injected into one
// partition's kernel, and the read error is walked back to its root. The
// example is Example in the package's tests (go test -run Example -v
// ./examples/arrow/), and docs/arrow.md holds it as a complete program;
// the package itself has no API. Its input, testdata/flights.parquet, is
// the first 2000 rows of the embedded flights sample (see
// examples/flights/data), in two row groups of 1000 rows.
package arrow
