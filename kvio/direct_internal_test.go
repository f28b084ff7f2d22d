//go:build linux

package kvio

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDirectMiddle(t *testing.T) {
	d := &directFile{}
	buf := AlignedBytes(5 * directAlign)
	tests := []struct {
		name   string
		p      []byte
		off    int64
		lo, hi int
		ok     bool
	}{
		{"aligned", buf, 0, 0, 5 * directAlign, true},
		{"head and tail", buf[100 : 4*directAlign+7], 100, directAlign - 100, 4*directAlign - 100, true},
		{"memory not like offset", buf[1:], 0, 0, 0, false},
		{"less than a block", buf[:directAlign-1], 0, 0, 0, false},
		{"no whole block inside", buf[100 : directAlign+100], 100, 0, 0, false},
	}
	for _, tc := range tests {
		lo, hi, ok := d.middle(tc.p, tc.off)
		assert.Equal(t, tc.ok, ok, tc.name)
		if tc.ok {
			assert.Equal(t, [2]int{tc.lo, tc.hi}, [2]int{lo, hi}, tc.name)
		}
	}
}

// TestDirectRefused plays a file system that refuses O_DIRECT at open
// (tmpfs before Linux 6.6): the File reads buffered and says why.
func TestDirectRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	saved := openDirectFlags
	t.Cleanup(func() { openDirectFlags = saved })
	openDirectFlags = func(string, int) (*os.File, error) {
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EINVAL}
	}
	f, err := Open(path, WithDirectIO(true, true), WithGDSThreshold(0))
	require.NoError(t, err)
	defer f.Close()
	on, why := f.DirectIO()
	assert.False(t, on)
	assert.Equal(t, "O_DIRECT refused: invalid argument", why)
	p := AlignedBytes(len(data))
	n, err := f.ReadAt(p, 0)
	require.NoError(t, err)
	assert.Equal(t, len(data), n)
	assert.Equal(t, data, p)
}

// TestDirectUsed checks that aligned reads go through the O_DIRECT
// descriptor, and that EINVAL from it falls back to buffered reads for
// good.
func TestDirectUsed(t *testing.T) {
	path := filepath.Join(t.TempDir(), "f")
	data := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	require.NoError(t, os.WriteFile(path, data, 0o600))
	f, err := Open(path, WithDirectIO(true, false), WithGDSThreshold(0), WithTaskSize(1<<18))
	require.NoError(t, err)
	defer f.Close()
	on, _ := f.DirectIO()
	require.True(t, on, "O_DIRECT on the test's temporary directory")

	lo, hi, ok := f.direct.middle(AlignedBytes(len(data)), 0)
	require.True(t, ok)
	assert.Equal(t, [2]int{0, len(data)}, [2]int{lo, hi})
	p := AlignedBytes(len(data))
	n, err := f.ReadAt(p, 0)
	require.NoError(t, err)
	assert.Equal(t, len(data), n)
	assert.Equal(t, data, p)

	// A misaligned length makes the kernel answer EINVAL, as a file
	// system that refuses O_DIRECT transfers does.
	m, err := f.direct.rw(opRead, p[:directAlign+1], 0)
	assert.ErrorIs(t, err, errFinishBuffered, "EINVAL from an unaligned O_DIRECT read")
	assert.Zero(t, m)
	on, why := f.DirectIO()
	assert.False(t, on)
	assert.Equal(t, "O_DIRECT transfer refused: invalid argument", why)
	clear(p)
	n, err = f.ReadAt(p, 0)
	require.NoError(t, err)
	assert.Equal(t, len(data), n)
	assert.Equal(t, data, p, "buffered after the fallback")
}

