// Package cli is what the project's commands share: usage errors and the
// mapping from a command's error to its message and exit status (Execute).
package cli
