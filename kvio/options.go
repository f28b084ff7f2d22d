package kvio

import (
	"fmt"
	"runtime"
)

// DefaultTaskSizeBytes is the default task size: the largest piece of a read
// that one worker performs, and the largest read that runs inline on the
// caller. It is KvikIO's default (KVIKIO_TASK_SIZE, 4 MiB).
const DefaultTaskSizeBytes int64 = 4 << 20

// Options are the settings of a [File]. The zero value is not valid; [Open]
// and [NewFile] start from the defaults documented on each field and apply
// the [Option] values in order.
type Options struct {
	// TaskSizeBytes is the chunk size in bytes into which a read larger
	// than it is split; reads of at most TaskSizeBytes run inline on the
	// calling goroutine. Default DefaultTaskSizeBytes (4 MiB).
	TaskSizeBytes int64
	// NumThreads bounds how many chunks of one File's large reads run at
	// once, across all concurrent calls on it; reads that run inline do not
	// count. Default runtime.GOMAXPROCS(0) when the File is opened.
	NumThreads int
}

// Option changes one setting of [Options]. It returns an error when the value
// is invalid; Open and NewFile return that error and open nothing.
type Option func(*Options) error

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

// WithThreads sets Options.NumThreads. n must be positive.
func WithThreads(n int) Option {
	return func(o *Options) error {
		if n <= 0 {
			return fmt.Errorf("kvio: WithThreads(%d): thread count must be positive", n)
		}
		o.NumThreads = n
		return nil
	}
}

// newOptions returns the defaults with opts applied, or the first error.
func newOptions(opts []Option) (Options, error) {
	o := Options{TaskSizeBytes: DefaultTaskSizeBytes, NumThreads: runtime.GOMAXPROCS(0)}
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return Options{}, err
		}
	}
	return o, nil
}
