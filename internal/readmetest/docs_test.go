package readmetest_test

import (
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"os"
	osexec "os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu/opencl"
	"github.com/streamdag/streamdag/internal/testdata"
)

// block is one fenced block of a Markdown file.
type block struct {
	file      string // path relative to the repository root
	line      int    // 1-based line of the opening fence
	info      string // the fence's info string: "sh", "go", "text", …
	body      string // the lines between the fences, each ending in "\n"
	directive string // "skip", "any-output", "opencl" or "files"; "" for none
	reason    string // the directive's text after its name
}

func (b block) String() string { return fmt.Sprintf("%s:%d", b.file, b.line) }

// directiveRE matches a directive line: <!-- doctest: NAME REASON -->.
var directiveRE = regexp.MustCompile(`^<!--\s*doctest:\s*([a-z-]+)\s*(.*?)\s*-->$`)

// directives are the names a directive may give.
var directives = []string{"skip", "any-output", "opencl", "files"}

// parseBlocks returns the fenced blocks of the Markdown text src, each
// with the directive on the last non-blank line before its fence.
func parseBlocks(t *testing.T, file, src string) []block {
	t.Helper()
	var blocks []block
	lines := strings.Split(src, "\n")
	lastText := ""
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "```") {
			if strings.TrimSpace(l) != "" {
				lastText = strings.TrimSpace(l)
			}
			continue
		}
		b := block{file: file, line: i + 1, info: strings.TrimSpace(strings.TrimPrefix(l, "```"))}
		if m := directiveRE.FindStringSubmatch(lastText); m != nil {
			require.Contains(t, directives, m[1], "%s: unknown directive %q", b, lastText)
			b.directive, b.reason = m[1], m[2]
		}
		var body strings.Builder
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			body.WriteString(lines[i] + "\n")
		}
		require.Less(t, i, len(lines), "%s: the block is not closed", b)
		b.body = body.String()
		blocks = append(blocks, b)
		lastText = ""
	}
	return blocks
}

// command is one "$ " line of a ```sh block (with its continuation lines)
// and the output the block gives for it.
type command struct {
	text string
	want string
}

// parseCommands splits a ```sh block into its commands: a line starting
// with "$ " is a command (a line ending in a backslash continues onto the
// next), and the lines after it, up to the next "$ " line or the end of the
// block, are its output.
func parseCommands(body string) ([]command, error) {
	var cmds []command
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		text, ok := strings.CutPrefix(lines[i], "$ ")
		if !ok {
			if len(cmds) == 0 {
				return nil, fmt.Errorf("line %q comes before the first \"$ \" command", lines[i])
			}
			cmds[len(cmds)-1].want += lines[i] + "\n"
			continue
		}
		for strings.HasSuffix(text, "\\") && i+1 < len(lines) {
			i++
			text = strings.TrimSuffix(text, "\\") + " " + strings.TrimSpace(lines[i])
		}
		cmds = append(cmds, command{text: text})
	}
	if len(cmds) == 0 {
		return nil, errors.New("no \"$ \" command")
	}
	return cmds, nil
}

