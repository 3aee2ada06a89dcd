package syncstate

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A bound ends a wait once its context is done (which Check reports first)
// or its timeout has passed since Start; Ended says so for a given elapsed
// time without reading the clock.
func TestBoundEndsOnItsContextOrTimeout(t *testing.T) {
	f := Fence{TL: &fakeTL{name: "q"}, Ticket: 3}
	open := Bound{Timeout: time.Hour, Start: time.Now()}
	require.NoError(t, open.Check(f))
	require.False(t, open.Ended(time.Minute))
	require.True(t, open.Ended(2*time.Hour))
	require.False(t, (&Bound{}).Ended(time.Hour), "no timeout, no context")

	late := Bound{Timeout: time.Millisecond, Start: time.Now().Add(-time.Second)}
	err := late.Check(f)
	var te *TimeoutError
	require.ErrorAs(t, err, &te)
	require.ErrorIs(t, err, ErrWaitTimeout)
	require.GreaterOrEqual(t, te.After, time.Second)

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	both := Bound{Ctx: ctx, Timeout: time.Millisecond, Start: time.Now().Add(-time.Second)}
	require.True(t, both.Ended(0))
	err = both.Check(f)
	require.ErrorIs(t, err, context.Canceled, "the context is reported before the timeout")
	require.False(t, errors.As(err, &te))
}
