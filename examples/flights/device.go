package flights

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"
	"unsafe"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/exec"
	"github.com/streamdag/streamdag/topology"
)

// The device graph (WithOpenCL): per partition p,
//
//	source[s] ─▶ columns[p] ─▶ delay[p], key[p] (raw) ─▶ filter[p] ─▶ keep[p] (raw)
//	                       └─▶ codes[p] (value)          partial[p] ◀─ delay, key, keep
//	                                                      partial[p] ─▶ table[p] (raw)
//	                         decode[p] ◀─ table[p], codes[p]; decode[p] ─▶ groups[p] ─▶ merge …
//
// columns[p] (host) copies the partition's delay values as Arrow holds
// them (their own width) into delay[p] and writes one int32 group code
// per row into key[p]: the row's key numbered densely within the
// partition, or -1 when its delay or key is null. filter[p] and
// partial[p] run over those raw bytes, in Go or in OpenCL C: filter
// writes keep[p], one byte per row (1: kept), partial aggregates the kept
// rows by code into partialGroups work-group tables of DeviceGroups codes
// each (count, sum, max, int64), exactly as the OpenCL launch splits the
// rows over its work-groups, so both variants write the same bytes.
// decode[p] (host) adds the tables up and names each code's key, giving
// the groups[p] value the CPU graph's partial writes; merge, sort, top-k,
// join and write are the CPU graph's.

// DeviceGroups is the most distinct keys (origin codes or hours) one
// partition of the device graph (WithOpenCL) can hold: the size of
// the group-by's per-work-group tables in OpenCL local memory (24 bytes
// a key). A partition with more fails in its columns kernel with an error
// naming the kernel, its rows and the limit.
const DeviceGroups = 1024

// deviceWorkGroup is the work-group size of the partial kernel's launch,
// and maxPartialGroups the most work-groups it uses (each one table of
// DeviceGroups entries in the partition's table buffer).
const (
	deviceWorkGroup  = 256
	maxPartialGroups = 8
	rowsPerGroup     = 32 << 10
)

// partialGroups returns the number of work-groups of the partial launch
// over rows rows: one per rowsPerGroup rows, 1 to maxPartialGroups.
func partialGroups(rows int64) int {
	return int(min(max((rows+rowsPerGroup-1)/rowsPerGroup, 1), maxPartialGroups))
}

// tableBytes is the size of a partial table buffer of ng work-group
// tables: count, sum and max (int64) of each of DeviceGroups codes.
func tableBytes(ng int) int64 { return int64(ng) * 3 * DeviceGroups * 8 }

// minDeviceBytes is the least size of a raw buffer of the device graph:
// device memory cannot be empty, so a partition of no rows still has
// bytes (its kernels touch none of them).
const minDeviceBytes = 8

// deviceSource is the OpenCL C of the flights kernels for delay values of
// width bytes (1, 2, 4 or 8: char, short, int, long). The group-by uses
// 64-bit atomics on local memory (cl_khr_int64_base_atomics and
// cl_khr_int64_extended_atomics, which PoCL and the GPU drivers offer),
// so its sums wrap as Go's int64 sums do.
func deviceSource(width int) string {
	ctype := map[int]string{1: "char", 2: "short", 4: "int", 8: "long"}[width]
	return fmt.Sprintf(`#pragma OPENCL EXTENSION cl_khr_int64_base_atomics : enable
#pragma OPENCL EXTENSION cl_khr_int64_extended_atomics : enable
typedef %s delay_t;
#define GROUPS %d
#define WG %d

/* keep[i] = 1 when row i has a key (0 <= key < GROUPS) and delay > min_delay. */
__kernel void flights_filter(__global const delay_t *delay, __global const int *key,
                             __global uchar *keep, long min_delay) {
	size_t i = get_global_id(0);
	int k = key[i];
	keep[i] = (k >= 0 && k < GROUPS && (long)delay[i] > min_delay) ? 1 : 0;
}

/* Work-item g takes rows g, g + S, g + 2S, … (S the global size) and adds
   each kept row to its work-group's table in local memory; each
   work-group then writes its table (count, sum, max of every code) to
   table + group * 3 * GROUPS. */
__kernel __attribute__((reqd_work_group_size(WG, 1, 1)))
void flights_partial(__global const delay_t *delay, __global const int *key,
                     __global const uchar *keep, __global long *table, long n) {
	__local long cnt[GROUPS], sum[GROUPS], mx[GROUPS];
	size_t lid = get_local_id(0);
	for (size_t c = lid; c < GROUPS; c += WG) {
		cnt[c] = 0;
		sum[c] = 0;
		mx[c] = LONG_MIN;
	}
	barrier(CLK_LOCAL_MEM_FENCE);
	long stride = get_global_size(0);
	for (long i = get_global_id(0); i < n; i += stride) {
		int k = key[i];
		if (keep[i] && k >= 0 && k < GROUPS) {
			long d = delay[i];
			atom_inc(&cnt[k]);
			atom_add(&sum[k], d);
			atom_max(&mx[k], d);
		}
	}
	barrier(CLK_LOCAL_MEM_FENCE);
	__global long *out = table + get_group_id(0) * 3 * GROUPS;
	for (size_t c = lid; c < GROUPS; c += WG) {
		out[c] = cnt[c];
		out[GROUPS + c] = sum[c];
		out[2 * GROUPS + c] = mx[c];
	}
}
`, ctype, DeviceGroups, deviceWorkGroup)
}

