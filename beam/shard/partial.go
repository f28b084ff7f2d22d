package shard

import (
	"bytes"
	"fmt"
	"reflect"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/ipc"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/beam/sdks/v2/go/pkg/beam"
)

// Partial is a table of partial group aggregates, one row per shard and
// key: Shard[i] is the shard whose rows Key[i]'s Count[i] flights (delay
// sum Sum[i] and largest delay Max[i], minutes) are. All five columns
// have one length. Its Beam coder is EncodePartial and DecodePartial.
type Partial struct {
	Shard []int32
	Key   []string
	Count []int64
	Sum   []int64
	Max   []int64
}

func init() {
	beam.RegisterCoder(reflect.TypeOf(Partial{}), EncodePartial, DecodePartial)
}

// partialSchema is the Arrow schema of an encoded Partial.
var partialSchema = arrow.NewSchema([]arrow.Field{
	{Name: "shard", Type: arrow.PrimitiveTypes.Int32},
	{Name: "key", Type: arrow.BinaryTypes.String},
	{Name: "count", Type: arrow.PrimitiveTypes.Int64},
	{Name: "delay_sum", Type: arrow.PrimitiveTypes.Int64},
	{Name: "delay_max", Type: arrow.PrimitiveTypes.Int64},
}, nil)

// Len returns the number of rows of p.
func (p Partial) Len() int { return len(p.Key) }

// add appends one row to p.
func (p *Partial) add(shard int32, key string, count, sum, maxDelay int64) {
	p.Shard = append(p.Shard, shard)
	p.Key = append(p.Key, key)
	p.Count = append(p.Count, count)
	p.Sum = append(p.Sum, sum)
	p.Max = append(p.Max, maxDelay)
}

// EncodePartial writes p as an Arrow IPC stream of one record batch with
// the columns shard (int32), key (utf8), count, delay_sum and delay_max
// (int64). Errors: columns of different lengths, or arrow-go's.
func EncodePartial(p Partial) ([]byte, error) {
	n := p.Len()
	if len(p.Shard) != n || len(p.Count) != n || len(p.Sum) != n || len(p.Max) != n {
		return nil, fmt.Errorf("shard: encode partial: columns of %d, %d, %d, %d and %d rows", len(p.Shard), n, len(p.Count), len(p.Sum), len(p.Max))
	}
	b := array.NewRecordBuilder(memory.DefaultAllocator, partialSchema)
	defer b.Release()
	b.Field(0).(*array.Int32Builder).AppendValues(p.Shard, nil)
	b.Field(1).(*array.StringBuilder).AppendValues(p.Key, nil)
	b.Field(2).(*array.Int64Builder).AppendValues(p.Count, nil)
	b.Field(3).(*array.Int64Builder).AppendValues(p.Sum, nil)
	b.Field(4).(*array.Int64Builder).AppendValues(p.Max, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	var buf bytes.Buffer
	w := ipc.NewWriter(&buf, ipc.WithSchema(partialSchema))
	if err := w.Write(rec); err != nil {
		return nil, fmt.Errorf("shard: encode partial: %w", err)
	}
	if err := w.Close(); err != nil {
		return nil, fmt.Errorf("shard: encode partial: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodePartial reads a Partial from an Arrow IPC stream that
// EncodePartial wrote (any number of record batches of its schema).
// Errors: not an IPC stream, another schema, nulls, or arrow-go's, each
// naming what is wrong.
func DecodePartial(data []byte) (Partial, error) {
	var p Partial
	r, err := ipc.NewReader(bytes.NewReader(data))
	if err != nil {
		return p, fmt.Errorf("shard: decode partial: %w", err)
	}
	defer r.Release()
	if !r.Schema().Equal(partialSchema) {
		return p, fmt.Errorf("shard: decode partial: schema %s, want %s", r.Schema(), partialSchema)
	}
	for r.Next() {
		rec := r.RecordBatch()
		for i := range rec.NumCols() {
			if n := rec.Column(int(i)).NullN(); n > 0 {
				return Partial{}, fmt.Errorf("shard: decode partial: column %s has %d nulls", rec.ColumnName(int(i)), n)
			}
		}
		p.Shard = append(p.Shard, rec.Column(0).(*array.Int32).Int32Values()...)
		keys := rec.Column(1).(*array.String)
		for i := range keys.Len() {
			p.Key = append(p.Key, keys.Value(i))
		}
		p.Count = append(p.Count, rec.Column(2).(*array.Int64).Int64Values()...)
		p.Sum = append(p.Sum, rec.Column(3).(*array.Int64).Int64Values()...)
		p.Max = append(p.Max, rec.Column(4).(*array.Int64).Int64Values()...)
	}
	if err := r.Err(); err != nil {
		return Partial{}, fmt.Errorf("shard: decode partial: %w", err)
	}
	return p, nil
}
