//go:build !rocsync_notrace

package rocsync_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/rocsync/rocsync"
)

// Example_trace records a timeline trace of two ops that cross from an
// HSA queue to a HIP stream, and lists its tracks (each queue and stream
// with its "(GPU)" track of device timestamps) and slices. Written to
// a file (rocsync.NewTraceFile, or ROCSYNC_TRACE=trace.json without any
// code), the JSON opens in ui.perfetto.dev.
func Example_trace() {
	var out bytes.Buffer
	dev, err := rocsync.Open(rocsync.Options{Backend: rocsync.Emulator, Trace: rocsync.NewTrace(&out), TraceName: "example"})
	if err != nil {
		panic(err)
	}
	t := dev.DefaultTask()
	x, _ := dev.FromFloat32(2, 2, []float32{1, 2, 3, 4})
	sq, _ := t.Mul(x, x)                 // a kernel on the HSA queue
	_, _ = t.MatMul(sq, x, false, false) // a gemm on the HIP stream: a boundary host wait
	if err := dev.Close(); err != nil {  // writes the trace
		panic(err)
	}

	var trace struct {
		TraceEvents []struct {
			Ph, Name, Cat string
			Args          map[string]any
		}
	}
	if err := json.Unmarshal(out.Bytes(), &trace); err != nil {
		panic(err)
	}
	var tracks, slices []string
	boundary := 0
	for _, e := range trace.TraceEvents {
		switch {
		case e.Ph == "M" && e.Name == "thread_name":
			tracks = append(tracks, e.Args["name"].(string))
		case e.Ph == "X" && e.Cat == "op":
			slices = append(slices, e.Name+" on "+e.Args["fence"].(string))
		case e.Ph == "X" && e.Cat == "gpu":
			slices = append(slices, e.Name+" ran on the GPU as "+e.Args["fence"].(string))
		case e.Ph == "X" && e.Cat == "host-wait" && e.Args["reason"] == "boundary":
			// The gemm's host wait for the kernel, unless the kernel had
			// already completed when the gemm was submitted.
			boundary++
		}
	}
	sort.Strings(tracks)
	fmt.Println(tracks)
	for _, s := range slices {
		fmt.Println(s)
	}
	fmt.Println("boundary waits drawn as counted:", uint64(boundary) == dev.Stats().HostWaits[rocsync.ReasonBoundary])
	// Output:
	// [gpu0/hip-s1 gpu0/hip-s1 (GPU) gpu0/hsa-q0 gpu0/hsa-q0 (GPU) host]
	// Mul on gpu0/hsa-q0#1
	// Mul ran on the GPU as gpu0/hsa-q0#1
	// MatMul on gpu0/hip-s1#1
	// MatMul ran on the GPU as gpu0/hip-s1#1
	// boundary waits drawn as counted: true
}
