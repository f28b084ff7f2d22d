package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/examples/flights"
	"github.com/streamdag/streamdag/internal/testdata"
	"github.com/streamdag/streamdag/kvio"
)

// TestRunFlightsKvioLine checks that the kvio line of the summary and the
// kvio entry of the metrics state what the input file used, not only the
// settings asked for: direct reads asked for through KVIKIO_* are
// unavailable for the embedded sample, and for a file on disk available
// exactly when its file system accepts O_DIRECT.
func TestRunFlightsKvioLine(t *testing.T) {
	input := testdata.File(t, "flights-200k.arrow")
	probe, err := kvio.Open(input, kvio.WithDirectIO(true, false))
	require.NoError(t, err)
	on, why := probe.DirectIO()
	require.NoError(t, probe.Close())
	onDisk := "direct I/O reads available ("
	if !on {
		onDisk = "direct I/O reads unavailable (" + why + ")"
	}
	tests := []struct {
		name   string
		args   []string
		prefix string // the line starts so: the file's name
		direct string // what the line says of direct I/O
	}{
		{"embedded sample", nil, "kvio: " + flights.SampleName + ": ", "direct I/O reads unavailable (not an operating-system file)"},
		{"file on disk", []string{"--input", input}, "kvio: " + input + ": ", onDisk},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(kvio.EnvAutoDirectIORead, "on")
			dir := t.TempDir()
			metrics, report := filepath.Join(dir, "m.json"), filepath.Join(dir, "r.json")
			code, _, errs := runArgs(t, append([]string{"run", "flights", "--top", "1", "--metrics", metrics, "--report", report}, tc.args...)...)
			require.Equal(t, 0, code, errs)
			var line string
			for l := range strings.Lines(errs) {
				if strings.HasPrefix(l, "kvio: ") {
					line = strings.TrimSuffix(l, "\n")
				}
			}
			assert.True(t, strings.HasPrefix(line, tc.prefix), "kvio line %q", line)
			assert.Contains(t, line, tc.direct)
			assert.NotContains(t, line, "direct I/O reads,", "the setting alone, as if in use")
			assert.False(t, strings.HasSuffix(line, "direct I/O reads"), "the setting alone, as if in use: %q", line)

			var m struct {
				ProcessConfig map[string]string `json:"process_config"`
			}
			b, err := os.ReadFile(metrics)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &m))
			assert.Equal(t, line, m.ProcessConfig["kvio"], "the metrics record what the file used")

			var r struct {
				Backend struct {
					ProcessConfig map[string]string `json:"process_config"`
				} `json:"backend"`
			}
			b, err = os.ReadFile(report)
			require.NoError(t, err)
			require.NoError(t, json.Unmarshal(b, &r))
			inReport := r.Backend.ProcessConfig["kvio"]
			assert.True(t, strings.HasPrefix(inReport, tc.prefix), "the run report names the file: %q", inReport)
			assert.Contains(t, inReport, tc.direct, "the run report states what the file uses")
		})
	}
}