// filterOption is filter's OpenCL variant over rows rows.
func filterOption(width int, rows, minDelay int64, delay, key, keep dag.BufferID) dag.KernelOption {
	shape := dag.Shape{Global: []int{int(rows)}}
	return dag.OpenCL(deviceSource(width), "flights_filter", func([]int64) dag.Shape { return shape },
		dag.BufferArg(delay), dag.BufferArg(key), dag.BufferArg(keep), dag.ScalarArg(minDelay))
}

// partialOption is partial's OpenCL variant over rows rows.
func partialOption(width int, rows int64, delay, key, keep, table dag.BufferID) dag.KernelOption {
	shape := dag.Shape{Global: []int{partialGroups(rows) * deviceWorkGroup}, Local: []int{deviceWorkGroup}}
	return dag.OpenCL(deviceSource(width), "flights_partial", func([]int64) dag.Shape { return shape },
		dag.BufferArg(delay), dag.BufferArg(key), dag.BufferArg(keep), dag.BufferArg(table), dag.ScalarArg(rows))
}

// delayWidth returns the byte width of the source's delay column.
func (p *Pipeline) delayWidth() int {
	f, _ := p.src.Schema().FieldsByName("delay")
	return f[0].Type.(arrow.FixedWidthDataType).Bytes()
}

// addDeviceKernels adds partition i's kernels of the device graph and
// returns its groups buffer, which holds what the CPU graph's partial
// writes.
func (p *Pipeline) addDeviceKernels(i int, part Partition, batches dag.Value[batchList]) dag.Value[*groups] {
	g := p.Graph
	rows := part.RowHi - part.RowLo
	width := p.delayWidth()
	delay := g.AddBuffer(fmt.Sprintf("delay[%d]", i), max(rows*int64(width), minDeviceBytes))
	key := g.AddBuffer(fmt.Sprintf("key[%d]", i), max(rows*4, minDeviceBytes))
	keep := g.AddBuffer(fmt.Sprintf("keep[%d]", i), max(rows, minDeviceBytes))
	ng := partialGroups(rows)
	table := g.AddBuffer(fmt.Sprintf("table[%d]", i), tableBytes(ng))
	codes := dag.AddValue[*groupCodes](g, fmt.Sprintf("codes[%d]", i), dag.SizeHint(DeviceGroups*8))
	where := dag.PreferDevice(topology.OpenCL(0))
	if p.opts.Device != nil {
		where = dag.OnDevice(*p.opts.Device)
	}
	grp := dag.AddValue[*groups](g, fmt.Sprintf("groups[%d]", i), dag.SizeHint(groupsBytes))
	g.AddKernel(fmt.Sprintf("columns[%d]", i), p.columns(part, batches, delay, key, codes), dag.Reads(batches.ID()), dag.Writes(delay, key, codes.ID()),
		dag.Estimate(time.Duration(rows)*filterNsPerRow))
	g.AddKernel(fmt.Sprintf("filter[%d]", i), hostFilter(width, rows, p.opts.MinDelay, delay, key, keep), dag.Reads(delay, key), dag.Writes(keep),
		dag.Estimate(time.Duration(rows)*filterNsPerRow), where,
		filterOption(width, rows, p.opts.MinDelay, delay, key, keep))
	g.AddKernel(fmt.Sprintf("partial[%d]", i), hostPartial(width, rows, delay, key, keep, table), dag.Reads(delay, key, keep), dag.Writes(table),
		dag.Estimate(time.Duration(rows)*partialNsPerRow), where,
		partialOption(width, rows, delay, key, keep, table))
	g.AddKernel(fmt.Sprintf("decode[%d]", i), p.decode(table, codes, grp), dag.Reads(table, codes.ID()), dag.Writes(grp.ID()),
		dag.Estimate(time.Duration(ng)*DeviceGroups*time.Nanosecond))
	return grp
}

