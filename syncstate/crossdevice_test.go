package syncstate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// placedTL is a fakeTL on a device: place says which, peer whether it can
// wait on the device for timelines of other devices.
type placedTL struct {
	fakeTL
	place uint64
	peer  bool
}

func (p *placedTL) Place() uint64             { return p.place }
func (p *placedTL) CanWaitPeer(d Domain) bool { return p.peer && d == p.domain }

// A fence on another device is waited for on the device where the consumer
// can and the policy waits on the device; otherwise the host waits with
// ReasonCrossDevice, never with the reasons of one device's crossings.
func TestCrossDeviceDecision(t *testing.T) {
	for _, tc := range []struct {
		name       string
		policy     Policy
		prodDomain Domain
		peer       bool
		wantDevice bool
	}{
		{"DeviceSide same domain, peer waits", DeviceSide, DomainLibrary, true, true},
		{"Unified same domain, peer waits", Unified, DomainLibrary, true, true},
		{"DeviceSide, consumer cannot wait for peers", DeviceSide, DomainLibrary, false, false},
		{"SkipSameQueue host-waits", SkipSameQueue, DomainLibrary, true, false},
		{"DeviceSide across domains host-waits", DeviceSide, DomainKernel, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &placedTL{fakeTL: fakeTL{name: "gpu0/s", domain: tc.prodDomain}, place: 1, peer: tc.peer}
			b := &placedTL{fakeTL: fakeTL{name: "gpu1/s", domain: DomainLibrary}, place: 2, peer: tc.peer}
			e := &Engine{Policy: tc.policy}
			x, y := NewState(), NewState()
			run(t, e, a, 7, nil, []*State{x})
			st := run(t, e, b, 1, []*State{x}, []*State{y})
			if tc.wantDevice {
				require.Equal(t, [][]Fence{{{TL: a, Ticket: 7}}}, b.devWaits)
				require.EqualValues(t, 1, st.DeviceWaits)
				require.Zero(t, st.HostWaitsTotal())
				return
			}
			require.Empty(t, b.devWaits)
			require.Equal(t, []uint64{7}, a.hostWaits)
			require.EqualValues(t, 1, st.HostWaitsFor(ReasonCrossDevice), "%v", st)
			require.EqualValues(t, 1, st.HostWaitsTotal())
			// The reader on b orders a's next write the same way.
			a.hostWaits, b.hostWaits = nil, nil
			st = run(t, e, a, 8, nil, []*State{x})
			require.EqualValues(t, 1, st.HostWaitsFor(ReasonCrossDevice)+st.DeviceWaits, "%v", st)
		})
	}
}

// Two timelines of one place are one device's crossing, and a timeline
// without a place (a host lane) is never a cross-device producer.
func TestSamePlaceIsNotCrossDevice(t *testing.T) {
	a := &placedTL{fakeTL: fakeTL{name: "a"}, place: 3}
	b := &placedTL{fakeTL: fakeTL{name: "b"}, place: 3}
	h := &fakeTL{name: "host"}
	require.False(t, CrossDevice(b, a))
	require.False(t, CrossDevice(b, h))
	require.False(t, CrossDevice(h, b))
	require.True(t, CrossDevice(b, &placedTL{place: 4}))
	e := &Engine{Policy: SkipSameQueue}
	x, y := NewState(), NewState()
	run(t, e, a, 1, nil, []*State{x})
	st := run(t, e, b, 1, []*State{x}, []*State{y})
	require.EqualValues(t, 1, st.HostWaitsFor(ReasonCrossQueue))
	require.Zero(t, st.HostWaitsFor(ReasonCrossDevice))
}
