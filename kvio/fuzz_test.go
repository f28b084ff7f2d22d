package kvio_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/kvio"
)

// FuzzOpenAuto feeds arbitrary bytes to OpenAuto and ReadAll: they must
// return an error or batches, never panic or hang.
func FuzzOpenAuto(f *testing.F) {
	for _, path := range []string{writeParquet(f, 20, 8), writeIPC(f, 5, 0, 7)} {
		data, err := os.ReadFile(path)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
		f.Add(data[:len(data)/2])
		f.Add(data[:len(data)-1])
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		file, err := kvio.NewFile("fuzz", bytes.NewReader(data), int64(len(data)), kvio.WithTaskSize(64))
		if err != nil {
			t.Fatal(err)
		}
		s, err := kvio.OpenAuto(t.Context(), file)
		if err != nil {
			return
		}
		defer s.Close()
		batches, err := kvio.ReadAll(t.Context(), s, memory.NewGoAllocator())
		if err != nil {
			return
		}
		for i, b := range batches {
			if b.NumRows() != s.PartRows(i) {
				t.Errorf("part %d: %d rows, PartRows says %d", i, b.NumRows(), s.PartRows(i))
			}
			b.Release()
		}
	})
}
