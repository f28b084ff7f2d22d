// Package names_test enforces one name per concept: no exported type name
// is declared by two importable packages of the module (main packages and
// packages under an internal directory are not importable by users and
// are left out).
package names_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/streamdag/streamdag/"

// shared are the exported type names several packages may each declare,
// and why: the same concept, each package's own.
var shared = map[string]string{
	// A functional option of the package's constructor (Go's convention).
	"Option": "constructor option",
	// The settings struct of the package's entry point.
	"Options": "settings struct",
}

// exportedTypes returns, by exported type name, the import paths (without
// the module prefix) of the importable module packages that declare it in
// a non-test file.
func exportedTypes(t *testing.T) map[string][]string {
	t.Helper()
	if _, err := osexec.LookPath("go"); err != nil {
		t.Skip("go command not found:", err)
	}
	cmd := osexec.Command("go", "list", "-f", `{{.ImportPath}}|{{.Name}}|{{.Dir}}|{{join .GoFiles " "}} {{join .CgoFiles " "}}`, module+"...")
	cmd.Dir = "../.."
	out, err := cmd.Output()
	require.NoError(t, err, "go list")
	fset := token.NewFileSet()
	decl := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.SplitN(line, "|", 4)
		require.Len(t, f, 4, line)
		path := strings.TrimPrefix(f[0], module)
		if f[1] == "main" || strings.Contains("/"+path+"/", "/internal/") {
			continue
		}
		for _, name := range strings.Fields(f[3]) {
			file, err := parser.ParseFile(fset, filepath.Join(f[2], name), nil, parser.SkipObjectResolution)
			require.NoError(t, err)
			for _, d := range file.Decls {
				g, ok := d.(*ast.GenDecl)
				if !ok || g.Tok != token.TYPE {
					continue
				}
				for _, s := range g.Specs {
					if n := s.(*ast.TypeSpec).Name; n.IsExported() && !slices.Contains(decl[n.Name], path) {
						decl[n.Name] = append(decl[n.Name], path)
					}
				}
			}
		}
	}
	return decl
}

func TestOneNamePerType(t *testing.T) {
	decl := exportedTypes(t)
	require.Contains(t, decl["Topology"], "topology", "no declarations read")
	for name, pkgs := range decl {
		if len(pkgs) > 1 && shared[name] == "" {
			slices.Sort(pkgs)
			t.Errorf("type %s is declared by %s: one name per concept (rename all but one, or use that one)", name, strings.Join(pkgs, ", "))
		}
	}
}
