package syncstate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// fakeTL is a timeline whose completion the test controls.
type fakeTL struct {
	name      string
	domain    Domain
	completed uint64
	hostWaits []uint64
	devWaits  [][]Fence
	failFrom  uint64
	failErr   error
}

func (f *fakeTL) Domain() Domain              { return f.domain }
func (f *fakeTL) Name() string                { return f.name }
func (f *fakeTL) Completed() uint64           { return f.completed }
func (f *fakeTL) LastTicket() uint64          { return f.completed }
func (f *fakeTL) CanWaitDevice(d Domain) bool { return d == f.domain }
func (f *fakeTL) Failed(t uint64) error {
	if f.failFrom != 0 && t >= f.failFrom {
		return f.failErr
	}
	return nil
}
func (f *fakeTL) WaitHost(t uint64) error {
	f.hostWaits = append(f.hostWaits, t)
	f.completed = max(f.completed, t)
	return nil
}
func (f *fakeTL) WaitDevice(fs []Fence) error {
	f.devWaits = append(f.devWaits, append([]Fence(nil), fs...))
	return nil
}

func run(t *testing.T, e *Engine, tl Timeline, ticket uint64, reads, writes []*State) Snapshot {
	t.Helper()
	var s Stats
	sinks := Sinks{&s}
	var op Op
	for _, r := range reads {
		op.Read(r)
	}
	for _, w := range writes {
		op.Write(w)
	}
	require.NoError(t, op.Begin(e, tl, sinks))
	require.NoError(t, op.Commit(ticket, sinks))
	return s.Snapshot()
}

func TestSameQueueSkips(t *testing.T) {
	q := &fakeTL{name: "q"}
	e := &Engine{Policy: DeviceSide}
	x, y := NewState(), NewState()
	run(t, e, q, 1, nil, []*State{x})
	st := run(t, e, q, 2, []*State{x}, []*State{y})
	require.EqualValues(t, 1, st.SkippedWaits)
	require.Zero(t, st.HostWaitsTotal())
	require.Empty(t, q.devWaits)
}

// A fence is compared with the queue of the op about to run, not with the
// array's own history: written on A, read on B, it is waited for.
func TestCrossQueueComparesWithConsumer(t *testing.T) {
	a, b := &fakeTL{name: "a"}, &fakeTL{name: "b"}
	x, y := NewState(), NewState()
	for _, p := range []Policy{SkipSameQueue, DeviceSide} {
		a.hostWaits, b.devWaits = nil, nil
		a.completed = 0
		e := &Engine{Policy: p}
		run(t, e, a, 10, nil, []*State{x})
		st := run(t, e, b, 1, []*State{x}, []*State{y})
		if p == DeviceSide {
			require.Equal(t, [][]Fence{{{TL: a, Ticket: 10}}}, b.devWaits)
			require.EqualValues(t, 1, st.DeviceWaits)
		} else {
			require.Equal(t, []uint64{10}, a.hostWaits)
			require.EqualValues(t, 1, st.HostWaitsFor(ReasonCrossQueue))
		}
	}
}

func TestBoundaryWaitsOnHostExceptBridge(t *testing.T) {
	k := &fakeTL{name: "hsa", domain: DomainKernel}
	l := &fakeTL{name: "hip", domain: DomainLibrary}
	x, y := NewState(), NewState()
	e := &Engine{Policy: DeviceSide}
	run(t, e, k, 5, nil, []*State{x})
	st := run(t, e, l, 1, []*State{x}, []*State{y})
	require.EqualValues(t, 1, st.HostWaitsFor(ReasonBoundary))
	require.Equal(t, []uint64{5}, k.hostWaits)
}

func TestWriteWaitsForReadersAndCollapses(t *testing.T) {
	a, b, c := &fakeTL{name: "a"}, &fakeTL{name: "b"}, &fakeTL{name: "c"}
	e := &Engine{Policy: DeviceSide}
	x, y1, y2, y3 := NewState(), NewState(), NewState(), NewState()
	run(t, e, a, 1, nil, []*State{x})
	run(t, e, a, 2, []*State{x}, []*State{y1})
	run(t, e, a, 3, []*State{x}, []*State{y2}) // newer reader on a replaces the older
	run(t, e, b, 1, []*State{x}, []*State{y3})
	x.Lock()
	require.Equal(t, 2, x.ReadersLocked())
	x.Unlock()
	// c overwrites x: one wait per producer queue, the newest ticket.
	run(t, e, c, 1, nil, []*State{x})
	require.Len(t, c.devWaits, 1)
	require.ElementsMatch(t, []Fence{{TL: a, Ticket: 3}, {TL: b, Ticket: 1}}, c.devWaits[0])
	x.Lock()
	require.Zero(t, x.ReadersLocked())
	x.Unlock()
}

func TestCompletedFencesAreDropped(t *testing.T) {
	a, b := &fakeTL{name: "a"}, &fakeTL{name: "b"}
	e := &Engine{Policy: SkipSameQueue}
	x, y := NewState(), NewState()
	run(t, e, a, 4, nil, []*State{x})
	a.completed = 4
	st := run(t, e, b, 1, []*State{x}, []*State{y})
	require.Zero(t, st.HostWaitsTotal())
	require.EqualValues(t, 1, st.SkippedWaits)
	require.Empty(t, a.hostWaits)
}

func TestAliasIsOneOperand(t *testing.T) {
	q := &fakeTL{name: "q"}
	e := &Engine{Policy: DeviceSide}
	x := NewState()
	var op Op
	op.Read(x)
	op.Read(x)
	op.Write(x)
	require.Equal(t, 1, op.n)
	require.True(t, op.acc[0].write)
	var s Stats
	require.NoError(t, op.Begin(e, q, Sinks{&s}))
	require.NoError(t, op.Commit(1, Sinks{&s}))
	require.Zero(t, x.ReadersLocked())
	require.Equal(t, Fence{TL: q, Ticket: 1}, x.Writer())
}

func TestTooManyOperands(t *testing.T) {
	var op Op
	for i := 0; i < MaxOperands+1; i++ {
		op.Read(NewState())
	}
	err := op.Begin(&Engine{}, &fakeTL{}, Sinks{})
	require.ErrorIs(t, err, ErrTooManyOperands)
}

func TestWaitAlwaysWaitsAfterEveryOp(t *testing.T) {
	q := &fakeTL{name: "q"}
	e := &Engine{Policy: WaitAlways}
	x := NewState()
	st := run(t, e, q, 1, nil, []*State{x})
	require.EqualValues(t, 1, st.HostWaitsFor(ReasonWaitAlways))
	require.Equal(t, []uint64{1}, q.hostWaits)
}

func TestParsePolicy(t *testing.T) {
	for _, p := range Policies {
		got, err := ParsePolicy(p.String())
		require.NoError(t, err)
		require.Equal(t, p, got)
	}
	_, err := ParsePolicy("Nope")
	require.Error(t, err)
}

func TestSteadyStateAllocatesNothing(t *testing.T) {
	q := &fakeTL{name: "q"}
	e := &Engine{Policy: DeviceSide}
	x, y := NewState(), NewState()
	var s Stats
	sinks := Sinks{&s}
	ticket := uint64(0)
	allocs := testing.AllocsPerRun(1000, func() {
		ticket++
		var op Op
		op.Read(x)
		op.Write(y)
		_ = op.Begin(e, q, sinks)
		_ = op.Commit(ticket, sinks)
	})
	require.Zero(t, allocs)
}
