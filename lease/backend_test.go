package lease_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/lease"
	"github.com/streamdag/streamdag/topology"
)

// closed closes b and requires a clean close.
func closed(t *testing.T, b *lease.Backend) lease.CloseSnapshot {
	t.Helper()
	s, err := b.CloseAndWait(context.Background())
	require.NoError(t, err)
	return s
}

func TestBackendOnePerProcess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b1, err := lease.New(lease.WithDevices(gpus(0, 1)))
		require.NoError(t, err)
		_, err = lease.New()
		assert.ErrorIs(t, err, lease.ErrBackendAlreadyLive, "while live")

		l, err := b1.Claim(context.Background())
		require.NoError(t, err)
		a, err := b1.BeginAttempt(lease.AttemptRequest{Name: "a"})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = b1.CloseAndWait(ctx)
		cancel()
		require.ErrorIs(t, err, lease.ErrBackendCloseTimeout)
		_, err = lease.New()
		assert.ErrorIs(t, err, lease.ErrBackendAlreadyLive, "while draining (a GPU permit is held)")

		l.Release()
		synctest.Wait()
		s := b1.CloseSnapshot()
		assert.True(t, s.GPUResourceQuiescent)
		assert.False(t, s.ObservationQuiescent, "attempt a is still open")
		// GPU quiescence freed the owner lease: a new backend may be built
		// while the old one's reports drain.
		b2, err := lease.New(lease.WithDevices(gpus(0, 1)))
		require.NoError(t, err)
		assert.Greater(t, b2.Identity().ID, b1.Identity().ID)
		a.Finish(nil)
		closed(t, b1)
		closed(t, b2)
	})
}

func TestBackendCloseGateSingleWinner(t *testing.T) {
	b, err := lease.New(lease.WithDevices(gpus(0)))
	require.NoError(t, err)
	var wins, refused atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 200 {
		wg.Go(func() {
			<-start
			switch err := b.Close(); {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, lease.ErrBackendClosing):
				refused.Add(1)
			default:
				t.Errorf("Close: %v", err)
			}
			_, err := b.CloseAndWait(context.Background())
			assert.NoError(t, err)
		})
	}
	close(start)
	wg.Wait()
	assert.Equal(t, int32(1), wins.Load(), "exactly one Close returns nil")
	assert.Equal(t, int32(199), refused.Load(), "every other Close returns ErrBackendClosing")
	assert.ErrorIs(t, b.Close(), lease.ErrBackendClosing, "later calls change nothing")
	s := closed(t, b)
	assert.Equal(t, lease.CloseSnapshot{Closing: true, GPUResourceQuiescent: true, ObservationQuiescent: true, Phase: "done"}, s)
}

func TestBackendBeginVersusClose(t *testing.T) {
	for round := range 20 {
		b, err := lease.New(lease.WithDevices(gpus(0, 1)))
		require.NoError(t, err)
		var begun, refused atomic.Uint64
		var wg sync.WaitGroup
		const workers = 16
		for range workers {
			wg.Go(func() {
				for {
					a, err := b.BeginAttempt(lease.AttemptRequest{Name: "x"})
					if err != nil {
						assert.ErrorIs(t, err, lease.ErrBackendClosing)
						refused.Add(1)
						return
					}
					begun.Add(1)
					if a.IsClosing() {
						a.Finish(lease.ErrBackendClosing)
					} else {
						a.Finish(nil)
					}
				}
			})
		}
		if round%2 == 0 {
			assert.NoError(t, b.Close())
		}
		s := closed(t, b)
		wg.Wait()
		m := b.MetricsSnapshot()
		msg := fmt.Sprintf("round %d", round)
		assert.Equal(t, begun.Load(), m.AttemptsBegun, msg)
		assert.Equal(t, m.AttemptsBegun, m.AttemptsFinished, "every counted begin was reported; %s", msg)
		assert.Equal(t, refused.Load(), m.AttemptsRefused, msg)
		assert.Equal(t, uint64(workers), m.AttemptsRefused, msg)
		assert.Equal(t, int64(0), s.ActiveObservationPermits)
		if n := min(m.AttemptsBegun, 64); n > 0 {
			assert.Len(t, b.Reports(), int(n))
		}
	}
}

func TestBackendTimeoutThenLateSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := lease.New(lease.WithDevices(gpus(0, 3)))
		require.NoError(t, err)
		l, err := b.Claim(context.Background())
		require.NoError(t, err)
		start := time.Now()
		s, err := b.CloseAndWaitUntil(context.Background(), start.Add(5*time.Second))
		require.ErrorIs(t, err, lease.ErrBackendCloseTimeout)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
		var ce *lease.CloseError
		require.ErrorAs(t, err, &ce)
		assert.Equal(t, s, ce.Snapshot)
		assert.Equal(t, 5*time.Second, time.Since(start))
		assert.Equal(t, lease.CloseSnapshot{Closing: true, ActiveGPUPermits: 1, CleanupDeadlineElapsedCount: 1, Phase: "gpu_permits"}, s)

		// A second timed-out wait on the same phase does not count it twice.
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err = b.CloseAndWait(ctx)
		cancel()
		require.ErrorIs(t, err, lease.ErrBackendCloseTimeout)
		assert.Equal(t, 1, b.CloseSnapshot().CleanupDeadlineElapsedCount)

		l.Release() // the cleanup goes on without any waiter
		synctest.Wait()
		s = b.CloseSnapshot()
		assert.Equal(t, 1, s.CleanupLateSuccessCount, "the timed-out phase completed later")
		assert.True(t, s.GPUResourceQuiescent)
		s = closed(t, b)
		assert.Equal(t, lease.CloseSnapshot{Closing: true, GPUResourceQuiescent: true, ObservationQuiescent: true,
			CleanupDeadlineElapsedCount: 1, CleanupLateSuccessCount: 1, Phase: "done"}, s)
	})
}

func TestBackendFailClosedKeepsLease(t *testing.T) {
	defer lease.ResetOwnerForTest()
	boom := errors.New("cuCtxDestroy: CUDA_ERROR_ILLEGAL_ADDRESS")
	b, err := lease.New(lease.WithDevices(gpus(0, 1)), lease.WithHooks(lease.Hooks{
		Release: func(_ context.Context, id topology.DeviceID) error {
			if id == topology.GPU(0) {
				return boom
			}
			return nil
		},
	}))
	require.NoError(t, err)
	s, err := b.CloseAndWait(context.Background())
	require.ErrorIs(t, err, lease.ErrCleanupFailedClosed)
	assert.ErrorIs(t, err, boom)
	assert.True(t, s.CleanupFailed)
	assert.False(t, s.GPUResourceQuiescent)
	assert.Equal(t, "failed", s.Phase)
	_, err = lease.New()
	assert.ErrorIs(t, err, lease.ErrBackendAlreadyLive, "the failed backend keeps the owner lease")
	_, err = b.CloseAndWait(context.Background())
	assert.ErrorIs(t, err, lease.ErrCleanupFailedClosed, "a later call sees the same failure")
}

func TestBackendReentrantCloseRefused(t *testing.T) {
	var b *lease.Backend
	var errs []error
	var snaps []lease.CloseSnapshot
	b, err := lease.New(lease.WithDevices(gpus(0)), lease.WithObserver(func(ctx context.Context, r lease.AttemptReport) {
		_, err := b.CloseAndWait(ctx)
		errs = append(errs, err)
		_, err = b.CloseAndWaitUntil(context.WithoutCancel(ctx), time.Now().Add(time.Hour))
		errs = append(errs, err)
		snaps = append(snaps, b.CloseSnapshot())
		_ = b.MetricsSnapshot() // readable from inside delivery
	}))
	require.NoError(t, err)
	a, err := b.BeginAttempt(lease.AttemptRequest{Name: "r"})
	require.NoError(t, err)
	require.True(t, a.Finish(nil))
	assert.False(t, a.Finish(nil), "Finish is idempotent")
	require.Len(t, errs, 2)
	for _, err := range errs {
		assert.ErrorIs(t, err, lease.ErrReentrantObservationClose)
	}
	require.Len(t, snaps, 1)
	assert.False(t, snaps[0].Closing)
	assert.Equal(t, int64(1), snaps[0].ActiveObservationPermits, "delivery runs under the attempt's permit")
	assert.False(t, b.CloseSnapshot().Closing, "close was not signalled")
	assert.Equal(t, []lease.AttemptReport{{ID: 1, Name: "r", Status: lease.AttemptOK}}, b.Reports())
	closed(t, b)
}

func TestBackendClaimParkedRefusedAtClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		b, err := lease.New(lease.WithDevices(gpus(2)))
		require.NoError(t, err)
		l, err := b.Claim(context.Background())
		require.NoError(t, err)
		assert.Equal(t, topology.GPU(2), l.Device().ID)
		errc := make(chan error)
		go func() {
			_, err := b.Claim(context.Background())
			errc <- err
		}()
		synctest.Wait()
		assert.Equal(t, 1, b.MetricsSnapshot().PendingClaimers)
		require.NoError(t, b.Close())
		assert.ErrorIs(t, <-errc, lease.ErrBackendClosing)
		_, err = b.Claim(context.Background())
		assert.ErrorIs(t, err, lease.ErrBackendClosing)
		_, err = b.Devices()
		assert.ErrorIs(t, err, lease.ErrBackendClosing)
		_, err = b.BeginAttempt(lease.AttemptRequest{})
		assert.ErrorIs(t, err, lease.ErrBackendClosing)
		assert.Equal(t, int64(1), b.CloseSnapshot().ActiveGPUPermits, "work holding a permit goes on")
		l.Release()
		closed(t, b)
		m := b.MetricsSnapshot()
		assert.Equal(t, uint64(1), m.Admissions)
		assert.Equal(t, uint64(2), m.AdmissionsRefused)
		assert.Equal(t, uint64(1), m.AttemptsRefused)
	})
}

