package kvio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sync/semaphore"
)

// ErrClosed is returned, wrapped with the file name, by requests on a [File]
// after [File.Close].
var ErrClosed = errors.New("kvio: file closed")

// ErrNotWritable is returned, wrapped with the file name, by writes on a
// File whose reader is not an io.WriterAt.
var ErrNotWritable = errors.New("kvio: file not writable")

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

// File reads and writes one file, or any io.ReaderAt, KvikIO-style: a
// request of more than Options.GDSThresholdBytes is split into task-size
// chunks that run in file order on a pool of Options.NumThreads goroutines
// shared by all requests on the File (and on the goroutine waiting for the
// request; see Options.NumThreads).
//
// A File is safe for concurrent use by several goroutines. Every goroutine it
// starts belongs to a request ([Future]) and ends before the Future is done;
// Close waits for every request in flight.
type File struct {
	name   string
	r      io.ReaderAt
	w      io.WriterAt // nil when r is not an io.WriterAt
	own    *os.File    // the file Open or OpenFile opened, closed by Close
	direct *directFile // O_DIRECT twin of own; nil when not asked for or refused
	cached *cachedFile // reads of own's cached pages only; nil where unsupported
	why    string      // why direct is nil although asked for, or ""
	size   atomic.Int64
	stats  [2]ioCounts // by opKind
	opts   Options
	mode   Resolution
	sem    *semaphore.Weighted // the pool: Options.NumThreads slots

	mu       sync.Mutex // guards closed and the Add of inflight
	closed   bool
	inflight sync.WaitGroup
}

var (
	_ io.ReaderAt = (*File)(nil)
	_ io.WriterAt = (*File)(nil)
)

// Open opens the file at path for reading; it is OpenFile(path, os.O_RDONLY,
// 0, opts...).
func Open(path string, opts ...Option) (*File, error) {
	return OpenFile(path, os.O_RDONLY, 0, opts...)
}

// OpenFile opens the file at path with os.OpenFile's flag and perm. Name
// returns path as given; Size is the size of the file when opened, and grows
// with writes past it. It returns an error, opening nothing, for an invalid
// Option or KVIKIO_* variable, compat mode off (ErrNoCuFile), or a path
// that is not a regular file (a directory, a named pipe, a socket or a
// device: "kvio: open PATH: a named pipe, want a regular file"), checked
// before it is opened; or the error of os.OpenFile or Stat. With
// Options.DirectIORead or DirectIOWrite it also opens the file with
// O_DIRECT; a file system that refuses that (EINVAL) leaves the File
// buffered, as File.DirectIO reports. Close the File to close the
// operating-system files.
func OpenFile(path string, flag int, perm os.FileMode, opts ...Option) (*File, error) {
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	mode, err := Resolve(o.CompatMode)
	if err != nil {
		return nil, fmt.Errorf("kvio: open %s: %w", path, err)
	}
	// Refuse what is not a regular file before opening it: the open of a
	// named pipe blocks until its other end is opened.
	if st, err := os.Stat(path); err == nil && !st.Mode().IsRegular() {
		return nil, irregularError(path, st.Mode())
	}
	osf, err := os.OpenFile(path, flag, perm)
	if err != nil {
		return nil, fmt.Errorf("kvio: %w", err)
	}
	st, err := osf.Stat()
	if err != nil {
		return nil, errors.Join(fmt.Errorf("kvio: %w", err), osf.Close())
	}
	if !st.Mode().IsRegular() { // replaced since the Stat above
		return nil, errors.Join(irregularError(path, st.Mode()), osf.Close())
	}
	f := newFile(path, osf, st.Size(), o)
	f.own, f.mode = osf, mode
	if flag&(os.O_RDONLY|os.O_WRONLY|os.O_RDWR) != os.O_WRONLY {
		f.cached = newCachedFile(int(osf.Fd()))
	}
	if o.DirectIORead || o.DirectIOWrite {
		// O_CREATE and O_TRUNC were done by the first open.
		f.direct, f.why = openDirect(path, flag&^(os.O_CREATE|os.O_TRUNC|os.O_EXCL))
	}
	return f, nil
}

