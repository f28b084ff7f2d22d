package kvio_test

import (
	"bytes"
	"context"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/kvio"
)

func ExampleFile_ReadAt() {
	data := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	// Reads longer than 8 bytes are split into 8-byte chunks, 2 at a time.
	f, err := kvio.NewFile("digits", bytes.NewReader(data), int64(len(data)), kvio.WithTaskSize(8), kvio.WithThreads(2))
	if err != nil {
		panic(err)
	}
	defer f.Close()

	p := make([]byte, 20)
	n, err := f.ReadAt(p, 10)
	fmt.Printf("%d %q %v\n", n, p[:n], err)

	n, err = f.ReadAt(p, 30)
	fmt.Printf("%d %q %v\n", n, p[:n], err)
	// Output:
	// 20 "abcdefghijklmnopqrst" <nil>
	// 6 "uvwxyz" kvio: read digits at 30: short read 6 of 20 bytes
}

func ExampleFile_Describe() {
	data := bytes.Repeat([]byte("kvio"), 1024)
	// Direct reads are asked for, but a File over memory has no O_DIRECT
	// descriptor: Describe says so, where Options.String states the setting.
	f, err := kvio.NewFile("in-memory", bytes.NewReader(data), int64(len(data)),
		kvio.WithCompatMode(kvio.CompatAuto), kvio.WithThreads(1), kvio.WithTaskSize(4<<20),
		kvio.WithGDSThreshold(1<<20), kvio.WithBounceBufferSize(16<<20), kvio.WithDirectIO(true, false))
	if err != nil {
		panic(err)
	}
	defer f.Close()
	if _, err := f.ReadAt(make([]byte, len(data)), 0); err != nil {
		panic(err)
	}
	fmt.Println(f.Options())
	fmt.Println(f.Describe())
	fmt.Printf("%+v\n", f.IOStats())
	// Output:
	// compat mode auto, 1 thread, task 4 MiB, gds threshold 1 MiB, bounce buffer 16 MiB, direct I/O reads
	// kvio: in-memory: compat mode auto → posix (not an operating-system file), 1 thread, task 4 MiB, gds threshold 1 MiB, bounce buffer 16 MiB, direct I/O reads unavailable (not an operating-system file)
	// {ReadBytes:4096 DirectReadBytes:0 WriteBytes:0 DirectWriteBytes:0}
}

func ExampleOpenAuto() {
	// An Arrow IPC file of two record batches, in memory.
	var buf bytes.Buffer
	schema := arrow.NewSchema([]arrow.Field{{Name: "delay", Type: arrow.PrimitiveTypes.Int64}}, nil)
	w, err := ipc.NewFileWriter(&buf, ipc.WithSchema(schema))
	if err != nil {
		panic(err)
	}
	for _, delays := range [][]int64{{5, -3, 12}, {40, 0}} {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		b.Field(0).(*array.Int64Builder).AppendValues(delays, nil)
		rec := b.NewRecordBatch()
		if err := w.Write(rec); err != nil {
			panic(err)
		}
		rec.Release()
		b.Release()
	}
	if err := w.Close(); err != nil {
		panic(err)
	}

	ctx := context.Background()
	f, err := kvio.NewFile("flights.arrow", bytes.NewReader(buf.Bytes()), int64(buf.Len()))
	if err != nil {
		panic(err)
	}
	defer f.Close()
	src, err := kvio.OpenAuto(ctx, f)
	if err != nil {
		panic(err)
	}
	defer src.Close()

	batches, err := kvio.ReadAll(ctx, src, memory.DefaultAllocator)
	if err != nil {
		panic(err)
	}
	for i, b := range batches {
		fmt.Println("part", i, src.PartRows(i), "rows:", b.Column(0))
		b.Release()
	}
	// Output:
	// part 0 3 rows: [5 -3 12]
	// part 1 2 rows: [40 0]
}
