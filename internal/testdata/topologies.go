package testdata

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// Topologies returns the directory of the example machine topologies
// (nvidia-smi topo -m / -p2p outputs and their JSON twins):
// $STREAMDAG_TOPOLOGIES when set, else shared/topologies beside the
// repository root (the directory of go.mod above the test's working
// directory), that is <root>/../shared/topologies.
//
// When the directory does not exist, Topologies skips the test with a
// message saying where it looked; when the environment variable CI is set
// it fails the test instead, so CI never passes by skipping.
func Topologies(t testing.TB) string {
	t.Helper()
	dir, err := findTopologies()
	if err == nil {
		_, err = os.Stat(dir)
	}
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("testdata: no topologies (set STREAMDAG_TOPOLOGIES): %v", err)
		}
		t.Skipf("testdata: no topologies (set STREAMDAG_TOPOLOGIES): %v", err)
	}
	return dir
}

func findTopologies() (string, error) {
	if dir := os.Getenv("STREAMDAG_TOPOLOGIES"); dir != "" {
		return dir, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", "topologies"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}
