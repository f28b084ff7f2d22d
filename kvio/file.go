package kvio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"golang.org/x/sync/errgroup"
	"golang.org/x/sync/semaphore"
)

// ErrClosed is returned, wrapped with the file name, by reads on a [File]
// after [File.Close].
var ErrClosed = errors.New("kvio: file closed")

// ShortReadError reports that a read reached the end of the file before it
// filled the caller's buffer.
type ShortReadError struct {
	File   string // name of the file, as File.Name returns it
	Offset int64  // offset in bytes of the request
	Want   int64  // bytes requested: len(p)
	Got    int64  // bytes read in total before end of file
}

// Error returns a message such as
// "kvio: read flights.parquet at 4194304: short read 1000 of 4096 bytes".
func (e *ShortReadError) Error() string {
	return fmt.Sprintf("kvio: read %s at %d: short read %d of %d bytes", e.File, e.Offset, e.Got, e.Want)
}

// Unwrap returns io.ErrUnexpectedEOF, so errors.Is(err, io.ErrUnexpectedEOF)
// holds for a short read.
func (e *ShortReadError) Unwrap() error { return io.ErrUnexpectedEOF }

// File reads one file, or any io.ReaderAt, KvikIO-style: a large read is
// split into task-size chunks that run in parallel on a pool of at most
// Options.NumThreads goroutines shared by all reads of the File.
//
// A File is safe for concurrent use by several goroutines. Its methods start
// no goroutine that outlives the call.
type File struct {
	name string
	r    io.ReaderAt
	own  *os.File // the file Open opened, closed by Close; nil for NewFile
	size int64
	opts Options
	sem  *semaphore.Weighted // slots for chunk reads, Options.NumThreads of them

	mu     sync.RWMutex // held for reading by every read, for writing by Close
	closed bool
}

var _ io.ReaderAt = (*File)(nil)

// Open opens the file at path for reading. Name returns path as given; Size
// is the size of the file when opened. It returns an error from an invalid
// Option (opening nothing) or from os.Open and Stat. Close the File to close
// the operating-system file.
func Open(path string, opts ...Option) (*File, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	osf, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("kvio: %w", err)
	}
	st, err := osf.Stat()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kvio: %w", err), osf.Close())
	}
	f := newFile(path, osf, st.Size(), o)
	f.own = osf
	return f, nil
}

// NewFile returns a File that reads the first sizeBytes bytes of r, which
// must be safe for concurrent ReadAt calls (os.File and bytes.Reader are).
// name identifies r in errors. The File does not own r: Close leaves it
// open. It returns an error for a negative sizeBytes or an invalid Option.
func NewFile(name string, r io.ReaderAt, sizeBytes int64, opts ...Option) (*File, error) {
	if sizeBytes < 0 {
		return nil, fmt.Errorf("kvio: NewFile %s: negative size %d bytes", name, sizeBytes)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	return newFile(name, r, sizeBytes, o), nil
}

func newFile(name string, r io.ReaderAt, size int64, o Options) *File {
	return &File{name: name, r: r, size: size, opts: o, sem: semaphore.NewWeighted(int64(o.NumThreads))}
}

// Name returns the name the File was opened with.
func (f *File) Name() string { return f.name }

// Size returns the size of the file in bytes, as known when it was opened;
// reads end there.
func (f *File) Size() int64 { return f.size }

// Options returns the settings in effect, defaults filled in.
func (f *File) Options() Options { return f.opts }

// Close waits for reads in flight, then closes the operating-system file if
// Open opened it. Later reads return an error wrapping ErrClosed. Close is
// idempotent: calls after the first return nil.
func (f *File) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return nil
	}
	f.closed = true
	if f.own != nil {
		return f.own.Close()
	}
	return nil
}

// ReadAt reads len(p) bytes at offset off; it is ReadAtContext without
// cancellation. It implements io.ReaderAt.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return f.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext reads len(p) bytes into p starting at byte offset off.
//
// A read of at most Options.TaskSizeBytes runs inline on the caller. A larger
// one is split into task-size chunks, issued in file order onto the File's
// pool of Options.NumThreads workers; each chunk repeats the underlying
// ReadAt until its range is full (the Go runtime already retries EINTR).
// It returns when every chunk it started has finished. Only [0, Size) is
// read: bytes past Size count as past the end of the file.
//
// n is the number of bytes read contiguously from off. When n < len(p) the
// error is non-nil: a *ShortReadError when the file ends before off+len(p);
// an error naming the file and offset that wraps the underlying error (the
// first one, after which no new chunk starts); or, when ctx is done, one
// wrapping ctx.Err(): chunks not yet started are skipped, running ones are
// waited for. A read that has finished every chunk returns nil even if ctx
// is done by then.
func (f *File) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("kvio: read %s at %d: negative offset", f.name, off)
	}
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.closed {
		return 0, fmt.Errorf("kvio: read %s: %w", f.name, ErrClosed)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("kvio: read %s at %d: %w", f.name, off, err)
	}
	want := len(p)
	p = p[:min(int64(want), max(f.size-off, 0))]
	var (
		n, got int // bytes read contiguously from off, and in all
		err    error
	)
	if int64(len(p)) <= f.opts.TaskSizeBytes {
		n, err = f.readFull(p, off)
		got = n
	} else {
		n, got, err = f.readChunks(ctx, p, off)
	}
	if err == nil && n < want {
		err = &ShortReadError{File: f.name, Offset: off, Want: int64(want), Got: int64(got)}
	}
	return n, err
}

// readChunks is the parallel path of ReadAtContext. It returns the bytes
// read contiguously from off, the bytes read in all, and the first error.
func (f *File) readChunks(ctx context.Context, p []byte, off int64) (n, got int, err error) {
	task := int(f.opts.TaskSizeBytes)
	counts := make([]int, (len(p)+task-1)/task) // bytes read by each chunk
	g, gctx := errgroup.WithContext(ctx)
	started := 0
	for i := range counts {
		if f.sem.Acquire(gctx, 1) != nil {
			break
		}
		if gctx.Err() != nil { // Acquire may succeed when gctx is done
			f.sem.Release(1)
			break
		}
		started++
		start := i * task
		chunk := p[start:min(start+task, len(p))]
		g.Go(func() error {
			defer f.sem.Release(1)
			var err error
			counts[i], err = f.readFull(chunk, off+int64(start))
			return err
		})
	}
	err = g.Wait()
	if err == nil && started < len(counts) {
		err = fmt.Errorf("kvio: read %s at %d: %w", f.name, off, ctx.Err())
	}

	contiguous := true
	for i, c := range counts {
		got += c
		if contiguous {
			n += c
			contiguous = c == min(task, len(p)-i*task)
		}
	}
	return n, got, err
}

// readFull repeats the underlying ReadAt until p is full or the file ends.
// It returns fewer than len(p) bytes and a nil error at end of file.
func (f *File) readFull(p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		m, err := f.r.ReadAt(p[n:], off+int64(n))
		n += m
		switch {
		case n == len(p), errors.Is(err, io.EOF):
			return n, nil
		case err != nil:
			return n, fmt.Errorf("kvio: read %s at %d: %w", f.name, off+int64(n), err)
		case m == 0:
			return n, fmt.Errorf("kvio: read %s at %d: %w", f.name, off+int64(n), io.ErrNoProgress)
		}
	}
	return n, nil
}
