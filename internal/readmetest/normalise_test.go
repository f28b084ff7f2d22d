package readmetest_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNormalise(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"run summary", "200000 rows in 2 partitions, 9 launches, 8.710 ms (23.0 M rows/s)",
			"200000 rows in 2 partitions, 9 launches, <duration> (<rate>)"},
		{"modeled figures kept", "modeled makespan 20.935 ms, 42 copies, modeled copy time 498.157 µs",
			"modeled makespan 20.935 ms, 42 copies, modeled copy time 498.157 µs"},
		{"timestamp", "measured 2026-12-01 13:47 UTC on 2 CPUs", "measured <time> on 2 CPUs"},
		{"sizes kept", "task 4 MiB, 20.2 MB, 23.5 GiB", "task 4 MiB, 20.2 MB, 23.5 GiB"},
		{"trailing blanks", "a  \nb\t\n\n", "a\nb"},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, normalise(tc.in)) })
	}
}

func TestMatch(t *testing.T) {
	lines := func(s string) []string { return strings.Split(s, "\n") }
	for _, tc := range []struct {
		name, want, got string
		ok              bool
	}{
		{"equal", "a\nb", "a\nb", true},
		{"differs", "a\nb", "a\nc", false},
		{"longer", "a", "a\nb", false},
		{"any lines", "a\n...\nd", "a\nb\nc\nd", true},
		{"any lines, none", "a\n...\nd", "a\nd", true},
		{"any lines at the end", "a\n...", "a\nb", true},
		{"prefix", "devices: cpu; ...", "devices: cpu; --device auto", true},
		{"prefix differs", "devices: gpu ...", "devices: cpu; --device auto", false},
	} {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.ok, match(lines(tc.want), lines(tc.got))) })
	}
}

func TestWords(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     []string
	}{
		{"plain", "streamdag run  flights", []string{"streamdag", "run", "flights"}},
		{"single quotes", "run --fail 'filter[3]'", []string{"run", "--fail", "filter[3]"}},
		{"double quotes", `a "b c" d\ e`, []string{"a", "b c", "d e"}},
		{"comment", "streamdag devices   # the devices", []string{"streamdag", "devices"}},
		{"env", "KVIKIO_NTHREADS=2 streamdag", []string{"KVIKIO_NTHREADS=2", "streamdag"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := words(tc.in)
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
	for _, bad := range []string{"a | b", "a > f", "echo $HOME", "a 'b", `a "$b"`, "a; b"} {
		_, err := words(bad)
		assert.Error(t, err, bad)
	}
}

func TestParseCommands(t *testing.T) {
	cmds, err := parseCommands("$ a \\\n  b\nout 1\nout 2\n$ c\n")
	require.NoError(t, err)
	assert.Equal(t, []command{{text: "a  b", want: "out 1\nout 2\n"}, {text: "c"}}, cmds)
	_, err = parseCommands("output first\n$ a\n")
	assert.Error(t, err)
	_, err = parseCommands("no command\n")
	assert.Error(t, err)
}
