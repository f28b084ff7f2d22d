package shard

import (
	"context"
	"sync"

	"github.com/streamdag/streamdag/lease"
)

// process is the process-wide backend handle: the backend and how many
// holders it has.
var process struct {
	mu      sync.Mutex
	backend *lease.Backend
	refs    int
}

// OpenBackend returns the process's lease backend, creating it (with no
// GPU: its Acquire hands out the CPU device) when no holder has it open,
// and counts one more holder: call ReleaseBackend once for each
// successful call. Errors are lease.New's (lease.ErrBackendAlreadyLive
// when another backend of the process, not made here, is live). Safe
// for concurrent use.
func OpenBackend() (*lease.Backend, error) {
	process.mu.Lock()
	defer process.mu.Unlock()
	if process.refs == 0 {
		b, err := lease.New(lease.WithSource("no GPU configured for Beam workers"))
		if err != nil {
			return nil, err
		}
		process.backend = b
	}
	process.refs++
	return process.backend, nil
}

// ReleaseBackend counts one holder less of the process's backend and,
// for the last one, closes it and waits for its close (lease's
// CloseAndWait under ctx), returning its error. A call with no holder
// does nothing and returns nil. Safe for concurrent use.
func ReleaseBackend(ctx context.Context) error {
	process.mu.Lock()
	defer process.mu.Unlock()
	if process.refs == 0 {
		return nil
	}
	process.refs--
	if process.refs > 0 {
		return nil
	}
	b := process.backend
	process.backend = nil
	_, err := b.CloseAndWait(ctx)
	return err
}

// backendHolders returns how many holders the process's backend has.
func backendHolders() int {
	process.mu.Lock()
	defer process.mu.Unlock()
	return process.refs
}
