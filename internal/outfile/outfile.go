// Package outfile writes a command's output files whole or not at all:
// each is prepared before the work starts, as a temporary file beside its
// path (so a path that cannot be written fails at once, before a long run
// is thrown away), and committed after: written, synced and renamed over
// the path, so the path holds either its old content or the whole new
// one, never a torn file.
package outfile

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// ErrSamePath is what a SamePathError matches with errors.Is.
var ErrSamePath = errors.New("outfile: two outputs name one file")

// SamePathError is Set.Add's error for a path an earlier output of the
// set already names, or whose rename would replace a file the set keeps
// (Set.Keep): First and Second name the two (as given to Keep and Add).
type SamePathError struct{ First, Second, Path string }

func (e *SamePathError) Error() string {
	return fmt.Sprintf("%s and %s both name %s", e.First, e.Second, e.Path)
}

// Is reports whether target is ErrSamePath.
func (e *SamePathError) Is(target error) bool { return target == ErrSamePath }

// File is one prepared output file. A nil *File is valid: its Commit does
// nothing. A File is not safe for concurrent use.
type File struct {
	name, path string
	mode       fs.FileMode
	tmp        *os.File // nil once committed or discarded
}

// Set is the output files of one command, prepared together. The zero
// Set is empty and ready; it is not safe for concurrent use.
type Set struct {
	files []*File
	kept  []kept
}

// kept is a file Set.Keep recorded.
type kept struct {
	name string
	info fs.FileInfo
}

// Keep records path (named name in errors, e.g. a flag "--input") as a
// file the command reads, so that a later Add of a path whose rename
// would replace it is a *SamePathError: the same path, the same file
// through a symlinked directory or a hard link, or the target of a
// symlink given to Keep. An output that is itself a symlink to the file
// replaces only the link, and is allowed. A path that cannot be stat'ed
// records nothing (the command's read of it reports why).
func (s *Set) Keep(name, path string) {
	if st, err := os.Stat(path); err == nil {
		s.kept = append(s.kept, kept{name: name, info: st})
	}
}

// Add prepares path (named name in errors, e.g. a flag "--out") for
// writing: the path must not be a directory, and a temporary file must be
// creatable in its directory. A path an earlier file of s names (after
// filepath.Abs), or one that names a file s keeps (Keep), is a
// *SamePathError. An empty path gives a nil *File and
// no error. Other errors read "NAME PATH: detail".
func (s *Set) Add(name, path string) (*File, error) {
	if path == "" {
		return nil, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", name, path, err)
	}
	for _, f := range s.files {
		if other, _ := filepath.Abs(f.path); other == abs {
			return nil, &SamePathError{First: f.name, Second: name, Path: path}
		}
	}
	if st, err := os.Lstat(path); err == nil { // the entry the rename replaces
		for _, k := range s.kept {
			if os.SameFile(k.info, st) {
				return nil, &SamePathError{First: k.name, Second: name, Path: path}
			}
		}
	}
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return nil, fmt.Errorf("%s %s: is a directory", name, path)
		}
		mode = st.Mode().Perm()
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%s %s: no directory %s", name, path, dir)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("%s %s: %s is not a directory", name, path, dir)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		if u := errors.Unwrap(err); u != nil {
			err = u // the reason, without the temporary file's name
		}
		return nil, fmt.Errorf("%s %s: cannot write in %s: %w", name, path, dir, err)
	}
	f := &File{name: name, path: path, mode: mode, tmp: tmp}
	s.files = append(s.files, f)
	return f, nil
}

// Commit writes the file's content with write, then renames it over the
// path, keeping the mode of the file it replaces (0644 for a new one). On
// any error the temporary file is removed and the path is left as it was;
// the error reads "NAME PATH: detail". A nil f, or one already committed
// or discarded, does nothing.
func (f *File) Commit(write func(io.Writer) error) error {
	if f == nil || f.tmp == nil {
		return nil
	}
	tmp := f.tmp
	f.tmp = nil
	bw := bufio.NewWriterSize(tmp, 64<<10)
	err := write(bw)
	if err == nil {
		err = bw.Flush()
	}
	if err == nil {
		err = tmp.Chmod(f.mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), f.path)
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
		return fmt.Errorf("%s %s: %w", f.name, f.path, err)
	}
	return nil
}

// Discard removes the temporary files of the outputs not committed,
// leaving their paths as they were. It is idempotent.
func (s *Set) Discard() {
	for _, f := range s.files {
		if f.tmp != nil {
			_ = f.tmp.Close()
			_ = os.Remove(f.tmp.Name())
			f.tmp = nil
		}
	}
}