// words splits a command line as a POSIX shell does for the forms the
// documents use: blanks separate words, single quotes keep everything,
// double quotes keep everything but backslash escapes, a backslash
// escapes the next character, and a word starting with # starts a
// comment. Anything else a shell would treat specially (pipes,
// redirections, $ expansion, ;, &) is an error: such a command cannot be
// run here and must be marked.
func words(line string) ([]string, error) {
	var out []string
	var w strings.Builder
	inWord := false
	for i := 0; i < len(line); i++ {
		c := line[i]
		switch {
		case c == ' ' || c == '\t':
			if inWord {
				out = append(out, w.String())
				w.Reset()
				inWord = false
			}
		case c == '#' && !inWord:
			return out, nil
		case c == '\'':
			j := strings.IndexByte(line[i+1:], '\'')
			if j < 0 {
				return nil, errors.New("unclosed single quote")
			}
			w.WriteString(line[i+1 : i+1+j])
			i += j + 1
			inWord = true
		case c == '"':
			i++
			for ; i < len(line) && line[i] != '"'; i++ {
				if line[i] == '$' || line[i] == '`' {
					return nil, fmt.Errorf("expansion %q in double quotes", line[i])
				}
				if line[i] == '\\' && i+1 < len(line) {
					i++
				}
				w.WriteByte(line[i])
			}
			if i == len(line) {
				return nil, errors.New("unclosed double quote")
			}
			inWord = true
		case c == '\\' && i+1 < len(line):
			i++
			w.WriteByte(line[i])
			inWord = true
		case strings.IndexByte("|&;<>()$`*?[", c) >= 0:
			return nil, fmt.Errorf("shell syntax %q is not supported", c)
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		out = append(out, w.String())
	}
	return out, nil
}

// envRE matches a leading NAME=value word of a command.
var envRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// cliArgs returns the environment assignments and the arguments of a
// streamdag command: "streamdag ARGS" or "go run ./cmd/streamdag ARGS",
// after any NAME=value words. ok is false for any other command.
func cliArgs(ws []string) (env, args []string, ok bool) {
	for len(ws) > 0 && envRE.MatchString(ws[0]) {
		env, ws = append(env, ws[0]), ws[1:]
	}
	switch {
	case len(ws) >= 1 && ws[0] == "streamdag":
		return env, ws[1:], true
	case len(ws) >= 3 && ws[0] == "go" && ws[1] == "run" && ws[2] == "./cmd/streamdag":
		return env, ws[3:], true
	}
	return nil, nil, false
}

// Masks: what the normaliser replaces, in both the document's output and
// the command's, before they are compared.
var (
	// durationRE matches a duration (a number and ns, µs, us, ms or s);
	// one that follows "modeled" or "modelled" and up to four words is a
	// figure of the cost model, which does not depend on timing, and is
	// kept.
	durationRE = regexp.MustCompile(`(modell?ed (?:[a-z]+ ){0,4})?\b\d+(?:\.\d+)? ?(?:ns|µs|us|ms|s)\b`)
	// rateRE matches a throughput: "23.0 M rows/s".
	rateRE = regexp.MustCompile(`\b\d+(?:\.\d+)? M rows/s`)
	// stampRE matches a timestamp: "2026-12-01 13:47 UTC".
	stampRE = regexp.MustCompile(`\b\d{4}-\d\d-\d\d[ T]\d\d:\d\d(?::\d\d(?:\.\d+)?)?(?: ?UTC|Z)?`)
)

// normalise masks the durations, rates and timestamps of out (see the
// masks above) and drops trailing blanks of each line.
func normalise(out string) string {
	out = stampRE.ReplaceAllString(out, "<time>")
	out = rateRE.ReplaceAllString(out, "<rate>")
	out = durationRE.ReplaceAllStringFunc(out, func(m string) string {
		if strings.HasPrefix(m, "model") {
			return m
		}
		return "<duration>"
	})
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " \t")
	}
	return strings.Join(lines, "\n")
}

// match reports whether got's lines match want's, both normalised: a want
// line "..." matches any run of lines (none included), a want line ending
// in "..." matches a line that starts with the text before it, and every
// other line must be equal.
func match(want, got []string) bool {
	if len(want) == 0 {
		return len(got) == 0
	}
	w := want[0]
	if w == "..." {
		for k := 0; k <= len(got); k++ {
			if match(want[1:], got[k:]) {
				return true
			}
		}
		return false
	}
	if len(got) == 0 {
		return false
	}
	if p, ok := strings.CutSuffix(w, "..."); ok {
		if !strings.HasPrefix(got[0], p) {
			return false
		}
	} else if w != got[0] {
		return false
	}
	return match(want[1:], got[1:])
}

// repo is the repository as the test sees it.
type repo struct {
	root string // absolute path of the repository root
	cli  string // the streamdag binary, built once
}

// docs returns the Markdown files the test reads, relative to the root.
func (r repo) docs(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	for _, pat := range []string{"docs/*.md", "bench/results/*.md"} {
		m, err := filepath.Glob(filepath.Join(r.root, pat))
		require.NoError(t, err)
		for _, f := range m {
			rel, err := filepath.Rel(r.root, f)
			require.NoError(t, err)
			files = append(files, rel)
		}
	}
	return files
}

// tally counts what the test did, for its log.
type tally struct {
	commands, programs, fragments int
	anyOutput                     int // commands run whose output is not compared
	skipped                       []string
}

