package kvio

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
)

// kvio reads some Arrow IPC metadata itself, for two reasons. The footer of
// an IPC file says where each record batch is but not how many rows it has,
// and arrow-go exposes neither; reading each batch's message metadata gives
// the row counts without reading the bodies. And arrow-go (v18.8.0) trusts
// the vector lengths of a schema FlatBuffer, allocating slices of those
// lengths before reading them: a corrupt length can exhaust memory, a fatal
// error that recover cannot catch, so schemas are checked first.
//
// Layout (https://arrow.apache.org/docs/format/Columnar.html#ipc-file-format;
// format/File.fbs, Message.fbs, Schema.fbs): an IPC file ends with the footer
// FlatBuffer, its int32 length and "ARROW1". Footer field 1 is the Schema,
// field 3 the vector of record batch Blocks, 24-byte structs {offset int64,
// metaDataLength int32, pad, bodyLength int64}. A block starts with an
// encapsulated message: an optional 0xFFFFFFFF continuation marker, the
// int32 metadata length, then the Message FlatBuffer: field 1 the header
// type, field 2 the header, field 3 the body length. A RecordBatch header's
// field 0 is its row count.

const (
	ipcTailBytes     = 10 // footer length (int32) + "ARROW1"
	ipcBlockBytes    = 24
	ipcSchema        = 1          // MessageHeader.Schema
	ipcRecordBatch   = 3          // MessageHeader.RecordBatch
	ipcContinuation  = 0xFFFFFFFF // marks the 8-byte message prefix
	ipcMaxFieldDepth = 64         // as Arrow C++'s kMaxNestingDepth
)

var errCorruptIPC = errors.New("corrupt Arrow IPC metadata")

// ipcFooter checks the schema in the footer of the Arrow IPC file f and
// returns the row count of each record batch.
func ipcFooter(ctx context.Context, f *File) ([]int64, error) {
	size := f.Size()
	if size < ipcTailBytes {
		return nil, fmt.Errorf("not an Arrow IPC file: file too small (%d bytes)", size)
	}
	var tail [ipcTailBytes]byte
	if _, err := f.ReadAtContext(ctx, tail[:], size-ipcTailBytes); err != nil {
		return nil, err
	}
	if string(tail[4:]) != "ARROW1" {
		return nil, fmt.Errorf("not an Arrow IPC file: ends with %q, want \"ARROW1\"", tail[4:])
	}
	n := int64(int32(binary.LittleEndian.Uint32(tail[:4])))
	if n <= 0 || n > size-ipcTailBytes {
		return nil, fmt.Errorf("%w: footer length %d", errCorruptIPC, n)
	}
	fb := &flatbuf{b: make([]byte, n)}
	if _, err := f.ReadAtContext(ctx, fb.b, size-ipcTailBytes-n); err != nil {
		return nil, err
	}

	footer := fb.deref(0)
	if schema := fb.field(footer, 1); schema >= 0 {
		fb.schemaFits(fb.deref(schema))
	}
	first, count := fb.vector(footer, 3, ipcBlockBytes)
	if fb.bad {
		return nil, fmt.Errorf("%w: footer", errCorruptIPC)
	}
	rows := make([]int64, count)
	for i := range rows {
		blk := first + i*ipcBlockBytes
		off, metaLen := int64(fb.uint(blk, 8)), int64(int32(fb.uint(blk+8, 4)))
		if off < 0 || metaLen < 8 || off > size-metaLen {
			return nil, fmt.Errorf("%w: record batch %d at %d with %d bytes of metadata", errCorruptIPC, i, off, metaLen)
		}
		meta := make([]byte, metaLen)
		if _, err := f.ReadAtContext(ctx, meta, off); err != nil {
			return nil, err
		}
		r, err := ipcBatchRows(meta)
		if err != nil {
			return nil, fmt.Errorf("record batch %d at %d: %w", i, off, err)
		}
		rows[i] = r
	}
	return rows, nil
}

// ipcBatchRows returns the row count of the encapsulated RecordBatch message
// whose metadata (prefix included) is meta.
func ipcBatchRows(meta []byte) (int64, error) {
	fb, msg, _, err := ipcMessage(meta, ipcRecordBatch)
	if err != nil {
		return 0, err
	}
	var rows int64
	if length := fb.field(fb.deref(fb.field(msg, 2)), 0); length >= 0 {
		rows = int64(fb.uint(length, 8))
	}
	if fb.bad || rows < 0 {
		return 0, fmt.Errorf("%w: record batch message", errCorruptIPC)
	}
	return rows, nil
}