func TestBackendPhaseOrder(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var log []string
		rec := func(what string) func(context.Context, topology.DeviceID) error {
			slow := 2 // the first Drain of gpu1 takes two slices
			return func(ctx context.Context, id topology.DeviceID) error {
				if what == "drain" && id == topology.GPU(1) && slow > 0 {
					slow--
					<-ctx.Done()
					return ctx.Err()
				}
				mu.Lock()
				log = append(log, what+" "+id.String())
				mu.Unlock()
				return nil
			}
		}
		b, err := lease.New(lease.WithDevices(gpus(0, 1, 2)), lease.WithCleanupSlice(time.Millisecond), lease.WithHooks(lease.Hooks{Drain: rec("drain"), Release: rec("release")}))
		require.NoError(t, err)
		l, err := b.Claim(context.Background())
		require.NoError(t, err)
		require.NoError(t, b.Close())
		time.Sleep(10 * time.Millisecond) // fake time: lets the slices run
		synctest.Wait()
		mu.Lock()
		assert.Equal(t, []string{"drain gpu0", "drain gpu2", "drain gpu1"}, log, "retried in the next slice")
		mu.Unlock()
		assert.Equal(t, "gpu_permits", b.CloseSnapshot().Phase, "release waits for the GPU permit")
		l.Release()
		closed(t, b)
		assert.Equal(t, []string{"drain gpu0", "drain gpu2", "drain gpu1", "release gpu2", "release gpu1", "release gpu0"}, log)
	})
}

func TestBackendConstructionRollback(t *testing.T) {
	for _, tc := range []struct {
		name      string
		install   func(context.Context, lease.DeviceProfile) (lease.StartupRecord, error)
		installed int
		want      string
	}{
		{"install fails", func(_ context.Context, p lease.DeviceProfile) (lease.StartupRecord, error) {
			if p.Device.ID.Index == 2 {
				return lease.StartupRecord{}, errors.New("cuCtxCreate: CUDA_ERROR_OUT_OF_MEMORY")
			}
			return lease.StartupRecord{Device: p.Device.ID.String(), Streams: p.Streams}, nil
		}, 2, "lease: install gpu2: cuCtxCreate: CUDA_ERROR_OUT_OF_MEMORY (rollback of 2 installed devices finished)"},
		{"record does not match", func(_ context.Context, p lease.DeviceProfile) (lease.StartupRecord, error) {
			return lease.StartupRecord{Device: p.Device.ID.String(), Streams: 4}, nil
		}, 1, "lease: startup record of gpu0 does not match its profile: 4 streams, want 1 (rollback of 1 installed devices finished)"},
		{"install panics", func(_ context.Context, p lease.DeviceProfile) (lease.StartupRecord, error) {
			panic("bad driver")
		}, 0, "lease: install gpu0: panic: bad driver (rollback of 0 installed devices finished)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var released []string
			_, err := lease.New(lease.WithDevices(gpus(0, 1, 2, 3)), lease.WithHooks(lease.Hooks{
				Install: tc.install,
				Release: func(_ context.Context, id topology.DeviceID) error {
					released = append(released, id.String())
					return nil
				},
			}))
			var ce *lease.ConstructionError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.want, err.Error())
			assert.Equal(t, lease.RollbackCleanup{Installed: tc.installed, Finished: true}, ce.Rollback)
			assert.Len(t, released, tc.installed, "every installed device is released, in reverse order")
			if tc.installed == 2 {
				assert.Equal(t, []string{"gpu1", "gpu0"}, released)
			}
			b, err := lease.New()
			require.NoError(t, err, "the owner lease is free again")
			closed(t, b)
		})
	}
	t.Run("handed over", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			unblock := make(chan struct{})
			_, err := lease.New(lease.WithDevices(gpus(0, 1)), lease.WithRollbackWait(time.Second), lease.WithHooks(lease.Hooks{
				Install: func(_ context.Context, p lease.DeviceProfile) (lease.StartupRecord, error) {
					if p.Device.ID.Index == 1 {
						return lease.StartupRecord{}, errors.New("no")
					}
					return lease.StartupRecord{Device: p.Device.ID.String(), Streams: 1}, nil
				},
				Release: func(context.Context, topology.DeviceID) error { <-unblock; return nil }, // ignores ctx
			}))
			var ce *lease.ConstructionError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, lease.RollbackCleanup{Installed: 1, Transferred: true}, ce.Rollback)
			_, err = lease.New()
			assert.ErrorIs(t, err, lease.ErrBackendAlreadyLive, "the coordinator still owns the lease")
			close(unblock)
			synctest.Wait()
			b, err := lease.New()
			require.NoError(t, err)
			closed(t, b)
		})
	})
}

