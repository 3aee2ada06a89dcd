package rocsync_test

import (
	"fmt"

	"github.com/rocsync/rocsync"
)

// A host function in the middle of a chain: it runs on the task's host
// lane once the kernel that writes x has completed, and the kernel after
// it waits for it on the device (a signal the lane completes); the
// submitting goroutine waits only at the read-back.
func ExampleTask_HostFunc() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()

	x, _ := t.Full(1, 4, rocsync.Float32, 2) // kernel: x = [2 2 2 2]
	y, _ := dev.Empty(1, 4, rocsync.Float32)
	err = t.HostFunc([]rocsync.Arg{rocsync.In(x), rocsync.Out(y)}, func(h *rocsync.HostAccess) error {
		v, err := h.Float32s(x)
		if err != nil {
			return err
		}
		for i := range v {
			v[i] += float32(i) // host-side work
		}
		return h.SetFloat32s(y, v)
	})
	if err != nil {
		panic(err)
	}
	z, _ := t.Mul(y, y) // kernel, ordered after the host function
	vals, _ := z.Float32s()
	fmt.Println(vals)
	st := t.Stats()
	fmt.Println("host waits besides the read-back:", st.HostWaitsTotal()-st.HostWaitsFor(rocsync.ReasonReadBack))
	// Output:
	// [4 9 16 25]
	// host waits besides the read-back: 0
}