// NewFile returns a File over the first sizeBytes bytes of r, which must be
// safe for concurrent ReadAt calls (os.File and bytes.Reader are). When r is
// also an io.WriterAt the File can write (safe for concurrent WriteAt calls
// on distinct ranges, as os.File is). name identifies r in errors. The File
// does not own r: Close leaves it open. Compat mode and direct I/O do not
// apply. It returns an error for a negative sizeBytes or an invalid Option
// or KVIKIO_* variable.
func NewFile(name string, r io.ReaderAt, sizeBytes int64, opts ...Option) (*File, error) {
	if sizeBytes < 0 {
		return nil, fmt.Errorf("kvio: NewFile %s: negative size %d bytes", name, sizeBytes)
	}
	o, err := newOptions(opts)
	if err != nil {
		return nil, err
	}
	f := newFile(name, r, sizeBytes, o)
	f.mode = Resolution{Mode: o.CompatMode, Reason: "not an operating-system file"}
	if o.DirectIORead || o.DirectIOWrite {
		f.why = "not an operating-system file"
	}
	return f, nil
}

// irregularError is OpenFile's error for a path that is not a regular
// file, such as "kvio: open in: a named pipe, want a regular file".
func irregularError(path string, mode os.FileMode) error {
	what := "an irregular file"
	switch {
	case mode.IsDir():
		what = "a directory"
	case mode&os.ModeNamedPipe != 0:
		what = "a named pipe"
	case mode&os.ModeSocket != 0:
		what = "a socket"
	case mode&os.ModeDevice != 0:
		what = "a device"
	}
	return fmt.Errorf("kvio: open %s: %s, want a regular file", path, what)
}

func newFile(name string, r io.ReaderAt, size int64, o Options) *File {
	f := &File{name: name, r: r, opts: o, sem: semaphore.NewWeighted(int64(o.NumThreads))}
	f.w, _ = r.(io.WriterAt)
	f.size.Store(size)
	return f
}

// Name returns the name the File was opened with.
func (f *File) Name() string { return f.name }

// Size returns the size of the file in bytes: as known when it was opened,
// grown by the File's own writes past it. Reads end there.
func (f *File) Size() int64 { return f.size.Load() }

// Options returns the settings in effect: defaults, environment and options.
func (f *File) Options() Options { return f.opts }

// Mode returns what the File's compat mode resolved to when it was opened.
func (f *File) Mode() Resolution { return f.mode }

// DirectIO reports whether the aligned middle of large requests goes
// through O_DIRECT now, and when it does not although Options asked for it,
// why: the open was refused ("O_DIRECT refused: invalid argument", as some
// file systems answer), a direct request failed with EINVAL and the File
// fell back to buffered I/O for good, or the File came from NewFile ("not
// an operating-system file"). See IOStats for the bytes it moved.
func (f *File) DirectIO() (on bool, why string) {
	if f.direct == nil {
		return false, f.why
	}
	if why := f.direct.disabled.Load(); why != nil {
		return false, *why
	}
	return true, ""
}

// ioCounts counts the bytes of one direction of a File's I/O.
type ioCounts struct {
	all    atomic.Int64 // transferred by requests, whatever the path
	direct atomic.Int64 // of all, those through O_DIRECT
}

// IOStats counts the bytes a File has transferred since it was opened, by
// the path they took. Bytes count once they are transferred, also by
// requests that fail later.
type IOStats struct {
	ReadBytes        int64 // bytes read by requests, however they were read
	DirectReadBytes  int64 // of ReadBytes, those read through O_DIRECT
	WriteBytes       int64 // bytes written by requests, however they were written
	DirectWriteBytes int64 // of WriteBytes, those written through O_DIRECT
}

// IOStats returns the bytes f has transferred so far, and how many of
// them went through O_DIRECT. Safe for concurrent use, also after Close;
// with requests in flight the counts are a moment's view.
func (f *File) IOStats() IOStats {
	return IOStats{
		ReadBytes: f.stats[opRead].all.Load(), DirectReadBytes: f.stats[opRead].direct.Load(),
		WriteBytes: f.stats[opWrite].all.Load(), DirectWriteBytes: f.stats[opWrite].direct.Load(),
	}
}

// Describe returns one line stating what f uses: its name, the settings
// in force (compat mode as resolved when f was opened) and, in place of
// the direct I/O setting, what direct I/O really does for f, e.g.
//
//	kvio: data.arrow: compat mode auto → posix (libcufile not found), 1 thread, task 4 MiB, gds threshold 1 MiB, bounce buffer 16 MiB, direct I/O reads available (3 MiB of 3 MiB read through O_DIRECT)
//
// The last part is "direct I/O off" when not asked for; "direct I/O reads
// available (…)" (or writes, or reads and writes) while f has an O_DIRECT
// descriptor, with the bytes that went through it so far (only the
// page-aligned middle of a request into memory aligned like the offset
// does: see AlignedBytes); and "direct I/O reads unavailable (why)" when
// asked for but refused at open, stopped since (adding the bytes it moved
// until then), or not applicable (a File from NewFile). Safe for
// concurrent use, also after Close.
func (f *File) Describe() string {
	return "kvio: " + f.name + ": " + f.opts.describe(f.mode.String(), f.describeDirect())
}

