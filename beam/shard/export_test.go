package shard

// WithFlaky makes the first attempts attempts of shard s fail with an
// injected transient error ("injected transient failure"): before the
// shard's graph runs, or, with afterEmit, after the attempt has emitted
// its partial and report.
func WithFlaky(cfg *Config, s, attempts int, afterEmit bool) {
	cfg.flaky = append(cfg.flaky, flake{Shard: s, Attempts: attempts, AfterEmit: afterEmit})
}

// BackendHolders is backendHolders.
var BackendHolders = backendHolders

// OnAttempt makes each shard attempt call f as it starts, until the
// returned undo is called.
func OnAttempt(f func()) (undo func()) {
	attemptHook.Store(&f)
	return func() { attemptHook.Store(nil) }
}
