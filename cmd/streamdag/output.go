package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// outputFile is one file a command writes. It is prepared before the work
// starts, as a temporary file beside its path (so a path that cannot be
// written fails at once, before a long run is thrown away), and committed
// after: written, synced and renamed over the path, so the path holds
// either its old content or the whole new one, never a torn file.
type outputFile struct {
	flag, path string
	mode       fs.FileMode
	tmp        *os.File // nil once committed or discarded
}

// outputs are the files of one command, prepared together.
type outputs struct{ files []*outputFile }

// add prepares path (given by flag) for writing: the path must not be a
// directory, and a temporary file must be creatable in its directory.
// Two flags naming one file is a usage error. An empty path gives a nil
// *outputFile, whose commit does nothing.
func (o *outputs) add(flag, path string) (*outputFile, error) {
	if path == "" {
		return nil, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, path, err)
	}
	for _, f := range o.files {
		if other, _ := filepath.Abs(f.path); other == abs {
			return nil, usagef("%s and %s both name %s", f.flag, flag, path)
		}
	}
	mode := fs.FileMode(0o644)
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return nil, fmt.Errorf("%s %s: is a directory", flag, path)
		}
		mode = st.Mode().Perm()
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("%s %s: no directory %s", flag, path, dir)
	} else if !st.IsDir() {
		return nil, fmt.Errorf("%s %s: %s is not a directory", flag, path, dir)
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		if u := errors.Unwrap(err); u != nil {
			err = u // the reason, without the temporary file's name
		}
		return nil, fmt.Errorf("%s %s: cannot write in %s: %w", flag, path, dir, err)
	}
	f := &outputFile{flag: flag, path: path, mode: mode, tmp: tmp}
	o.files = append(o.files, f)
	return f, nil
}

// commit writes the file's content with write, then renames it over the
// path. On any error the temporary file is removed and the path is left
// as it was; the error names the flag and the path. A nil f does nothing.
func (f *outputFile) commit(write func(io.Writer) error) error {
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
		return fmt.Errorf("%s %s: %w", f.flag, f.path, err)
	}
	return nil
}

// discard removes the temporary files of the outputs not committed,
// leaving their paths as they were. It is idempotent.
func (o *outputs) discard() {
	for _, f := range o.files {
		if f.tmp != nil {
			_ = f.tmp.Close()
			_ = os.Remove(f.tmp.Name())
			f.tmp = nil
		}
	}
}

// fmtDuration prints a time the one way the CLI prints times: three
// decimals and a unit, µs below a millisecond, ms below a second, else s
// ("12.617 ms", "0.845 µs", "2.500 s").
func fmtDuration(d time.Duration) string {
	switch {
	case d < time.Millisecond && d > -time.Millisecond:
		return fmt.Sprintf("%.3f µs", float64(d)/float64(time.Microsecond))
	case d < time.Second && d > -time.Second:
		return fmt.Sprintf("%.3f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.3f s", d.Seconds())
}