// describeDirect states what direct I/O does for f; see Describe.
func (f *File) describeDirect() string {
	o, st := f.opts, f.IOStats()
	asked := map[string]string{"reads": "reads", "writes": "writes", "on": "reads and writes"}[o.directString()]
	if asked == "" {
		return "direct I/O off"
	}
	var moved []string
	if o.DirectIORead {
		moved = append(moved, fmt.Sprintf("%s of %s read", formatBytes(st.DirectReadBytes), formatBytes(st.ReadBytes)))
	}
	if o.DirectIOWrite {
		moved = append(moved, fmt.Sprintf("%s of %s written", formatBytes(st.DirectWriteBytes), formatBytes(st.WriteBytes)))
	}
	counts := strings.Join(moved, ", ") + " through O_DIRECT"
	on, why := f.DirectIO()
	switch {
	case on:
		return fmt.Sprintf("direct I/O %s available (%s)", asked, counts)
	case st.DirectReadBytes+st.DirectWriteBytes > 0:
		return fmt.Sprintf("direct I/O %s unavailable (%s; %s until then)", asked, why, counts)
	default:
		return fmt.Sprintf("direct I/O %s unavailable (%s)", asked, why)
	}
}

// Close waits for the requests in flight, then closes the operating-system
// files if Open or OpenFile opened them. Later requests fail with an error
// wrapping ErrClosed. Close is idempotent: calls after the first return nil.
func (f *File) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	f.mu.Unlock()
	f.inflight.Wait()
	var errs []error
	if f.direct != nil {
		errs = append(errs, f.direct.f.Close())
	}
	if f.own != nil {
		errs = append(errs, f.own.Close())
	}
	return errors.Join(errs...)
}

// ReadAt reads len(p) bytes at offset off; it is ReadAtContext without
// cancellation. It implements io.ReaderAt.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return f.ReadAtContext(context.Background(), p, off)
}

// ReadAtContext reads len(p) bytes into p starting at byte offset off, and
// returns when done: it is ReadAsync(ctx, p, off).Wait(ctx), without the
// Future when the read runs inline, with the same count and errors (a
// *ShortReadError past the end, ErrClosed after Close, ctx's cause).
func (f *File) ReadAtContext(ctx context.Context, p []byte, off int64) (int, error) {
	if int64(len(p)) <= f.opts.GDSThresholdBytes {
		if err := f.begin(ctx, opRead, off); err != nil {
			return 0, err
		}
		defer f.inflight.Done()
		return f.inline(opRead, p, off)
	}
	return f.ReadAsync(ctx, p, off).Wait(ctx)
}

// WriteAt writes len(p) bytes at offset off; it is WriteAsync(ctx,p,off)
// waited for without cancellation. It implements io.WriterAt.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	ctx := context.Background()
	return f.WriteAsync(ctx, p, off).Wait(ctx)
}

// ReadAsync starts reading len(p) bytes into p at byte offset off and
// returns its Future. Only [0, Size) is read: bytes past Size count as past
// the end of the file. p must not be touched until the Future is done.
//
// A read of at most Options.GDSThresholdBytes runs inline, before ReadAsync
// returns. A larger one is split into chunks of Options.TaskSizeBytes,
// claimed in file order by the File's pool and by goroutines in
// Future.Wait; each chunk repeats the underlying read until its range is
// full, retrying EINTR. The Future's result: n, the bytes read contiguously
// from off, and, when n < len(p), an error: a *ShortReadError (file,
// offset, wanted, got) when the file ends first; the first failure, naming
// the file and the offset, after which no new chunk starts; or, when ctx
// (or the ctx of a Wait) is done first, an error wrapping its cause: chunks
// not yet started are skipped, running ones are waited for. A read that
// has finished every chunk succeeds even if ctx is done by then.
// Reads on a closed File, or at a negative offset, fail at once.
func (f *File) ReadAsync(ctx context.Context, p []byte, off int64) *Future {
	return f.start(ctx, opRead, p, off)
}

