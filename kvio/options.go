package kvio

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// The defaults below are KvikIO's, as its documentation gives them
// ("Runtime Settings", https://docs.rapids.ai/api/kvikio/stable/runtime_settings/,
// and the kvikio::defaults class of libkvikio).
const (
	// DefaultCompatMode is KvikIO's default compat mode (KVIKIO_COMPAT_MODE):
	// CompatAuto.
	DefaultCompatMode = CompatAuto
	// DefaultNumThreads is KvikIO's default thread-pool size
	// (KVIKIO_NTHREADS): 1. See Options.NumThreads for why reads stay
	// parallel across goroutines with it.
	DefaultNumThreads = 1
	// DefaultTaskSizeBytes is KvikIO's default task size (KVIKIO_TASK_SIZE):
	// 4 MiB, the largest piece of a request that one worker performs.
	DefaultTaskSizeBytes int64 = 4 << 20
	// DefaultGDSThresholdBytes is KvikIO's default GDS threshold
	// (KVIKIO_GDS_THRESHOLD): 1 MiB. Requests of at most this many bytes
	// run inline on the caller, bypassing the pool.
	DefaultGDSThresholdBytes int64 = 1 << 20
	// DefaultBounceBufferBytes is KvikIO's default bounce-buffer size
	// (KVIKIO_BOUNCE_BUFFER_SIZE): 16 MiB.
	DefaultBounceBufferBytes int64 = 16 << 20
)

// The environment variables that Settings, Open, OpenFile and NewFile read,
// with KvikIO's names and meanings. An unset or empty variable leaves the
// default.
const (
	EnvCompatMode        = "KVIKIO_COMPAT_MODE"         // on|off|auto (and KvikIO's aliases), case-insensitive
	EnvNumThreads        = "KVIKIO_NTHREADS"            // positive integer
	EnvTaskSize          = "KVIKIO_TASK_SIZE"           // positive integer, bytes
	EnvGDSThreshold      = "KVIKIO_GDS_THRESHOLD"       // non-negative integer, bytes
	EnvBounceBufferSize  = "KVIKIO_BOUNCE_BUFFER_SIZE"  // positive integer, bytes
	EnvAutoDirectIORead  = "KVIKIO_AUTO_DIRECT_IO_READ" // boolean: on|off (and aliases)
	EnvAutoDirectIOWrite = "KVIKIO_AUTO_DIRECT_IO_WRITE"
)

// CompatMode is KvikIO's compatibility mode: whether I/O goes through POSIX
// calls (compat mode on) or through NVIDIA cuFile (GPUDirect Storage, compat
// mode off), or whichever the host supports (auto). The zero value is
// CompatAuto.
type CompatMode int

const (
	// CompatAuto uses cuFile when the host supports it and POSIX otherwise;
	// see Resolve for the checks. kvio has no cuFile path, so it
	// always resolves to POSIX and says why.
	CompatAuto CompatMode = iota
	// CompatOn is compatibility mode: POSIX I/O only, libcufile is never
	// loaded.
	CompatOn
	// CompatOff enforces cuFile I/O. Opening a file fails when libcufile
	// cannot be found, and, while kvio has no cuFile path, also when it
	// can (ErrNoCuFile).
	CompatOff
)

// String returns "auto", "on" or "off".
func (m CompatMode) String() string {
	switch m {
	case CompatAuto:
		return "auto"
	case CompatOn:
		return "on"
	case CompatOff:
		return "off"
	}
	return fmt.Sprintf("CompatMode(%d)", int(m))
}

// ParseCompatMode parses a compat mode as KvikIO does, case-insensitively:
// "on" (aliases "true", "yes", "1"), "off" ("false", "no", "0") or "auto".
// Any other string is an error quoting it.
func ParseCompatMode(s string) (CompatMode, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto":
		return CompatAuto, nil
	case "on", "true", "yes", "1":
		return CompatOn, nil
	case "off", "false", "no", "0":
		return CompatOff, nil
	}
	return 0, fmt.Errorf("kvio: compat mode %q: want on, off or auto", s)
}

