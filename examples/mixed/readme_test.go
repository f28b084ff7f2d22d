package mixed_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/doctest"
)

// TestReadmeProgram: the program of docs/device-code.md is Example's
// code: every line of it from the OpenCL C source on, but func main, is a
// line of example_test.go, in the same order; and the output the page
// shows is the Example's.
func TestReadmeProgram(t *testing.T) {
	page, err := os.ReadFile("../../docs/device-code.md")
	require.NoError(t, err)
	program, shown := doctest.Program(t, string(page), "## A program with Go and OpenCL C kernels")
	k := strings.Index(program, "const squareCL")
	require.GreaterOrEqual(t, k, 0, "the program declares squareCL")
	ex, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	doctest.InOrder(t, program[k:], string(ex), func(l string) bool { return l == "func main() {" })
	assert.Equal(t, doctest.Output(string(ex)), shown)
}
