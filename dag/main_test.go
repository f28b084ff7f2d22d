package dag_test

import (
	"context"
	"flag"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/streamdag/streamdag/dag"
)

var update = flag.Bool("update", false, "rewrite golden files")

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// nop is a kernel that does nothing; these tests only describe graphs.
func nop(context.Context, dag.Launch) error { return nil }

// name returns prefix followed by i in decimal.
func name(prefix string, i int) string { return prefix + strconv.Itoa(i) }
