package kvio_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/kvio"
)

func writeFile(path string, data []byte) error { return os.WriteFile(path, data, 0o600) }

func TestFutureRead(t *testing.T) {
	clearEnv(t)
	data := pattern(1 << 16)
	log := &callLog{data: data}
	f, err := kvio.NewFile("mem", log, int64(len(data)), kvio.WithTaskSize(1000), kvio.WithThreads(3), kvio.WithGDSThreshold(4096))
	require.NoError(t, err)
	defer f.Close()

	// At or below the threshold: inline, done when ReadAsync returns.
	p := make([]byte, 4096)
	fu := f.ReadAsync(t.Context(), p, 10)
	select {
	case <-fu.Done():
	default:
		t.Fatal("a read at the threshold is not done when ReadAsync returns")
	}
	n, err := fu.Wait(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 4096, n)
	assert.Equal(t, data[10:4106], p)
	assert.Len(t, log.calls, 1)

	// Above it: task-size chunks, each call at most a task.
	log.calls = nil
	p = make([]byte, 60000)
	fu = f.ReadAsync(t.Context(), p, 5)
	<-fu.Done() // completes without Wait
	n, err = fu.Wait(t.Context())
	require.NoError(t, err)
	assert.Equal(t, 60000, n)
	assert.Equal(t, data[5:60005], p)
	assert.Len(t, log.calls, 60)
	for _, c := range log.calls {
		assert.LessOrEqual(t, c[1], int64(1000))
	}
	assert.LessOrEqual(t, int(log.peak.Load()), 3+1)
}

// eintr returns EINTR from every other ReadAt or WriteAt, after doing half
// of it.
type eintr struct {
	buf   []byte
	calls atomic.Int32
}

func (e *eintr) ReadAt(p []byte, off int64) (int, error) {
	if e.calls.Add(1)%2 == 1 && len(p) > 1 {
		n := copy(p[:len(p)/2], e.buf[off:])
		return n, &os.PathError{Op: "read", Path: "eintr", Err: syscall.EINTR}
	}
	return bytes.NewReader(e.buf).ReadAt(p, off)
}

func (e *eintr) WriteAt(p []byte, off int64) (int, error) {
	if e.calls.Add(1)%2 == 1 && len(p) > 1 {
		n := copy(e.buf[off:], p[:len(p)/2])
		return n, syscall.EINTR
	}
	return copy(e.buf[off:], p), nil
}

func TestEINTRRetried(t *testing.T) {
	clearEnv(t)
	data := pattern(10000)
	for _, threshold := range []int64{0, 1 << 20} {
		r := &eintr{buf: bytes.Clone(data)}
		f, err := kvio.NewFile("eintr", r, int64(len(data)), kvio.WithTaskSize(999), kvio.WithGDSThreshold(threshold))
		require.NoError(t, err)
		p := make([]byte, len(data))
		n, err := f.ReadAt(p, 0)
		require.NoError(t, err, "threshold %d", threshold)
		assert.Equal(t, len(data), n)
		assert.Equal(t, data, p)

		out := pattern(5000)
		for i := range out {
			out[i] ^= 0xff
		}
		n, err = f.WriteAt(out, 100)
		require.NoError(t, err)
		assert.Equal(t, 5000, n)
		assert.Equal(t, out, r.buf[100:5100])
		assert.Positive(t, r.calls.Load())
		require.NoError(t, f.Close())
	}
}

