// Command streamdag runs streamdag's pipelines and shows its devices.
//
//	streamdag run flights [--input FILE] [--airports FILE] [--min-delay N] [--top K]
//	                      [--streams N] [--out FILE.csv|FILE.json] [--dot FILE]
//	                      [--trace FILE.json] [--report FILE.json] [--metrics FILE.json]
//	                      [--errors-dot FILE] [--fail KERNEL[:panic]]... [--json] [--quiet]
//	                      [--topology sim:NAME|FILE [--lose-device gpuN@P%]]
//	streamdag graph [--in plan.dot] [--out FILE.svg|FILE.png]
//	streamdag devices [--json]
//	streamdag topo [--file topo.txt|sim:NAME] [--p2p p2p.txt] [--gpu NAME] [--json]
//	streamdag version
//
// Exit status: 0 on success; 2 on a usage error (an unknown command, flag or
// pipeline, a missing or bad argument or flag value), reported before
// anything runs; 1 when a command failed (a launch failed, a result is
// partial, a file could not be read or written).
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// errLaunchesFailed reports a run that finished with failed launches; its
// details were already printed.
var errLaunchesFailed = errors.New("some launches failed")

// usageError is a command line that cannot run as written: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

// usagef returns a usageError with the message format makes.
func usagef(format string, args ...any) error { return usageError{fmt.Errorf(format, args...)} }

func main() {
	// The first SIGINT or SIGTERM cancels the run (which then stops
	// scheduling launches and removes its temporary files); a second one
	// kills the process as usual.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the command line args and returns its exit status (see the
// package doc). Every error is printed once, on stderr, as
// "streamdag: …"; a usage error adds where to find help.
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	root := newRoot()
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	var usage usageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "streamdag: %v (see '%s --help')\n", err, cmd.CommandPath())
		return 2
	case errors.Is(err, errLaunchesFailed):
		return 1
	default:
		fmt.Fprintln(stderr, "streamdag:", err)
		return 1
	}
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "streamdag",
		Short:         "Data-oriented pipelines on GPUs and CPUs, as DAGs of kernels and buffers",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return usagef("unknown command %q (known: run, graph, devices, topo, version)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.AddCommand(newRunCmd(), newDevicesCmd(), newTopoCmd(), newGraphCmd(), newVersionCmd())
	// Wrong positional arguments are usage errors, for every command.
	var wrap func(*cobra.Command)
	wrap = func(c *cobra.Command) {
		if check := c.Args; check != nil {
			c.Args = func(c *cobra.Command, args []string) error {
				if err := check(c, args); err != nil {
					var u usageError
					if errors.As(err, &u) {
						return err
					}
					return usageError{err}
				}
				return nil
			}
		}
		for _, sub := range c.Commands() {
			wrap(sub)
		}
	}
	wrap(root)
	return root
}