// groupCodes is the value of a codes[p] buffer: the key of each group
// code of the partition, in code order (origin codes or hours).
type groupCodes struct {
	origins []string
	hours   []int64
}

var _ exec.Copier = (*groupCodes)(nil)

// CopyTo copies the keys.
func (c *groupCodes) CopyTo(memory.Allocator) (any, int64, error) {
	out := &groupCodes{origins: append([]string(nil), c.origins...), hours: append([]int64(nil), c.hours...)}
	var n int64
	for _, s := range c.origins {
		n += int64(len(s))
	}
	return out, n + 8*int64(len(c.hours)), nil
}

// coder numbers the distinct keys of one partition densely from 0.
type coder struct {
	codes  *groupCodes
	byName map[string]int32
	byHour map[int64]int32
	kernel string    // for errors
	part   Partition // for errors
}

func (c *coder) full() error {
	return fmt.Errorf("flights: %s: partition rows [%d, %d) have more than %d distinct keys, the most the device group-by holds",
		c.kernel, c.part.RowLo, c.part.RowHi, DeviceGroups)
}

func (c *coder) origin(s string) (int32, error) {
	if k, ok := c.byName[s]; ok {
		return k, nil
	}
	k := int32(len(c.codes.origins))
	if k >= DeviceGroups {
		return 0, c.full()
	}
	s = strings.Clone(s) // s points into Arrow memory
	c.byName[s] = k
	c.codes.origins = append(c.codes.origins, s)
	return k, nil
}

func (c *coder) hour(h int64) (int32, error) {
	if k, ok := c.byHour[h]; ok {
		return k, nil
	}
	k := int32(len(c.codes.hours))
	if k >= DeviceGroups {
		return 0, c.full()
	}
	c.byHour[h] = k
	c.codes.hours = append(c.codes.hours, h)
	return k, nil
}

// columns returns partition part's columns kernel: from the batches in
// it writes the partition's delay values (as Arrow holds them) and group
// codes into the raw buffers delay and key, which the device kernels
// read, and the codes' keys into codes.
func (p *Pipeline) columns(part Partition, in dag.Value[batchList], delay, key dag.BufferID, codes dag.Value[*groupCodes]) dag.KernelFunc {
	width := p.delayWidth()
	return func(_ context.Context, l dag.Launch) error {
		batches, err := dag.Get(l, in)
		if err != nil {
			return err
		}
		delayOut, err := dag.Bytes(l, delay)
		if err != nil {
			return err
		}
		keyOut, err := dag.Bytes(l, key)
		if err != nil {
			return err
		}
		keys := int32s(keyOut)
		c := &coder{codes: &groupCodes{}, byName: map[string]int32{}, byHour: map[int64]int32{}, kernel: l.Kernel(), part: part}
		var off, pos int64 // rows of the parts before, rows written
		for b, rec := range batches {
			n := p.src.PartRows(part.PartLo + b)
			lo, hi := max(part.RowLo-off, 0), min(part.RowHi-off, n)
			off += n
			if lo >= hi {
				continue
			}
			dst := delayOut[pos*int64(width) : (pos+hi-lo)*int64(width)]
			kdst := keys[pos : pos+hi-lo]
			pos += hi - lo
			if rec == nil { // not read: no row passes
				clear(dst)
				for i := range kdst {
					kdst[i] = -1
				}
				continue
			}
			if rec.NumRows() != n {
				return fmt.Errorf("flights: part %d has %d rows, want %d", part.PartLo+b, rec.NumRows(), n)
			}
			delay, err := column(rec, "delay")
			if err != nil {
				return err
			}
			if w, ok := delay.DataType().(arrow.FixedWidthDataType); !ok || w.Bytes() != width || !isSignedInt(delay.DataType()) {
				return fmt.Errorf("flights: column \"delay\" is %s, want a signed integer of %d bytes", delay.DataType(), width)
			}
			start := int64(delay.Data().Offset()) + lo
			var vals []byte
			if bufs := delay.Data().Buffers(); len(bufs) > 1 && bufs[1] != nil {
				vals = bufs[1].Bytes()
			}
			if int64(len(vals)) < (start+hi-lo)*int64(width) {
				return fmt.Errorf("flights: part %d: column \"delay\" holds %d bytes of values, want %d", part.PartLo+b, len(vals), (start+hi-lo)*int64(width))
			}
			copy(dst, vals[start*int64(width):(start+hi-lo)*int64(width)])
			if err := p.codeRows(c, rec, int(lo), int(hi), kdst); err != nil {
				return err
			}
			if delay.NullN() > 0 {
				for i := range kdst {
					if delay.IsNull(int(lo) + i) {
						kdst[i] = -1
					}
				}
			}
		}
		return dag.Put(l, codes, c.codes)
	}
}

