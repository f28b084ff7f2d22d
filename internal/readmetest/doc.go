// Package readmetest holds the test that runs what the documentation shows.
//
// It reads README.md, docs/*.md and bench/results/*.md and, in each, runs
// every command of a ```sh block and every complete Go program of a ```go
// block, comparing what they print with the output the document gives
// after masking what depends on timing; Go fragments must parse. A block
// that cannot run in a test says so with a directive. The conventions are
// in docs/doctest.md. It has no API.
package readmetest
