package rocsync_test

import (
	"fmt"

	"github.com/rocsync/rocsync"
)

// Two GPUs opened together: gpu0 squares x, gpu1 copies the result over
// (ordered after gpu0's kernel) and doubles it. The copy runs on gpu1's
// task; nothing waits on the host but the read-back.
func Example_copyPeer() {
	devs, err := rocsync.OpenAll(rocsync.Options{Backend: rocsync.Emulator, Policy: rocsync.Unified,
		Emulator: rocsync.EmulatorOptions{Devices: 2}})
	if err != nil {
		panic(err)
	}
	defer func() {
		for _, d := range devs {
			d.Close()
		}
	}()
	gpu0, gpu1 := devs[0], devs[1]
	x, _ := gpu0.FromFloat32(1, 4, []float32{1, 2, 3, 4})
	sq, _ := gpu0.DefaultTask().Mul(x, x)
	y, _ := gpu1.Empty(1, 4, rocsync.Float32)
	t1 := gpu1.DefaultTask()
	if err := t1.CopyPeer(y, sq); err != nil { // y on t1's device, sq on gpu0
		panic(err)
	}
	z, _ := t1.Scale(2, y)
	vals, _ := z.Float32s()
	direct, _ := gpu1.PeerAccess(gpu0)
	st := gpu1.Stats()
	fmt.Println(vals, "direct:", direct, "cross-device host waits:", st.HostWaitsFor(rocsync.ReasonCrossDevice))
	// Output:
	// [2 8 18 32] direct: true cross-device host waits: 0
}
