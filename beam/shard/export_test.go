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
