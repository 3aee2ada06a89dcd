package cudadev

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hostlane"
	"github.com/rocsync/rocsync/stream"
	"github.com/rocsync/rocsync/syncstate"
)

// With driver.DeviceConfig.StreamWaitsForHostLanes (off by default: see
// ErrHostLaneWaitsOff), a CUDA stream waits on the device for a host
// lane's function: each lane publishes its completed tickets
// (hostlane.Config.Publish) to a 64-bit word of host memory mapped to the
// GPU, and the stream waits with
// cuStreamWaitValue64(word >= ticket). Tickets only grow, so a word needs
// no reset and serves every wait on its lane; a failed function completes
// its ticket too, and the consumer learns of the failure from its
// upstream record, as with an HSA signal. Where the driver or device does
// not support stream memory operations, and by default, streams wait for
// the lane on the host (a boundary wait).
//
// Words are never reused while the device is open: a stream may still be
// waiting on a closed task's word, and a reused word would start again
// from 0 under that wait. A page holds 512 of them.

const wordsPerPage = 512

type laneWords struct {
	once    sync.Once
	support error // nil: streams wait on the device

	words  mappedWords
	mu     sync.Mutex
	byLane map[*hostlane.Lane]driver.DevicePtr
}

// mappedWords hands out zeroed 64-bit words of host memory mapped to the
// device, a page at a time; they are freed together, when the device
// closes.
type mappedWords struct {
	mu    sync.Mutex
	pages []unsafe.Pointer
	next  int // the next unused word of the last page (wordsPerPage: none)
	base  driver.DevicePtr
}

// get returns a fresh word's host and device addresses.
func (w *mappedWords) get(b backend) (*uint64, driver.DevicePtr, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.pages) == 0 || w.next == wordsPerPage {
		p, dev, err := b.mappedAlloc(8 * wordsPerPage)
		if err != nil {
			return nil, 0, err
		}
		w.pages, w.next, w.base = append(w.pages, p), 0, dev
	}
	i := w.next
	w.next++
	host := (*uint64)(unsafe.Add(w.pages[len(w.pages)-1], 8*i))
	*host = 0
	return host, w.base + driver.DevicePtr(8*i), nil
}

// free releases every page; the device has drained.
func (w *mappedWords) free(b backend) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	var errs []error
	for _, p := range w.pages {
		errs = append(errs, b.hostFree(p))
	}
	w.pages = nil
	return errors.Join(errs...)
}

// supported says whether streams can wait on the device for host lanes.
// ErrHostLaneWaitsOff is why streams wait for host lanes on the host by
// default (driver.DeviceConfig.StreamWaitsForHostLanes).
var ErrHostLaneWaitsOff = errors.New("cudadev: streams wait for host functions on the host: a device-side wait (cuStreamWaitValue64) can hang a function's own synchronous copies queued behind it on a shared hardware queue")

func (d *Device) hostWaitSupport() error {
	w := &d.hostWords
	w.once.Do(func() {
		if !d.cfg.StreamWaitsForHostLanes {
			w.support = ErrHostLaneWaitsOff
			return
		}
		w.support = d.b.streamMemOps()
	})
	return w.support
}

// newLaneWord returns a fresh word for a lane (host and device addresses),
// or nil when streams cannot wait on the device.
func (d *Device) newLaneWord() (*uint64, driver.DevicePtr, error) {
	if d.hostWaitSupport() != nil {
		return nil, 0, nil
	}
	host, dev, err := d.hostWords.words.get(d.b)
	if err != nil {
		return nil, 0, fmt.Errorf("cudadev: mapped host memory for host lanes: %w", err)
	}
	return host, dev, nil
}

func (d *Device) registerLane(l *hostlane.Lane, dev driver.DevicePtr) {
	w := &d.hostWords
	w.mu.Lock()
	if w.byLane == nil {
		w.byLane = map[*hostlane.Lane]driver.DevicePtr{}
	}
	w.byLane[l] = dev
	w.mu.Unlock()
}

func (d *Device) forgetLane(l *hostlane.Lane) {
	w := &d.hostWords
	w.mu.Lock()
	delete(w.byLane, l)
	w.mu.Unlock()
}

// hostToStream is a stream's device-side wait for a host lane's fence.
func (d *Device) hostToStream(s *stream.Stream, f syncstate.Fence) (uint64, error) {
	lane, ok := f.TL.(*hostlane.Lane)
	if !ok {
		return 0, fmt.Errorf("cudadev: %s is not a host lane", f.TL.Name())
	}
	if f.Ticket <= lane.Completed() {
		return 0, nil
	}
	w := &d.hostWords
	w.mu.Lock()
	addr, ok := w.byLane[lane]
	w.mu.Unlock()
	if !ok {
		return 0, fmt.Errorf("cudadev: host lane %s has no word on %s", lane.Name(), d.name)
	}
	b, ticket := d.b, f.Ticket
	return s.SubmitWait(f, func(h uintptr) error { return b.streamWaitValueGEQ(h, addr, ticket) })
}

// freeLaneWords releases the host lanes' and the streams' words; the
// device has drained.
func (d *Device) freeLaneWords() error {
	w := &d.hostWords
	w.mu.Lock()
	w.byLane = nil
	w.mu.Unlock()
	return errors.Join(w.words.free(d.b), d.watches.words.free(d.b))
}

// HostWaitsOnDevice reports whether the device's streams wait for host
// lanes on the device (nil), or why they wait on the host.
func (d *Device) HostWaitsOnDevice() error { return d.hostWaitSupport() }
