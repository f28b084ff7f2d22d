package lease

import (
	"context"
	"errors"
	"sync/atomic"
	"weak"

	"github.com/streamdag/streamdag/topology"
)

// AttemptStatus is how an attempt ended.
type AttemptStatus string

// The statuses of AttemptReport.
const (
	AttemptOK        AttemptStatus = "ok"
	AttemptFailed    AttemptStatus = "failed"
	AttemptUnplanned AttemptStatus = "unplanned" // won its begin, then saw the backend closing
)

// AttemptRequest describes an attempt to begin: one execution of a plan
// (for example one `streamdag run`).
type AttemptRequest struct {
	Name string // free text, e.g. "flights"
}

// AttemptReport is the observation an attempt leaves behind. It marshals
// to JSON.
type AttemptReport struct {
	ID     uint64        `json:"id"`              // 1, 2, … in begin order, per backend
	Name   string        `json:"name"`            // AttemptRequest.Name
	Status AttemptStatus `json:"status"`          // how it ended
	Error  string        `json:"error,omitempty"` // the text of Finish's error; "" when ok
}

// Attempt is a begun attempt: it holds one observation permit, so close's
// observation scope waits for its report, until Finish. Safe for
// concurrent use.
type Attempt struct {
	b        *Backend
	id       uint64
	name     string
	finished atomic.Bool
}

// BeginAttempt begins an attempt. Taking the observation permit is the
// linearization point against Close: a begin that gets it is counted in
// AttemptsBegun and close's observation scope waits for its Finish; a
// begin that loses to Close returns ErrBackendClosing and is counted only
// in AttemptsRefused. No GPU permit is taken here (Claim takes one).
func (b *Backend) BeginAttempt(req AttemptRequest) (*Attempt, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closing {
		b.m.attemptsRefused++
		b.m.gen++
		return nil, ErrBackendClosing
	}
	b.m.attemptsBegun++
	b.m.obsPermits++
	b.m.gen++
	return &Attempt{b: b, id: b.m.attemptsBegun, name: req.Name}, nil
}

// ID returns the attempt's id (1, 2, … in begin order).
func (a *Attempt) ID() uint64 { return a.id }

// IsClosing reports whether the backend's close has been signalled; an
// attempt that sees true before planning should Finish with
// ErrBackendClosing (status "unplanned") instead of starting.
func (a *Attempt) IsClosing() bool { return a.b.closeCtx.Err() != nil }

// Finish ends the attempt with err (nil: ok; errors.Is(err,
// ErrBackendClosing): unplanned; else failed): it stores the report,
// delivers it to the backend's Observer on this goroutine, then returns
// the observation permit. Only the first call does anything; it reports
// whether this call finished the attempt.
func (a *Attempt) Finish(err error) bool {
	if a == nil || !a.finished.CompareAndSwap(false, true) {
		return false
	}
	r := AttemptReport{ID: a.id, Name: a.name, Status: AttemptOK}
	if err != nil {
		r.Error = err.Error()
		r.Status = AttemptFailed
		if errors.Is(err, ErrBackendClosing) {
			r.Status = AttemptUnplanned
		}
	}
	b := a.b
	b.mu.Lock()
	switch r.Status {
	case AttemptFailed:
		b.m.attemptsFailed++
	case AttemptUnplanned:
		b.m.attemptsUnplanned++
	}
	b.reports = append(b.reports, r)
	if len(b.reports) > maxReports {
		b.reports = append(b.reports[:0], b.reports[len(b.reports)-maxReports:]...)
	}
	b.m.gen++
	b.mu.Unlock()
	if obs := b.cfg.observer; obs != nil {
		b.deliver(obs, r)
	}
	b.mu.Lock()
	b.m.attemptsFinished++
	b.m.obsPermits--
	b.m.gen++
	b.notifyLocked()
	b.mu.Unlock()
	return true
}

// deliver calls obs with r under a ctx marked as this backend's
// observation (see CloseAndWait), recovering a panic of obs.
func (b *Backend) deliver(obs func(context.Context, AttemptReport), r AttemptReport) {
	defer func() {
		recover() // an observer's panic must not leak the observation permit
	}()
	obs(context.WithValue(context.Background(), observationKey{}, b), r)
}

// Reports returns the newest attempt reports (at most 64), oldest first.
// It works at any time, also after the GPU resources are released.
func (b *Backend) Reports() []AttemptReport {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]AttemptReport{}, b.reports...)
}

// Session is the capability that session and optimizer state hold. It is not a handle to the GPU resources: it
// refers to them weakly (a weak.Pointer), so sessions never keep the
// resource generation alive after close released it, while it holds the
// observation side (identity, attempts, reports, metrics) strongly, so
// those stay readable after the resources are gone. Safe for concurrent
// use.
type Session struct {
	b   *Backend
	res weak.Pointer[resources]
}

// Session mints a session capability. It works at any time.
func (b *Backend) Session() *Session {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := &Session{b: b}
	if b.res != nil {
		s.res = weak.Make(b.res)
	}
	return s
}

// Identity returns the backend's identity.
func (s *Session) Identity() Identity { return s.b.Identity() }

// IsClosing reports whether the backend's close has been signalled.
func (s *Session) IsClosing() bool { return s.b.closeCtx.Err() != nil }

// BeginAttempt is Backend.BeginAttempt.
func (s *Session) BeginAttempt(req AttemptRequest) (*Attempt, error) { return s.b.BeginAttempt(req) }

// MetricsSnapshot is Backend.MetricsSnapshot.
func (s *Session) MetricsSnapshot() MetricsSnapshot { return s.b.MetricsSnapshot() }

// Reports is Backend.Reports.
func (s *Session) Reports() []AttemptReport { return s.b.Reports() }

// Devices is a service read through the weak reference: the GPUs of the
// resource generation, or ErrBackendClosing once close has been signalled
// or the generation is gone.
func (s *Session) Devices() ([]topology.DeviceFacts, error) {
	if s.res.Value() == nil {
		return nil, ErrBackendClosing
	}
	return s.b.Devices()
}
