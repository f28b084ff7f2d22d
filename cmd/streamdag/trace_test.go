package main

import (
	"bytes"
	"encoding/json"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRunFlightsTrace(t *testing.T) {
	dir := t.TempDir()
	tracePath := filepath.Join(dir, "t.json")
	code, _, errs := runArgs(t, "run", "flights", "--streams", "3", "--fail", "filter[1]", "--trace", tracePath, "--quiet")
	require.Equal(t, 1, code, errs)
	b, err := os.ReadFile(tracePath)
	require.NoError(t, err)
	var tf struct {
		TraceEvents []struct {
			Name, Ph, Cat, Cname string
			Ts                   float64
			Pid, Tid             int
			ID                   uint64
			Args                 map[string]any
		} `json:"traceEvents"`
	}
	require.NoError(t, json.Unmarshal(b, &tf))
	tracks := map[string]bool{}
	phases := map[string]int{}
	kinds := map[string]string{}
	for _, e := range tf.TraceEvents {
		phases[e.Ph]++
		if e.Name == "thread_name" {
			tracks[e.Args["name"].(string)] = true
		}
		if e.Ph == "X" || e.Ph == "i" {
			kinds[e.Name] = e.Ph + " " + e.Cat + " " + e.Cname
		}
	}
	assert.Equal(t, map[string]bool{"cpu stream 0": true, "cpu stream 1": true, "cpu stream 2": true}, tracks)
	assert.Equal(t, "X launch,failed terrible", kinds["filter[1]"])
	assert.Equal(t, "i launch,skipped grey", kinds["partial[1]"])
	assert.Equal(t, "X launch ", kinds["merge"])
	assert.Positive(t, phases["s"], "flow arrows for the event waits")
	assert.Equal(t, phases["s"], phases["f"])
}

func TestRunFlightsJSONOutput(t *testing.T) {
	code, out, errs := runArgs(t, "run", "flights", "--streams", "3", "--top", "2", "--json", "--quiet")
	require.Equal(t, 0, code, errs)
	var s runSummary
	require.NoError(t, json.Unmarshal([]byte(out), &s), "stdout is one JSON document:\n%s", out)
	require.Len(t, s.Rows, 2)
	assert.Equal(t, "17", s.Rows[0].Key)
	assert.EqualValues(t, 6888, s.Rows[0].Count)
	assert.EqualValues(t, 200000, s.Summary.InputRows)
	assert.Equal(t, []int{3}, s.Summary.StreamsPerDevice)
	assert.Equal(t, []string{"cpu"}, s.Summary.Devices)
	assert.Equal(t, s.Summary.Launches, s.Summary.OK)
	assert.Empty(t, s.Problems)
	assert.Empty(t, s.Lost)

	code, out, _ = runArgs(t, "run", "flights", "--streams", "3", "--json", "--quiet", "--fail", "filter[2]")
	require.Equal(t, 1, code)
	s = runSummary{}
	require.NoError(t, json.Unmarshal([]byte(out), &s))
	assert.True(t, s.Partial)
	require.Len(t, s.Lost, 1)
	assert.Equal(t, 2, s.Lost[0].Partition, "lost partitions are numbers, not prose")
	assert.EqualValues(t, 200000-2*200000/3, s.Lost[0].Rows)
	assert.EqualValues(t, 2*200000/3, s.Lost[0].RowLo)
	assert.EqualValues(t, 200000, s.Lost[0].RowHi)
	assert.EqualValues(t, 1, s.Lost[0].Failure)
	assert.Equal(t, `exec: kernel "filter[2]": dag: injected failure`, s.Lost[0].Error)
	assert.Equal(t, 1, s.Summary.Failed)
	assert.Equal(t, 1, s.Summary.Skipped)
	require.Len(t, s.Problems, 2)
	assert.Equal(t, "filter[2]", s.Problems[0].Kernel)
	assert.Equal(t, []string{"filter[2]"}, s.Problems[1].Chain)
}

func TestShowProgress(t *testing.T) {
	env := func(kv ...string) func(string) string {
		return func(k string) string {
			for i := 0; i+1 < len(kv); i += 2 {
				if kv[i] == k {
					return kv[i+1]
				}
			}
			return ""
		}
	}
	var buf bytes.Buffer
	assert.False(t, showProgress(&buf, false, env()), "not a terminal")
	f, err := os.Create(filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err)
	defer f.Close()
	assert.False(t, showProgress(f, false, env()), "a file is not a terminal")
	// A terminal, when the test has one, still gets no bar in CI or with --quiet.
	assert.False(t, showProgress(os.Stderr, true, env()))
	assert.False(t, showProgress(os.Stderr, false, env("CI", "true")))
	assert.False(t, showProgress(os.Stderr, false, env("TERM", "dumb")))
}

func TestProgressBar(t *testing.T) {
	var buf bytes.Buffer
	p := &progress{total: 40}
	p.start(&buf, "flights", 0)
	p.done.Add(25)
	p.Stop() // waits for the drawing goroutine, fills the bar and clears it
	out := buf.String()
	assert.Contains(t, out, "flights")
	assert.Contains(t, out, "/40, ", "the count of launches")
	assert.True(t, strings.HasSuffix(out, strings.Repeat(" ", 20)+"\r"), "the bar is cleared at the end: %q", out)

	var quiet bytes.Buffer
	p = &progress{total: 10}
	p.start(&quiet, "flights", time.Hour)
	p.Stop()
	assert.Empty(t, quiet.String(), "a run shorter than the delay draws nothing")

	var none *progress
	none.start(&quiet, "x", 0)
	none.Stop()
}

func TestGraphCommand(t *testing.T) {
	dir := t.TempDir()
	dotPath := filepath.Join(dir, "plan.dot")
	code, _, errs := runArgs(t, "run", "flights", "--quiet", "--dot", dotPath)
	require.Equal(t, 0, code, errs)

	if _, err := osexec.LookPath("dot"); err != nil {
		t.Log("Graphviz not installed: rendering not checked (apt-get install graphviz)")
	} else {
		svg := filepath.Join(dir, "plan.svg")
		code, _, errs = runArgs(t, "graph", "--in", dotPath, "--out", svg)
		require.Equal(t, 0, code, errs)
		b, err := os.ReadFile(svg)
		require.NoError(t, err)
		assert.Contains(t, string(b), "<svg")
		assert.Contains(t, string(b), "cpu stream 0")

		png := filepath.Join(dir, "plan.png")
		code, _, errs = runArgs(t, "graph", "--in", dotPath, "--out", png)
		require.Equal(t, 0, code, errs)
		b, err = os.ReadFile(png)
		require.NoError(t, err)
		assert.True(t, bytes.HasPrefix(b, []byte("\x89PNG")), "a PNG file")

		code, out, errs := runArgs(t, "graph", "--in", dotPath)
		require.Equal(t, 0, code, errs)
		assert.True(t, strings.Contains(out, "<svg"), "SVG on stdout by default")

		bad := filepath.Join(dir, "bad.dot")
		require.NoError(t, os.WriteFile(bad, []byte("digraph { a -> }"), 0o644))
		code, _, errs = runArgs(t, "graph", "--in", bad, "--out", svg)
		assert.Equal(t, 1, code)
		assert.Contains(t, errs, "bad.dot")
	}

	// Without Graphviz on PATH, the command says how to install it.
	t.Setenv("PATH", "")
	code, _, errs = runArgs(t, "graph", "--in", dotPath, "--out", filepath.Join(dir, "x.svg"))
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "apt-get install graphviz")
}

func TestGraphCommandBadArgs(t *testing.T) {
	dir := t.TempDir()
	dotPath := filepath.Join(dir, "g.dot")
	require.NoError(t, os.WriteFile(dotPath, []byte("digraph { a -> b }"), 0o644))
	cases := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"bad extension", []string{"graph", "--in", dotPath, "--out", "x.gif"}, 2, "want a .svg or .png"},
		{"bad format", []string{"graph", "--in", dotPath, "--format", "pdf"}, 2, "want svg or png"},
		{"format contradicts", []string{"graph", "--in", dotPath, "--out", "x.svg", "--format", "png"}, 2, "contradicts"},
		{"missing input", []string{"graph", "--in", filepath.Join(dir, "none.dot")}, 1, "none.dot"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, _, errs := runArgs(t, c.args...)
			assert.Equal(t, c.code, code)
			assert.Contains(t, errs, c.want)
		})
	}
	empty := filepath.Join(dir, "empty.dot")
	require.NoError(t, os.WriteFile(empty, nil, 0o644))
	code, _, errs := runArgs(t, "graph", "--in", empty)
	assert.Equal(t, 1, code)
	assert.Contains(t, errs, "no DOT to render")
}
