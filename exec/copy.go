package exec

import (
	"fmt"
	"math/bits"
	"slices"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/buffers"
	"github.com/streamdag/streamdag/dag"
	"github.com/streamdag/streamdag/topology"
)

// Copier is implemented by values of value buffers that can cross
// devices: CopyTo returns a deep copy whose memory comes from mem (the
// destination device's allocator) and the number of bytes it copied.
// Arrow arrays and record batches are copied without it.
type Copier interface {
	CopyTo(mem memory.Allocator) (v any, bytes int64, err error)
}

// copyRange copies the bytes [off, off+n) of src into the same bytes of
// dst, a replica on another device (or the other way round); a value
// buffer's value is copied whole, through Copier or Arrow's own layout.
// It returns the bytes copied. A value that cannot be copied is an error
// naming its type: a real copy or none, never a shared pointer.
func copyRange(dst, src *buffers.Buffer, off, n int64, mem memory.Allocator) (int64, error) {
	if b := src.Bytes(); b != nil {
		return int64(copy(dst.Bytes()[off:off+n], b[off:off+n])), nil
	}
	v := src.Value()
	var (
		out any
		m   int64
		err error
	)
	switch x := v.(type) {
	case nil:
		return 0, dst.Store(nil)
	case Copier:
		out, m, err = x.CopyTo(mem)
	case arrow.RecordBatch:
		out, m, err = CopyRecord(x, mem)
	case arrow.Array:
		var a arrow.Array
		a, m, err = copyArray(x, mem)
		out = a
	default:
		return 0, fmt.Errorf("exec: cannot copy %s (a %T) across devices: its type does not implement exec.Copier", src.Name(), v)
	}
	if err != nil {
		return 0, fmt.Errorf("exec: copy %s: %w", src.Name(), err)
	}
	return m, dst.Store(out)
}

// runCopy runs copy launch op: the bytes of its read into the same bytes
// of its write. Bytes that failed or skipped work left unwritten are not
// worth moving, and a value may not be copyable then: a source with any
// taint is copied only when it holds raw bytes. Either way the copy's
// taint is settled byte for byte when it succeeds (settleCopy).
func (r *run) runCopy(op *PlannedLaunch) (int64, error) {
	src, dst := op.Reads[0], op.Writes[0]
	from, to := r.buffer(src.Buffer), r.buffer(dst.Buffer)
	if from == nil || to == nil { // a failed reservation: settleCopy carries it
		return 0, nil
	}
	if from.Bytes() == nil && r.store.EnsureWritten(src) != nil {
		return 0, nil
	}
	return copyRange(to, from, src.Offset, src.Length, r.alloc)
}

// settleCopy settles a copy launch that succeeded: each byte it wrote
// takes the taint of the byte it copied, so a reader on the destination
// device is skipped exactly when the same read on the source device would
// be, with the same root failure.
func (r *run) settleCopy(op *PlannedLaunch) {
	r.store.Carry(op.Name, op.Reads[0], op.Writes[0])
}

// maxDevices is how many devices a plan can span (the width of devSet).
const maxDevices = 64

// devSet is a set of device indices.
type devSet uint64

// allDevs is every device: bytes nobody has written yet (zero, or a nil
// value) read the same on every device.
const allDevs = ^devSet(0)

func (s devSet) has(d int) bool { return s&(1<<d) != 0 }

// pick returns the device a copy of bytes held on s comes from: home when
// it holds them, else the lowest device that does.
func (s devSet) pick(home int) int {
	if s.has(home) {
		return home
	}
	return bits.TrailingZeros64(uint64(s))
}

// piece is a byte range of one buffer and the devices that hold its
// current bytes.
type piece struct {
	off, end int64
	on       devSet
}

