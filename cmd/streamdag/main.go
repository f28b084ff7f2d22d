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
// Exit status: 0 on success, 1 when a launch failed or a command failed,
// 2 on a usage error.
package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"
)

// errLaunchesFailed reports a run that finished with failed launches; its
// details were already printed.
var errLaunchesFailed = errors.New("some launches failed")

func main() {
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	root := newRoot()
	root.SetArgs(args)
	err := root.Execute()
	switch {
	case err == nil:
		return 0
	case errors.Is(err, errUsage):
		return 2
	default:
		if !errors.Is(err, errLaunchesFailed) {
			fmt.Fprintln(root.ErrOrStderr(), "streamdag:", err)
		}
		return 1
	}
}

var errUsage = errors.New("usage")

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "streamdag",
		Short:         "Data-oriented pipelines on GPUs and CPUs, as DAGs of kernels and buffers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		fmt.Fprintf(c.ErrOrStderr(), "streamdag: %v (see '%s --help')\n", err, c.CommandPath())
		return errUsage
	})
	root.AddCommand(newRunCmd(), newDevicesCmd(), newTopoCmd(), newGraphCmd(), newVersionCmd())
	return root
}
