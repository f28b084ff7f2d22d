package shard_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/beam/shard"
)

// TestRunsShareOneBackend: the DoFns of successive runs in one process
// hold the process's one backend: a run leaves it held (Beam's Go
// harness does not call Teardown when a loopback worker stops), and the
// next run's DoFns take the same one.
func TestRunsShareOneBackend(t *testing.T) {
	sharded(t, shard.Config{Shards: 1})
	assert.Positive(t, shard.BackendHolders())
	a, err := shard.OpenBackend()
	require.NoError(t, err)
	defer shard.ReleaseBackend(t.Context())
	n := shard.BackendHolders()
	sharded(t, shard.Config{Shards: 1})
	assert.Greater(t, shard.BackendHolders(), n)
	b, err := shard.OpenBackend()
	require.NoError(t, err)
	defer shard.ReleaseBackend(t.Context())
	assert.Same(t, a, b)
}