// placer decides, while a plan is built in launch order, where each
// graph buffer's current bytes are, by byte range, and inserts the copy
// launches a read needs: a kernel reads its device's instance of a buffer
// (the buffer itself on its home device, a replica elsewhere), and every
// range of the read whose current bytes are not on that device is copied
// there first, from a device that holds them. A write makes its device
// the only holder of the bytes it covers. A copy is therefore placed
// after the last write of the bytes it moves, and moves only the bytes
// some read needs; after the last launch, bytes whose current version is
// not on the buffer's home are copied home, so the buffer itself always
// ends with the final bytes (a Result reads it).
type placer struct {
	p        *Plan
	g        *dag.Graph
	devs     []topology.DeviceID
	devNames []string              // devs[d].String()
	mem      devSet                // the code devices: their instances are device memory
	drained  devSet                // the drained devices (Executor.Drain): unwritten bytes are not there
	pieces   [][]piece             // by graph buffer: sorted, disjoint, covering its extent
	rep      map[[2]int]buffers.ID // (graph buffer, device) → replica
	// The copy launches' records, allocated in chunks: each copy takes
	// one Copy and two bindings (its read and its write).
	copies   []Copy
	bindings []buffers.Binding
}

// copyChunk is how many copy launches' records the placer allocates at
// once.
const copyChunk = 256

// copyOptional is every copy launch's Optional: its one read is never
// required (a copy carries its source's taint). Shared, never written.
var copyOptional = []bool{true}

// newPlacer starts tracking p's graph buffers: the bytes of buffer b are
// on every device but code devices and drained ones (nothing has written
// them: they read as zeros, which device memory does not hold until
// copied there), or
// only on its home device when only[b] (an input, or bytes carried from
// an earlier phase).
func newPlacer(p *Plan, only []bool) *placer {
	pl := &placer{p: p, g: p.graph, devs: p.devices, devNames: make([]string, len(p.devices)),
		pieces: make([][]piece, len(p.bufs)), rep: map[[2]int]buffers.ID{}}
	for d, id := range p.devices {
		pl.devNames[d] = id.String()
	}
	for d, m := range p.mem {
		if m {
			pl.mem |= 1 << d
		}
		if p.isDrained(d) {
			pl.drained |= 1 << d
		}
	}
	first := make([]piece, len(p.bufs)) // each buffer's one piece, until a split moves it out
	for b := range p.bufs {
		on := allDevs &^ pl.mem &^ pl.drained
		if only[b] {
			on = 1 << p.bufs[b].Device
		}
		first[b] = piece{0, pl.g.Buffer(dag.BufferID(b)).Whole().Length, on}
		pl.pieces[b] = first[b : b+1 : b+1]
	}
	return pl
}

// instance returns the plan buffer that holds graph buffer b on device d:
// b itself on its home, else its replica there (made on first use).
func (pl *placer) instance(b dag.BufferID, d int) buffers.ID {
	src := pl.p.bufs[b]
	if src.Device == d {
		return buffers.ID(b)
	}
	key := [2]int{int(b), d}
	id, ok := pl.rep[key]
	if !ok {
		id = buffers.ID(len(pl.p.bufs))
		pl.rep[key] = id
		pl.p.bufs = append(pl.p.bufs, PlannedBuffer{Name: src.Name + "@" + pl.devNames[d],
			SizeBytes: src.SizeBytes, Value: src.Value, Device: d, Of: b})
	}
	return id
}

// split makes off and end piece boundaries of buffer b and returns the
// index range [i, j) of the pieces inside [off, end).
func (pl *placer) split(b dag.BufferID, off, end int64) (int, int) {
	ps := pl.pieces[b]
	cut := func(at int64) {
		i, found := slices.BinarySearchFunc(ps, at, func(p piece, at int64) int {
			switch {
			case p.end <= at:
				return -1
			case p.off > at:
				return 1
			}
			return 0
		})
		if found && ps[i].off < at {
			ps = slices.Insert(ps, i+1, piece{at, ps[i].end, ps[i].on})
			ps[i].end = at
		}
	}
	cut(off)
	cut(end)
	pl.pieces[b] = ps
	i := slices.IndexFunc(ps, func(p piece) bool { return p.off >= off })
	j := i
	for j < len(ps) && ps[j].end <= end {
		j++
	}
	return i, j
}

