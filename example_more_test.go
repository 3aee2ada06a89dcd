package rocsync_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/rocsync/rocsync"
)

// Logging needs no logging package: a level and an io.Writer, or a
// log/slog handler. Here a slog handler at info level, without times,
// receives the line saying which backend Open chose.
func Example_logging() {
	noTime := func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}
	h := slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: noTime})
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogHandler: h})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	// Output:
	// level=INFO msg="rocsync: using the emulated AMD device, as requested" backend=emulator
}

// At LogDebug every sync decision is logged: here the second multiply
// follows the first on the same HSA queue, so its wait is skipped.
// (LogWriter takes any io.Writer; the default is os.Stderr, and the
// default level, LogWarn, prints nothing while all goes well.)
func Example_debugLogging() {
	var buf bytes.Buffer
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogDebug, LogWriter: &buf})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()
	x, _ := dev.FromFloat32(1, 2, []float32{1, 2})
	y, _ := t.Mul(x, x)
	_ = t.MulInto(y, y, x)
	for _, line := range strings.Split(buf.String(), "\n") {
		if strings.Contains(line, "rocsync: skip") {
			fmt.Println(line[strings.Index(line, "DBG"):]) // without the time
		}
	}
	// Output:
	// DBG rocsync: skip (same timeline) after=gpu0/hsa-q0 on=gpu0/hsa-q0 op=Mul ticket=1
}

// Each goroutine that submits work uses its own Task; tasks share arrays,
// and rocsync orders the crossings between them on the device.
func ExampleDevice_NewTask() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	x, _ := dev.FromFloat32(1, 4, []float32{1, 2, 3, 4})
	results := make([]*rocsync.Array, 3)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			t, err := dev.NewTask()
			if err != nil {
				panic(err)
			}
			defer t.Close()
			results[i], _ = t.Scale(float64(i+1), x) // reads x, written by no task
		}()
	}
	wg.Wait()
	t := dev.DefaultTask()
	sum, _ := t.Add(results[0], results[1]) // follows two other tasks' queues
	_ = t.AddInto(sum, sum, results[2])
	vals, _ := sum.Float32s()
	fmt.Println(vals)
	// Output:
	// [6 12 18 24]
}

// Errors are *rocsync.Error values: errors.Is matches their kind,
// errors.As gives the op, and the message names the operands as the
// program wrote them.
func ExampleError() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()
	a, _ := dev.Empty(2, 3, rocsync.Float32)
	b, _ := dev.Empty(3, 2, rocsync.Float32)
	_, err = t.Add(a, b)
	fmt.Println(errors.Is(err, rocsync.ErrShape))
	var e *rocsync.Error
	if errors.As(err, &e) {
		fmt.Println(e.Op, "|", e.Detail)
	}
	fmt.Println(err)
	_, err = rocsync.ParsePolicy("Fastest")
	fmt.Println(errors.Is(err, rocsync.ErrInvalid))
	// Output:
	// true
	// Add | a is 2x3, b is 3x2
	// rocsync: Add: shape mismatch: a is 2x3, b is 3x2
	// true
}

// Stats count what the sync core did: ops dispatched, host waits by
// reason, waits skipped and waits made on the device. Sub gives what
// happened between two snapshots.
func ExampleStats() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()
	x, _ := dev.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	before := dev.Stats()
	y, _ := t.Mul(x, x)
	_ = t.MulInto(y, y, x)               // same queue: the wait is skipped
	z, _ := t.MatMul(y, x, false, false) // a boundary crossing: at most one host wait
	_, _ = z.Float32s()
	st := dev.Stats().Sub(before)
	fmt.Println("dispatches:", st.Dispatches)
	fmt.Println("skipped at least one wait:", st.SkippedWaits >= 1)
	fmt.Println("boundary waits ≤ 1:", st.HostWaitsFor(rocsync.ReasonBoundary) <= 1)
	fmt.Println("same via the array:", st.HostWaits[rocsync.ReasonBoundary] == st.HostWaitsFor(rocsync.ReasonBoundary))
	// Output:
	// dispatches: 3
	// skipped at least one wait: true
	// boundary waits ≤ 1: true
	// same via the array: true
}

// Free never blocks: memory still in use by pending work is released once
// that work completes, into the device's cache of freed blocks. Using or
// freeing the array again is an ErrFreed error.
func ExampleArray_Free() {
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, LogLevel: rocsync.LogOff})
	if err != nil {
		panic(err)
	}
	defer dev.Close()
	t := dev.DefaultTask()
	x, _ := dev.FromFloat32(1, 3, []float32{1, 2, 3})
	y, _ := t.Exp(x)
	fmt.Println(x.Free()) // Exp may still be reading x: freed later
	_, err = y.Float32s()
	fmt.Println(err)
	err = x.Free()
	fmt.Println(errors.Is(err, rocsync.ErrFreed), err)
	// Output:
	// <nil>
	// <nil>
	// true rocsync: Free: array already freed: double free of Array(1x3 float32 on gpu0)
}

// The policy is chosen per device; every policy computes the same result
// and differs only in how it waits. WaitAlways waits on the host after
// every op; DeviceSide, the default, only where the device cannot wait.
func ExamplePolicy() {
	for _, name := range []string{"WaitAlways", "DeviceSide", "Unified"} {
		p, err := rocsync.ParsePolicy(name)
		if err != nil {
			panic(err)
		}
		dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, Policy: p, LogLevel: rocsync.LogOff})
		if err != nil {
			panic(err)
		}
		t := dev.DefaultTask()
		x, _ := dev.FromFloat32(2, 2, []float32{1, 2, 3, 4})
		y, _ := t.Mul(x, x)
		z, _ := t.MatMul(y, x, false, false)
		vals, _ := z.Float32s()
		st := dev.Stats()
		fmt.Println(dev.Policy(), vals, "wait-always waits:", st.HostWaitsFor(rocsync.ReasonWaitAlways))
		_ = dev.Close()
	}
	// Output:
	// WaitAlways [13 18 57 82] wait-always waits: 2
	// DeviceSide [13 18 57 82] wait-always waits: 0
	// Unified [13 18 57 82] wait-always waits: 0
}
