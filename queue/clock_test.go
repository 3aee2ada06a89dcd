package queue_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hsa"
	"github.com/rocsync/rocsync/queue"
)

// slowClock is a runtime whose system clock (1 GHz, time since base) is
// read by calls the first slow of which stall for stall: the thread was
// descheduled inside the call, after its reading (readFirst) or before.
type slowClock struct {
	hsa.Profiler
	base      time.Time
	stall     time.Duration
	slow      int
	readFirst bool
	calls     int
}

func (c *slowClock) SystemInfoUint64(attr hsa.SystemInfo) (uint64, error) {
	if attr == hsa.SystemInfoTimestampFrequency {
		return 1_000_000_000, nil
	}
	slow := c.calls < c.slow
	c.calls++
	if slow && c.readFirst {
		ticks := c.now()
		time.Sleep(c.stall)
		return ticks, nil
	}
	if slow {
		time.Sleep(c.stall)
	}
	return c.now(), nil
}

func (c *slowClock) now() uint64 { return uint64(time.Since(c.base)) }

// A device time mapped to the host's clock is never earlier than the
// instant it stands for, however long the reading of the runtime's clock
// took: the trace checks that an op did not start on the GPU before the
// host submitted it. The pairing took the middle of the call, and a
// reading made late in a slow call (the thread descheduled inside it, as
// on a loaded machine) put every device time up to half the call early:
// 46 µs under -race beside a CPU hog, in
// TestTraceDeviceTimestampsOnSimulatedDriver. Times are now late by at
// most the quickest of several readings.
func TestSystemClockIsNeverEarly(t *testing.T) {
	const stall = 20 * time.Millisecond
	for name, c := range map[string]*slowClock{
		"every reading slow, made late in the call": {slow: 100},
		"the first slow, made early in the call":    {slow: 1, readFirst: true},
	} {
		t.Run(name, func(t *testing.T) {
			c.base, c.stall = time.Now(), stall
			clock, err := queue.ReadSystemClock(c)
			require.NoError(t, err)
			at := time.Now()
			ticks := c.now() // stands for an instant at or after at
			mapped := clock.At(ticks)
			require.False(t, mapped.Before(at), "device time %v early", at.Sub(mapped))
			if c.readFirst {
				require.Less(t, mapped.Sub(at), stall/2, "the quicker readings were kept")
			}
		})
	}
}
