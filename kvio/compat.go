package kvio

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"

	"github.com/ebitengine/purego"
)

// ErrNoCuFile is returned, wrapped with the reason, when compat mode off
// (KVIKIO_COMPAT_MODE=off, which enforces cuFile I/O) is asked for and kvio
// cannot do cuFile I/O: libcufile cannot be loaded, the host fails KvikIO's
// checks, or, as long as kvio has no cuFile path, libcufile loads but kvio
// cannot use it.
var ErrNoCuFile = errors.New("kvio: cuFile I/O unavailable")

// Resolution is what a compat mode resolves to on this host.
type Resolution struct {
	// Mode is the compat mode asked for.
	Mode CompatMode
	// CuFile is true when I/O goes through cuFile. It is always false:
	// kvio has no cuFile path.
	CuFile bool
	// Library is the libcufile that was loaded ("libcufile.so.0"), or "".
	Library string
	// Reason says why the mode resolved as it did, e.g. "libcufile not
	// found" or "compat mode on".
	Reason string
}

// String returns e.g. "auto → posix (libcufile not found)".
func (r Resolution) String() string {
	backend := "posix"
	if r.CuFile {
		backend = "cufile"
	}
	return fmt.Sprintf("%s → %s (%s)", r.Mode, backend, r.Reason)
}

// cufileNames are the names tried, in order, by the dynamic loader's usual
// search (LD_LIBRARY_PATH, the ld.so cache, /lib, /usr/lib): the soname of
// CUDA's libcufile first.
var cufileNames = []string{"libcufile.so.0", "libcufile.so.1", "libcufile.so"}

// loadCuFile dlopens libcufile once per process, with purego (no cgo at
// build time, so one binary serves hosts with and without CUDA), and
// returns its name or why it could not be loaded. The library stays loaded,
// as KvikIO keeps it.
var loadCuFile = sync.OnceValues(func() (string, error) {
	var errs []string
	for _, name := range cufileNames {
		h, err := purego.Dlopen(name, purego.RTLD_LAZY|purego.RTLD_LOCAL)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if _, err := purego.Dlsym(h, "cuFileDriverOpen"); err != nil {
			_ = purego.Dlclose(h)
			errs = append(errs, fmt.Sprintf("%s: no cuFileDriverOpen", name))
			continue
		}
		return name, nil
	}
	return "", fmt.Errorf("libcufile not found (%s)", strings.Join(errs, "; "))
})

// hostChecks returns the reason KvikIO's compat mode auto would fall back to
// POSIX on this host besides a missing libcufile, or "": Windows Subsystem
// for Linux, or /run/udev not readable (a container started without
// --volume /run/udev:/run/udev:ro).
func hostChecks() string {
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil &&
		strings.Contains(strings.ToLower(string(b)), "microsoft") {
		return "running in WSL"
	}
	if _, err := os.ReadDir("/run/udev"); err != nil {
		return "/run/udev not readable"
	}
	return ""
}

// Resolve returns what compat mode m resolves to on this host, following
// KvikIO: on is POSIX without loading libcufile; auto loads libcufile and
// falls back to POSIX when it is missing, under WSL, or when /run/udev is
// not readable; off requires cuFile and is an error wrapping ErrNoCuFile
// when it is unavailable. kvio has no cuFile path, so auto always
// resolves to POSIX and off is always an error; Reason and the error say
// which check failed. The libcufile lookup happens once per process; the
// host checks on every call. Safe for concurrent use.
func Resolve(m CompatMode) (Resolution, error) {
	r := Resolution{Mode: m}
	if m == CompatOn {
		r.Reason = "compat mode on"
		return r, nil
	}
	lib, err := loadCuFile()
	r.Library = lib
	switch {
	case err != nil:
		r.Reason = "libcufile not found"
	case hostChecks() != "":
		r.Reason = hostChecks()
	default:
		r.Reason = lib + " found, but kvio has no cuFile path yet"
	}
	if m == CompatOff {
		return r, fmt.Errorf("%w: compat mode off needs cuFile: %s", ErrNoCuFile, r.Reason)
	}
	return r, nil
}

// Mode resolves the compat mode of Settings (KVIKIO_COMPAT_MODE, default
// auto) on this host; see Resolve. It returns Settings' error for an invalid
// environment, or Resolve's.
func Mode() (Resolution, error) {
	o, err := Settings()
	if err != nil {
		return Resolution{}, err
	}
	return Resolve(o.CompatMode)
}

// Describe returns one line stating the settings a File opened without
// options gets here (Settings, with the compat mode resolved), for a CLI
// or a run report: e.g. "kvio: compat mode auto → posix (libcufile not
// found), 1 thread, task 4 MiB, gds threshold 1 MiB, bounce buffer 16 MiB,
// direct I/O off". The direct I/O part is the setting asked for; whether
// a file's file system accepts O_DIRECT, and what a file really used, is
// what File.Describe states. For an invalid environment or compat mode off
// without cuFile it returns "kvio: " followed by the error (without a
// second "kvio: "). Safe for concurrent use.
func Describe() string {
	o, err := Settings()
	if err != nil {
		return "kvio: " + strings.TrimPrefix(err.Error(), "kvio: ")
	}
	return describe(o)
}

func describe(o Options) string {
	r, err := Resolve(o.CompatMode)
	if err != nil {
		return "kvio: " + strings.TrimPrefix(err.Error(), "kvio: ")
	}
	return "kvio: " + o.describe(r.String(), "direct I/O "+o.directString())
}
