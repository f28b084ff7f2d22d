package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/beam/sdks/v2/go/pkg/beam/testing/ptest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/beam/shard"
	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/gpu/cpu"
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
		{"txt out", []string{"run", "flights", "--out", "x.txt"}, 2, "streamdag-beam: --out x.txt: want a .csv or .json file name (see 'streamdag-beam run flights --help')\n", ""},
		{"no pipeline", []string{"run"}, 2, "streamdag-beam: name a pipeline to run (known: flights) (see 'streamdag-beam run --help')\n", ""},
		{"bad flag", []string{"run", "flights", "--shards", "two"}, 2, "streamdag-beam: invalid argument \"two\" for \"--shards\" flag: strconv.ParseInt: parsing \"two\": invalid syntax (see 'streamdag-beam run flights --help')\n", ""},
		{"unknown kernel", []string{"run", "flights", "--streams", "1", "--fail", "nosuch@1"}, 2, "streamdag-beam: shard: shard 1: flights: fault nosuch: dag: no kernel \"nosuch\" to fail (kernels: source[0], filter[0], partial[0], merge, sort, topk, write) (see 'streamdag-beam run flights --help')\n", ""},
		{"too many streams", []string{"run", "flights", "--streams", "1025"}, 2, "streamdag-beam: --streams 1025: want 1 to 1024, or 0 (see 'streamdag-beam run flights --help')\n", ""},
		{"airports device", []string{"run", "flights", "--airports", "/dev/zero"}, 1, "streamdag-beam: --airports: kvio: open /dev/zero: a device, want a regular file\n", ""},
		{"bad beam log", []string{"run", "flights", "--beam-log", "loud"}, 2, "streamdag-beam: --beam-log loud: want off, error, warn, info or debug (see 'streamdag-beam run flights --help')\n", ""},
		{"negative attempts", []string{"run", "flights", "--attempts", "-1"}, 2, "streamdag-beam: --attempts -1: want 1 or more, or 0 (3) (see 'streamdag-beam run flights --help')\n", ""},
		{"no such shard", []string{"run", "flights", "--fail", "filter[0]@3"}, 2, "streamdag-beam: shard: flights: fault filter[0]: no shard 3 (the run has 2) (see 'streamdag-beam run flights --help')\n", ""},
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

// TestJSONOutMatchesSingleNode: --out FILE.json writes what `streamdag
// run flights --out FILE.json` writes for the same flags; a partial
// result's JSON is marked partial and names the lost partition's shard,
// chain and root error.
func TestJSONOutMatchesSingleNode(t *testing.T) {
	dir := t.TempDir()
	single := filepath.Join(dir, "single.json")
	dev, err := cpu.New(cpu.WithStreams(2))
	require.NoError(t, err)
	defer dev.Close()
	job := flights.Job{Options: []flights.Option{flights.WithMinDelay(15), flights.WithTopK(3)},
		Files: flights.Files{Result: flights.OutputFile{Path: single}}}
	defer job.Close()
	e, err := exec.New(dev)
	require.NoError(t, err)
	_, err = job.Run(t.Context(), e)
	require.NoError(t, err)
	want, err := os.ReadFile(single)
	require.NoError(t, err)

	out := filepath.Join(dir, "sharded.json")
	var stdout, stderr bytes.Buffer
	require.Equal(t, 0, run(t.Context(), []string{"run", "flights", "--shards", "2", "--min-delay", "15", "--top", "3", "--quiet", "--out", out}, &stdout, &stderr), stderr.String())
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, string(want), string(got))

	require.Equal(t, 1, run(t.Context(), []string{"run", "flights", "--shards", "2", "--top", "3", "--quiet", "--out", out, "--fail", "filter[0]@1"}, &stdout, &stderr))
	got, err = os.ReadFile(out)
	require.NoError(t, err)
	var doc struct {
		Partial bool                    `json:"partial"`
		Lost    []flights.LostPartition `json:"lost"`
		Rows    []flights.Row           `json:"rows"`
	}
	require.NoError(t, json.Unmarshal(got, &doc))
	assert.True(t, doc.Partial)
	assert.Equal(t, []flights.LostPartition{{Partition: 1, Rows: 100000, RowLo: 100000, RowHi: 200000, PartLo: 0, PartHi: 1,
		Error: `shard 1 partition 0: groups[0] was not written: partial[0] ← filter[0]: exec: kernel "filter[0]": dag: injected failure`}}, doc.Lost)
	assert.Len(t, doc.Rows, 3)
}

// TestShardLine: a shard's summary line says how many attempts it took
// when it took more than one.
func TestShardLine(t *testing.T) {
	r := shard.Report{Shard: 1, Attempt: 1, Range: shard.Range{PartLo: 0, PartHi: 1, RowLo: 100000, RowHi: 200000}, Rows: 100000, Partitions: 1}
	assert.Equal(t, "shard 1: rows [100000, 200000) of parts [0, 1), 100000 rows, 1 partition", shardLine(r))
	r.Attempt, r.Partitions, r.Failed = 3, 2, []string{"kvio: read: EIO", "lease: no device"}
	assert.Equal(t, "shard 1: rows [100000, 200000) of parts [0, 1), 100000 rows, 2 partitions, 3 attempts (attempt 1: kvio: read: EIO; attempt 2: lease: no device)", shardLine(r))
}

// TestOutNamingAnInput: an --out that would replace --input or
// --airports is a usage error, and the file is left as it was.
func TestOutNamingAnInput(t *testing.T) {
	in := filepath.Join(t.TempDir(), "airports.csv")
	require.NoError(t, os.WriteFile(in, []byte("iata,name,city\n"), 0o600))
	var stdout, stderr bytes.Buffer
	code := run(t.Context(), []string{"run", "flights", "--airports", in, "--out", in}, &stdout, &stderr)
	assert.Equal(t, 2, code)
	assert.Equal(t, "streamdag-beam: --airports and --out both name "+in+" (see 'streamdag-beam run flights --help')\n", stderr.String())
	b, err := os.ReadFile(in)
	require.NoError(t, err)
	assert.Equal(t, "iata,name,city\n", string(b))
}
