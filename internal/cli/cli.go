package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// UsageError is a command line that cannot run as written (an unknown
// command or flag, a missing or bad argument or flag value): exit status 2.
type UsageError struct{ Err error }

// Error returns Err's text.
func (e UsageError) Error() string { return e.Err.Error() }

// Unwrap returns Err.
func (e UsageError) Unwrap() error { return e.Err }

// Usagef returns a UsageError with the message format makes (fmt.Errorf:
// %w wraps).
func Usagef(format string, args ...any) error { return UsageError{fmt.Errorf(format, args...)} }

// Execute runs the command tree root with args, stdin, stdout and stderr,
// and returns its exit status:
//
//   - 0 when the command succeeded;
//   - 2 for a UsageError, printed on stderr as
//     "NAME: ERROR (see 'COMMAND --help')", NAME being root's name and
//     COMMAND the path of the command that refused it. A bad flag and
//     wrong positional arguments of any command in the tree are usage
//     errors;
//   - 1 for any other error, printed as "NAME: ERROR", except an error
//     that errors.Is reported: the command has printed what went wrong
//     itself, and Execute prints nothing more.
//
// Execute installs root's flag error function and wraps the Args check
// of every command in the tree; call it once per tree. Cancelling ctx
// cancels the command's context.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdin io.Reader, stdout, stderr io.Writer, reported error) int {
	root.SilenceUsage, root.SilenceErrors = true, true
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return UsageError{err} })
	wrapArgs(root)
	root.SetArgs(args)
	root.SetIn(stdin)
	root.SetOut(stdout)
	root.SetErr(stderr)
	cmd, err := root.ExecuteContextC(ctx)
	var usage UsageError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &usage):
		if cmd == nil {
			cmd = root
		}
		fmt.Fprintf(stderr, "%s: %v (see '%s --help')\n", root.Name(), err, cmd.CommandPath())
		return 2
	case reported != nil && errors.Is(err, reported):
		return 1
	default:
		fmt.Fprintf(stderr, "%s: %v\n", root.Name(), err)
		return 1
	}
}

// wrapArgs makes the error of c's Args check, and of those of its
// subcommands, a UsageError.
func wrapArgs(c *cobra.Command) {
	if check := c.Args; check != nil {
		c.Args = func(c *cobra.Command, args []string) error {
			if err := check(c, args); err != nil {
				if _, ok := errors.AsType[UsageError](err); ok {
					return err
				}
				return UsageError{err}
			}
			return nil
		}
	}
	for _, sub := range c.Commands() {
		wrapArgs(sub)
	}
}
