// Package testdata locates the fixtures that streamdag's tests read from
// outside the repository, such as the real data sets (flights-3m.parquet,
// flights-200k.arrow, …) that are too large to commit, and real machines'
// topologies.
package testdata

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Dir returns the directory holding the data sets: $STREAMDAG_DATA when set,
// else shared/data beside the repository root (the directory of go.mod
// above the test's working directory), that is <root>/../shared/data. A
// relative $STREAMDAG_DATA is taken from the repository root, where the
// README's commands are typed, not from the test's working directory
// (go test runs each package's tests in the package's directory): with
// STREAMDAG_DATA=../shared/data every package finds <root>/../shared/data.
//
// When the directory does not exist, Dir skips the test with a message
// saying where it looked; it fails the test instead when $STREAMDAG_DATA
// is set (the data is meant to be there) or when the environment variable
// CI is set, so CI never passes by skipping.
func Dir(t testing.TB) string {
	t.Helper()
	return shared(t, "STREAMDAG_DATA", "data", "data sets")
}

// Topologies returns the directory of the example machine topologies
// (nvidia-smi topo -m / -p2p outputs and their JSON twins):
// $STREAMDAG_TOPOLOGIES when set (a relative one taken from the
// repository root), else <root>/../shared/topologies. It skips or fails as
// Dir does.
func Topologies(t testing.TB) string {
	t.Helper()
	return shared(t, "STREAMDAG_TOPOLOGIES", "topologies", "topologies")
}

// File returns the path of data set name (e.g. "flights-3m.parquet") in
// Dir. When that file is missing it skips the test with a message naming
// it, or fails the test when $STREAMDAG_DATA or CI is set.
func File(t testing.TB, name string) string {
	t.Helper()
	return fileIn(t, Dir(t), os.Getenv("STREAMDAG_DATA") != "", name, "data set")
}

// TopologyFile returns the path of rel (e.g. "dgx1-v100.topo-m.txt" or
// "raw/…") in Topologies. When that file is missing it skips the test with
// a message naming it, or fails the test when $STREAMDAG_TOPOLOGIES or CI
// is set.
func TopologyFile(t testing.TB, rel string) string {
	t.Helper()
	return fileIn(t, Topologies(t), os.Getenv("STREAMDAG_TOPOLOGIES") != "", rel, "topology file")
}

// fileIn returns dir/rel, skipping (failing when required or under CI)
// with a message naming the missing file, a what.
func fileIn(t testing.TB, dir string, required bool, rel, what string) string {
	t.Helper()
	path := filepath.Join(dir, rel)
	if _, err := os.Stat(path); err != nil {
		missing(t, required, "testdata: "+what+" "+rel+" missing (see docs/data.md): %v", err)
	}
	return path
}

// shared returns $env (relative to the repository root when relative),
// or <root>/../shared/sub, skipping when it does not exist (failing when
// env is set or under CI).
func shared(t testing.TB, env, sub, what string) string {
	t.Helper()
	set := os.Getenv(env)
	dir, err := find(set, sub)
	if err == nil {
		_, err = os.Stat(dir)
	}
	if err != nil {
		missing(t, set != "", "testdata: no "+what+" (set "+env+"; a relative path is taken from the repository root): %v", err)
	}
	return dir
}

// missing fails the test when required or when CI is set, else skips it.
func missing(t testing.TB, required bool, format string, err error) {
	t.Helper()
	if required || os.Getenv("CI") != "" {
		t.Fatalf(format, err)
	}
	t.Skipf(format, err)
}

// find returns set when it is absolute, else set joined to the repository
// root (the first directory with a go.mod from the working directory up),
// or <root>/../shared/sub when set is empty.
func find(set, sub string) (string, error) {
	if filepath.IsAbs(set) {
		return set, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			if set != "" {
				return filepath.Join(dir, set), nil
			}
			return filepath.Join(dir, "..", "shared", sub), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
