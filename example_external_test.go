package rocsync_test

import (
	"fmt"

	"github.com/rocsync/rocsync"
	"github.com/rocsync/rocsync/backends"
	"github.com/rocsync/rocsync/hip"
)

// A producer and consumer outside rocsync (here a HIP stream of the
// user's own doing a copy) share rocsync's arrays through the DLPack-style
// handshake: ExportTo makes the foreign stream wait for x's writer and
// y's readers on the device, ImportFrom makes rocsync's next ops on x and
// y wait for the foreign stream. The host never waits for either side.
func Example_foreignStream() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()
	h, _, _ := backends.ROCmLibraries(dev)
	foreign, _ := h.StreamCreate(0, 0) // someone else's stream
	defer h.StreamDestroy(foreign)

	x, _ := t.Full(2, 2, rocsync.Float32, 3) // rocsync's kernel writes x
	y, _ := dev.Empty(2, 2, rocsync.Float32)
	fmt.Println(t.ExportTo(uintptr(foreign), rocsync.In(x), rocsync.Out(y)))
	// The foreign work: y = x, on its own stream.
	_ = h.MemcpyDtoDAsync(hip.DevicePtr(y.Buffer().Pointer()), hip.DevicePtr(x.Buffer().Pointer()), uint64(y.Buffer().Size()), foreign)
	fmt.Println(t.ImportFrom(uintptr(foreign), rocsync.In(x), rocsync.Out(y)))
	z, _ := t.Scale(2, y) // waits for the foreign copy, on the device
	_ = t.Fill(x, 0)      // waits for the foreign read of x
	vals, _ := z.Float32s()
	fmt.Println(vals)
	// Output:
	// <nil>
	// <nil>
	// [6 6 6 6]
}
