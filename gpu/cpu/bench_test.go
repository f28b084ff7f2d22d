package cpu_test

import (
	"context"
	"testing"

	"github.com/streamdag/streamdag/gpu"
	"github.com/streamdag/streamdag/gpu/cpu"
)

// BenchmarkStreamLaunch measures queuing and running empty tasks on one
// stream: each op launches n tasks and waits for them. ns/launch is the
// figure to compare with the baselines, plain worker goroutines fed by a
// channel (buffered 1024, and unbuffered).
func BenchmarkStreamLaunch(b *testing.B) {
	const n = 1000
	ctx := context.Background()
	b.Run("impl=stream/n=1000", func(b *testing.B) {
		d, err := cpu.New(cpu.WithStreams(1))
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		s := d.Stream(0)
		task := &nopTask{}
		b.ReportAllocs()
		for b.Loop() {
			for range n {
				if err := s.Launch(task); err != nil {
					b.Fatal(err)
				}
			}
			if err := s.Synchronize(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/launch")
	})
	b.Run("impl=stream-batch/n=1000", func(b *testing.B) {
		d, err := cpu.New(cpu.WithStreams(1))
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		s := d.Stream(0)
		task := &nopTask{}
		batch := make([]gpu.Task, n)
		for i := range batch {
			batch[i] = task
		}
		b.ReportAllocs()
		for b.Loop() {
			if err := s.LaunchBatch(batch); err != nil {
				b.Fatal(err)
			}
			if err := s.Synchronize(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/launch")
	})
	for _, bc := range []struct {
		name string
		buf  int
	}{{"impl=chan1024/n=1000", 1024}, {"impl=chan0/n=1000", 0}} {
		b.Run(bc.name, func(b *testing.B) {
			ch := make(chan gpu.Task, bc.buf)
			done := make(chan struct{})
			go func() {
				defer close(done)
				for t := range ch {
					t.Run()
				}
			}()
			defer func() { close(ch); <-done }()
			task := &nopTask{}
			synced := make(chan struct{}, 1)
			syncTask := gpu.TaskFunc(func() { synced <- struct{}{} })
			b.ReportAllocs()
			for b.Loop() {
				for range n {
					ch <- task
				}
				ch <- syncTask
				<-synced
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/launch")
		})
	}
}

// BenchmarkEventWait ping-pongs between two streams: each round trip is
// a task on a, then a task on b that waits for it, then the next task on a
// waits for b. ns/handoff is per cross-stream wait. The baseline is two
// goroutines passing a token over unbuffered channels. "satisfied" is the
// cost of Stream.Wait on an event that has already fired.
func BenchmarkEventWait(b *testing.B) {
	const rounds = 100
	ctx := context.Background()
	b.Run("impl=stream/pingpong", func(b *testing.B) {
		d, err := cpu.New(cpu.WithStreams(2))
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		sa, sb := d.Stream(0), d.Stream(1)
		ta, tb := &nopTask{}, &nopTask{}
		b.ReportAllocs()
		for b.Loop() {
			for range rounds {
				_ = sa.Wait(sb.Record())
				_ = sa.Launch(ta)
				_ = sb.Wait(sa.Record())
				_ = sb.Launch(tb)
			}
			if err := sb.Synchronize(ctx); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rounds*2), "ns/handoff")
	})
	b.Run("impl=chan/pingpong", func(b *testing.B) {
		ping, pong := make(chan struct{}), make(chan struct{})
		done := make(chan struct{})
		ta, tb := &nopTask{}, &nopTask{}
		go func() {
			defer close(done)
			for range ping {
				tb.Run()
				pong <- struct{}{}
			}
		}()
		defer func() { close(ping); <-done }()
		b.ReportAllocs()
		for b.Loop() {
			for range rounds {
				ta.Run()
				ping <- struct{}{}
				<-pong
			}
		}
		b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rounds*2), "ns/handoff")
	})
	b.Run("impl=stream/satisfied", func(b *testing.B) {
		d, err := cpu.New(cpu.WithStreams(2))
		if err != nil {
			b.Fatal(err)
		}
		defer d.Close()
		ev := d.Stream(0).Record() // idle stream: fired
		s := d.Stream(1)
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Wait(ev); err != nil {
				b.Fatal(err)
			}
		}
	})
}