func TestWriteAsync(t *testing.T) {
	clearEnv(t)
	path := filepath.Join(t.TempDir(), "out.bin")
	f, err := kvio.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600, kvio.WithTaskSize(4096), kvio.WithThreads(2), kvio.WithGDSThreshold(4096))
	require.NoError(t, err)
	data := pattern(100_003)
	fu := f.WriteAsync(t.Context(), data, 7)
	n, err := fu.Wait(t.Context())
	require.NoError(t, err)
	assert.Equal(t, len(data), n)
	assert.Equal(t, int64(100_010), f.Size(), "writes grow Size")

	small := []byte("head")
	n, err = f.WriteAt(small, 0)
	require.NoError(t, err)
	assert.Equal(t, 4, n)

	back := make([]byte, 100_010)
	_, err = f.ReadAt(back, 0)
	require.NoError(t, err)
	assert.Equal(t, []byte("head\x00\x00\x00"), back[:7])
	assert.Equal(t, data, back[7:])
	require.NoError(t, f.Close())

	onDisk, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.Equal(t, back, onDisk)

	// Read-only files and plain readers refuse writes.
	ro, err := kvio.NewFile("ro", bytes.NewReader(data), int64(len(data)))
	require.NoError(t, err)
	_, err = ro.WriteAt(small, 0)
	assert.ErrorIs(t, err, kvio.ErrNotWritable)
	assert.EqualError(t, err, "kvio: write ro: kvio: file not writable")
	_, err = f.WriteAt(small, 0)
	assert.ErrorIs(t, err, kvio.ErrClosed)
}

func TestDirectIO(t *testing.T) {
	clearEnv(t)
	data := pattern(3<<20 + 123)
	dirs := map[string]string{"tempdir": t.TempDir()}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		dir, err := os.MkdirTemp("/dev/shm", "kvio")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(dir) })
		dirs["tmpfs"] = dir // refuses O_DIRECT before Linux 6.6
	}
	for name, dir := range dirs {
		t.Run(name, func(t *testing.T) {
			path := filepath.Join(dir, "d.bin")
			require.NoError(t, writeFile(path, data))
			f, err := kvio.Open(path, kvio.WithDirectIO(true, false), kvio.WithTaskSize(1<<20), kvio.WithGDSThreshold(64<<10))
			require.NoError(t, err)
			defer f.Close()
			on, why := f.DirectIO()
			t.Logf("%s: direct I/O %t %s", name, on, why)
			for _, tc := range []struct{ off, n int }{
				{0, len(data)},           // aligned start, unaligned end
				{4096, 2 << 20},          // all aligned
				{1, 3 << 20},             // unaligned head and tail
				{len(data) - 5000, 5000}, // tail only, inline
			} {
				aligned := kvio.AlignedBytes(tc.n + 4096)
				aligned = aligned[tc.off%4096:][:tc.n] // memory address ≡ file offset (mod 4096)
				unaligned := make([]byte, tc.n+1)[1:]
				for _, p := range [][]byte{aligned, unaligned} {
					n, err := f.ReadAt(p, int64(tc.off))
					require.NoError(t, err, "off %d n %d", tc.off, tc.n)
					assert.Equal(t, tc.n, n)
					require.True(t, bytes.Equal(data[tc.off:tc.off+tc.n], p), "off %d n %d", tc.off, tc.n)
				}
			}
			p := make([]byte, 10)
			_, err = f.ReadAt(p, int64(len(data)-5))
			var short *kvio.ShortReadError
			assert.ErrorAs(t, err, &short)
		})
	}
}

func TestDirectWrite(t *testing.T) {
	clearEnv(t)
	path := filepath.Join(t.TempDir(), "w.bin")
	f, err := kvio.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600, kvio.WithDirectIO(true, true), kvio.WithTaskSize(1<<20), kvio.WithGDSThreshold(0))
	require.NoError(t, err)
	data := kvio.AlignedBytes(2<<20 + 4096 + 17)
	copy(data, pattern(len(data)))
	n, err := f.WriteAt(data[4096-100:], 4096-100) // unaligned head, aligned middle, tail
	require.NoError(t, err)
	assert.Equal(t, len(data)-4096+100, n)
	require.NoError(t, f.Close())
	got, err := os.ReadFile(path)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(data[4096-100:], got[4096-100:]))
}

