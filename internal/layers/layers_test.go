// Package layers_test enforces design.md's layering: a package imports
// only packages of lower layers (or its own layer where design.md allows
// it); only gpu/nvml (and its subpackages) imports go-nvml; only tests
// import test doubles; and the packages a CPU-only user needs build with
// CGO_ENABLED=0.
package layers_test

import (
	"encoding/json"
	"os"
	osexec "os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/streamdag/streamdag/"

// allowed lists, for each library unit, the module units it may import
// (directly or not): design.md's "Layers". A unit is a top-level package
// with its subpackages, except under gpu, where each device kind and the
// NVML inventory is a unit of its own (gpu/cpu, gpu/sim, gpu/opencl with
// its internal binding, gpu/nvml with gpu/nvml/nvmlmock).
var allowed = map[string][]string{
	"topology":   {},
	"gpu":        {"topology"},
	"gpu/cpu":    {"gpu", "topology"},
	"gpu/sim":    {"gpu", "gpu/cpu", "topology"},
	"gpu/nvml":   {"gpu", "topology"},
	"gpu/opencl": {"gpu", "topology", "buffers"},
	"buffers":    {"topology"},
	"lease":      {"gpu", "buffers", "topology"},
	"failgraph":  {"buffers", "topology"},
	"dag":        {"buffers", "topology"},
	"placement":  {"dag", "buffers", "topology"},
	"exec":       {"dag", "failgraph", "lease", "buffers", "gpu", "placement", "topology"},
	"kvio":       {"buffers", "gpu", "dag", "topology"},
	"k2k":        {"dag", "buffers", "gpu", "placement", "topology"},
}

// nvmlUnit is the only unit that may import go-nvml.
const nvmlUnit = "gpu/nvml"

// unit returns the layering unit of a module package path (without the
// module prefix): "exec" for exec, "gpu/nvml" for gpu/nvml/nvmlmock.
func unit(name string) string {
	parts := strings.SplitN(name, "/", 3)
	if parts[0] == "gpu" && len(parts) > 1 {
		return parts[0] + "/" + parts[1]
	}
	return parts[0]
}

func TestUnit(t *testing.T) {
	for name, want := range map[string]string{
		"exec": "exec", "kvio/arrow": "kvio", "gpu": "gpu", "gpu/cpu": "gpu/cpu",
		"gpu/nvml": "gpu/nvml", "gpu/nvml/nvmlmock": "gpu/nvml", "lease": "lease", "cmd/streamdag": "cmd",
		"gpu/opencl/internal/cl": "gpu/opencl", "gpu/opencl/internal/cltest": "gpu/opencl",
		"internal/readmetest": "internal", "internal/testdata": "internal",
	} {
		assert.Equal(t, want, unit(name), name)
	}
}

// goList runs go list at the module root, skipping the test when the go
// command is not installed.
func goList(t *testing.T, args ...string) []byte {
	t.Helper()
	if _, err := osexec.LookPath("go"); err != nil {
		t.Skip("go command not found:", err)
	}
	cmd := osexec.Command("go", append([]string{"list"}, args...)...)
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	return out
}

func TestLayers(t *testing.T) {
	out := goList(t, "-deps", "-json=ImportPath,Deps", module+"...")
	dec := json.NewDecoder(strings.NewReader(string(out)))
	seen := 0
	for dec.More() {
		var p struct {
			ImportPath string
			Deps       []string
		}
		require.NoError(t, dec.Decode(&p))
		name, ok := strings.CutPrefix(p.ImportPath, module)
		if !ok {
			continue
		}
		top := unit(name)
		rules, isLib := allowed[top]
		for _, d := range p.Deps {
			if isLib && top != nvmlUnit && strings.HasPrefix(d, "github.com/NVIDIA/go-nvml") {
				// A library unit below gpu/nvml that pulls go-nvml in,
				// even indirectly, needs cgo: the CPU-only build breaks.
				t.Errorf("%s depends on %s: only %s may (go-nvml needs cgo)", p.ImportPath, d, nvmlUnit)
				continue
			}
			dep, ok := strings.CutPrefix(d, module)
			if !ok {
				continue
			}
			dtop := unit(dep)
			if dtop == top || dtop == "internal" || !isLib {
				continue
			}
			seen++
			if !slices.Contains(rules, dtop) {
				t.Errorf("%s imports %s: layer rule broken (allowed: %v)", p.ImportPath, d, rules)
			}
		}
	}
	require.Positive(t, seen, "no module imports inspected")
}

func TestOnlyNVMLImportsGoNVML(t *testing.T) {
	out := goList(t, "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...")
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if name, ok := strings.CutPrefix(pkg, module); ok && unit(name) == nvmlUnit {
			continue
		}
		if strings.Contains(imports, "github.com/NVIDIA/go-nvml") {
			t.Errorf("%s imports go-nvml; only %s may", pkg, module+nvmlUnit)
		}
	}
}

// testDoubles are the packages only tests may import: streamdag's NVML
// mocks, go-nvml's own, and the device that reports its loss on cue.
var testDoubles = []string{module + "gpu/nvml/nvmlmock", "github.com/NVIDIA/go-nvml/pkg/nvml/mock", module + "internal/faultdev"}

// TestNoTestDoublesOutsideTests: no package of the module, built without
// its tests (the streamdag binary included), links a test double.
func TestNoTestDoublesOutsideTests(t *testing.T) {
	out := goList(t, "-f", `{{.ImportPath}} {{join .Deps " "}}`, module+"...")
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.NotEmpty(t, lines)
	for _, line := range lines {
		pkg, deps, _ := strings.Cut(line, " ")
		if slices.ContainsFunc(testDoubles, func(d string) bool { return strings.HasPrefix(pkg, d) }) {
			continue
		}
		for _, d := range strings.Fields(deps) {
			if slices.ContainsFunc(testDoubles, func(td string) bool { return strings.HasPrefix(d, td) }) {
				t.Errorf("%s depends on %s: test doubles are for _test files only", pkg, d)
			}
		}
	}
}

// TestBuildsWithoutCgo: a user who needs only the CPU device, the
// simulated GPUs or the OpenCL device (which loads its library with
// purego) builds the pipeline description, the executor, the lease
// backend and those device packages without cgo.
func TestBuildsWithoutCgo(t *testing.T) {
	if _, err := osexec.LookPath("go"); err != nil {
		t.Skip("go command not found:", err)
	}
	pkgs := []string{"./dag", "./exec", "./lease", "./gpu", "./gpu/cpu", "./gpu/sim", "./gpu/opencl"}
	cmd := osexec.Command("go", append([]string{"build"}, pkgs...)...)
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "CGO_ENABLED=0 go build %s:\n%s", strings.Join(pkgs, " "), out)
}
