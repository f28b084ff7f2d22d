package exec_test

import "github.com/streamdag/streamdag/dag"

// bytesOf returns the bytes of raw buffer id of the running launch l
// (dag.Bytes). A kernel that did not declare id panics with the
// *dag.AccessError, which fails its launch.
func bytesOf(l dag.Launch, id dag.BufferID) []byte {
	b, err := dag.Bytes(l, id)
	if err != nil {
		panic(err)
	}
	return b
}

// valueOf returns the value of h's buffer of the running launch l
// (dag.Get), panicking with Get's error, which fails the launch.
func valueOf[T any](l dag.Launch, h dag.Value[T]) T {
	v, err := dag.Get(l, h)
	if err != nil {
		panic(err)
	}
	return v
}
