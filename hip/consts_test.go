package hip

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// goConsts maps each C name to the value package hip uses for it.
var goConsts = map[string]uint64{
	"hipSuccess":                    uint64(Success),
	"hipErrorInvalidValue":          uint64(ErrorInvalidValue),
	"hipErrorOutOfMemory":           uint64(ErrorOutOfMemory),
	"hipErrorNotInitialized":        uint64(ErrorNotInitialized),
	"hipErrorNoDevice":              uint64(ErrorNoDevice),
	"hipErrorInvalidDevice":         uint64(ErrorInvalidDevice),
	"hipErrorInvalidImage":          uint64(ErrorInvalidImage),
	"hipErrorInvalidHandle":         uint64(ErrorInvalidHandle),
	"hipErrorInvalidResourceHandle": uint64(ErrorInvalidResource),
	"hipErrorNotFound":              uint64(ErrorNotFound),
	"hipErrorNotReady":              uint64(ErrorNotReady),
	"hipErrorIllegalAddress":        uint64(ErrorIllegalAddress),
	"hipErrorLaunchFailure":         uint64(ErrorLaunchFailure),
	"hipErrorLaunchOutOfResources":  uint64(ErrorLaunchOutOfResources),
	"hipErrorNotSupported":          uint64(ErrorNotSupported),
	"hipErrorUnknown":               uint64(ErrorUnknown),

	"hipErrorSharedObjectInitFailed": uint64(ErrorSharedObjectInitFailed),

	"hipErrorPeerAccessAlreadyEnabled": uint64(ErrorPeerAccessAlreadyEnabled),
	"hipErrorPeerAccessUnsupported":    uint64(ErrorPeerAccessUnsupported),

	"hipErrorIllegalState":             uint64(ErrorIllegalState),
	"hipErrorStreamCaptureUnsupported": uint64(ErrorStreamCaptureUnsupported),
	"hipErrorStreamCaptureInvalidated": uint64(ErrorStreamCaptureInvalidated),
	"hipErrorStreamCaptureUnmatched":   uint64(ErrorStreamCaptureUnmatched),
	"hipErrorStreamCaptureIsolation":   uint64(ErrorStreamCaptureIsolation),
	"hipErrorStreamCaptureImplicit":    uint64(ErrorStreamCaptureImplicit),
	"hipErrorCapturedEvent":            uint64(ErrorCapturedEvent),
	"hipErrorStreamCaptureWrongThread": uint64(ErrorStreamCaptureWrongThread),

	"hipStreamCaptureModeGlobal":        uint64(StreamCaptureModeGlobal),
	"hipStreamCaptureModeThreadLocal":   uint64(StreamCaptureModeThreadLocal),
	"hipStreamCaptureModeRelaxed":       uint64(StreamCaptureModeRelaxed),
	"hipStreamCaptureStatusNone":        uint64(StreamCaptureStatusNone),
	"hipStreamCaptureStatusActive":      uint64(StreamCaptureStatusActive),
	"hipStreamCaptureStatusInvalidated": uint64(StreamCaptureStatusInvalidated),
	"sizeof(hipStreamCaptureMode)":      uint64(unsafe.Sizeof(StreamCaptureModeGlobal)),
	"sizeof(hipGraph_t)":                uint64(unsafe.Sizeof(Graph(0))),
	"sizeof(hipGraphExec_t)":            uint64(unsafe.Sizeof(GraphExec(0))),

	"hipStreamDefault":      uint64(StreamDefault),
	"hipStreamNonBlocking":  uint64(StreamNonBlocking),
	"hipEventDefault":       uint64(EventDefault),
	"hipEventBlockingSync":  uint64(EventBlockingSync),
	"hipEventDisableTiming": uint64(EventDisableTiming),

	"hipMemcpyHostToHost":     uint64(MemcpyHostToHost),
	"hipMemcpyHostToDevice":   uint64(MemcpyHostToDevice),
	"hipMemcpyDeviceToHost":   uint64(MemcpyDeviceToHost),
	"hipMemcpyDeviceToDevice": uint64(MemcpyDeviceToDevice),
	"hipMemcpyDefault":        uint64(MemcpyDefault),

	"hipStreamWaitValueGte": uint64(StreamWaitValueGte),
	"hipStreamWaitValueEq":  uint64(StreamWaitValueEq),
	"hipStreamWaitValueAnd": uint64(StreamWaitValueAnd),
	"hipStreamWaitValueNor": uint64(StreamWaitValueNor),

	"hipDeviceMallocDefault":     uint64(DeviceMallocDefault),
	"hipDeviceMallocFinegrained": uint64(DeviceMallocFinegrained),
	"hipMallocSignalMemory":      uint64(MallocSignalMemory),

	"HIP_LAUNCH_PARAM_BUFFER_POINTER": uint64(LaunchParamBufferPointer),
	"HIP_LAUNCH_PARAM_BUFFER_SIZE":    uint64(LaunchParamBufferSize),
	"HIP_LAUNCH_PARAM_END":            uint64(LaunchParamEnd),

	"hipDeviceAttributeComputeCapabilityMajor": uint64(DeviceAttributeComputeCapabilityMajor),
	"hipDeviceAttributeMaxThreadsPerBlock":     uint64(DeviceAttributeMaxThreadsPerBlock),
	"hipDeviceAttributeComputeCapabilityMinor": uint64(DeviceAttributeComputeCapabilityMinor),
	"hipDeviceAttributeMultiprocessorCount":    uint64(DeviceAttributeMultiprocessorCount),
	"hipDeviceAttributePciBusId":               uint64(DeviceAttributePciBusId),
	"hipDeviceAttributePciDeviceId":            uint64(DeviceAttributePciDeviceId),
	"hipDeviceAttributePciDomainID":            uint64(DeviceAttributePciDomainID),
	"hipDeviceAttributeWarpSize":               uint64(DeviceAttributeWarpSize),
	"hipDeviceAttributeCanUseStreamWaitValue":  uint64(DeviceAttributeCanUseStreamWaitValue),

	// The widths purego passes them with.
	"sizeof(hipError_t)":           uint64(unsafe.Sizeof(ErrorCode(0))),
	"sizeof(hipMemcpyKind)":        uint64(unsafe.Sizeof(MemcpyDefault)),
	"sizeof(hipDeviceAttribute_t)": uint64(unsafe.Sizeof(DeviceAttributeWarpSize)),
	"sizeof(hipStream_t)":          uint64(unsafe.Sizeof(Stream(0))),
}

