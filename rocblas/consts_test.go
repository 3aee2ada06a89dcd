package rocblas

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"testing"
	"unsafe"
)

// TestConstantsMatchDoc checks the rocBLAS constants of this package against
// testdata/rocblas_consts.golden. That file is written from the values in
// the project's rocm-api.md (section 4), not generated: no rocBLAS headers
// exist on the development machine. testdata/fakerocblas.c uses the same
// values.
func TestConstantsMatchDoc(t *testing.T) {
	f, err := os.Open("testdata/rocblas_consts.golden")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, val, ok := strings.Cut(line, " ")
		v, err := strconv.ParseUint(val, 10, 64)
		if !ok || err != nil {
			t.Fatalf("bad line %q", line)
		}
		doc[name] = v
	}
	ours := map[string]uint64{
		"rocblas_operation_none":                uint64(OperationNone),
		"rocblas_operation_transpose":           uint64(OperationTranspose),
		"rocblas_operation_conjugate_transpose": uint64(OperationConjTrans),
		"rocblas_pointer_mode_host":             uint64(PointerModeHost),
		"rocblas_pointer_mode_device":           uint64(PointerModeDevice),
		"rocblas_status_success":                uint64(StatusSuccess),
		"rocblas_status_invalid_handle":         uint64(StatusInvalidHandle),
		"rocblas_status_not_implemented":        uint64(StatusNotImplemented),
		"rocblas_status_invalid_pointer":        uint64(StatusInvalidPointer),
		"rocblas_status_invalid_size":           uint64(StatusInvalidSize),
		"rocblas_status_memory_error":           uint64(StatusMemoryError),
		"rocblas_status_internal_error":         uint64(StatusInternalError),
		"rocblas_status_invalid_value":          uint64(StatusInvalidValue),
		"sizeof(rocblas_int)":                   uint64(unsafe.Sizeof(int32(0))),
		"sizeof(rocblas_status)":                uint64(unsafe.Sizeof(StatusSuccess)),
		"sizeof(rocblas_operation)":             uint64(unsafe.Sizeof(OperationNone)),
		"sizeof(rocblas_pointer_mode)":          uint64(unsafe.Sizeof(PointerModeHost)),
		"sizeof(rocblas_handle)":                uint64(unsafe.Sizeof(Handle(0))),
	}
	for name, v := range ours {
		d, ok := doc[name]
		switch {
		case !ok:
			t.Errorf("the golden file lacks %s", name)
		case d != v:
			t.Errorf("%s = %d here, %d in rocm-api.md", name, v, d)
		}
	}
}
