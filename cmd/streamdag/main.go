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
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/streamdag/streamdag/internal/cli"
)

// errLaunchesFailed reports a run that finished with failed launches; its
// details were already printed.
var errLaunchesFailed = errors.New("some launches failed")

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
	return cli.Execute(ctx, newRoot(), args, stdin, stdout, stderr, errLaunchesFailed)
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "streamdag",
		Short:         "Data-oriented pipelines on GPUs and CPUs, as DAGs of kernels and buffers",
		SilenceUsage:  true,
		SilenceErrors: true,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) > 0 {
				return cli.Usagef("unknown command %q (known: run, graph, devices, topo, version)", args[0])
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error { return cmd.Help() },
	}
	root.AddCommand(newRunCmd(), newDevicesCmd(), newTopoCmd(), newGraphCmd(), newVersionCmd())
	return root
}
