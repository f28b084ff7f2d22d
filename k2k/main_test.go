package k2k_test

import (
	"testing"

	"github.com/streamdag/streamdag/internal/leaktest"
)

func TestMain(m *testing.M) { leaktest.Main(m) }
