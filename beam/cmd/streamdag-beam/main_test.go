package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/beam/shard"
)

func TestMain(m *testing.M) { ptest.Main(m) }

// TestFlightsCommand: the command's exit statuses and output: a usage
// error (2), a complete run (0, the table and --out), and a run with a
// failed kernel (1, the partial result marked in stderr and --out).
func TestFlightsCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "result.csv")
	for _, tc := range []struct {
		name     string
		args     []string
		code     int
		stderr   string
		csvFirst string
	}{
		{"no shards", []string{"run", "flights", "--shards", "0"}, 2, "streamdag-beam: --shards 0: want 1 or more (see 'streamdag-beam run flights --help')\n", ""},
		{"bad fail", []string{"run", "flights", "--fail", "filter[0]"}, 2, "streamdag-beam: --fail filter[0]: want KERNEL@SHARD or KERNEL:panic@SHARD (see 'streamdag-beam run flights --help')\n", ""},
		{"negative attempts", []string{"run", "flights", "--attempts", "-1"}, 2, "streamdag-beam: --attempts -1: want 1 or more, or 0 (3) (see 'streamdag-beam run flights --help')\n", ""},
		{"json out", []string{"run", "flights", "--out", "x.json"}, 2, "streamdag-beam: --out x.json: want a .csv file name (see 'streamdag-beam run flights --help')\n", ""},
		{"no such shard", []string{"run", "flights", "--fail", "filter[0]@3"}, 1, "streamdag-beam: shard: fault filter[0]@3: no shard 3 (the run has 2)\n", ""},
		{"complete", []string{"run", "flights", "--top", "3", "--quiet", "--out", out}, 0, "", "key,count,delay_sum,delay_mean,delay_max"},
		{"partial", []string{"run", "flights", "--top", "3", "--quiet", "--out", out, "--fail", "filter[0]@0"}, 1,
			"PARTIAL RESULT: 1 of 2 partitions lost (100000 of 200000 rows are not counted above):\n" +
				"  partition 0: 100000 rows lost (rows [0, 100000) of part 0): shard 0 partition 0: groups[0] was not written: partial[0] ← filter[0]: exec: kernel \"filter[0]\": dag: injected failure\n",
			"# PARTIAL RESULT: 1 of 2 partitions lost (100000 of 200000 input rows not counted)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(t.Context(), tc.args, &stdout, &stderr)
			assert.Equal(t, tc.code, code)
			assert.Equal(t, tc.stderr, stderr.String())
			if tc.csvFirst == "" {
				return
			}
			assert.Contains(t, stdout.String(), "hour  count  delay_sum")
			b, err := os.ReadFile(out)
			require.NoError(t, err)
			first, _, _ := bytes.Cut(b, []byte("\n"))
			assert.Equal(t, tc.csvFirst, string(first))
		})
	}
}

// TestShardLine: a shard's summary line says how many attempts it took
// when it took more than one.
func TestShardLine(t *testing.T) {
	r := shard.Report{Shard: 1, Attempt: 1, Range: shard.Range{PartLo: 0, PartHi: 1, RowLo: 100000, RowHi: 200000}, Rows: 100000, Partitions: 1}
	assert.Equal(t, "shard 1: rows [100000, 200000) of parts [0, 1), 100000 rows, 1 partition", shardLine(r))
	r.Attempt, r.Partitions = 2, 2
	assert.Equal(t, "shard 1: rows [100000, 200000) of parts [0, 1), 100000 rows, 2 partitions, 2 attempts", shardLine(r))
}