// WriteAsync starts writing p at byte offset off and returns its Future;
// it splits, schedules and cancels like ReadAsync. p must not be touched
// until the Future is done. The Future's n is the bytes written
// contiguously from off; when n < len(p) its error names the file and the
// offset of the first failure, or wraps ErrNotWritable, ErrClosed or the
// context's cause. Writes past Size grow it.
func (f *File) WriteAsync(ctx context.Context, p []byte, off int64) *Future {
	return f.start(ctx, opWrite, p, off)
}

type opKind int

const (
	opRead opKind = iota
	opWrite
)

func (k opKind) String() string {
	if k == opWrite {
		return "write"
	}
	return "read"
}

// begin registers a request in flight, or returns why it cannot start.
// The caller calls f.inflight.Done when it ends.
func (f *File) begin(ctx context.Context, op opKind, off int64) error {
	if off < 0 {
		return fmt.Errorf("kvio: %s %s at %d: negative offset", op, f.name, off)
	}
	if op == opWrite && f.w == nil {
		return fmt.Errorf("kvio: write %s: %w", f.name, ErrNotWritable)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return fmt.Errorf("kvio: %s %s: %w", op, f.name, ErrClosed)
	}
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("kvio: %s %s at %d: %w", op, f.name, off, err)
	}
	f.inflight.Add(1)
	return nil
}

// inline performs a whole request on the calling goroutine.
func (f *File) inline(op opKind, p []byte, off int64) (int, error) {
	want := len(p)
	if op == opRead {
		p = p[:min(int64(want), max(f.Size()-off, 0))]
	}
	n, err := f.rw(op, p, off)
	f.stats[op].all.Add(int64(n))
	if err == nil && n < want {
		err = &ShortReadError{File: f.name, Offset: off, Want: int64(want), Got: int64(n)}
	}
	return n, err
}

// rw performs one chunk: the whole range, retrying partial transfers and
// EINTR; the aligned middle through O_DIRECT when enabled for op. A read
// returns fewer than len(p) bytes and a nil error at end of file.
func (f *File) rw(op opKind, p []byte, off int64) (int, error) {
	if d := f.direct; d != nil && (op == opRead && f.opts.DirectIORead || op == opWrite && f.opts.DirectIOWrite) {
		if lo, hi, ok := d.middle(p, off); ok {
			n, err := f.buffered(op, p[:lo], off)
			if err != nil || n < lo {
				return n, err
			}
			m, err := d.rw(op, p[lo:hi], off+int64(lo))
			f.stats[op].direct.Add(int64(m))
			n += m
			if errors.Is(err, errFinishBuffered) {
				k, err := f.buffered(op, p[n:], off+int64(n))
				return n + k, err
			}
			if err != nil {
				return n, err
			}
			k, err := f.buffered(op, p[hi:], off+int64(hi))
			return n + k, err
		}
	}
	return f.buffered(op, p, off)
}

// buffered repeats the underlying ReadAt or WriteAt until p is done,
// retrying EINTR.
func (f *File) buffered(op opKind, p []byte, off int64) (int, error) {
	n := 0
	for n < len(p) {
		var (
			m   int
			err error
		)
		if op == opRead {
			m, err = f.r.ReadAt(p[n:], off+int64(n))
		} else {
			m, err = f.w.WriteAt(p[n:], off+int64(n))
		}
		n += m
		switch {
		case n == len(p):
			return n, nil
		case op == opRead && errors.Is(err, io.EOF):
			return n, nil
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			return n, fmt.Errorf("kvio: %s %s at %d: %w", op, f.name, off+int64(n), err)
		case m == 0:
			return n, fmt.Errorf("kvio: %s %s at %d: %w", op, f.name, off+int64(n), io.ErrNoProgress)
		}
	}
	return n, nil
}

// probes reports whether the pool tells reads that wait for the device
// from copies of cached pages (see Options.NumThreads): for a file from
// Open or OpenFile on Linux whose file system accepts RWF_NOWAIT, unless
// reads go through O_DIRECT.
func (f *File) probes() bool {
	return f.cached != nil && !f.cached.disabled.Load() && !(f.direct != nil && f.opts.DirectIORead && f.direct.disabled.Load() == nil)
}

// cpuWorkers is the most pool goroutines of one request that copy cached
// pages at once: GOMAXPROCS less one, for the goroutine waiting for the
// request, which helps; at least one.
func cpuWorkers() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// grow raises the size to off+n after a write of n bytes at off; a
// write that wrote nothing leaves it as it was.
func (f *File) grow(off int64, n int) {
	if n == 0 {
		return
	}
	end := off + int64(n)
	for {
		s := f.size.Load()
		if end <= s || f.size.CompareAndSwap(s, end) {
			return
		}
	}
}