// codeRows writes the group code of rows [lo, hi) of rec into dst (-1
// for a null key). By hour, a row the filter drops (its delay null or
// not above MinDelay) gets -1 without its time being looked at, so that
// a time that is no hour fails the rows the CPU graph's partial fails,
// no more.
func (p *Pipeline) codeRows(c *coder, rec arrow.RecordBatch, lo, hi int, dst []int32) error {
	if p.Key == KeyHour {
		hour, err := hourColumn(rec, "time")
		if err != nil {
			return err
		}
		delay, err := int64Column(rec, "delay")
		if err != nil {
			return err
		}
		for i := lo; i < hi; i++ {
			if d, ok := delay(i); !ok || d <= p.opts.MinDelay {
				dst[i-lo] = -1
				continue
			}
			h, ok, err := hour(i)
			if err != nil {
				return err
			}
			if !ok {
				dst[i-lo] = -1
				continue
			}
			k, err := c.hour(h)
			if err != nil {
				return err
			}
			dst[i-lo] = k
		}
		return nil
	}
	col, err := column(rec, "origin")
	if err != nil {
		return err
	}
	if dict, ok := col.(*array.Dictionary); ok {
		return codeDictionary(c, dict, lo, hi, dst)
	}
	key, err := stringArray(col, "origin")
	if err != nil {
		return err
	}
	for i := lo; i < hi; i++ {
		s, ok := key(i)
		if !ok {
			dst[i-lo] = -1
			continue
		}
		k, err := c.origin(s)
		if err != nil {
			return err
		}
		dst[i-lo] = k
	}
	return nil
}

// codeDictionary codes rows [lo, hi) of a dictionary-encoded origin
// column: each dictionary value the rows use is coded once, then each
// row's index is mapped to its code. A null index or value codes as -1.
func codeDictionary(c *coder, dict *array.Dictionary, lo, hi int, dst []int32) error {
	dv := array.MakeFromData(dict.Data().Dictionary()) // see groupByIndex
	defer dv.Release()
	values, err := stringArray(dv, "origin")
	if err != nil {
		return err
	}
	n := dv.Len()
	remap := make([]int32, n)
	const uncoded = math.MinInt32
	for i := range remap {
		remap[i] = uncoded
	}
	for i := lo; i < hi; i++ {
		if !dict.IsValid(i) {
			dst[i-lo] = -1
			continue
		}
		x := dict.GetValueIndex(i)
		if x < 0 || x >= n {
			return fmt.Errorf("flights: origin row %d: dictionary index %d out of [0, %d)", i, x, n)
		}
		k := remap[x]
		if k == uncoded {
			k = -1
			if s, ok := values(x); ok {
				if k, err = c.origin(s); err != nil {
					return err
				}
			}
			remap[x] = k
		}
		dst[i-lo] = k
	}
	return nil
}

// decode adds a partition's work-group tables up and names each code's
// key: the groups the CPU graph's partial kernel writes.
// It reads the raw buffer tables and codes, and writes out.
func (p *Pipeline) decode(tables dag.BufferID, in dag.Value[*groupCodes], out dag.Value[*groups]) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		b, err := dag.Bytes(l, tables)
		if err != nil {
			return err
		}
		table := int64s(b)
		codes, err := dag.Get(l, in)
		if err != nil {
			return err
		}
		g := newGroups()
		ncodes := len(codes.origins) + len(codes.hours)
		for c := range ncodes {
			var a agg
			for t := 0; t+3*DeviceGroups <= len(table); t += 3 * DeviceGroups {
				a.merge(agg{count: table[t+c], sum: table[t+DeviceGroups+c], max: table[t+2*DeviceGroups+c]})
			}
			if a.count == 0 {
				continue
			}
			if p.Key == KeyHour {
				g.byHour[codes.hours[c]] = &a
			} else {
				g.byCode[codes.origins[c]] = &a
			}
		}
		return dag.Put(l, out, g)
	}
}

