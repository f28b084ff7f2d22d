package kvio_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/kvio"
)

// pattern returns n bytes that differ from their neighbours.
func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i/251)
	}
	return b
}

// callLog is an io.ReaderAt over data that records each call and the most
// calls in flight at once; it returns at most maxBytes per call when set.
type callLog struct {
	data     []byte
	maxBytes int

	mu       sync.Mutex
	calls    [][2]int64 // offset, length
	inFlight atomic.Int32
	peak     atomic.Int32
}

func (c *callLog) ReadAt(p []byte, off int64) (int, error) {
	now := c.inFlight.Add(1)
	defer c.inFlight.Add(-1)
	for {
		old := c.peak.Load()
		if now <= old || c.peak.CompareAndSwap(old, now) {
			break
		}
	}
	c.mu.Lock()
	c.calls = append(c.calls, [2]int64{off, int64(len(p))})
	c.mu.Unlock()
	if c.maxBytes > 0 && len(p) > c.maxBytes {
		p = p[:c.maxBytes]
	}
	return bytes.NewReader(c.data).ReadAt(p, off)
}

func TestReadAtChunks(t *testing.T) {
	data := pattern(1000)
	tests := []struct {
		name      string
		task      int64
		threads   int
		off, n    int
		maxBytes  int // per underlying call; 0 = no limit
		wantCalls int
	}{
		{name: "task 7 unaligned", task: 7, threads: 3, off: 3, n: 990, wantCalls: 142},
		{name: "task 7 whole", task: 7, threads: 2, off: 0, n: 1000, wantCalls: 143},
		{name: "exact multiple", task: 100, threads: 4, off: 0, n: 1000, wantCalls: 10},
		{name: "inline at task size", task: 100, threads: 4, off: 17, n: 100, wantCalls: 1},
		{name: "one past task size", task: 100, threads: 4, off: 17, n: 101, wantCalls: 2},
		{name: "inline default task size", task: kvio.DefaultTaskSizeBytes, threads: 1, off: 5, n: 995, wantCalls: 1},
		{name: "partial reads retried", task: 64, threads: 2, off: 1, n: 999, maxBytes: 5, wantCalls: 203},
		{name: "partial reads inline", task: 4096, threads: 2, off: 0, n: 1000, maxBytes: 3, wantCalls: 334},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			log := &callLog{data: data, maxBytes: tc.maxBytes}
			f, err := kvio.NewFile("mem", log, int64(len(data)), kvio.WithTaskSize(tc.task), kvio.WithThreads(tc.threads), kvio.WithGDSThreshold(tc.task))
			require.NoError(t, err)
			defer f.Close()

			p := make([]byte, tc.n)
			n, err := f.ReadAt(p, int64(tc.off))
			require.NoError(t, err)
			assert.Equal(t, tc.n, n)
			assert.Equal(t, data[tc.off:tc.off+tc.n], p)
			assert.Len(t, log.calls, tc.wantCalls)
			assert.LessOrEqual(t, int(log.peak.Load()), tc.threads+1, "calls in flight: the pool and the waiting caller")
			for _, c := range log.calls {
				assert.LessOrEqual(t, c[1], tc.task, "call at %d longer than a task", c[0])
			}
		})
	}
}

func TestReadAtRandom(t *testing.T) {
	data := pattern(1000)
	const seed = 42
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range 300 {
		task, threads, threshold := 1+rng.Int64N(64), 1+rng.IntN(4), rng.Int64N(128)
		off := rng.IntN(len(data))
		n := rng.IntN(len(data) - off + 1)
		f, err := kvio.NewFile("mem", bytes.NewReader(data), int64(len(data)), kvio.WithTaskSize(task), kvio.WithThreads(threads), kvio.WithGDSThreshold(threshold))
		require.NoError(t, err)
		p := make([]byte, n)
		got, err := f.ReadAt(p, int64(off))
		require.NoError(t, err, "seed %d case %d: task %d threads %d off %d n %d", seed, i, task, threads, off, n)
		require.Equal(t, n, got)
		require.Equal(t, data[off:off+n], p, "seed %d case %d", seed, i)
		require.NoError(t, f.Close())
	}
}

func TestReadAtShort(t *testing.T) {
	data := pattern(1000)
	for _, task := range []int64{7, kvio.DefaultTaskSizeBytes} {
		f, err := kvio.NewFile("flights.parquet", bytes.NewReader(data), int64(len(data)), kvio.WithTaskSize(task), kvio.WithGDSThreshold(task))
		require.NoError(t, err)
		p := make([]byte, 100)
		n, err := f.ReadAt(p, 950)
		assert.Equal(t, 50, n, "task %d", task)
		assert.Equal(t, data[950:], p[:n])
		var short *kvio.ShortReadError
		require.ErrorAs(t, err, &short)
		assert.Equal(t, kvio.ShortReadError{File: "flights.parquet", Offset: 950, Want: 100, Got: 50}, *short)
		assert.EqualError(t, err, "kvio: read flights.parquet at 950: short read 50 of 100 bytes")
		assert.ErrorIs(t, err, io.ErrUnexpectedEOF)

		n, err = f.ReadAt(p, 2000)
		assert.Equal(t, 0, n)
		require.ErrorAs(t, err, &short)
		assert.Equal(t, kvio.ShortReadError{File: "flights.parquet", Offset: 2000, Want: 100, Got: 0}, *short)
	}
}