// read returns r (a binding of a graph buffer) redirected to device d's
// instance, after appending to the plan a copy of every range of it whose
// current bytes d does not hold.
func (pl *placer) read(r buffers.Binding, d int) buffers.Binding {
	b := dag.BufferID(r.Buffer)
	out := r
	out.Buffer = pl.instance(b, d)
	if r.Length <= 0 {
		return out
	}
	i, j := pl.split(b, r.Offset, r.End())
	ps := pl.pieces[b]
	for i < j {
		if ps[i].on.has(d) {
			i++
			continue
		}
		// One copy for a run of pieces that come from the same device.
		home := pl.p.bufs[b].Device
		from := ps[i].on.pick(home)
		k := i
		for k < j && !ps[k].on.has(d) && ps[k].on.pick(home) == from {
			ps[k].on |= 1 << d
			k++
		}
		if pl.mem.has(from) && pl.mem.has(d) && from != d {
			// Between two code devices: through the host copy at home
			// (which does not hold these bytes, or pick would give it).
			pl.copy(b, ps[i].off, ps[k-1].end, from, home)
			for x := i; x < k; x++ {
				ps[x].on |= 1 << home
			}
			from = home
		}
		pl.copy(b, ps[i].off, ps[k-1].end, from, d)
		i = k
	}
	pl.merge(b)
	return out
}

// write records that device d writes w (a binding of a graph buffer) and
// returns it redirected to d's instance.
func (pl *placer) write(w buffers.Binding, d int) buffers.Binding {
	b := dag.BufferID(w.Buffer)
	out := w
	out.Buffer = pl.instance(b, d)
	if w.Length <= 0 {
		return out
	}
	i, j := pl.split(b, w.Offset, w.End())
	for k := i; k < j; k++ {
		pl.pieces[b][k].on = 1 << d
	}
	pl.merge(b)
	return out
}

// merge fuses neighbouring pieces of b held on the same devices.
func (pl *placer) merge(b dag.BufferID) {
	ps := pl.pieces[b]
	out := ps[:1]
	for _, p := range ps[1:] {
		if last := &out[len(out)-1]; last.on == p.on {
			last.end = p.end
			continue
		}
		out = append(out, p)
	}
	pl.pieces[b] = out
}

// copy appends a copy launch of bytes [off, end) of b from device from
// to device to. It runs on a stream of to, or of from when from is a code
// device (a code device's stream copies its memory out to the host).
func (pl *placer) copy(b dag.BufferID, off, end int64, from, to int) {
	buf := pl.g.Buffer(b)
	name := buf.Name
	bytes := end - off
	if buf.Value {
		bytes = buf.TransferBytes()
	} else if off != 0 || end != buf.SizeBytes {
		name = fmt.Sprintf("%s[%d:%d)", buf.Name, off, end)
	}
	if len(pl.copies) == cap(pl.copies) {
		pl.copies, pl.bindings = make([]Copy, 0, copyChunk), make([]buffers.Binding, 0, 2*copyChunk)
	}
	pl.copies = append(pl.copies, Copy{Buffer: b, From: from, To: to, Bytes: bytes})
	pl.bindings = append(pl.bindings,
		buffers.Binding{Buffer: pl.instance(b, from), Offset: off, Length: end - off},
		buffers.Binding{Buffer: pl.instance(b, to), Offset: off, Length: end - off})
	c, n := &pl.copies[len(pl.copies)-1], len(pl.bindings)
	on := to // a copy runs on the destination, or on the code device it leaves
	if pl.mem.has(from) {
		on = from
	}
	pl.p.launches = append(pl.p.launches, PlannedLaunch{Kernel: -1, Device: on, Copy: c,
		Name:  "copy " + name + " " + pl.devNames[from] + "→" + pl.devNames[to],
		Reads: pl.bindings[n-2 : n-1 : n-1], Writes: pl.bindings[n-1 : n : n],
		// A copy is never skipped: it carries its source's taint.
		optional: true}) // copyOptional (Plan.optional)
	pl.p.copies++
}

