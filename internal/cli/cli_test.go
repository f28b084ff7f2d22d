package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/assert"
)

var errShown = errors.New("already shown")

func tree(runErr error) *cobra.Command {
	root := &cobra.Command{Use: "tool", Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return nil }}
	sub := &cobra.Command{Use: "do", Args: cobra.ExactArgs(1), RunE: func(*cobra.Command, []string) error { return runErr }}
	sub.Flags().Int("n", 0, "a number")
	root.AddCommand(sub)
	return root
}

// TestExecute: each kind of error gets its exit status and one message
// on stderr, naming the command; a reported error prints nothing more.
func TestExecute(t *testing.T) {
	for _, tc := range []struct {
		name   string
		args   []string
		runErr error
		code   int
		stderr string
	}{
		{"ok", []string{"do", "x"}, nil, 0, ""},
		{"bad flag", []string{"do", "x", "--n", "two"}, nil, 2, `tool: invalid argument "two" for "--n" flag: strconv.ParseInt: parsing "two": invalid syntax (see 'tool do --help')` + "\n"},
		{"unknown flag", []string{"do", "x", "--m"}, nil, 2, "tool: unknown flag: --m (see 'tool do --help')\n"},
		{"args", []string{"do"}, nil, 2, "tool: accepts 1 arg(s), received 0 (see 'tool do --help')\n"},
		{"root args", []string{"what"}, nil, 2, "tool: unknown command \"what\" for \"tool\" (see 'tool --help')\n"},
		{"usagef", []string{"do", "x"}, Usagef("--n %d: want 1 or more", 0), 2, "tool: --n 0: want 1 or more (see 'tool do --help')\n"},
		{"failed", []string{"do", "x"}, errors.New("disk full"), 1, "tool: disk full\n"},
		{"reported", []string{"do", "x"}, errShown, 1, ""},
		{"reported wrapped", []string{"do", "x"}, errors.Join(errShown), 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := Execute(t.Context(), tree(tc.runErr), tc.args, strings.NewReader(""), &stdout, &stderr, errShown)
			assert.Equal(t, tc.code, code)
			assert.Equal(t, tc.stderr, stderr.String())
		})
	}
}

// TestUsageErrorUnwraps: a UsageError made with %w reaches its cause.
func TestUsageErrorUnwraps(t *testing.T) {
	err := Usagef("--in: %w", errShown)
	assert.ErrorIs(t, err, errShown)
	assert.EqualError(t, err, "--in: already shown")
}
