// Package kvio reads files into memory the way NVIDIA KvikIO does, and loads
// Arrow IPC and Parquet files into Arrow record batches.
//
// # Reads
//
// A [File] wraps an operating-system file ([Open]) or any io.ReaderAt
// ([NewFile]). [File.ReadAt] and [File.ReadAtContext] run a read of at most
// the task size (default 4 MiB, [DefaultTaskSizeBytes]) inline on the caller;
// a larger read is split into task-size chunks that run, in file order, on a
// pool of at most [Options.NumThreads] goroutines shared by every read of the
// File. Each chunk repeats the underlying ReadAt until its range is full, and
// a read that meets the end of the file fails with a [*ShortReadError] that
// names the file, the offset and the byte counts.
//
// # Loaders
//
// A [Source] is a file cut into parts: the row groups of a Parquet file
// ([OpenParquet], through arrow-go's pqarrow) or the record batches of an
// Arrow IPC file ([OpenIPC]); [OpenAuto] tells them apart by their magic
// bytes. [Source.ReadPart] decodes one part into an arrow.RecordBatch whose
// memory comes from the caller's allocator, and may be called from several
// goroutines at once; [ReadAll] reads every part that way. The bytes of a part
// come through the File, so a large column chunk is itself read in parallel.
// Strings load as Arrow gives them, utf8 or large_utf8.
//
// Empty, truncated and corrupt files fail with an error naming the file (and
// the part, for a part), never a panic: panics raised by arrow-go on corrupt
// input are recovered and turned into errors.
//
// # Layer and concurrency
//
// kvio is layer 3 of streamdag (see design.md): it may import buffers, gpu and
// dag, and imports none of them today. Every exported method of File and of
// the Sources is safe for concurrent use. No goroutine outlives the call that
// started it. Batches returned by ReadPart and ReadAll belong to the caller,
// who releases them; they stay valid after the Source and the File close.
package kvio