// TestDocs runs the commands and programs of README.md, docs/*.md and
// bench/results/*.md (see docs/doctest.md for the conventions) and checks
// the Go fragments parse.
func TestDocs(t *testing.T) {
	if _, err := osexec.LookPath("go"); err != nil {
		t.Skip("go command not found:", err)
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	r := repo{root: root, cli: filepath.Join(t.TempDir(), "streamdag")}
	build := osexec.CommandContext(t.Context(), "go", "build", "-o", r.cli, "./cmd/streamdag")
	build.Dir = root
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./cmd/streamdag:\n%s", out)

	var n tally
	for _, file := range r.docs(t) {
		src, err := os.ReadFile(filepath.Join(root, file))
		require.NoError(t, err)
		blocks := parseBlocks(t, file, string(src))
		t.Run(file, func(t *testing.T) {
			if file == "README.md" {
				// The README shows the set-up, a program and the CLI's main
				// uses: a parser that misses them would pass on nothing.
				cmds, programs := 0, 0
				for _, b := range blocks {
					if c, err := parseCommands(b.body); b.info == "sh" && err == nil {
						cmds += len(c)
					}
					if b.info == "go" && isProgram(b.body) {
						programs++
					}
				}
				assert.GreaterOrEqual(t, cmds, 5, "README.md's commands")
				assert.GreaterOrEqual(t, programs, 1, "README.md's programs")
			}
			for i, b := range blocks {
				switch {
				case b.info == "sh":
					t.Run(fmt.Sprintf("line%d", b.line), func(t *testing.T) { r.runShell(t, b, &n) })
				case b.info == "go" && isProgram(b.body):
					var want *block
					if i+1 < len(blocks) && blocks[i+1].info == "text" {
						want = &blocks[i+1]
					}
					t.Run(fmt.Sprintf("line%d", b.line), func(t *testing.T) { r.runProgram(t, b, want, &n) })
				case b.info == "go":
					if b.directive == "skip" {
						n.skipped = append(n.skipped, b.String()+": "+b.reason)
						continue
					}
					assert.NoError(t, parseFragment(b.body), "%s: a Go fragment that does not parse (mark it <!-- doctest: skip REASON --> if it is not Go)", b)
					n.fragments++
				}
			}
		})
	}
	t.Logf("ran %d commands (%d with output not compared) and %d programs; %d Go fragments parse; %d blocks not run:\n\t%s",
		n.commands, n.anyOutput, n.programs, n.fragments, len(n.skipped), strings.Join(n.skipped, "\n\t"))
}

// runShell runs the commands of one ```sh block and compares their output.
func (r repo) runShell(t *testing.T, b block, n *tally) {
	cmds, err := parseCommands(b.body)
	require.NoError(t, err, "%s: a ```sh block holds \"$ command\" lines, each followed by its output", b)
	if b.directive == "skip" {
		require.NotEmpty(t, b.reason, "%s: a skip directive gives its reason", b)
		n.skipped = append(n.skipped, fmt.Sprintf("%s (%d commands): %s", b, len(cmds), b.reason))
		t.Skipf("%s: %s", b, b.reason)
	}
	if b.directive == "opencl" {
		needOpenCL(t, b)
	}
	for _, c := range cmds {
		ws, err := words(c.text)
		require.NoError(t, err, "%s: %q", b, c.text)
		env, args, ok := cliArgs(ws)
		require.True(t, ok, "%s: %q is not a streamdag command; mark the block <!-- doctest: skip REASON -->", b, c.text)
		if gpuNode() && usesAutoDevice(args) {
			t.Skipf("%s: this host has a GPU device node, so --device auto may run on a GPU; the documents show a host without one", b)
		}
		got, status := r.runCLI(t, b, env, args)
		n.commands++
		if b.directive == "any-output" {
			n.anyOutput++
			assert.Zero(t, status, "%s: $ %s\n%s", b, c.text, got)
			continue
		}
		want := normalise(c.want)
		assert.True(t, match(strings.Split(want, "\n"), strings.Split(normalise(got), "\n")),
			"%s: $ %s\nthe document shows (normalised):\n%s\n\nthe command printed (normalised):\n%s", b, c.text, want, normalise(got))
	}
}

// shared maps the documents' paths of the data sets and topologies beside
// the repository to the files testdata finds (which skip the test, or fail
// it under CI, when absent).
var shared = []struct {
	prefix string
	file   func(testing.TB, string) string
}{
	{"../shared/data/", testdata.File},
	{"../shared/topologies/", testdata.TopologyFile},
}

// runCLI runs the streamdag binary with args from the repository root,
// with GOMAXPROCS=2 (the documents' outputs are a 2-core machine's: the
// number of streams and so of partitions follows it) and env, and returns
// what it printed on stdout and stderr, in order, followed by "exit status
// N" when it exits with N > 0 (as go run prints), and N.
func (r repo) runCLI(t *testing.T, b block, env, args []string) (string, int) {
	t.Helper()
	var dirs [][2]string
	for i, a := range args {
		for _, s := range shared {
			if before, rel, ok := strings.Cut(a, s.prefix); ok {
				dir := strings.TrimSuffix(s.file(t, rel), rel)
				args[i] = before + dir + rel
				dirs = append(dirs, [2]string{dir, s.prefix})
			}
		}
	}
	cmd := osexec.CommandContext(t.Context(), r.cli, args...)
	cmd.Dir = r.root
	cmd.Env = append(append(os.Environ(), "GOMAXPROCS=2"), env...)
	out, err := cmd.CombinedOutput()
	got, status := string(out), 0
	var exit *osexec.ExitError
	if errors.As(err, &exit) {
		status = exit.ExitCode()
		got += fmt.Sprintf("exit status %d\n", status)
	} else {
		require.NoError(t, err, "%s: streamdag %s", b, strings.Join(args, " "))
	}
	for _, d := range dirs {
		got = strings.ReplaceAll(got, d[0], d[1])
	}
	return got, status
}

// usesAutoDevice reports whether a streamdag command runs the flights job
// with --device auto (the default) on the real devices.
func usesAutoDevice(args []string) bool {
	if len(args) < 2 || args[0] != "run" || slices.Contains(args, "--help") {
		return false
	}
	for i, a := range args {
		if strings.HasPrefix(a, "--topology") || a == "--device=cpu" || a == "--device=opencl" ||
			(a == "--device" && i+1 < len(args) && args[i+1] != "auto") {
			return false
		}
	}
	return true
}

// gpuNode reports whether this host has a GPU's kernel device node, where
// --device auto looks for an OpenCL GPU.
func gpuNode() bool {
	for _, pat := range []string{"/dev/nvidia[0-9]*", "/dev/dri/renderD*", "/dev/kfd"} {
		if m, _ := filepath.Glob(pat); len(m) > 0 {
			return true
		}
	}
	return false
}

// needOpenCL skips the test without an OpenCL device (failing it under
// CI, which installs PoCL), as the repository's OpenCL tests do.
func needOpenCL(t *testing.T, b block) {
	t.Helper()
	ds, err := opencl.Devices()
	if err == nil && len(ds) > 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("%s needs an OpenCL device: %v", b, err)
	}
	t.Skipf("%s needs an OpenCL device (install pocl-opencl-icd): %v", b, err)
}

