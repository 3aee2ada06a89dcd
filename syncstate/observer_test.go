package syncstate

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

type recordingObserver struct{ got []string }

func (r *recordingObserver) Decided(op string, consumer Timeline, f Fence, d Decision, reason Reason) {
	s := fmt.Sprintf("%s on %s: %v %v", op, consumer.Name(), d, f)
	if d == HostWait {
		s += " (" + reason.String() + ")"
	}
	r.got = append(r.got, s)
}

// The observer hears every decision, one per fence, and the counters agree
// with what it heard: a skip on the op's own queue, a device wait within a
// domain, a host wait across domains, and WaitAlways's wait after the op.
func TestObserverHearsEveryDecision(t *testing.T) {
	q1, q2 := &fakeTL{name: "q1"}, &fakeTL{name: "q2"}
	s := &fakeTL{name: "s", domain: DomainLibrary}
	obs := &recordingObserver{}
	e := &Engine{Policy: DeviceSide, Observer: obs}
	x, y, z := NewState(), NewState(), NewState()
	run(t, e, q1, 1, nil, []*State{x})               // nothing to follow
	st := run(t, e, q1, 2, []*State{x}, []*State{y}) // skip: same queue
	require.EqualValues(t, 1, st.SkippedWaits)
	st = run(t, e, q2, 1, []*State{y}, []*State{z}) // device wait on q1#2
	require.EqualValues(t, 1, st.DeviceWaits)
	// Boundary host waits: for z's writer, and for x's writer and reader
	// on q1 (one fence, the newer).
	st = run(t, e, s, 1, []*State{z}, []*State{x})
	require.EqualValues(t, 2, st.HostWaitsFor(ReasonBoundary))
	require.Equal(t, []string{
		" on q1: skip (same timeline) q1#1",
		" on q2: device wait q1#2",
		" on s: host wait q1#2 (boundary)",
		" on s: host wait q2#1 (boundary)",
	}, withoutOrder(obs.got[:1], obs.got[1:2], obs.got[2:]))

	obs.got = nil
	e = &Engine{Policy: WaitAlways, Observer: obs}
	run(t, e, q1, 3, nil, []*State{y})
	require.Equal(t, []string{" on q1: host wait q1#3 (wait-always)"}, obs.got[len(obs.got)-1:])
}

// withoutOrder sorts the last group (whose order follows the operands' lock
// order, not the test's) and joins the groups.
func withoutOrder(groups ...[]string) []string {
	var out []string
	for i, g := range groups {
		g = append([]string(nil), g...)
		if i == len(groups)-1 {
			for a := range g {
				for b := a + 1; b < len(g); b++ {
					if g[b] < g[a] {
						g[a], g[b] = g[b], g[a]
					}
				}
			}
		}
		out = append(out, g...)
	}
	return out
}

type timingObserver struct {
	recordingObserver
	ended []string
}

func (o *timingObserver) HostWaitEnded(consumer Timeline, f Fence, err error) {
	o.ended = append(o.ended, fmt.Sprintf("%s after %v: %v", consumer.Name(), f, err))
}

// A WaitObserver hears the end of every host wait it heard begin, and of
// nothing else: the boundary waits and WaitAlways's wait after the op.
func TestWaitObserverHearsHostWaitsEnd(t *testing.T) {
	q1 := &fakeTL{name: "q1"}
	s := &fakeTL{name: "s", domain: DomainLibrary}
	obs := &timingObserver{}
	e := &Engine{Policy: DeviceSide, Observer: obs}
	x, y := NewState(), NewState()
	run(t, e, q1, 1, nil, []*State{x})
	require.Empty(t, obs.ended)
	run(t, e, s, 1, []*State{x}, []*State{y})
	require.Equal(t, []string{"s after q1#1: <nil>"}, obs.ended)
	e.Policy = WaitAlways
	run(t, e, q1, 2, []*State{y}, []*State{x})
	require.Equal(t, []string{"s after q1#1: <nil>", "q1 after s#1: <nil>", "q1 after q1#2: <nil>"}, obs.ended)
}

// Observers tells every observer of every decision, and only the
// WaitObservers of the ends of host waits; none is no observer at all.
func TestObserversCombine(t *testing.T) {
	require.Nil(t, Observers())
	require.Nil(t, Observers(nil, nil))
	plain := &recordingObserver{}
	require.Same(t, plain, Observers(nil, plain))
	timing := &timingObserver{}
	q1 := &fakeTL{name: "q1"}
	s := &fakeTL{name: "s", domain: DomainLibrary}
	e := &Engine{Policy: DeviceSide, Observer: Observers(plain, nil, timing)}
	x, y := NewState(), NewState()
	run(t, e, q1, 1, nil, []*State{x})
	run(t, e, s, 1, []*State{x}, []*State{y})
	require.Equal(t, []string{" on s: host wait q1#1 (boundary)"}, plain.got)
	require.Equal(t, plain.got, timing.got)
	require.Equal(t, []string{"s after q1#1: <nil>"}, timing.ended)
}
