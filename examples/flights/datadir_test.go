package flights_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/testdata"
)

// recorder is a testing.TB that records a Fatalf or Skipf and stops its
// goroutine, as testing.T does, without ending the test (see call).
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

func (r *recorder) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// call runs f with a recorder on a goroutine of its own and returns the
// recorder once f returns or stops, and the path f returned ("" when it
// stopped).
func call(t *testing.T, f func(testing.TB) string) (*recorder, string) {
	r := &recorder{TB: t}
	var got string
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = f(r)
	}()
	<-done
	return r, got
}

// root returns the working directory (this package's) and the repository
// root, two levels up.
func root(t *testing.T) (wd, root string) {
	wd, err := os.Getwd()
	require.NoError(t, err)
	root = filepath.Dir(filepath.Dir(wd))
	require.FileExists(t, filepath.Join(root, "go.mod"))
	return wd, root
}

// TestDataDirRelativeFromRoot: a relative $STREAMDAG_DATA is taken from
// the repository root, not from the package directory go test runs in (as
// the commands the README gives for this package's benchmark are typed);
// an absolute one is used as it is. (testdata's own directory is one go
// test ./... does not list, so its tests live here.)
func TestDataDirRelativeFromRoot(t *testing.T) {
	wd, _ := root(t)
	t.Setenv("CI", "")
	for _, tc := range []struct{ name, set, want string }{
		{"relative", filepath.Join("examples", "flights", "data"), filepath.Join(wd, "data")},
		{"absolute", filepath.Join(wd, "data"), filepath.Join(wd, "data")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("STREAMDAG_DATA", tc.set)
			r, dir := call(t, testdata.Dir)
			assert.Equal(t, tc.want, dir)
			assert.Empty(t, r.fatal+r.skip)
			r, file := call(t, func(tb testing.TB) string { return testdata.File(tb, "flights-200k.arrow") })
			assert.Equal(t, filepath.Join(tc.want, "flights-200k.arrow"), file)
			assert.Empty(t, r.fatal+r.skip)
		})
	}
}

// TestDataDirSetButMissingFails: a $STREAMDAG_DATA that names no directory,
// or a directory without the file asked for, fails the test instead of
// skipping it, naming where it looked.
func TestDataDirSetButMissingFails(t *testing.T) {
	_, root := root(t)
	t.Setenv("CI", "")
	t.Setenv("STREAMDAG_DATA", "no-such-dir")
	r, _ := call(t, testdata.Dir)
	assert.Empty(t, r.skip)
	assert.Contains(t, r.fatal, "testdata: no data sets (set STREAMDAG_DATA; a relative path is taken from the repository root)")
	assert.Contains(t, r.fatal, filepath.Join(root, "no-such-dir"))

	dir := t.TempDir()
	t.Setenv("STREAMDAG_DATA", dir)
	r, _ = call(t, func(tb testing.TB) string { return testdata.File(tb, "flights-3m.parquet") })
	assert.Empty(t, r.skip)
	assert.Contains(t, r.fatal, "testdata: data set flights-3m.parquet missing (see docs/data.md)")
	assert.Contains(t, r.fatal, filepath.Join(dir, "flights-3m.parquet"))
}
