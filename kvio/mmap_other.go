//go:build !unix

package kvio

import "errors"

func mapFile(*File) ([]byte, error) {
	return nil, errors.New("WithMmap is not supported on this operating system")
}

func unmapFile(string, []byte) error { return nil }