// Options are the settings of a [File]. Open, OpenFile and NewFile start
// from the defaults documented on each field, overlay the KVIKIO_*
// environment variables (see Settings), then apply the [Option] values in
// order, so an explicit Option wins over the environment.
type Options struct {
	// CompatMode chooses POSIX or cuFile I/O (KVIKIO_COMPAT_MODE).
	// Default CompatAuto. It applies to files opened by Open and OpenFile;
	// NewFile reads host memory or a caller's reader and ignores it.
	CompatMode CompatMode
	// NumThreads is the size of a File's I/O pool (KVIKIO_NTHREADS): the
	// most chunks of its requests that pool goroutines run at once, across
	// all concurrent requests on the File. Default 1, as KvikIO.
	//
	// Unlike KvikIO, a goroutine that waits for a request (Future.Wait, and
	// so ReadAt and ReadAtContext) also runs the request's unclaimed chunks
	// itself, in file order, instead of idling. So with the default of one
	// thread a lone large read runs on two goroutines, and requests from
	// different goroutines (the row groups that different source kernels
	// decode) still proceed in parallel, one per caller: one pool thread
	// never serializes the loaders.
	//
	// A request starts its pool goroutines itself, one per slot it can
	// use, not one per chunk. For a file from Open or OpenFile on Linux
	// (amd64, arm64, riscv64, loong64), a chunk first copies what the
	// page cache holds (preadv2 with RWF_NOWAIT) and only the rest waits
	// for the device; then a request starts at most GOMAXPROCS-1 pool
	// goroutines (at least one), because copying cached pages keeps a CPU
	// busy and more copies at once than the CPUs beside the waiting
	// goroutine share the same CPUs and memory bandwidth: a larger
	// NumThreads does not make a warm read slower. A chunk that has to wait
	// for the device starts one more, up to NumThreads, so that reads
	// which miss the cache keep up to NumThreads requests queued on the
	// device; the extra goroutines end after a chunk that was all cached.
	// Other readers (NewFile, or a file system that refuses RWF_NOWAIT)
	// give no such signal and get NumThreads goroutines at once.
	NumThreads int
	// TaskSizeBytes is the chunk size in bytes into which a request larger
	// than GDSThresholdBytes is split (KVIKIO_TASK_SIZE). Default 4 MiB.
	TaskSizeBytes int64
	// GDSThresholdBytes is the size in bytes at or below which a request
	// runs inline on the calling goroutine, bypassing the pool
	// (KVIKIO_GDS_THRESHOLD; in KvikIO it is also the smallest request
	// sent to cuFile). Default 1 MiB; 0 sends every non-empty request to
	// the pool.
	GDSThresholdBytes int64
	// BounceBufferBytes is the size in bytes of the host bounce buffer that
	// KvikIO stages device transfers through (KVIKIO_BOUNCE_BUFFER_SIZE).
	// Default 16 MiB. kvio reads and writes host memory only, so it
	// is validated and reported but does not change what kvio does.
	BounceBufferBytes int64
	// DirectIORead makes reads of a file from Open or OpenFile go through
	// O_DIRECT for their page-aligned middle, with buffered head and tail
	// (KVIKIO_AUTO_DIRECT_IO_READ). Default false: a warm page cache serves
	// buffered reads faster than the device serves direct ones. See
	// File.DirectIO for when the file system refuses it.
	DirectIORead bool
	// DirectIOWrite is DirectIORead for writes
	// (KVIKIO_AUTO_DIRECT_IO_WRITE). Default false.
	DirectIOWrite bool
}

// String summarises the settings, e.g. "compat mode auto, 1 thread, task
// 4 MiB, gds threshold 1 MiB, bounce buffer 16 MiB, direct I/O off". It
// states what was asked for; File.Describe states what a file uses.
func (o Options) String() string {
	return o.describe(o.CompatMode.String(), "direct I/O "+o.directString())
}

// directString names the direct I/O setting: off, reads, writes or on.
func (o Options) directString() string {
	switch {
	case o.DirectIORead && o.DirectIOWrite:
		return "on"
	case o.DirectIORead:
		return "reads"
	case o.DirectIOWrite:
		return "writes"
	}
	return "off"
}

// describe is String with the compat mode and the direct I/O part given.
func (o Options) describe(compat, direct string) string {
	threads := "threads"
	if o.NumThreads == 1 {
		threads = "thread"
	}
	return fmt.Sprintf("compat mode %s, %d %s, task %s, gds threshold %s, bounce buffer %s, %s",
		compat, o.NumThreads, threads, formatBytes(o.TaskSizeBytes), formatBytes(o.GDSThresholdBytes),
		formatBytes(o.BounceBufferBytes), direct)
}

// formatBytes writes n as "4 MiB" when it is a whole number of KiB, MiB or
// GiB, else as "1000 bytes".
func formatBytes(n int64) string {
	for _, u := range []struct {
		shift uint
		name  string
	}{{30, "GiB"}, {20, "MiB"}, {10, "KiB"}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return fmt.Sprintf("%d %s", n>>u.shift, u.name)
		}
	}
	return fmt.Sprintf("%d bytes", n)
}

// DefaultOptions returns KvikIO's defaults, ignoring the environment.
func DefaultOptions() Options {
	return Options{
		CompatMode:        DefaultCompatMode,
		NumThreads:        DefaultNumThreads,
		TaskSizeBytes:     DefaultTaskSizeBytes,
		GDSThresholdBytes: DefaultGDSThresholdBytes,
		BounceBufferBytes: DefaultBounceBufferBytes,
	}
}

// Settings returns the defaults overlaid with the KVIKIO_* environment
// variables (the Env constants): the settings a File gets when opened
// without options. It reads the environment on every call. An invalid
// value is an error naming the variable and quoting the value, e.g.
// `kvio: KVIKIO_NTHREADS="zero": want a positive integer`; the Options are
// then the zero value.
func Settings() (Options, error) {
	o := DefaultOptions()
	if err := o.fromEnv(os.LookupEnv); err != nil {
		return Options{}, err
	}
	return o, nil
}