func TestAlignedAllocator(t *testing.T) {
	var a memory.Allocator = kvio.PageAllocator{}
	for _, n := range []int{1, 100, 4096, 1 << 20} {
		b := a.Allocate(n)
		assert.Len(t, b, n)
		assert.Zero(t, uintptr(unsafe.Pointer(&b[0]))%kvio.PageAlignBytes, "n %d", n)
		b[n-1] = 7
		b = a.Reallocate(2*n, b)
		assert.Len(t, b, 2*n)
		assert.Equal(t, byte(7), b[n-1])
		assert.Zero(t, uintptr(unsafe.Pointer(&b[0]))%kvio.PageAlignBytes)
		a.Free(b)
	}
	assert.Empty(t, kvio.AlignedBytes(0))
	mem := memory.NewCheckedAllocator(kvio.PageAllocator{})
	buf := memory.NewResizableBuffer(mem)
	buf.Resize(12345)
	assert.Zero(t, uintptr(unsafe.Pointer(&buf.Bytes()[0]))%kvio.PageAlignBytes)
	buf.Release()
	mem.AssertSize(t, 0)
}

// TestOver4GiB reads near the end of a sparse file of 5 GiB, so offsets and
// sizes pass 32 bits, through the pool, direct I/O and the inline path.
func TestOver4GiB(t *testing.T) {
	clearEnv(t)
	const size = 5 << 30
	path := filepath.Join(t.TempDir(), "sparse.bin")
	osf, err := os.Create(path)
	require.NoError(t, err)
	tail := pattern(3 << 20)
	if err := osf.Truncate(size); err != nil {
		osf.Close()
		t.Skipf("no sparse files here: %v", err)
	}
	_, err = osf.WriteAt(tail, size-int64(len(tail)))
	require.NoError(t, err)
	require.NoError(t, osf.Close())

	for _, direct := range []bool{false, true} {
		f, err := kvio.Open(path, kvio.WithTaskSize(1<<20), kvio.WithThreads(2), kvio.WithDirectIO(direct, false))
		require.NoError(t, err)
		assert.Equal(t, int64(size), f.Size())
		off := int64(size - len(tail))
		p := kvio.AlignedBytes(len(tail) + 8192)
		n, err := f.ReadAt(p, off-8192) // 8 KiB of hole, then the tail
		require.NoError(t, err)
		assert.Equal(t, len(p), n)
		assert.Equal(t, make([]byte, 8192), p[:8192])
		assert.True(t, bytes.Equal(tail, p[8192:]), "direct %t", direct)

		small := make([]byte, 100)
		_, err = f.ReadAt(small, off+5)
		require.NoError(t, err)
		assert.Equal(t, tail[5:105], small)

		_, err = f.ReadAt(small, size-50)
		var short *kvio.ShortReadError
		require.ErrorAs(t, err, &short)
		assert.Equal(t, kvio.ShortReadError{File: path, Offset: size - 50, Want: 100, Got: 50}, *short)
		require.NoError(t, f.Close())
	}
}

func TestCloseWaitsForFutures(t *testing.T) {
	clearEnv(t)
	g := &gate{data: pattern(100), blockAt: 0, started: make(chan struct{}), release: make(chan struct{})}
	f, err := kvio.NewFile("gate", g, 100, kvio.WithTaskSize(10), kvio.WithGDSThreshold(0))
	require.NoError(t, err)
	fu := f.ReadAsync(context.Background(), make([]byte, 100), 0)
	<-g.started
	closed := make(chan error)
	go func() { closed <- f.Close() }()
	close(g.release) // Close returns only after the Future is done
	require.NoError(t, <-closed)
	select {
	case <-fu.Done():
	default:
		t.Fatal("Close returned before the Future was done")
	}
	n, err := fu.Wait(t.Context())
	assert.NoError(t, err)
	assert.Equal(t, 100, n)
	_, err = f.ReadAsync(t.Context(), make([]byte, 100), 0).Wait(t.Context())
	assert.ErrorIs(t, err, kvio.ErrClosed)
	_, err = f.ReadAsync(t.Context(), make([]byte, 10), -3).Wait(t.Context())
	assert.ErrorContains(t, err, "negative offset")
	var _ io.ReaderAt = f
}
