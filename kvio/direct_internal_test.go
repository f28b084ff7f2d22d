//go:build linux

package kvio

import (
	"bytes"
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
	assert.ErrorIs(t, err, errDirectRefused, "EINVAL from an unaligned O_DIRECT read")
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