// hostFilter is filter's Go variant in the device graph: what
// flights_filter computes, over the same bytes (it reads delay and key,
// and writes keep).
func hostFilter(width int, rows, minDelay int64, delay, key, keep dag.BufferID) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		b, err := rawBuffers(l, delay, key, keep)
		if err != nil {
			return err
		}
		filterRows(width, b[0], int32s(b[1])[:rows], b[2][:rows], minDelay)
		return nil
	}
}

// hostPartial is partial's Go variant in the device graph: what
// flights_partial computes, over the same bytes (it reads delay, key and
// keep, and writes table).
func hostPartial(width int, rows int64, delay, key, keep, table dag.BufferID) dag.KernelFunc {
	return func(_ context.Context, l dag.Launch) error {
		b, err := rawBuffers(l, delay, key, keep, table)
		if err != nil {
			return err
		}
		n := int(rows)
		partialRows(width, b[0], int32s(b[1])[:n], b[2][:n], int64s(b[3]))
		return nil
	}
}

// rawBuffers returns the bytes of the raw buffers ids (at most 4) of the
// launch l, in order, or the first error of dag.Bytes.
func rawBuffers(l dag.Launch, ids ...dag.BufferID) ([4][]byte, error) {
	var b [4][]byte
	for i, id := range ids {
		var err error
		if b[i], err = dag.Bytes(l, id); err != nil {
			return b, err
		}
	}
	return b, nil
}

// filterRows sets keep[i] as flights_filter does for the rows of key.
func filterRows(width int, delay []byte, key []int32, keep []byte, minDelay int64) {
	switch width {
	case 1:
		filterTyped(ints[int8](delay), key, keep, minDelay)
	case 2:
		filterTyped(ints[int16](delay), key, keep, minDelay)
	case 4:
		filterTyped(ints[int32](delay), key, keep, minDelay)
	default:
		filterTyped(ints[int64](delay), key, keep, minDelay)
	}
}

func filterTyped[T int8 | int16 | int32 | int64](delay []T, key []int32, keep []byte, minDelay int64) {
	for i, k := range key {
		if k >= 0 && k < DeviceGroups && int64(delay[i]) > minDelay {
			keep[i] = 1
		} else {
			keep[i] = 0
		}
	}
}

// partialRows fills table as flights_partial does for the rows of key:
// partialGroups(len(key)) tables, row i counted in table
// (i mod S) / deviceWorkGroup, S the launch's global size.
func partialRows(width int, delay []byte, key []int32, keep []byte, table []int64) {
	ng := partialGroups(int64(len(key)))
	for t := range ng {
		tb := table[t*3*DeviceGroups : (t+1)*3*DeviceGroups]
		clear(tb[:2*DeviceGroups])
		for c := range DeviceGroups {
			tb[2*DeviceGroups+c] = math.MinInt64
		}
	}
	switch width {
	case 1:
		partialTyped(ints[int8](delay), key, keep, table, ng)
	case 2:
		partialTyped(ints[int16](delay), key, keep, table, ng)
	case 4:
		partialTyped(ints[int32](delay), key, keep, table, ng)
	default:
		partialTyped(ints[int64](delay), key, keep, table, ng)
	}
}

func partialTyped[T int8 | int16 | int32 | int64](delay []T, key []int32, keep []byte, table []int64, ng int) {
	stride := ng * deviceWorkGroup
	for i, k := range key {
		if keep[i] == 0 || k < 0 || k >= DeviceGroups {
			continue
		}
		tb := table[(i%stride)/deviceWorkGroup*3*DeviceGroups:]
		d := int64(delay[i])
		tb[k]++
		tb[DeviceGroups+k] += d
		if d > tb[2*DeviceGroups+k] {
			tb[2*DeviceGroups+k] = d
		}
	}
}

// ints views b as the native-endian integers of type T that a device
// buffer holds (the layout OpenCL C reads). Raw buffers are allocated
// with at least 8-byte alignment.
func ints[T int8 | int16 | int32 | int64](b []byte) []T {
	var z T
	size := int(unsafe.Sizeof(z))
	if len(b) < size {
		return nil
	}
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), len(b)/size)
}

func int32s(b []byte) []int32 { return ints[int32](b) }
func int64s(b []byte) []int64 { return ints[int64](b) }
