// Package kvio reads files into memory the way NVIDIA KvikIO does, and loads
// Arrow IPC and Parquet files into Arrow record batches.
//
// # Reads and writes
//
// A [File] wraps an operating-system file ([Open], [OpenFile]) or any
// io.ReaderAt ([NewFile]). Its settings are KvikIO's, with KvikIO's names,
// meanings and defaults ([Options], [Settings]): compat mode (auto), thread
// count (1), task size (4 MiB), GDS threshold (1 MiB), bounce buffer
// (16 MiB), each also read from its KVIKIO_* environment variable; an
// invalid value is an error naming the variable and the value. [Describe]
// states the settings in force in one line, and [Mode] what the compat mode
// resolves to: libcufile is looked up at run time with purego (no cgo), and
// while kvio has no cuFile path, auto resolves to POSIX and says why, and
// compat mode off fails ([ErrNoCuFile]).
//
// [File.ReadAsync] and [File.WriteAsync] return a [Future] whose Wait(ctx)
// gives the byte count and error; [File.ReadAt], [File.ReadAtContext] and
// [File.WriteAt] wait for one. A request of at most the GDS threshold runs
// inline on the caller; a larger one is split into task-size chunks that
// run, in file order, on a pool of [Options.NumThreads] goroutines shared by
// every request of the File, and on the goroutine waiting for it. Where the
// page cache can be asked first (Linux), a warm read uses no more
// goroutines than there are CPUs to copy with, and a cold one up to
// NumThreads (see [Options.NumThreads]). Each chunk
// repeats the underlying transfer until its range is done, retrying EINTR;
// a read that meets the end of the file fails with a [*ShortReadError] that
// names the file, the offset and the byte counts. Cancellation skips the
// chunks not yet started and waits for the running ones. With
// [WithDirectIO], the page-aligned middle of a chunk goes through O_DIRECT,
// head and tail buffered, and a file system that refuses O_DIRECT leaves the
// File buffered ([File.DirectIO]); [PageAllocator] and [AlignedBytes] give
// buffers aligned for it. A direct read stops at the end of the file as it
// is when the read runs (the size is checked before and after), so a file
// truncated after it was opened gives a ShortReadError, never zeros as
// data. [File.Describe] states what one File uses, direct I/O included,
// and [File.IOStats] counts the bytes it moved through O_DIRECT.
//
// # Loaders
//
// A [Source] is a file cut into parts: the row groups of a Parquet file
// ([OpenParquet]: flat number and dictionary string columns through kvio's
// page decoder, straight into Arrow buffers; the others through arrow-go's
// pqarrow) or the record batches of an
// Arrow IPC file ([OpenIPC]); [OpenAuto] tells them apart by their magic
// bytes. [Source.ReadPart] decodes one part into an arrow.RecordBatch whose
// memory comes from the caller's allocator, and may be called from several
// goroutines at once; [ReadAll] reads every part, in parallel. For Parquet,
// ReadPart decodes the columns of its row group in parallel, and ReadAll
// shares out column chunks rather than whole row groups, reading
// runs of row groups of one column with one reader and splitting the
// longest run when a goroutine runs out of work, so every goroutine stays
// busy to the end even when the file has few row groups. The bytes of a
// part come through the File, so a large column chunk is itself read in
// parallel.
// Strings load as Arrow gives them, utf8 or large_utf8.
//
// [WithColumns] projects columns at open, and [Select] gives a projected
// view of an open Source (Parquet columns left out are not read), for a
// pipeline that learns which columns it uses from the schema.
// [Dictionary] gives a view that reads the string columns a Parquet file
// stores dictionary-encoded as Arrow dictionary arrays, [Narrow] one that
// reads signed integer columns as the narrowest type their statistics
// allow, and a Parquet Source is an [IntRanger]: it states each row
// group's bounds of a signed integer column from the footer's statistics,
// so a pipeline can leave out row groups its filter rejects whole.
// [Column] reaches a column of a batch by name as its array type, with an
// error (not a panic) when the batch has no such column or another type.
// [WithBudget] charges the bytes ReadPart allocates to a buffers.Budget,
// and [WithMmap] decodes Arrow IPC files from a read-only mapping.
//
// # Damaged files
//
// What kvio finds fails with an error naming the file (and the part, for a
// part), never a panic: panics raised by arrow-go on corrupt input are
// recovered and turned into errors. It finds damage to the structure of a
// file: an empty or truncated file, a wrong magic, a footer, schema or
// message metadata that does not parse, lengths and offsets that point
// outside the file, a Parquet page header that does not parse or
// disagrees with its page. An Arrow IPC record batch is also checked as a
// whole before ReadPart returns it (arrow-go's array.ValidateFull):
// offsets of variable-length values within their buffers and in order,
// strings valid UTF-8, the null count recorded in the batch equal to the
// nulls in its validity bitmap.
//
// A changed value, in general, is not found. Arrow IPC carries no
// checksum; Parquet page CRCs are optional in the format, and arrow-go
// (v18.8.0) neither writes nor checks them. So a changed byte of a
// fixed-width value, of a string that stays valid UTF-8, or of a Parquet
// page uncompressed or compressed with a codec that has no checksum
// (Snappy, LZ4_RAW, Brotli) can load as a wrong value, without an error.
// A Parquet page compressed with gzip, or with zstd by a writer that adds
// zstd's content checksum (arrow-go does), is checked by its
// decompression: a changed byte either fails the read or leaves the values
// as written. Where values must be trusted, keep a checksum of the file
// beside it.
//
// # Layer and concurrency
//
// kvio is layer 3 of streamdag, beside exec and placement: it may import
// buffers, gpu and dag, and imports buffers. Every exported method of File,
// Future and the Sources is safe for concurrent use. Every goroutine kvio
// starts belongs to a Future and ends before the Future is done; File.Close
// waits for the Futures in flight, Source.Close for the ReadPart calls.
// Batches returned by ReadPart and ReadAll belong to the caller, who
// releases them; they stay valid after the Source and the File close.
package kvio