func TestReadAtSize(t *testing.T) {
	data := pattern(1000)
	for _, task := range []int64{7, kvio.DefaultTaskSizeBytes} {
		// The File ends before the data: reads stop at Size.
		f, err := kvio.NewFile("head", bytes.NewReader(data), 900, kvio.WithTaskSize(task), kvio.WithGDSThreshold(task))
		require.NoError(t, err)
		p := make([]byte, 100)
		n, err := f.ReadAt(p, 850)
		assert.Equal(t, 50, n, "task %d", task)
		assert.Equal(t, data[850:900], p[:n])
		assert.EqualError(t, err, "kvio: read head at 850: short read 50 of 100 bytes")

		// The data ends before the File (a file that shrank): the
		// underlying EOF makes the short read.
		f, err = kvio.NewFile("shrunk", bytes.NewReader(data), 2000, kvio.WithTaskSize(task), kvio.WithGDSThreshold(task))
		require.NoError(t, err)
		n, err = f.ReadAt(p, 950)
		assert.Equal(t, 50, n, "task %d", task)
		assert.Equal(t, data[950:], p[:n])
		var short *kvio.ShortReadError
		require.ErrorAs(t, err, &short)
		assert.Equal(t, kvio.ShortReadError{File: "shrunk", Offset: 950, Want: 100, Got: 50}, *short)
	}
}

func TestShortReadErrorMessage(t *testing.T) {
	err := &kvio.ShortReadError{File: "flights.parquet", Offset: 4194304, Want: 4096, Got: 1000}
	assert.EqualError(t, err, "kvio: read flights.parquet at 4194304: short read 1000 of 4096 bytes")
}

// failAt fails every read that covers offset bad.
type failAt struct {
	data []byte
	bad  int64
}

var errDisk = errors.New("disk on fire")

func (r failAt) ReadAt(p []byte, off int64) (int, error) {
	if off <= r.bad && r.bad < off+int64(len(p)) {
		return copy(p, r.data[off:r.bad]), errDisk
	}
	return bytes.NewReader(r.data).ReadAt(p, off)
}

func TestReadAtError(t *testing.T) {
	data := pattern(1000)
	for _, task := range []int64{10, kvio.DefaultTaskSizeBytes} {
		f, err := kvio.NewFile("disk", failAt{data: data, bad: 505}, int64(len(data)), kvio.WithTaskSize(task), kvio.WithThreads(1), kvio.WithGDSThreshold(task))
		require.NoError(t, err)
		p := make([]byte, 1000)
		n, err := f.ReadAt(p, 0)
		assert.ErrorIs(t, err, errDisk, "task %d", task)
		assert.ErrorContains(t, err, "kvio: read disk at 505")
		assert.Equal(t, 505, n, "task %d", task)
		assert.Equal(t, data[:n], p[:n])
	}
}

// gate blocks every ReadAt at offset blockAt until release is closed, and
// counts the calls.
type gate struct {
	data    []byte
	blockAt int64
	started chan struct{} // closed when the blocking call starts
	release chan struct{}
	calls   atomic.Int32
}

func (g *gate) ReadAt(p []byte, off int64) (int, error) {
	g.calls.Add(1)
	if off == g.blockAt {
		close(g.started)
		<-g.release
	}
	return bytes.NewReader(g.data).ReadAt(p, off)
}

func TestReadAtContextCancel(t *testing.T) {
	// One pool thread and no caller help (ReadAsync, no Wait until the
	// end): the pool's single chunk in flight blocks, the request is
	// canceled, and no later chunk starts.
	g := &gate{data: pattern(100), blockAt: 0, started: make(chan struct{}), release: make(chan struct{})}
	f, err := kvio.NewFile("gate", g, 100, kvio.WithTaskSize(10), kvio.WithThreads(1), kvio.WithGDSThreshold(0))
	require.NoError(t, err)
	defer f.Close()

	ctx, cancel := context.WithCancel(t.Context())
	fu := f.ReadAsync(ctx, make([]byte, 100), 0)
	<-g.started
	cancel()
	close(g.release)
	<-fu.Done()
	n, err := fu.Wait(t.Context())
	assert.ErrorIs(t, err, context.Canceled)
	assert.ErrorContains(t, err, "kvio: read gate at 0: context canceled")
	assert.Equal(t, 10, n, "the running chunk finishes")
	assert.Equal(t, int32(1), g.calls.Load(), "no chunk starts after cancellation")

	n, err = f.ReadAtContext(ctx, make([]byte, 5), 0)
	assert.ErrorIs(t, err, context.Canceled, "read with a done context")
	assert.Zero(t, n)
}

