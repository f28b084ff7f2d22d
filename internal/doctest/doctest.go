// Package doctest checks a Go program shown in a Markdown document
// against the Example it copies: the program's lines are the Example
// file's, in order, and the output the document shows is the Example's
// "// Output:" comment. It is a test helper (layer: internal, for tests
// of any package).
package doctest

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Program returns the first ```go fenced block of doc after the first
// occurrence of after (the whole document for ""), and the output shown
// right after the block, in the form "\nOutput:\n\n```text\nLINES```\n". It
// fails t, naming what is missing, when doc lacks after, the block or the
// output.
func Program(t testing.TB, doc, after string) (program, output string) {
	t.Helper()
	i := strings.Index(doc, after)
	require.GreaterOrEqual(t, i, 0, "the document has %q", after)
	j := strings.Index(doc[i:], "```go\n")
	require.GreaterOrEqual(t, j, 0, "the document has a Go program after %q", after)
	block := doc[i+j+len("```go\n"):]
	end := strings.Index(block, "```\n")
	require.GreaterOrEqual(t, end, 0, "the program's block ends")
	block, rest := block[:end], block[end+len("```\n"):]
	const outHead = "\nOutput:\n\n```text\n"
	require.True(t, strings.HasPrefix(rest, outHead), "the program's output follows it")
	shown := rest[len(outHead):]
	end = strings.Index(shown, "```\n")
	require.GreaterOrEqual(t, end, 0, "the output's block ends")
	return block, shown[:end]
}

// InOrder checks that every line of program, but blank lines and the
// lines skip reports, is a line of example (the text of the Example's
// file), in the same order; it fails t at the first line that is not.
func InOrder(t testing.TB, program, example string, skip func(line string) bool) {
	t.Helper()
	lines := strings.Split(example, "\n")
	at := 0
	for _, l := range strings.Split(program, "\n") {
		if strings.TrimSpace(l) == "" || skip(l) {
			continue
		}
		for at < len(lines) && lines[at] != l {
			at++
		}
		if !assert.Less(t, at, len(lines), "program line %q is not in the Example's file (in order)", l) {
			return
		}
		at++
	}
}

// Output returns the lines of the first "\t// Output:" comment of example
// (the text of an Example's file), each ending in "\n"; "" when it has
// none.
func Output(example string) string {
	i := strings.Index(example, "\t// Output:\n")
	if i < 0 {
		return ""
	}
	var out strings.Builder
	for _, l := range strings.Split(example[i+len("\t// Output:\n"):], "\n") {
		if !strings.HasPrefix(l, "\t// ") {
			break
		}
		out.WriteString(strings.TrimPrefix(l, "\t// ") + "\n")
	}
	return out.String()
}
