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

// TestAddRefusesAKeptFile: an output whose rename would replace a file
// the command reads is refused before anything is written, by its path,
// through a symlinked directory or as the target of a symlinked input; an
// output that is a symlink to the input only replaces the link.
func TestAddRefusesAKeptFile(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "in.json")
	require.NoError(t, os.WriteFile(in, []byte("input"), 0o600))
	linkDir := filepath.Join(t.TempDir(), "d")
	require.NoError(t, os.Symlink(dir, linkDir))
	linkIn := filepath.Join(dir, "link.json")
	require.NoError(t, os.Symlink(in, linkIn))

	for _, c := range []struct{ name, kept, out string }{
		{"its path", in, in},
		{"through a symlinked directory", in, filepath.Join(linkDir, "in.json")},
		{"the target of a symlinked input", linkIn, in},
	} {
		t.Run(c.name, func(t *testing.T) {
			var s outfile.Set
			defer s.Discard()
			s.Keep("--input", c.kept)
			_, err := s.Add("--out", c.out)
			require.ErrorIs(t, err, outfile.ErrSamePath)
			assert.EqualError(t, err, "--input and --out both name "+c.out)
		})
	}
	var s outfile.Set
	s.Keep("--input", in)
	f, err := s.Add("--out", linkIn)
	require.NoError(t, err)
	require.NoError(t, f.Commit(func(w io.Writer) error { _, err := io.WriteString(w, "output"); return err }))
	got, err := os.ReadFile(in)
	require.NoError(t, err)
	assert.Equal(t, "input", string(got), "the link was replaced, not its target")
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	assert.Len(t, names, 2, "in.json and link.json, no temporary file")
}
