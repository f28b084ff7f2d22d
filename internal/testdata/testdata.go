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
// above the test's working directory), that is <root>/../shared/data.
//
// When the directory does not exist, Dir skips the test with a message
// saying where it looked; when the environment variable CI is set it fails
// the test instead, so CI never passes by skipping.
func Dir(t testing.TB) string {
	t.Helper()
	return shared(t, "STREAMDAG_DATA", "data", "data sets")
}

// Topologies returns the directory of the example machine topologies
// (nvidia-smi topo -m / -p2p outputs and their JSON twins):
// $STREAMDAG_TOPOLOGIES when set, else <root>/../shared/topologies. It
// skips or fails as Dir does.
func Topologies(t testing.TB) string {
	t.Helper()
	return shared(t, "STREAMDAG_TOPOLOGIES", "topologies", "topologies")
}

// File returns the path of data set name (e.g. "flights-3m.parquet") in
// Dir. When that file is missing it skips the test with a message naming
// it, or fails the test when the environment variable CI is set.
func File(t testing.TB, name string) string {
	t.Helper()
	return fileIn(t, Dir(t), name, "data set")
}

// TopologyFile returns the path of rel (e.g. "dgx1-v100.topo-m.txt" or
// "raw/…") in Topologies. When that file is missing it skips the test with
// a message naming it, or fails the test when CI is set.
func TopologyFile(t testing.TB, rel string) string {
	t.Helper()
	return fileIn(t, Topologies(t), rel, "topology file")
}

// fileIn returns dir/rel, skipping (failing under CI) with a message
// naming the missing file, a what.
func fileIn(t testing.TB, dir, rel, what string) string {
	t.Helper()
	path := filepath.Join(dir, rel)
	if _, err := os.Stat(path); err != nil {
		missing(t, "testdata: "+what+" "+rel+" missing (see README): %v", err)
	}
	return path
}

// shared returns $env, or <root>/../shared/sub, skipping (failing under
// CI) when it does not exist.
func shared(t testing.TB, env, sub, what string) string {
	t.Helper()
	dir, err := find(env, sub)
	if err == nil {
		_, err = os.Stat(dir)
	}
	if err != nil {
		missing(t, "testdata: no "+what+" (set "+env+"): %v", err)
	}
	return dir
}

func missing(t testing.TB, format string, err error) {
	t.Helper()
	if os.Getenv("CI") != "" {
		t.Fatalf(format, err)
	}
	t.Skipf(format, err)
}

func find(env, sub string) (string, error) {
	if dir := os.Getenv(env); dir != "" {
		return dir, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", sub), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
