package opencl_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/streamdag/streamdag/gpu/opencl"
)

// CommandEvent gives none for command 0, a command never returned, or one
// no Record follows yet; then the event recorded after the command, which
// another stream waits on on the device (it holds that stream's later
// commands until the command has run); once the stream has released that
// marker, an event that has fired; after Close, the event Close recorded.
func TestCommandEvent(t *testing.T) {
	d, err := opencl.NewDevice(device(t), opencl.WithStreams(2))
	require.NoError(t, err)
	m, err := d.Alloc(16)
	require.NoError(t, err)
	s0, s1 := codeStream(d, 0), codeStream(d, 1)
	require.NoError(t, recordWait(t, s0)) // the memory's zero fill, out of the way
	fail, err := opencl.HoldForTest(s0)
	require.NoError(t, err)
	seq, err := s0.Fill(m, 0, 16, []byte{7})
	require.NoError(t, err)
	require.NotZero(t, seq)
	for _, at := range []uint64{0, seq, seq + 1} {
		_, ok := s0.CommandEvent(at)
		assert.False(t, ok, "command %d: no Record after it yet", at)
	}
	e := s0.Record()
	ev, ok := s0.CommandEvent(seq)
	require.True(t, ok)
	assert.Same(t, e, ev, "the event recorded after the command")
	assert.Equal(t, opencl.SeqForTest(e), opencl.SeqForTest(ev))
	_, ok = s0.CommandEvent(seq + 100)
	assert.False(t, ok, "a command never returned")
	require.NoError(t, s1.Wait(ev))
	got := make([]byte, 16)
	_, err = s1.CopyOut(got, m, 0)
	require.NoError(t, err)
	after := s1.Record()
	assert.False(t, ev.Done(), "stream 0 is held")
	assert.False(t, after.Done(), "stream 1 waits on the device for stream 0's command")
	require.NoError(t, fail(0))
	require.NoError(t, after.Wait(t.Context()))
	assert.Equal(t, []byte{7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7}, got, "the copy ran after the fill")
	require.NoError(t, recordWait(t, s0))
	s0.Record() // releases the markers that have fired
	ev, ok = s0.CommandEvent(seq)
	require.True(t, ok, "a released marker's command")
	assert.True(t, ev.Done())
	assert.NoError(t, ev.Wait(t.Context()))
	require.NoError(t, s1.Wait(ev))
	require.NoError(t, m.Release())
	require.NoError(t, d.Close())
	ev, ok = s0.CommandEvent(seq)
	require.True(t, ok, "after Close")
	assert.True(t, ev.Done())
	_, ok = s0.CommandEvent(seq + 100)
	assert.False(t, ok, "after Close, a command never returned")
}