// TestBackendOptionErrors checks that each option refuses bad input with
// an error naming it, and that a refused New claims nothing.
func TestBackendOptionErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  lease.Option
		want string
	}{
		{"duplicate", lease.WithDevices(gpus(1, 1)), "lease: WithDevices: gpu1 given twice"},
		{"negative index", lease.WithDevices([]topology.DeviceFacts{{ID: topology.GPU(-1)}}), "lease: WithDevices: gpu-1: negative index or memory"},
		{"zero streams", lease.WithStreams(0), "lease: WithStreams(0): want at least 1 stream"},
		{"negative streams", lease.WithStreams(-1), "lease: WithStreams(-1): want at least 1 stream"},
		{"negative slice", lease.WithCleanupSlice(-time.Second), "lease: WithCleanupSlice(-1s): want a positive duration"},
		{"zero rollback wait", lease.WithRollbackWait(0), "lease: WithRollbackWait(0s): want a positive duration"},
		{"no lease type", lease.WithLeaseTypes(), "lease: WithLeaseTypes: no device type (want some of [gpu cpu accelerator custom])"},
		{"empty source", lease.WithSource(""), "lease: WithSource: empty source"},
		{"nil observer", lease.WithObserver(nil), "lease: WithObserver: nil observer"},
		{"nil health check", lease.WithHealthCheck(nil), "lease: WithHealthCheck: nil check"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, err := lease.New(tc.opt)
			require.EqualError(t, err, tc.want)
			assert.Nil(t, b)
		})
	}
	b, err := lease.New()
	require.NoError(t, err, "option errors claim nothing")
	closed(t, b)
}

func TestBackendMetricsGenerationAndJSON(t *testing.T) {
	b, err := lease.New(lease.WithDevices(gpus(0, 4)))
	require.NoError(t, err)
	s := b.Session()
	var gens []uint64
	snap := func() { gens = append(gens, b.MetricsSnapshot().Generation) }
	snap()
	l, err := b.Claim(context.Background())
	require.NoError(t, err)
	snap()
	a, err := s.BeginAttempt(lease.AttemptRequest{Name: "m"})
	require.NoError(t, err)
	snap()
	a.Finish(errors.New("kernel failed"))
	snap()
	m := b.MetricsSnapshot()
	assert.Equal(t, []lease.SlotState{{Slot: 0, Device: "gpu0", Index: 0, Name: "test GPU", Leased: true},
		{Slot: 1, Device: "gpu4", Index: 4, Name: "test GPU", Leased: false}}, m.Leases)
	l.Release()
	snap()
	devs, err := s.Devices()
	require.NoError(t, err)
	assert.Len(t, devs, 2)
	closed(t, b)
	snap()
	for i := 1; i < len(gens); i++ {
		assert.Greater(t, gens[i], gens[i-1], "generation is monotonic: %v", gens)
	}
	_, err = s.Devices()
	assert.ErrorIs(t, err, lease.ErrBackendClosing)
	m = s.MetricsSnapshot() // readable after the resources are gone
	assert.Equal(t, uint64(1), m.AttemptsFailed)
	assert.Equal(t, []lease.AttemptReport{{ID: 1, Name: "m", Status: lease.AttemptFailed, Error: "kernel failed"}}, s.Reports())
	raw, err := json.Marshal(m)
	require.NoError(t, err)
	var back map[string]any
	require.NoError(t, json.Unmarshal(raw, &back))
	assert.EqualValues(t, m.Generation, back["generation"])
	assert.Equal(t, []any{}, back["leases"])
	assert.Equal(t, "done", back["close"].(map[string]any)["phase"])
	recs := back["startup_records"].([]any)
	require.Len(t, recs, 2)
	assert.Equal(t, "none", recs[1].(map[string]any)["runtime"])
}

// TestBackendClaimDoneContext: Backend.Claim with a done context refuses
// before taking a lease: no admission, no GPU permit, pool unchanged.
func TestBackendClaimDoneContext(t *testing.T) {
	b, err := lease.New(lease.WithDevices(gpus(0)))
	require.NoError(t, err)
	defer closed(t, b)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	l, err := b.Claim(ctx)
	assert.ErrorIs(t, err, context.Canceled)
	if !assert.Nil(t, l) {
		l.Release()
	}
	m := b.MetricsSnapshot()
	assert.Zero(t, m.Admissions)
	assert.Zero(t, b.CloseSnapshot().ActiveGPUPermits)
	l, err = b.Claim(context.Background())
	require.NoError(t, err, "the GPU is still free")
	l.Release()
}
