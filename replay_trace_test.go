//go:build !rocsync_notrace

package rocsync

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A traced replay draws one op per segment, each counted as a dispatch,
// and its waits like any op's: the trace matches the counters.
func TestReplayTraceMatchesStats(t *testing.T) {
	for _, pol := range allPolicies {
		t.Run(pol.String(), func(t *testing.T) {
			var buf bytes.Buffer
			d, err := Open(Options{Backend: Emulator, Policy: pol, LogLevel: LogOff, Trace: NewTrace(&buf), TraceName: "replay",
				Emulator: EmulatorOptions{HazardChecker: true, MaxDelay: 30 * time.Microsecond, Seed: 3}})
			require.NoError(t, err)
			tk := d.DefaultTask() // its host track is the trace's "host"
			checkReplayEqualsEager(t, d, tk, replaySeedPrograms[2], 16, 2)
			require.NoError(t, d.Close())
			require.Empty(t, d.Hazards())
			checkTrace(t, buf.Bytes(), "replay", d.Stats())
		})
	}
}