// finish copies home every range whose current bytes are elsewhere, but
// on a code device alone (those a Result fetches when it reads the
// buffer: Plan.fetch), and marks which instances end with every byte's
// final version.
func (pl *placer) finish() {
	for b := range pl.g.NumBuffers() {
		home := pl.p.bufs[b].Device
		if pl.mem != 0 {
			pl.fetchLater(dag.BufferID(b), home)
		}
		pl.read(pl.g.Buffer(dag.BufferID(b)).Whole(), home)
	}
	if f := pl.p.fetch; f != nil {
		// A graph buffer no launch binds is touched by fetches alone:
		// its host bytes are made by the first (its budget is taken).
		pl.p.fetchOnly = make([]bool, len(f))
		for b := range f {
			pl.p.fetchOnly[b] = f[b] != nil
		}
		for _, l := range pl.p.launches {
			for _, bs := range [2][]buffers.Binding{l.Reads, l.Writes} {
				for _, x := range bs {
					if int(x.Buffer) < len(f) {
						pl.p.fetchOnly[x.Buffer] = false
					}
				}
			}
		}
	}
	for i := range pl.p.bufs {
		pb := &pl.p.bufs[i]
		pb.final = !slices.ContainsFunc(pl.pieces[pb.Of], func(p piece) bool { return !p.on.has(pb.Device) })
	}
}

// fetchLater records in the plan, for each range of b whose current
// bytes are on a code device and not home, a fetch from that device's
// instance, and counts those bytes as home's: a Result reads them there
// only after fetching them (Result.Buffer).
func (pl *placer) fetchLater(b dag.BufferID, home int) {
	ps := pl.pieces[b]
	for i := 0; i < len(ps); {
		from := ps[i].on.pick(home)
		if ps[i].on.has(home) || !pl.mem.has(from) {
			i++
			continue
		}
		k := i
		for k < len(ps) && !ps[k].on.has(home) && ps[k].on.pick(home) == from {
			ps[k].on |= 1 << home
			k++
		}
		if pl.p.fetch == nil {
			pl.p.fetch = make([][]fetch, pl.g.NumBuffers())
		}
		pl.p.fetch[b] = append(pl.p.fetch[b], fetch{inst: pl.instance(b, from), dev: from, off: ps[i].off, end: ps[k-1].end})
		i = k
	}
	pl.merge(b)
}

// CopyRecord deep-copies rec into memory from mem and returns the copy
// and the bytes of its buffers.
func CopyRecord(rec arrow.RecordBatch, mem memory.Allocator) (arrow.RecordBatch, int64, error) {
	cols := make([]arrow.Array, rec.NumCols())
	var n int64
	for i, c := range rec.Columns() {
		a, m, err := copyArray(c, mem)
		if err != nil {
			for _, done := range cols[:i] {
				done.Release()
			}
			return nil, 0, err
		}
		cols[i], n = a, n+m
	}
	out := array.NewRecordBatch(rec.Schema(), cols, rec.NumRows())
	for _, c := range cols {
		c.Release()
	}
	return out, n, nil
}

// copyArray copies a through arrow's Concatenate of one array, which
// writes fresh buffers from mem.
func copyArray(a arrow.Array, mem memory.Allocator) (arrow.Array, int64, error) {
	out, err := array.Concatenate([]arrow.Array{a}, mem)
	if err != nil {
		return nil, 0, err
	}
	var n int64
	var walk func(d arrow.ArrayData)
	walk = func(d arrow.ArrayData) {
		for _, b := range d.Buffers() {
			if b != nil {
				n += int64(b.Len())
			}
		}
		for _, c := range d.Children() {
			walk(c)
		}
		if d.DataType().ID() == arrow.DICTIONARY {
			walk(d.Dictionary()) // the values, held beside the indices
		}
	}
	walk(out.Data())
	return out, n, nil
}