// ipcCheckSchemaMessage returns an error unless b starts with an
// encapsulated Schema message whose declared body fits in b and whose schema
// passes schemaFits.
func ipcCheckSchemaMessage(b []byte) error {
	fb, msg, rest, err := ipcMessage(b, ipcSchema)
	if err != nil {
		return err
	}
	fb.schemaFits(fb.deref(fb.field(msg, 2)))
	var body int64
	if f := fb.field(msg, 3); f >= 0 {
		body = int64(fb.uint(f, 8))
	}
	if fb.bad || body < 0 || body > int64(len(rest)) {
		return fmt.Errorf("%w: schema message", errCorruptIPC)
	}
	return nil
}

// ipcMessage reads the encapsulated IPC message at the start of b, which
// must have header type typ. It returns the Message FlatBuffer, the position
// of the Message table in it, and the bytes of b after the metadata (where
// the body starts).
func ipcMessage(b []byte, typ uint64) (fb *flatbuf, msg int, rest []byte, err error) {
	if len(b) < 8 {
		return nil, 0, nil, fmt.Errorf("%w: message of %d bytes", errCorruptIPC, len(b))
	}
	start := 4
	if binary.LittleEndian.Uint32(b) == ipcContinuation {
		start = 8
	}
	n := int(int32(binary.LittleEndian.Uint32(b[start-4:])))
	if n <= 0 || n > len(b)-start {
		return nil, 0, nil, fmt.Errorf("%w: message length %d", errCorruptIPC, n)
	}
	fb = &flatbuf{b: b[start : start+n]}
	msg = fb.deref(0)
	if t := fb.field(msg, 1); t < 0 || fb.field(msg, 2) < 0 || fb.uint(t, 1) != typ {
		return nil, 0, nil, fmt.Errorf("%w: message is not of header type %d", errCorruptIPC, typ)
	}
	return fb, msg, b[start+n:], nil
}

// flatbuf reads a FlatBuffer (https://flatbuffers.dev/internals/) with
// bounds checks. A read out of bounds returns zeros and sets bad; callers
// check bad once after a series of reads.
type flatbuf struct {
	b   []byte
	bad bool
}

// uint returns the n-byte little-endian unsigned integer at pos.
func (fb *flatbuf) uint(pos, n int) uint64 {
	if fb.bad || pos < 0 || pos > len(fb.b)-n {
		fb.bad = true
		return 0
	}
	var v uint64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | uint64(fb.b[pos+i])
	}
	return v
}

// deref returns the position that the offset stored at pos points to.
func (fb *flatbuf) deref(pos int) int { return pos + int(fb.uint(pos, 4)) }

// field returns the position of field slot of the table at t, or -1 when the
// field is absent (it then has its default value). It follows the FlatBuffers
// Go runtime (Table.Offset) exactly, which arrow-go uses: a field is present
// when its vtable entry starts inside the vtable, however odd the size.
func (fb *flatbuf) field(t, slot int) int {
	vt := t - int(int32(fb.uint(t, 4)))
	if 4+2*slot >= int(fb.uint(vt, 2)) {
		return -1
	}
	off := int(fb.uint(vt+4+2*slot, 2))
	if off == 0 || fb.bad {
		return -1
	}
	return t + off
}

// vector returns the position of the first element and the length of the
// vector in field slot of the table at t (0, 0 when absent). It sets bad
// when elements of elemBytes bytes each would run past the buffer.
func (fb *flatbuf) vector(t, slot, elemBytes int) (first, n int) {
	f := fb.field(t, slot)
	if f < 0 {
		return 0, 0
	}
	v := fb.deref(f)
	n = int(fb.uint(v, 4))
	if fb.bad || n > (len(fb.b)-v-4)/elemBytes {
		fb.bad = true
		return 0, 0
	}
	return v + 4, n
}

// schemaFits sets bad unless the vectors of the Schema table at t, and of
// every Field under it, fit in the buffer and fields nest at most
// ipcMaxFieldDepth deep. Schema: field 1 fields, 2 custom_metadata; Field:
// field 5 children, 6 custom_metadata (all vectors of offsets).
func (fb *flatbuf) schemaFits(t int) {
	fb.vector(t, 2, 4)
	fb.fieldsFit(t, 1, 0)
}

func (fb *flatbuf) fieldsFit(t, slot, depth int) {
	first, n := fb.vector(t, slot, 4)
	if n > 0 && depth == ipcMaxFieldDepth {
		fb.bad = true
	}
	for i := 0; i < n && !fb.bad; i++ {
		f := fb.deref(first + 4*i)
		fb.vector(f, 6, 4)
		fb.fieldsFit(f, 5, depth+1)
	}
}
