//go:build !linux

package kvio

import (
	"errors"
	"os"
	"sync/atomic"
)

const directAlign = 4096

var errFinishBuffered = errors.New("kvio: finish buffered")

// directFile is never created off Linux.
type directFile struct {
	f        *os.File
	disabled atomic.Pointer[string]
}

func openDirect(string, int) (*directFile, string) {
	return nil, "O_DIRECT not supported on this operating system"
}

func (d *directFile) middle([]byte, int64) (int, int, bool) { return 0, 0, false }

func (d *directFile) rw(opKind, []byte, int64) (int, error) { return 0, errFinishBuffered }
