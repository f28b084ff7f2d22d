// Package layers_test enforces design.md's layering: a package imports
// only packages of lower layers (or its own layer where design.md allows
// it), and only gpu imports go-nvml.
package layers_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/streamdag/streamdag/"

// allowed lists, for each library package, the module packages it may
// import (directly or not): design.md's "Layers".
var allowed = map[string][]string{
	"topology":  {},
	"gpu":       {"topology"},
	"buffers":   {"topology"},
	"failgraph": {"buffers", "topology"},
	"dag":       {"buffers", "topology"},
	"exec":      {"dag", "failgraph", "buffers", "gpu", "topology"},
	"kvio":      {"buffers", "gpu", "dag", "topology"},
}

// allowedSub narrows allowed for packages inside a top-level directory:
// the device-kind packages under gpu sit on the device boundary and must
// not reach up into exec (or sideways into failgraph, dag, kvio).
var allowedSub = map[string][]string{
	"gpu/opencl": {"gpu", "topology", "buffers"},
}

func TestLayers(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", "-json=ImportPath,Deps", module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
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
		top, _, _ := strings.Cut(name, "/")
		for sub, rules := range allowedSub {
			if name != sub && !strings.HasPrefix(name, sub+"/") {
				continue
			}
			for _, d := range p.Deps {
				dep, ok := strings.CutPrefix(d, module)
				if !ok || dep == sub || strings.HasPrefix(dep, sub+"/") || strings.HasPrefix(dep, "internal/") {
					continue
				}
				seen++
				if !slices.Contains(rules, dep) {
					t.Errorf("%s imports %s: layer rule broken (allowed: %v)", p.ImportPath, d, rules)
				}
			}
		}
		for _, d := range p.Deps {
			if strings.HasPrefix(d, "github.com/NVIDIA/go-nvml") && top != "gpu" {
				// Importing gpu brings go-nvml in indirectly; only a direct
				// import outside gpu breaks the rule, checked below.
				continue
			}
			dep, ok := strings.CutPrefix(d, module)
			if !ok {
				continue
			}
			dtop, _, _ := strings.Cut(dep, "/")
			if dtop == top || dtop == "internal" {
				continue
			}
			if rules, isLib := allowed[top]; isLib {
				seen++
				if !slices.Contains(rules, dtop) {
					t.Errorf("%s imports %s: layer rule broken (allowed: %v)", p.ImportPath, d, rules)
				}
			}
		}
	}
	require.Positive(t, seen, "no module imports inspected")
}

func TestOnlyGPUImportsNVML(t *testing.T) {
	cmd := exec.Command("go", "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, imports, _ := strings.Cut(line, " ")
		if strings.HasPrefix(pkg, module+"gpu") {
			continue
		}
		if strings.Contains(imports, "github.com/NVIDIA/go-nvml") {
			t.Errorf("%s imports go-nvml; only package gpu may", pkg)
		}
	}
}

// TestOpenCLBuildsWithoutCgo: the OpenCL device loads its library with
// purego, so a user who needs only it builds with CGO_ENABLED=0.
func TestOpenCLBuildsWithoutCgo(t *testing.T) {
	cmd := exec.Command("go", "build", "-o", os.DevNull, "./gpu/opencl")
	cmd.Dir = "../.."
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "CGO_ENABLED=0 go build ./gpu/opencl: %s", out)
}
