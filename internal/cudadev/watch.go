package cudadev

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rocsync/rocsync/stream"
)

// Each stream gets a progress word (stream.Watch) where the device
// supports cuStreamWriteValue64: a whole-stream host wait enqueues a write
// of the stream's newest ticket to the word and spins reading it, which
// on an H100 learns of completion 0.7 µs sooner than
// cuStreamSynchronize and 0.8 µs sooner than spinning on cuStreamQuery
// (BenchmarkGPUWaitDetection). Unlike a stream waiting on a host word
// (hostwait.go), a write holds nothing up, so it is on wherever the
// device can do it. Words come from mappedWords and live as long as the
// device.
type streamWatches struct {
	once    sync.Once
	support error // nil: streams have watches
	words   mappedWords
}

// newWatch returns a fresh watch, or nil when the device cannot write
// one.
func (d *Device) newWatch() (*stream.Watch, error) {
	if d.WatchesStreams() != nil {
		return nil, nil
	}
	host, dev, err := d.watches.words.get(d.b)
	if err != nil {
		return nil, fmt.Errorf("cudadev: mapped host memory for a stream's progress word: %w", err)
	}
	b := d.b
	return &stream.Watch{
		Word:  (*atomic.Uint64)(unsafe.Pointer(host)),
		Write: func(s uintptr, ticket uint64) error { return b.streamWriteValue(s, dev, ticket) },
	}, nil
}

// WatchesStreams reports whether the device's streams have progress words
// (nil), or why not.
func (d *Device) WatchesStreams() error {
	w := &d.watches
	w.once.Do(func() { w.support = d.b.streamWriteSupport() })
	return w.support
}
