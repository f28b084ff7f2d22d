package shard

import (
	"github.com/apache/beam/sdks/v2/go/pkg/beam/core/sdf"
	"github.com/apache/beam/sdks/v2/go/pkg/beam/io/rtrackers/offsetrange"
)

// WithFlaky makes the first attempts attempts of shard s fail with an
// injected transient error ("injected transient failure"): before the
// shard's graph runs, or, with afterEmit, after the attempt has emitted
// its partial and report.
func WithFlaky(cfg *Config, s, attempts int, afterEmit bool) {
	cfg.flaky = append(cfg.flaky, flake{Shard: s, Attempts: attempts, AfterEmit: afterEmit})
}

// BackendHolders is backendHolders.
var BackendHolders = backendHolders

// NewAttemptTracker is the shard DoFn's tracker of rest.
func NewAttemptTracker(rest offsetrange.Restriction) sdf.RTracker {
	return &attemptTracker{Tracker: offsetrange.NewTracker(rest)}
}

// EndAttempt marks t's claimed attempt ended, as ProcessElement does
// before it self-checkpoints.
func EndAttempt(t sdf.RTracker) { t.(*attemptTracker).ended = true }
