// Package testdata locates the fixtures that streamdag's tests read from
// outside the repository, such as the real data sets (flights-3m.parquet,
// flights-200k.arrow, …) that are too large to commit.
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
	dir, err := find()
	if err == nil {
		_, err = os.Stat(dir)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("testdata: no data sets (set STREAMDAG_DATA): %v", err)
		}
		t.Skipf("testdata: no data sets (set STREAMDAG_DATA): %v", err)
	}
	return dir
}

func find() (string, error) {
	if dir := os.Getenv("STREAMDAG_DATA"); dir != "" {
		return dir, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", "data"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// File returns the path of data set name (e.g. "flights-3m.parquet") in
// Dir. When that file is missing it skips the test with a message naming
// it, or fails the test when the environment variable CI is set.
func File(t testing.TB, name string) string {
	t.Helper()
	path := filepath.Join(Dir(t), name)
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("testdata: data set %s missing: %v", name, err)
		}
		t.Skipf("testdata: data set %s missing (see README): %v", name, err)
	}
	return path
}