// fromEnv overlays the variables that lookup finds set and non-empty.
func (o *Options) fromEnv(lookup func(string) (string, bool)) error {
	get := func(name string) (string, bool) {
		v, ok := lookup(name)
		return v, ok && strings.TrimSpace(v) != ""
	}
	if v, ok := get(EnvCompatMode); ok {
		m, err := ParseCompatMode(v)
		if err != nil {
			return fmt.Errorf("kvio: %s=%q: want on, off or auto", EnvCompatMode, v)
		}
		o.CompatMode = m
	}
	ints := []struct {
		name string
		min  int64
		set  func(int64)
	}{
		{EnvNumThreads, 1, func(n int64) { o.NumThreads = int(n) }},
		{EnvTaskSize, 1, func(n int64) { o.TaskSizeBytes = n }},
		{EnvGDSThreshold, 0, func(n int64) { o.GDSThresholdBytes = n }},
		{EnvBounceBufferSize, 1, func(n int64) { o.BounceBufferBytes = n }},
	}
	for _, e := range ints {
		v, ok := get(e.name)
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil || n < e.min || (e.name == EnvNumThreads && n > maxThreads) {
			want := "a positive integer"
			if e.min == 0 {
				want = "a non-negative integer"
			}
			if e.name == EnvNumThreads {
				want = fmt.Sprintf("an integer in [1, %d]", maxThreads)
			} else {
				want += " (bytes)"
			}
			return fmt.Errorf("kvio: %s=%q: want %s", e.name, v, want)
		}
		e.set(n)
	}
	for _, e := range []struct {
		name string
		set  *bool
	}{{EnvAutoDirectIORead, &o.DirectIORead}, {EnvAutoDirectIOWrite, &o.DirectIOWrite}} {
		if v, ok := get(e.name); ok {
			m, err := ParseCompatMode(v) // the same on/off aliases
			if err != nil || m == CompatAuto {
				return fmt.Errorf("kvio: %s=%q: want on or off", e.name, v)
			}
			*e.set = m == CompatOn
		}
	}
	return nil
}

// maxThreads bounds NumThreads, so a typo cannot ask for a billion slots.
const maxThreads = 1 << 16

// Option changes one setting of [Options]. It returns an error when the value
// is invalid; Open, OpenFile and NewFile return that error and open nothing.
// They ignore a nil Option.
type Option func(*Options) error

// WithCompatMode sets Options.CompatMode.
func WithCompatMode(m CompatMode) Option {
	return func(o *Options) error {
		if m < CompatAuto || m > CompatOff {
			return fmt.Errorf("kvio: WithCompatMode(%d): unknown compat mode", int(m))
		}
		o.CompatMode = m
		return nil
	}
}

// WithTaskSize sets Options.TaskSizeBytes. bytes must be positive.
func WithTaskSize(bytes int64) Option {
	return func(o *Options) error {
		if bytes <= 0 {
			return fmt.Errorf("kvio: WithTaskSize(%d): task size must be positive", bytes)
		}
		o.TaskSizeBytes = bytes
		return nil
	}
}

// WithThreads sets Options.NumThreads. n must be in [1, 65536].
func WithThreads(n int) Option {
	return func(o *Options) error {
		if n <= 0 || n > maxThreads {
			return fmt.Errorf("kvio: WithThreads(%d): thread count must be in [1, %d]", n, maxThreads)
		}
		o.NumThreads = n
		return nil
	}
}

// WithGDSThreshold sets Options.GDSThresholdBytes. bytes must not be
// negative.
func WithGDSThreshold(bytes int64) Option {
	return func(o *Options) error {
		if bytes < 0 {
			return fmt.Errorf("kvio: WithGDSThreshold(%d): threshold must not be negative", bytes)
		}
		o.GDSThresholdBytes = bytes
		return nil
	}
}

// WithBounceBufferSize sets Options.BounceBufferBytes. bytes must be
// positive.
func WithBounceBufferSize(bytes int64) Option {
	return func(o *Options) error {
		if bytes <= 0 {
			return fmt.Errorf("kvio: WithBounceBufferSize(%d): size must be positive", bytes)
		}
		o.BounceBufferBytes = bytes
		return nil
	}
}

// WithDirectIO sets Options.DirectIORead and Options.DirectIOWrite.
func WithDirectIO(read, write bool) Option {
	return func(o *Options) error {
		o.DirectIORead, o.DirectIOWrite = read, write
		return nil
	}
}

// newOptions returns Settings with opts applied (nil ones ignored), or
// the first error.
func newOptions(opts []Option) (Options, error) {
	o, err := Settings()
	if err != nil {
		return Options{}, err
	}
	for _, opt := range opts {
		if opt == nil {
			continue
		}
		if err := opt(&o); err != nil {
			return Options{}, err
		}
	}
	return o, nil
}