// isProgram reports whether a ```go block is a complete program.
func isProgram(src string) bool {
	return regexp.MustCompile(`(?m)^package main$`).MatchString(src)
}

// parseFragment parses a Go fragment as a file, as declarations, or as
// statements.
func parseFragment(src string) error {
	fset := token.NewFileSet()
	_, err := parser.ParseFile(fset, "", src, parser.SkipObjectResolution)
	if err == nil {
		return nil
	}
	if _, err2 := parser.ParseFile(fset, "", "package p\n"+src, parser.SkipObjectResolution); err2 == nil {
		return nil
	}
	if _, err2 := parser.ParseFile(fset, "", "package p\nfunc _() {\n"+src+"\n}", parser.SkipObjectResolution); err2 == nil {
		return nil
	}
	return err
}

// runProgram writes a ```go program into a module of its own outside the
// repository, makes it depend on this clone as README.md says (go mod
// edit -replace, then go mod tidy), runs it with go run and compares its
// stdout with the ```text block that follows it.
func (r repo) runProgram(t *testing.T, b block, want *block, n *tally) {
	if b.directive == "skip" {
		n.skipped = append(n.skipped, b.String()+": "+b.reason)
		t.Skipf("%s: %s", b, b.reason)
	}
	require.NotNil(t, want, "%s: a program is followed by a ```text block with its output", b)
	if b.directive == "opencl" {
		needOpenCL(t, b)
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(b.body), 0o644))
	if b.directive == "files" {
		for _, p := range strings.Fields(b.reason) {
			require.NoError(t, os.CopyFS(filepath.Join(dir, filepath.Base(p)), os.DirFS(filepath.Join(r.root, p))),
				"%s: files %s", b, p)
		}
	}
	env := append(os.Environ(), "GOFLAGS=-mod=mod", "GOWORK=off")
	for _, args := range [][]string{
		{"mod", "init", "example.com/doc"},
		{"mod", "edit", "-replace", "github.com/streamdag/streamdag=" + r.root},
		{"mod", "tidy"},
	} {
		cmd := osexec.CommandContext(t.Context(), "go", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s: go %s:\n%s", b, strings.Join(args, " "), out)
	}
	cmd := osexec.CommandContext(t.Context(), "go", "run", ".")
	cmd.Dir, cmd.Env = dir, env
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "%s: go run:\n%s%s", b, out, stderr.String())
	n.programs++
	w := normalise(want.body)
	g := normalise(string(out))
	assert.True(t, match(strings.Split(w, "\n"), strings.Split(g, "\n")),
		"%s: the program's output, %s, differs:\nshown (normalised):\n%s\n\nprinted (normalised):\n%s", b, want, w, g)
}