// directDir returns a directory whose file system accepts O_DIRECT: the
// test's temporary directory, else one under /var/tmp (on a disk where
// /tmp is a tmpfs or ramfs). Without one it skips the test, or fails it
// when CI is set.
func directDir(t *testing.T) string {
	t.Helper()
	dirs := []string{t.TempDir()}
	if d, err := os.MkdirTemp("/var/tmp", "kvio-direct"); err == nil {
		t.Cleanup(func() { os.RemoveAll(d) })
		dirs = append(dirs, d)
	}
	for _, dir := range dirs {
		path := filepath.Join(dir, "probe")
		if err := os.WriteFile(path, nil, 0o600); err != nil {
			continue
		}
		if f, err := openDirectFlags(path, os.O_RDONLY); err == nil {
			f.Close()
			return dir
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("no directory accepts O_DIRECT (tried %v)", dirs)
	}
	t.Skipf("no directory accepts O_DIRECT (tried %v)", dirs)
	return ""
}

// seeded returns n bytes from a PCG seeded with seed.
func seeded(n int, seed uint64) []byte {
	rng := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestDirectReadTruncated truncates a file after it was opened for direct
// reads and reads past the new end: the read fails with a ShortReadError
// whose counts are those of the file as it now is, the bytes before the end
// are the file's, and the caller's bytes past it are left as they were (a
// direct read of the last block would have filled them with zeros).
func TestDirectReadTruncated(t *testing.T) {
	const (
		seed    = 13
		size    = 64 << 10
		task    = 16 << 10
		keepVal = 0xa5
	)
	dir := directDir(t)
	tests := []struct {
		name    string
		newSize int64
		off     int64
		n       int
		threads int
	}{
		{"inside a block", 10000, 0, size, 1},
		{"at a block boundary", 8192, 0, size, 1},
		{"to empty", 0, 0, size, 1},
		{"inside a later chunk", 40000, 0, size, 4},
		{"unaligned head", 10000, 100, size - 100, 1},
		{"inside a block, inline", 10000, 0, 3 * 4096, 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := seeded(size, seed)
			path := filepath.Join(dir, "truncated")
			require.NoError(t, os.WriteFile(path, data, 0o600))
			f, err := Open(path, WithDirectIO(true, false), WithGDSThreshold(task), WithTaskSize(task), WithThreads(tc.threads))
			require.NoError(t, err)
			defer f.Close()
			on, why := f.DirectIO()
			require.True(t, on, "O_DIRECT in %s: %s", dir, why)
			require.NoError(t, os.Truncate(path, tc.newSize))

			buf := AlignedBytes(size)
			p := buf[tc.off%directAlign:][:tc.n] // memory address ≡ file offset (mod 4096)
			for i := range p {
				p[i] = keepVal
			}
			n, err := f.ReadAt(p, tc.off)
			got := int(max(tc.newSize-tc.off, 0))
			var short *ShortReadError
			require.ErrorAs(t, err, &short, "seed %d", seed)
			assert.Equal(t, ShortReadError{File: path, Offset: tc.off, Want: int64(tc.n), Got: int64(got)}, *short, "seed %d", seed)
			assert.Equal(t, got, n, "seed %d", seed)
			assert.True(t, bytes.Equal(data[tc.off:tc.off+int64(got)], p[:n]), "seed %d: the bytes before the new end", seed)
			overwritten := 0
			for _, b := range p[n:] {
				if b != keepVal {
					overwritten++
				}
			}
			assert.Zero(t, overwritten, "seed %d: bytes past the new end overwritten", seed)
		})
	}
}

// TestDirectReadShrinksInFlight plays a file system that completes a
// direct read in full although the file shrank while it was in flight,
// filling the part past the new end with zeros: the size re-checked after
// the read turns that into a short read instead of returning the zeros as
// data.
func TestDirectReadShrinksInFlight(t *testing.T) {
	const seed, size, newSize = 17, 64 << 10, 20000
	dir := directDir(t)
	data := seeded(size, seed)
	path := filepath.Join(dir, "shrinks")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	f, err := Open(path, WithDirectIO(true, false), WithGDSThreshold(0), WithTaskSize(size))
	require.NoError(t, err)
	defer f.Close()
	on, why := f.DirectIO()
	require.True(t, on, "O_DIRECT in %s: %s", dir, why)

	saved := directPread
	t.Cleanup(func() { directPread = saved })
	directPread = func(fd int, p []byte, off int64) (int, error) {
		m, err := saved(fd, p, off)
		if err != nil {
			return m, err
		}
		if err := os.Truncate(path, newSize); err != nil {
			return 0, err
		}
		clear(p[max(newSize-off, 0):])
		return m, nil
	}
	p := AlignedBytes(size)
	n, err := f.ReadAt(p, 0)
	var short *ShortReadError
	require.ErrorAs(t, err, &short, "seed %d", seed)
	assert.Equal(t, ShortReadError{File: path, Offset: 0, Want: size, Got: newSize}, *short, "seed %d", seed)
	assert.Equal(t, newSize, n, "seed %d", seed)
	assert.True(t, bytes.Equal(data[:newSize], p[:n]), "seed %d", seed)
}

// TestFileDescribe checks that a File states what it really uses: direct
// I/O asked for but refused by the file system, available, stopped after
// EINVAL, or not applicable, with the bytes that went through O_DIRECT.
func TestFileDescribe(t *testing.T) {
	const seed, size = 19, 1 << 20
	dir := directDir(t)
	data := seeded(size, seed)
	path := filepath.Join(dir, "described")
	require.NoError(t, os.WriteFile(path, data, 0o600))
	refuse := func(string, int) (*os.File, error) {
		return nil, &os.PathError{Op: "open", Path: path, Err: syscall.EINVAL}
	}
	tests := []struct {
		name   string
		open   func(...Option) (*File, error)
		direct bool                    // ask for direct reads
		refuse bool                    // the file system refuses O_DIRECT at open
		before func(*testing.T, *File) // after one read of the whole file
		want   string                  // the direct I/O part of the line
		stats  IOStats
	}{
		{name: "not asked for", open: func(o ...Option) (*File, error) { return Open(path, o...) },
			want: "direct I/O off", stats: IOStats{ReadBytes: size}},
		{name: "refused at open", open: func(o ...Option) (*File, error) { return Open(path, o...) }, direct: true, refuse: true,
			want: "direct I/O reads unavailable (O_DIRECT refused: invalid argument)", stats: IOStats{ReadBytes: size}},
		{name: "in use", open: func(o ...Option) (*File, error) { return Open(path, o...) }, direct: true,
			want: "direct I/O reads available (1 MiB of 1 MiB read through O_DIRECT)", stats: IOStats{ReadBytes: size, DirectReadBytes: size}},
		{name: "stopped", open: func(o ...Option) (*File, error) { return Open(path, o...) }, direct: true,
			before: func(t *testing.T, f *File) {
				// A misaligned length makes the kernel answer EINVAL.
				_, err := f.direct.rw(opRead, AlignedBytes(directAlign+1), 0)
				require.ErrorIs(t, err, errFinishBuffered)
				n, err := f.ReadAt(AlignedBytes(size), 0)
				require.NoError(t, err)
				require.Equal(t, size, n)
			},
			want:  "direct I/O reads unavailable (O_DIRECT transfer refused: invalid argument; 1 MiB of 2 MiB read through O_DIRECT until then)",
			stats: IOStats{ReadBytes: 2 * size, DirectReadBytes: size}},
		{name: "not an operating-system file", direct: true,
			open: func(o ...Option) (*File, error) { return NewFile("mem", bytes.NewReader(data), size, o...) },
			want: "direct I/O reads unavailable (not an operating-system file)", stats: IOStats{ReadBytes: size}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			for _, env := range []string{EnvCompatMode, EnvNumThreads, EnvTaskSize, EnvGDSThreshold, EnvBounceBufferSize, EnvAutoDirectIORead, EnvAutoDirectIOWrite} {
				t.Setenv(env, "")
			}
			if tc.refuse {
				saved := openDirectFlags
				t.Cleanup(func() { openDirectFlags = saved })
				openDirectFlags = refuse
			}
			f, err := tc.open(WithDirectIO(tc.direct, false), WithTaskSize(256<<10), WithGDSThreshold(0))
			require.NoError(t, err)
			defer f.Close()
			p := AlignedBytes(size)
			n, err := f.ReadAt(p, 0)
			require.NoError(t, err)
			require.Equal(t, size, n)
			require.True(t, bytes.Equal(data, p), "seed %d", seed)
			if tc.before != nil {
				tc.before(t, f)
			}
			settings := "compat mode " + f.Mode().String() + ", 1 thread, task 256 KiB, gds threshold 0 bytes, bounce buffer 16 MiB, "
			assert.Equal(t, "kvio: "+f.Name()+": "+settings+tc.want, f.Describe())
			assert.Equal(t, tc.stats, f.IOStats())
		})
	}
}
