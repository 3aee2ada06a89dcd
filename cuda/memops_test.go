package cuda

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"
)

// The stream memory operations through the binding: mapped host memory
// has a device address, and a stream waits until the word reaches the
// value (the fake blocks the call, a GPU the stream); a bad flag is the
// driver's typed error.
func TestStreamWaitValue64(t *testing.T) {
	l := fakeLib(t)
	if !l.HasStreamMemOps() {
		t.Fatal("the fake exports cuStreamWaitValue64_v2 and cuMemHostGetDevicePointer_v2")
	}
	d, err := l.DeviceGet(0)
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("FAKECUDA_STREAM_MEM_OPS", "1")
	if v, err := l.DeviceAttribute(d, AttrCanUse64BitStreamMemOps); err != nil || v != 1 {
		t.Fatalf("attribute: %d, %v", v, err)
	}
	c, err := l.PrimaryCtxRetain(d)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release()
	p, err := c.MemHostAllocFlags(4096, MemHostAllocDeviceMap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFreeHost(p)
	dp, err := c.MemHostGetDevicePointer(p)
	if err != nil || dp == 0 {
		t.Fatalf("device pointer %#x, %v", dp, err)
	}
	s, err := c.StreamCreate(StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer c.StreamDestroy(s)
	word := (*uint64)(p)
	atomic.StoreUint64(word, 7)
	if err := c.StreamWaitValue64(s, dp, 7, StreamWaitValueGEQ); err != nil {
		t.Fatal(err)
	}
	go func() { time.Sleep(20 * time.Millisecond); atomic.StoreUint64(word, 9) }()
	start := time.Now()
	if err := c.StreamWaitValue64(s, dp, 8, StreamWaitValueGEQ); err != nil {
		t.Fatal(err)
	}
	if time.Since(start) < 10*time.Millisecond {
		t.Error("the wait did not wait for the word")
	}
	err = c.StreamWaitValue64(s, dp, 1, StreamWaitValueNor)
	var e *Error
	if !errors.As(err, &e) || e.Code != ErrorInvalidValue || e.Func != "cuStreamWaitValue64_v2" {
		t.Fatalf("a flag the fake refuses: %v", err)
	}
}

// On the GPU: the attribute, and a wait on a word that already holds the
// value completes.
func TestGPUStreamWaitValue64(t *testing.T) {
	c := gpuCtx(t)
	v, err := c.Lib().DeviceAttribute(c.Device(), AttrCanUse64BitStreamMemOps)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS = %d, entry points: %v", v, c.Lib().HasStreamMemOps())
	if v == 0 || !c.Lib().HasStreamMemOps() {
		t.Skip("no 64-bit stream memory operations")
	}
	p, err := c.MemHostAllocFlags(4096, MemHostAllocDeviceMap)
	if err != nil {
		t.Fatal(err)
	}
	defer c.MemFreeHost(p)
	dp, err := c.MemHostGetDevicePointer(p)
	if err != nil {
		t.Fatal(err)
	}
	s, err := c.StreamCreate(StreamNonBlocking)
	if err != nil {
		t.Fatal(err)
	}
	defer c.StreamDestroy(s)
	atomic.StoreUint64((*uint64)(p), 5)
	if err := c.StreamWaitValue64(s, dp, 3, StreamWaitValueGEQ); err != nil {
		t.Fatal(err)
	}
	if err := c.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
	// A wait the host releases later.
	if err := c.StreamWaitValue64(s, dp, 6, StreamWaitValueGEQ); err != nil {
		t.Fatal(err)
	}
	if err := c.StreamQuery(s); err == nil {
		t.Error("the stream ran past a wait whose word is below the value")
	}
	atomic.StoreUint64((*uint64)(p), 6)
	if err := c.StreamSynchronize(s); err != nil {
		t.Fatal(err)
	}
}
