package outfile_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/outfile"
)

// TestCommit: a committed file holds the whole new content with the mode
// of the file it replaced; a failed write leaves the old content; Discard
// removes what was not committed; no temporary file is left.
func TestCommit(t *testing.T) {
	dir := t.TempDir()
	a, b, c := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "c")
	require.NoError(t, os.WriteFile(a, []byte("old a"), 0o600))
	require.NoError(t, os.WriteFile(b, []byte("old b"), 0o644))
	var s outfile.Set
	fa, err := s.Add("--a", a)
	require.NoError(t, err)
	fb, err := s.Add("--b", b)
	require.NoError(t, err)
	_, err = s.Add("--c", c)
	require.NoError(t, err)
	none, err := s.Add("--none", "")
	require.NoError(t, err)
	assert.Nil(t, none)
	assert.NoError(t, none.Commit(func(io.Writer) error { return errors.New("not called") }))

	require.NoError(t, fa.Commit(func(w io.Writer) error { _, err := io.WriteString(w, "new a"); return err }))
	err = fb.Commit(func(w io.Writer) error {
		_, _ = io.WriteString(w, "torn")
		return errors.New("disk full")
	})
	assert.EqualError(t, err, "--b "+b+": disk full")
	s.Discard()
	s.Discard()

	got, err := os.ReadFile(a)
	require.NoError(t, err)
	assert.Equal(t, "new a", string(got))
	st, err := os.Stat(a)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	got, err = os.ReadFile(b)
	require.NoError(t, err)
	assert.Equal(t, "old b", string(got))
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, names, 2, "a and b, no c, no temporary file")
}

// TestAddErrors: a second name for one path, a directory, a missing
// directory.
func TestAddErrors(t *testing.T) {
	dir := t.TempDir()
	var s outfile.Set
	defer s.Discard()
	p := filepath.Join(dir, "x")
	_, err := s.Add("--out", p)
	require.NoError(t, err)
	_, err = s.Add("--dot", filepath.Join(dir, ".", "x"))
	require.ErrorIs(t, err, outfile.ErrSamePath)
	assert.EqualError(t, err, "--out and --dot both name "+filepath.Join(dir, ".", "x"))
	_, err = s.Add("--trace", dir)
	assert.EqualError(t, err, "--trace "+dir+": is a directory")
	missing := filepath.Join(dir, "no", "y")
	_, err = s.Add("--report", missing)
	assert.EqualError(t, err, "--report "+missing+": no directory "+filepath.Join(dir, "no"))
}
