package shard

// WithTwice makes the shards' DoFn emit the output of each of shards
// twice, as a bundle's output delivered again would be.
func WithTwice(cfg *Config, shards ...int) { cfg.twice = shards }

// BackendHolders is backendHolders.
var BackendHolders = backendHolders