func TestWaitCancel(t *testing.T) {
	// Future a holds the File's one pool thread; b's chunks wait for it.
	// A Wait on b with a done ctx cancels b before any chunk of it starts,
	// with that ctx's cause.
	g := &gate{data: pattern(100), blockAt: 0, started: make(chan struct{}), release: make(chan struct{})}
	f, err := kvio.NewFile("gate", g, 100, kvio.WithTaskSize(10), kvio.WithThreads(1), kvio.WithGDSThreshold(0))
	require.NoError(t, err)
	defer f.Close()
	a := f.ReadAsync(t.Context(), make([]byte, 10), 0)
	<-g.started
	b := f.ReadAsync(t.Context(), make([]byte, 90), 10)

	ctx, cancel := context.WithCancelCause(t.Context())
	cancel(errDisk)
	n, err := b.Wait(ctx)
	assert.ErrorIs(t, err, errDisk, "Wait's cause")
	assert.EqualError(t, err, "kvio: read gate at 10: disk on fire")
	assert.Zero(t, n)
	n2, err2 := b.Wait(t.Context())
	assert.Equal(t, n, n2, "Wait returns the same result again")
	assert.Equal(t, err, err2)

	close(g.release)
	n, err = a.Wait(t.Context())
	assert.NoError(t, err)
	assert.Equal(t, 10, n)
	assert.Equal(t, int32(1), g.calls.Load(), "b read nothing")
}

func TestReadAtSharedPool(t *testing.T) {
	log := &callLog{data: pattern(1 << 16)}
	f, err := kvio.NewFile("mem", log, 1<<16, kvio.WithTaskSize(100), kvio.WithThreads(2), kvio.WithGDSThreshold(100))
	require.NoError(t, err)
	defer f.Close()
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			p := make([]byte, 1<<16)
			_, err := f.ReadAt(p, 0)
			assert.NoError(t, err)
			assert.Equal(t, log.data, p)
		})
	}
	wg.Wait()
	assert.LessOrEqual(t, int(log.peak.Load()), 2+4, "chunks in flight across concurrent reads: the pool and the 4 callers")
}

func TestOpenClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "data.bin")
	data := pattern(3000)
	require.NoError(t, os.WriteFile(path, data, 0o600))

	f, err := kvio.Open(path, kvio.WithTaskSize(512))
	require.NoError(t, err)
	assert.Equal(t, path, f.Name())
	assert.Equal(t, int64(3000), f.Size())
	p := make([]byte, 2999)
	n, err := f.ReadAt(p, 1)
	require.NoError(t, err)
	assert.Equal(t, 2999, n)
	assert.Equal(t, data[1:], p)

	_, err = f.ReadAt(p[:10], -1)
	assert.ErrorContains(t, err, "negative offset")

	require.NoError(t, f.Close())
	require.NoError(t, f.Close(), "Close is idempotent")
	_, err = f.ReadAt(p, 0)
	assert.ErrorIs(t, err, kvio.ErrClosed)
	assert.ErrorContains(t, err, path)

	_, err = kvio.Open(filepath.Join(t.TempDir(), "absent"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

// Open refuses what is not a regular file, naming it, before it opens
// anything: a directory, and a named pipe with no writer, whose open(2)
// would block until one came (and which pread(2) cannot read anyway).
func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	for _, c := range []struct{ name, path, want string }{
		{"directory", dir, "kvio: open " + dir + ": a directory, want a regular file"},
		{"named pipe", fifo, "kvio: open " + fifo + ": a named pipe, want a regular file"},
	} {
		t.Run(c.name, func(t *testing.T) {
			done := make(chan error, 1)
			go func() {
				f, err := kvio.Open(c.path)
				if err == nil {
					err = errors.Join(errors.New("no error"), f.Close())
				}
				done <- err
			}()
			var err error
			select {
			case err = <-done:
			case <-time.After(time.Minute): // a correct Open returns at once
				if w, werr := os.OpenFile(c.path, os.O_WRONLY|syscall.O_NONBLOCK, 0); werr == nil {
					_ = w.Close() // lets the blocked open return
				}
				<-done
				t.Fatal("Open blocked")
			}
			assert.EqualError(t, err, c.want)
		})
	}
}

// diskFull is an io.ReaderAt over a string whose writes fail having
// written nothing.
type diskFull struct{ *strings.Reader }

func (diskFull) WriteAt([]byte, int64) (int, error) { return 0, errors.New("disk full") }

// A write that wrote nothing leaves Size as it was, also past the end of
// the file: inline (at most the GDS threshold) and in chunks.
func TestFailedWriteLeavesSize(t *testing.T) {
	f, err := kvio.NewFile("full", diskFull{strings.NewReader("hello")}, 5, kvio.WithGDSThreshold(4), kvio.WithTaskSize(4))
	require.NoError(t, err)
	defer f.Close()
	for _, n := range []int{2, 10} {
		got, err := f.WriteAt(make([]byte, n), 100)
		assert.Zero(t, got)
		assert.EqualError(t, err, "kvio: write full at 100: disk full", "%d bytes", n)
		assert.Equal(t, int64(5), f.Size(), "%d bytes", n)
	}
}
