package arrow_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/doctest"
)

// TestDocsProgram: the program in docs/arrow.md is Example's code: every
// line of it but the package clause and func main is a line of
// example_test.go, in the same order; and the output it shows is the
// Example's.
func TestDocsProgram(t *testing.T) {
	doc, err := os.ReadFile("../../docs/arrow.md")
	require.NoError(t, err)
	program, shown := doctest.Program(t, string(doc), "")
	require.True(t, strings.HasPrefix(program, "package main\n"), "it is a complete program")
	require.Contains(t, program, "\nfunc main() {\n")
	ex, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	doctest.InOrder(t, program, string(ex), func(l string) bool { return l == "package main" || l == "func main() {" })
	want := doctest.Output(string(ex))
	require.NotEmpty(t, want, "the Example checks its output")
	assert.Equal(t, want, shown)
}