func parseConsts(t *testing.T, what string, data []byte) map[string]uint64 {
	t.Helper()
	m := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		v, err := strconv.ParseUint(val, 10, 64)
		if !ok || err != nil {
			t.Fatalf("%s: bad line %q", what, line)
		}
		m[name] = v
	}
	return m
}

func compareConsts(t *testing.T, what string, got map[string]uint64) {
	t.Helper()
	for name, want := range goConsts {
		v, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s lacks %s", what, name)
		case v != want:
			t.Errorf("%s: %s = %d, package hip has %d", what, name, v, want)
		}
	}
	for name := range got {
		if _, ok := goConsts[name]; !ok {
			t.Errorf("%s has %s, which the test does not check", what, name)
		}
	}
}

// hipIncludeDir finds the HIP headers, or "".
func hipIncludeDir() string {
	var dirs []string
	if p := os.Getenv("ROCM_PATH"); p != "" {
		dirs = append(dirs, filepath.Join(p, "include"))
	}
	dirs = append(dirs, "/opt/rocm/include", "/usr/include")
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "hip", "hip_runtime_api.h")); err == nil {
			return d
		}
	}
	return ""
}

// TestConstantsMatchHeaders compiles testdata/hipconsts.c against the
// installed HIP headers and compares every value with package hip. The
// golden file (testdata/hipconsts.golden, from testdata/gen_golden.sh) is
// always checked too, and is what is left where gcc or the headers are
// missing.
func TestConstantsMatchHeaders(t *testing.T) {
	golden, err := os.ReadFile("testdata/hipconsts.golden")
	if err != nil {
		t.Fatal(err)
	}
	goldenConsts := parseConsts(t, "hipconsts.golden", golden)
	compareConsts(t, "hipconsts.golden", goldenConsts)

	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("gcc is not installed: checked against the golden file only")
	}
	inc := hipIncludeDir()
	if inc == "" {
		t.Skip("no HIP headers (hip/hip_runtime_api.h): checked against the golden file only")
	}
	bin := filepath.Join(t.TempDir(), "hipconsts")
	cmd := exec.Command(gcc, "-D__HIP_PLATFORM_AMD__", "-I"+inc, "-o", bin, "testdata/hipconsts.c")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compiling hipconsts.c against %s: %v\n%s", inc, err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatal(err)
	}
	headers := parseConsts(t, "headers in "+inc, out)
	compareConsts(t, "headers in "+inc, headers)
	for name, v := range headers {
		if goldenConsts[name] != v {
			t.Errorf("hipconsts.golden is stale for %s (%d, headers %d): run hip/testdata/gen_golden.sh", name, goldenConsts[name], v)
		}
	}
	t.Logf("%d values checked against the headers in %s", len(headers), inc)
}
