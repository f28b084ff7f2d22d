package mixed_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReadmeProgram: the program of docs/device-code.md is Example's
// code: every line of it from the OpenCL C source on, but func main, is a
// line of example_test.go, in the same order; and the output the page
// shows is the Example's.
func TestReadmeProgram(t *testing.T) {
	page, err := os.ReadFile("../../docs/device-code.md")
	require.NoError(t, err)
	s := string(page)
	i := strings.Index(s, "## A program with Go and OpenCL C kernels")
	require.GreaterOrEqual(t, i, 0, "docs/device-code.md has the section")
	j := strings.Index(s[i:], "```go\n")
	require.GreaterOrEqual(t, j, 0)
	block := s[i+j+len("```go\n"):]
	rest := block[strings.Index(block, "```\n")+4:]
	block = block[:strings.Index(block, "```\n")]
	k := strings.Index(block, "const squareCL")
	require.GreaterOrEqual(t, k, 0, "the program declares squareCL")
	ex, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	lines := strings.Split(string(ex), "\n")
	at := 0
	for _, l := range strings.Split(block[k:], "\n") {
		if strings.TrimSpace(l) == "" || l == "func main() {" {
			continue
		}
		for at < len(lines) && lines[at] != l {
			at++
		}
		if !assert.Less(t, at, len(lines), "README line %q is not in example_test.go (in order)", l) {
			return
		}
		at++
	}

	const outHead = "Output:\n\n```text\n"
	require.True(t, strings.HasPrefix(rest, "\n"+outHead), "the program's output follows it")
	shown := rest[len(outHead)+1:]
	shown = shown[:strings.Index(shown, "```\n")]
	example := string(ex)
	example = example[strings.Index(example, "\t// Output:\n")+len("\t// Output:\n"):]
	var want strings.Builder
	for _, l := range strings.Split(example, "\n") {
		if !strings.HasPrefix(l, "\t// ") {
			break
		}
		want.WriteString(strings.TrimPrefix(l, "\t// ") + "\n")
	}
	assert.Equal(t, want.String(), shown)
}
