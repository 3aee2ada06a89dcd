package queue_test

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/internal/rocmdev/emu"
	"github.com/rocsync/rocsync/queue"
	"github.com/rocsync/rocsync/syncstate"
)

// quietStream is a producer of another domain whose ticket 1 has completed
// while a later op of it broke in a way only a query reveals (a HIP
// stream's fault): the bridge signal its consumer waits for completes only
// once someone polls it and it learns of the failure (the bridge's
// OnFailure hook), as the stream package does.
type quietStream struct {
	armed  atomic.Bool // Poll completes the signal only once armed
	polled atomic.Bool
	once   sync.Once
	sig    *queue.Signal
}

func (p *quietStream) Domain() syncstate.Domain            { return syncstate.DomainLibrary }
func (p *quietStream) Name() string                        { return "quiet-stream" }
func (p *quietStream) LastTicket() uint64                  { return 2 }
func (p *quietStream) Completed() uint64                   { return 1 }
func (p *quietStream) WaitHost(uint64) error               { return nil }
func (p *quietStream) CanWaitDevice(syncstate.Domain) bool { return false }
func (p *quietStream) WaitDevice([]syncstate.Fence) error  { return nil }
func (p *quietStream) Failed(uint64) error                 { return nil }

// Poll is what syncstate's Probe asks a stream.
func (p *quietStream) Poll() uint64 {
	if p.armed.Load() {
		p.polled.Store(true)
		p.once.Do(func() { p.sig.Complete(); p.sig.Release() })
	}
	return 1
}

// A device wait stays on the queue's record until the barrier-AND that
// waits has passed, so that a host waiting behind it asks the producer
// whether it failed. Here another goroutine's marker takes the ticket after
// the consumer's newest while the consumer bridges its wait, as a HIP
// stream's marker does under DeviceBridge. The record used to name the
// marker's ticket; once the marker completed it was pruned, the host wait
// behind the barrier asked nobody, and the producer's failure, which only
// a query reveals, never completed the bridge signal (the fault fuzzer's
// seed 224 hung this way).
func TestDeviceWaitRecordLastsUntilTheBarrierPasses(t *testing.T) {
	r := newRig(t, emu.Options{Hazards: true})
	agents, _ := r.rt.Agents()
	pools, _ := r.rt.MemoryPools(agents[0])
	q, err := queue.New(r.rt, queue.Config{Name: "consumer", Agent: agents[1], Size: 64, KernargPool: pools[0],
		Signals: r.signals, WaitTimeout: 5 * time.Second})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })

	prod := &quietStream{}
	var marker uint64
	q.SetBridge(func(f syncstate.Fence) (*queue.Signal, error) {
		sig, err := r.signals.Get()
		if err != nil {
			return nil, err
		}
		sig.Retain() // the producer's, until Poll completes it
		prod.sig = sig
		// Another goroutine's marker, between the consumer's look at the
		// queue and its barrier.
		if marker, err = q.Marker(nil); err != nil {
			return nil, err
		}
		return sig, nil
	})
	require.NoError(t, q.WaitDevice([]syncstate.Fence{{TL: prod, Ticket: 1}}))
	barrier := q.LastTicket()
	require.Equal(t, marker+1, barrier, "the marker went in before the barrier")
	// The marker completes and is retired, the record pruned if it named
	// the marker.
	require.NoError(t, q.WaitHost(marker))
	require.Less(t, q.Completed(), barrier)

	prod.armed.Store(true)
	require.NoError(t, q.WaitHost(barrier), "the host wait behind the barrier must ask the producer")
	require.True(t, prod.polled.Load())
	require.Empty(t, r.m.Hazards())
}
