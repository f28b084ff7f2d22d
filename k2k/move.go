package k2k

import (
	"context"
	"errors"
	"fmt"

	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/topology"
)

// place is where a payload's bytes are: device memory of a code device
// (mem), or host memory (host): a host-memory device's (dev set), or
// staging host memory between two hops (dev nil). owned host memory
// comes from the Router's allocator.
type place struct {
	dev   gpu.Device
	mem   gpu.Memory
	host  []byte
	owned bool
	n     int64
}

// release frees the place's memory once.
func (p *place) release(alloc memory.Allocator) error {
	var err error
	switch {
	case p.mem != nil:
		err = p.mem.Release()
	case p.owned:
		alloc.Free(p.host)
	}
	p.mem, p.host, p.owned, p.n = nil, nil, false, 0
	return err
}

// codeStream returns stream 0 of code device d as a CodeStream.
func codeStream(d gpu.CodeDevice) (gpu.CodeStream, error) {
	s, ok := d.Stream(0).(gpu.CodeStream)
	if !ok {
		return nil, fmt.Errorf("k2k: %s is a code device whose stream 0 is no gpu.CodeStream", d.ID())
	}
	return s, nil
}

// finish waits for the commands enqueued on s so far. A copy cannot be
// recalled once enqueued and its memory may not be freed before it ends,
// so the wait does not end with ctx.
func finish(ctx context.Context, s gpu.Stream) error {
	return s.Record().Wait(context.WithoutCancel(ctx))
}

// hop copies the bytes at cur into new memory on dev (host staging memory
// when dev is nil) and returns it; cur is left as it was. The copy runs
// on stream 0 of a code device at either end, else of dev, else of cur's
// device. Errors (nothing is left allocated): an allocation the device
// refuses, a copy between two code devices' memories (the gpu contract
// has none), the device's own errors.
func hop(ctx context.Context, alloc memory.Allocator, cur *place, dev gpu.Device) (place, error) {
	if err := ctx.Err(); err != nil {
		return place{}, err
	}
	to := "host memory"
	if dev != nil {
		to = dev.ID().String()
	}
	wrap := func(err error) error {
		from := "host memory"
		if cur.dev != nil {
			from = cur.dev.ID().String()
		}
		return fmt.Errorf("k2k: copy %d bytes %s→%s: %w", cur.n, from, to, err)
	}
	if cd, ok := dev.(gpu.CodeDevice); ok {
		s, err := codeStream(cd)
		if err != nil {
			return place{}, err
		}
		if cur.mem != nil && cur.dev.ID() != cd.ID() {
			return place{}, wrap(errors.New("no copy between two code devices' memories in the gpu contract"))
		}
		m, err := cd.Alloc(cur.n)
		if err != nil {
			return place{}, wrap(err)
		}
		if cur.mem != nil {
			_, err = s.Copy(m, 0, cur.mem, 0, cur.n)
		} else {
			_, err = s.CopyIn(m, 0, cur.host)
		}
		if err == nil {
			err = finish(ctx, s)
		}
		if err != nil {
			return place{}, errors.Join(wrap(err), m.Release())
		}
		return place{dev: dev, mem: m, n: cur.n}, nil
	}
	out := place{dev: dev, host: alloc.Allocate(int(cur.n)), owned: true, n: cur.n}
	var err error
	if cd, ok := cur.dev.(gpu.CodeDevice); ok && cur.mem != nil {
		var s gpu.CodeStream
		if s, err = codeStream(cd); err == nil {
			if _, err = s.CopyOut(out.host, cur.mem, 0); err == nil {
				err = finish(ctx, s)
			}
		}
	} else {
		on := dev
		if on == nil {
			on = cur.dev
		}
		s := on.Stream(0)
		src, dst := cur.host, out.host
		if err = s.Launch(gpu.TaskFunc(func() { copy(dst, src) })); err == nil {
			err = finish(ctx, s)
		}
	}
	if err != nil {
		_ = out.release(alloc)
		return place{}, wrap(err)
	}
	return out, nil
}

// carry moves the payload at at along path (at is on path[0]; a cpu
// between the ends is host staging memory) onto the device of the last
// element, dev, and returns its new place. at and every intermediate
// place are released on the way, on success or not; on an error nothing
// is left allocated.
func carry(ctx context.Context, alloc memory.Allocator, at place, path []topology.DeviceID, devs map[topology.DeviceID]gpu.Device) (place, error) {
	cur := at
	for i, id := range path[1:] {
		var dev gpu.Device
		if i+2 == len(path) || id != topology.CPU {
			if dev = devs[id]; dev == nil {
				return place{}, errors.Join(fmt.Errorf("k2k: route %v: the router holds no device %s", path, id), cur.release(alloc))
			}
		}
		next, err := hop(ctx, alloc, &cur, dev)
		rerr := cur.release(alloc)
		if err != nil {
			return place{}, errors.Join(err, rerr)
		}
		if rerr != nil {
			return place{}, errors.Join(rerr, next.release(alloc))
		}
		cur = next
	}
	return cur, nil
}
