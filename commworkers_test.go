package rocsync

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Every call runs each rank's part once, with its own index, whether the
// workers are spinning (back to back) or parked (after a pause).
func TestRankWorkersRunEachPartOnce(t *testing.T) {
	ws := newRankWorkers(3)
	defer ws.close()
	var counts [4]atomic.Int64
	for call := range 300 {
		ws.run(func(i int) { counts[i].Add(1) })
		if call%50 == 0 {
			time.Sleep(2 * workerSpin) // the workers park; the next post wakes them
		}
		for i := range counts {
			require.EqualValues(t, call+1, counts[i].Load(), "rank %d after call %d", i, call)
		}
	}
}

// The parts run at once: rank 0's (on the caller) waits for rank 3's (on
// a worker), which a sequential loop would never reach.
func TestRankWorkersRunPartsConcurrently(t *testing.T) {
	ws := newRankWorkers(3)
	defer ws.close()
	reached := make(chan struct{})
	var errs [4]error
	ws.run(func(i int) {
		switch i {
		case 3:
			close(reached)
		case 0:
			select {
			case <-reached:
			case <-time.After(time.Minute):
				errs[0] = errors.New("rank 3's part never ran while rank 0's waited")
			}
		}
	})
	require.NoError(t, errs[0])
}

// A part that panics is its rank's error; the workers go on.
func TestRankWorkersPanicIsTheRanksError(t *testing.T) {
	ws := newRankWorkers(2)
	defer ws.close()
	errs := make([]error, 3)
	ws.run(func(i int) {
		defer recoverPart(errs, i)
		if i == 2 {
			panic("boom")
		}
	})
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	require.ErrorContains(t, errs[2], "boom")
	var ran atomic.Int64
	ws.run(func(int) { ran.Add(1) })
	require.EqualValues(t, 3, ran.Load())
}
