//go:build linux

package kvio

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"testing/synctest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatedReader is an io.ReaderAt over data whose reads wait until the test
// opens gate, counting those waiting.
type gatedReader struct {
	data []byte
	gate chan struct{}

	mu      sync.Mutex
	waiting int
}

func (r *gatedReader) ReadAt(p []byte, off int64) (int, error) {
	r.mu.Lock()
	r.waiting++
	r.mu.Unlock()
	<-r.gate
	return bytes.NewReader(r.data).ReadAt(p, off)
}

func (r *gatedReader) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.waiting
}

// playCache makes preadNoWait serve data through r: the whole range when
// cached, after waiting at r's gate like a copy in progress; EAGAIN when
// not, as for pages the device must read.
func playCache(t *testing.T, r *gatedReader, cached bool) {
	saved := preadNoWait
	t.Cleanup(func() { preadNoWait = saved })
	preadNoWait = func(_ int, p []byte, off int64) (int, error) {
		if !cached {
			return 0, syscall.EAGAIN
		}
		return r.ReadAt(p, off)
	}
}

// startGatedRead starts an asynchronous read of 1 KiB (16 chunks of 64
// bytes) from a gated reader whose pages all play as cached or all as on
// the device, with threads pool goroutines allowed. It returns the file,
// the reader, the data, the destination and the Future.
func startGatedRead(t *testing.T, cached bool, threads int) (*File, *gatedReader, []byte, []byte, *Future) {
	t.Helper()
	data := bytes.Repeat([]byte("0123456789abcdef"), 64)
	r := &gatedReader{data: data, gate: make(chan struct{})}
	playCache(t, r, cached)
	f := newFile("gated", r, int64(len(data)), Options{NumThreads: threads, TaskSizeBytes: 64, GDSThresholdBytes: 0})
	f.cached = &cachedFile{fd: -1}
	p := make([]byte, len(data))
	return f, r, data, p, f.ReadAsync(t.Context(), p, 0)
}

// TestPoolCachedReads: when every page is cached, a request runs no more
// pool goroutines than cpuWorkers whatever NumThreads, so more threads
// cannot slow a copy down; the goroutine that waits adds one.
func TestPoolCachedReads(t *testing.T) {
	for _, tc := range [][2]int{{1, 1}, {1, 8}, {2, 1}, {2, 2}, {2, 8}, {4, 2}, {4, 8}} {
		procs, threads := tc[0], tc[1]
		t.Run(fmt.Sprintf("procs=%d/threads=%d", procs, threads), func(t *testing.T) {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			synctest.Test(t, func(t *testing.T) {
				f, r, data, p, fu := startGatedRead(t, true, threads)
				synctest.Wait()
				assert.Equal(t, min(threads, max(1, procs-1)), r.count(), "pool goroutines copying")
				close(r.gate)
				n, err := fu.Wait(t.Context())
				require.NoError(t, err)
				assert.Equal(t, len(data), n)
				assert.Equal(t, data, p)
				require.NoError(t, f.Close())
			})
		})
	}
}

// TestPoolDeviceReads: when pages must come from the device, pool
// goroutines join until NumThreads reads wait for it at once, and the
// goroutine in Wait adds one more.
func TestPoolDeviceReads(t *testing.T) {
	for _, threads := range []int{1, 3, 8} {
		t.Run(fmt.Sprint("threads=", threads), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				f, r, data, p, fu := startGatedRead(t, false, threads)
				synctest.Wait()
				assert.Equal(t, threads, r.count(), "reads waiting for the device")
				done := make(chan struct{})
				go func() {
					defer close(done)
					n, err := fu.Wait(t.Context())
					assert.NoError(t, err)
					assert.Equal(t, len(data), n)
				}()
				synctest.Wait()
				assert.Equal(t, threads+1, r.count(), "with the waiting goroutine")
				close(r.gate)
				<-done
				assert.Equal(t, data, p)
				require.NoError(t, f.Close())
			})
		})
	}
}

// TestCachedFile reads a real file through RWF_NOWAIT: a cached file
// reads whole, with EOF at its end; a kernel or file system that refuses
// the flag disables it, and reads go the ordinary way.
func TestCachedFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<12)
	w, err := os.Create(path)
	require.NoError(t, err)
	_, err = w.Write(data)
	require.NoError(t, err)
	// Just written, so in the page cache; synced, so no page is locked
	// for writeback, which RWF_NOWAIT reads do not wait for.
	require.NoError(t, w.Sync())
	require.NoError(t, w.Close())
	f, err := Open(path, WithTaskSize(4096), WithGDSThreshold(0), WithThreads(4))
	require.NoError(t, err)
	defer f.Close()
	if f.cached == nil {
		t.Skip("preadv2 not known on this architecture")
	}
	p := make([]byte, len(data)+10)
	n, eof := f.cached.read(p, 0)
	assert.Equal(t, len(data), n)
	assert.True(t, eof)
	assert.Equal(t, data, p[:n])

	n, err = f.ReadAt(p[:len(data)], 0)
	require.NoError(t, err)
	assert.Equal(t, len(data), n)
	assert.True(t, f.probes())

	saved := preadNoWait
	t.Cleanup(func() { preadNoWait = saved })
	preadNoWait = func(int, []byte, int64) (int, error) { return 0, syscall.EOPNOTSUPP }
	clear(p)
	n, err = f.ReadAt(p[:len(data)], 0)
	require.NoError(t, err)
	assert.Equal(t, len(data), n)
	assert.Equal(t, data, p[:n])
	assert.False(t, f.probes(), "refused: no more probing")
}
