package mixed_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/doctest"
)

// TestReadmeProgram: the README's program in "Device code (OpenCL)" is
// Example's code: every line of it from the OpenCL C source on, but
// func main, is a line of example_test.go, in the same order; and the
// output the README shows is the Example's.
func TestReadmeProgram(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	program, shown := doctest.Program(t, string(readme), "## Device code (OpenCL)")
	k := strings.Index(program, "const squareCL")
	require.GreaterOrEqual(t, k, 0, "the program declares squareCL")
	ex, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	doctest.InOrder(t, program[k:], string(ex), func(l string) bool { return l == "func main() {" })
	assert.Equal(t, doctest.Output(string(ex)), shown)
}
