//go:build !rocsync_notrace

package cudadev

import (
	"testing"
	"time"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/kernels"
	"github.com/rocsync/rocsync/syncstate"
)

// Through the fake libcuda, timing on a task's kernel stream records
// events created with timing (flags 0) around each launch and reads them
// with cuEventElapsedTime: every launch is reported once, in order, with
// the fake's clock (each record 0.25 ms after the one before).
func TestStreamTimingThroughCUDA(t *testing.T) {
	cfakeEnv(t)
	devs, err := Open(driver.DeviceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	d := devs[0].(*Device)
	defer func() {
		for _, x := range devs {
			_ = x.Close()
		}
	}()
	tk := newTask(t, d, syncstate.Sinks{})
	type span struct{ start, end time.Time }
	var got []span
	var tickets []uint64
	kernel := tk.Kernel()
	if err := kernel.EnableTiming(func(ticket uint64, start, end time.Time) {
		tickets = append(tickets, ticket)
		got = append(got, span{start, end})
	}); err != nil {
		t.Fatal(err)
	}
	p, err := d.Malloc(256)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Free(p)
	const n = 5
	for i := 0; i < n; i++ {
		if _, err := tk.Launch(kernels.Fill, kernels.F32, kernels.Args{Out: uint64(p), Alpha: 2, N: 64}); err != nil {
			t.Fatal(err)
		}
	}
	if err := tk.Close(); err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("%d launches reported, want %d (tickets %v)", len(got), n, tickets)
	}
	for i, s := range got {
		if tickets[i] != uint64(i+1) {
			t.Errorf("report %d is ticket %d", i, tickets[i])
		}
		// Each launch sits between two records: 0.25 ms.
		if d := s.end.Sub(s.start); d != 250*time.Microsecond {
			t.Errorf("launch %d lasted %v, want 250µs", i+1, d)
		}
		if i > 0 && s.start.Before(got[i-1].end) {
			t.Errorf("launch %d starts before launch %d ends", i+1, i)
		}
	}
	if lost := kernel.TimingLost(); lost != 0 {
		t.Errorf("%d launches lost their times", lost)
	}
}
