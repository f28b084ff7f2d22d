package main

import (
	"bytes"
	"errors"
	"fmt"
	"golang.org/x/term"
	"io"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/streamdag/streamdag/internal/outfile"

	"github.com/streamdag/streamdag/internal/cli"
)

// errNoGraphviz reports that Graphviz's dot is not on PATH.
var errNoGraphviz = errors.New("dot not found on PATH: Graphviz is not installed " +
	"(Debian/Ubuntu: apt-get install graphviz; Fedora: dnf install graphviz; macOS: brew install graphviz)")

func newGraphCmd() *cobra.Command {
	var in, out, format string
	cmd := &cobra.Command{
		Use:   "graph [--in plan.dot] [--out FILE.svg|FILE.png]",
		Short: "Render a DOT file (from run --dot or --errors-dot) to SVG or PNG with Graphviz",
		Long: `Renders Graphviz DOT, such as the plan written by 'streamdag run flights --dot
plan.dot', to SVG or PNG with Graphviz's dot command. The format follows the
--out extension (.svg or .png), else --format (default svg). With no --in it
reads DOT from stdin; with no --out it writes to stdout.

Graphviz must be installed: apt-get install graphviz.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return renderGraph(cmd.InOrStdin(), cmd.OutOrStdout(), in, out, format)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&in, "in", "", "DOT file to render (default: stdin)")
	fl.StringVar(&out, "out", "", "output FILE.svg or FILE.png (default: stdout)")
	fl.StringVar(&format, "format", "", "svg or png when --out has no such extension (default svg)")
	return cmd
}

// renderGraph renders DOT from in (a path, or stdin when "") to out (a
// path, or stdout when "") with Graphviz. It checks its arguments before
// looking for Graphviz, and names the install command when dot is absent.
func renderGraph(stdin io.Reader, stdout io.Writer, in, out, format string) error {
	switch ext := strings.ToLower(filepath.Ext(out)); {
	case ext == ".svg" || ext == ".png":
		if format != "" && format != ext[1:] {
			return cli.Usagef("--format %s contradicts --out %s", format, out)
		}
		format = ext[1:]
	case out != "" && format == "":
		return cli.Usagef("--out %s: want a .svg or .png file name (or give --format)", out)
	case format == "":
		format = "svg"
	}
	if format != "svg" && format != "png" {
		return cli.Usagef("--format %s: want svg or png", format)
	}
	var outs outfile.Set
	defer outs.Discard()
	outFile, err := outs.Add("--out", out)
	if err != nil {
		return err
	}
	var src []byte
	if in == "" {
		if f, ok := stdin.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
			return cli.Usagef("no --in FILE, and standard input is a terminal: pass --in plan.dot or pipe DOT in")
		}
		src, err = io.ReadAll(stdin)
	} else {
		src, err = os.ReadFile(in)
	}
	if err != nil {
		return fmt.Errorf("--in: %w", err)
	}
	if len(bytes.TrimSpace(src)) == 0 {
		return fmt.Errorf("no DOT to render (empty input %s)", orStdin(in))
	}
	dot, err := osexec.LookPath("dot")
	if err != nil {
		return errNoGraphviz
	}
	c := osexec.Command(dot, "-T"+format)
	c.Stdin = bytes.NewReader(src)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	img, err := c.Output()
	if err != nil {
		return fmt.Errorf("dot -T%s %s: %w: %s", format, orStdin(in), err, strings.TrimSpace(stderr.String()))
	}
	if outFile == nil {
		_, err = stdout.Write(img)
		return err
	}
	return outFile.Commit(func(w io.Writer) error { _, err := w.Write(img); return err })
}

func orStdin(path string) string {
	if path == "" {
		return "(stdin)"
	}
	return path
}
