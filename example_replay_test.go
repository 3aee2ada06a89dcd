package rocsync_test

import (
	"fmt"

	"github.com/rocsync/rocsync"
)

// Record a sequence once and replay it as one op: the input is uploaded
// anew before each replay, outside the recording, and the replay is
// ordered after that upload like any op.
func ExampleTask_Record() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()

	x, _ := dev.Empty(1, 4, rocsync.Float32)
	y, _ := dev.Empty(1, 4, rocsync.Float32)
	rec, err := t.Record(func() error { // nothing runs yet
		if err := t.MulInto(y, x, x); err != nil {
			return err
		}
		return t.AddInto(y, y, x) // y = x² + x
	})
	if err != nil {
		panic(err)
	}
	defer rec.Close() // before dev.Close: deferred calls run last-in first-out
	for _, in := range [][]float32{{1, 2, 3, 4}, {2, 2, 2, 2}} {
		if err := t.UploadFloat32(x, in); err != nil {
			panic(err)
		}
		if err := rec.Replay(); err != nil { // one op: two AQL packets, one doorbell
			panic(err)
		}
		vals, _ := y.Float32s()
		fmt.Println(vals)
	}
	fmt.Println(rec.Ops(), "ops in", rec.Segments(), "segment")
	fmt.Println("freeing y while the recording lives:", y.Free() != nil)
	// Output:
	// [2 6 12 20]
	// [6 6 6 6]
	// 2 ops in 1 segment
	// freeing y while the recording lives: true
}
