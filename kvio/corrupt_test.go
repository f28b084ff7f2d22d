package kvio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/internal/leaktest"
	"github.com/streamdag/streamdag/kvio"
)

// garbage returns n seeded pseudo-random bytes.
func garbage(n int) []byte {
	rng := rand.New(rand.NewPCG(7, 7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// overwrite returns a copy of b with garbage over [off, off+n).
func overwrite(b []byte, off, n int) []byte {
	c := bytes.Clone(b)
	copy(c[off:off+n], garbage(n))
	return c
}

func TestCorruptFiles(t *testing.T) {
	pq, err := os.ReadFile(writeParquet(t, 2000, 500))
	require.NoError(t, err)
	arrow, err := os.ReadFile(writeIPC(t, 500, 500, 500, 500))
	require.NoError(t, err)
	pqFooter := int(binary.LittleEndian.Uint32(pq[len(pq)-8:]))
	ipcFooter := int(binary.LittleEndian.Uint32(arrow[len(arrow)-10:]))
	require.Positive(t, pqFooter)
	require.Positive(t, ipcFooter)

	type opener = func(context.Context, *kvio.File, ...kvio.LoadOption) (kvio.Source, error)
	tests := []struct {
		name   string
		data   []byte
		opens  []opener
		atOpen bool   // the error comes from opening, not from reading a part
		want   string // part of the error message besides the file name
	}{
		{"empty", nil, []opener{kvio.OpenParquet, kvio.OpenIPC}, true, "too small"},
		{"empty auto", nil, []opener{kvio.OpenAuto}, true, "empty file"},
		{"parquet truncated", pq[:len(pq)/2], []opener{kvio.OpenParquet, kvio.OpenAuto}, true, "open"},
		{"parquet cut before magic", pq[:len(pq)-2], []opener{kvio.OpenParquet}, true, "open"},
		{"parquet footer garbage", overwrite(pq, len(pq)-8-pqFooter, pqFooter), []opener{kvio.OpenParquet, kvio.OpenAuto}, true, "open"},
		{"parquet footer length", overwrite(pq, len(pq)-8, 4), []opener{kvio.OpenParquet}, true, "open"},
		{"parquet data garbage", overwrite(pq, 4, len(pq)/2), []opener{kvio.OpenParquet, kvio.OpenAuto}, false, "part"},
		{"parquet magic only", append(append([]byte("PAR1"), garbage(4000)...), "PAR1"...), []opener{kvio.OpenParquet, kvio.OpenAuto}, true, "open"},
		{"ipc truncated", arrow[:len(arrow)/2], []opener{kvio.OpenIPC, kvio.OpenAuto}, true, "open"},
		{"ipc footer garbage", overwrite(arrow, len(arrow)-10-ipcFooter, ipcFooter), []opener{kvio.OpenIPC, kvio.OpenAuto}, true, "open"},
		{"ipc footer length", overwrite(arrow, len(arrow)-10, 4), []opener{kvio.OpenIPC}, true, "open"},
		{"ipc batches garbage", overwrite(arrow, 1000, len(arrow)-2000), []opener{kvio.OpenIPC, kvio.OpenAuto}, true, "open"},
		{"ipc magic only", append(append([]byte("ARROW1\x00\x00"), garbage(4000)...), "ARROW1"...), []opener{kvio.OpenIPC, kvio.OpenAuto}, true, "open"},
		{"garbage parquet", garbage(4096), []opener{kvio.OpenParquet}, true, "open"},
		{"garbage ipc", garbage(4096), []opener{kvio.OpenIPC}, true, "open"},
		{"garbage auto", garbage(4096), []opener{kvio.OpenAuto}, true, "neither Parquet nor Arrow IPC"},
		{"parquet as ipc", pq, []opener{kvio.OpenIPC}, true, "open"},
		{"ipc as parquet", arrow, []opener{kvio.OpenParquet}, true, "open"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "bad.file")
			require.NoError(t, os.WriteFile(path, tc.data, 0o600))
			f, err := kvio.Open(path, kvio.WithTaskSize(1024))
			require.NoError(t, err)
			defer f.Close()
			for _, open := range tc.opens {
				mem := leaktest.Allocator(t)
				s, err := open(t.Context(), f)
				if tc.atOpen {
					require.Error(t, err)
				} else {
					require.NoError(t, err)
					_, err = kvio.ReadAll(t.Context(), s, mem)
					require.Error(t, err)
					assert.NoError(t, s.Close())
				}
				assert.ErrorContains(t, err, path)
				assert.ErrorContains(t, err, tc.want)
			}
		})
	}
}

// TestAllocationGuards opens inputs, found by fuzzing, on which arrow-go
// v18.8.0 alone allocates a corrupt length and the process dies out of
// memory: kvio must reject them first.
func TestAllocationGuards(t *testing.T) {
	tests := []struct{ seed, want string }{
		{"parquet-arrow-schema-body-length", "ARROW:schema: corrupt Arrow IPC metadata"},
		{"parquet-arrow-schema-metadata-length", "ARROW:schema: corrupt Arrow IPC metadata"},
		{"ipc-schema-children-length", "corrupt Arrow IPC metadata: footer"},
	}
	for _, tc := range tests {
		t.Run(tc.seed, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("testdata", "fuzz", "FuzzOpenAuto", tc.seed))
			require.NoError(t, err)
			_, lit, ok := strings.Cut(strings.TrimSpace(string(raw)), "[]byte(")
			require.True(t, ok, "fuzz seed format")
			data, err := strconv.Unquote(strings.TrimSuffix(lit, ")"))
			require.NoError(t, err)

			f, err := kvio.NewFile(tc.seed, strings.NewReader(data), int64(len(data)))
			require.NoError(t, err)
			_, err = kvio.OpenAuto(t.Context(), f)
			assert.ErrorContains(t, err, tc.seed)
			assert.ErrorContains(t, err, tc.want)
		})
	}
}
