// fakerocblas.c: a test-only stand-in for librocblas, compiled by
// lib_test.go into a temporary directory as lib/librocblas.so.3. There is no
// rocBLAS on Debian, so this is how the purego binding's argument passing is
// checked: same symbols, same prototypes (rocm-api.md section 4), and
// sgemm/dgemm do a real naive column-major gemm on HOST pointers.
//
// Like the real library it also exports hipSetDevice (the real one comes
// from rocBLAS's libamdhip64 dependency) with a per-thread current device.
// Handles remember the device current at rocblas_create_handle, and every
// call on a handle fails with rocblas_status_internal_error unless that
// device is current: rocBLAS requires it, and this makes the fake check the
// binding's LockOSThread+hipSetDevice discipline.
//
// Values are those of rocblas-types.h as given in rocm-api.md.
#include <stdint.h>
#include <stdlib.h>

typedef int32_t rocblas_int;
typedef enum {
  rocblas_status_success = 0,
  rocblas_status_invalid_handle = 1,
  rocblas_status_not_implemented = 2,
  rocblas_status_invalid_pointer = 3,
  rocblas_status_invalid_size = 4,
  rocblas_status_memory_error = 5,
  rocblas_status_internal_error = 6,
  rocblas_status_perf_degraded = 7,
  rocblas_status_size_query_mismatch = 8,
  rocblas_status_size_increased = 9,
  rocblas_status_size_unchanged = 10,
  rocblas_status_invalid_value = 11,
  rocblas_status_continue = 12,
} rocblas_status;
typedef enum {
  rocblas_operation_none = 111,
  rocblas_operation_transpose = 112,
  rocblas_operation_conjugate_transpose = 113,
} rocblas_operation;
typedef enum { rocblas_pointer_mode_host = 0, rocblas_pointer_mode_device = 1 } rocblas_pointer_mode;

#define MAGIC 0x524f4342u
struct handle {
  uint32_t magic;
  int device;
  void* stream;
  rocblas_pointer_mode mode;
};
typedef struct handle* rocblas_handle;
typedef void* hipStream_t;

static __thread int cur;

int hipSetDevice(int d) {
  if (d < 0 || d >= 4) return 101; // hipErrorInvalidDevice
  cur = d;
  return 0;
}
const char* hipGetErrorName(int e) { return e == 101 ? "hipErrorInvalidDevice" : "hipErrorUnknown"; }

static rocblas_status check(rocblas_handle h) {
  if (!h || h->magic != MAGIC) return rocblas_status_invalid_handle;
  if (h->device != cur) return rocblas_status_internal_error;
  return rocblas_status_success;
}

rocblas_status rocblas_create_handle(rocblas_handle* h) {
  if (!h) return rocblas_status_invalid_pointer;
  struct handle* p = calloc(1, sizeof *p);
  p->magic = MAGIC;
  p->device = cur;
  *h = p;
  return rocblas_status_success;
}
rocblas_status rocblas_destroy_handle(rocblas_handle h) {
  rocblas_status s = check(h);
  if (s) return s;
  h->magic = 0;
  free(h);
  return rocblas_status_success;
}
rocblas_status rocblas_set_stream(rocblas_handle h, hipStream_t stream) {
  rocblas_status s = check(h);
  if (s) return s;
  h->stream = stream;
  return rocblas_status_success;
}
rocblas_status rocblas_get_stream(rocblas_handle h, hipStream_t* stream) {
  rocblas_status s = check(h);
  if (s) return s;
  if (!stream) return rocblas_status_invalid_pointer;
  *stream = h->stream;
  return rocblas_status_success;
}
rocblas_status rocblas_set_pointer_mode(rocblas_handle h, rocblas_pointer_mode mode) {
  rocblas_status s = check(h);
  if (s) return s;
  if (mode != rocblas_pointer_mode_host && mode != rocblas_pointer_mode_device) return rocblas_status_invalid_value;
  h->mode = mode;
  return rocblas_status_success;
}

// Test hooks, not rocBLAS API.
int fake_pointer_mode(rocblas_handle h) { return h->mode; }
static __thread rocblas_int last[9];
void fake_last_gemm(rocblas_int out[9]) {
  for (int i = 0; i < 9; i++) out[i] = last[i];
}

static int valid_op(rocblas_operation op) {
  return op == rocblas_operation_none || op == rocblas_operation_transpose ||
         op == rocblas_operation_conjugate_transpose;
}

#define GEMM(NAME, T)                                                                              \
  rocblas_status NAME(rocblas_handle h, rocblas_operation ta, rocblas_operation tb, rocblas_int m,  \
                      rocblas_int n, rocblas_int k, const T* alpha, const T* A, rocblas_int lda,    \
                      const T* B, rocblas_int ldb, const T* beta, T* C, rocblas_int ldc) {         \
    rocblas_int args[9] = {ta, tb, m, n, k, lda, ldb, ldc, cur};                                   \
    for (int i = 0; i < 9; i++) last[i] = args[i];                                                 \
    rocblas_status s = check(h);                                                                   \
    if (s) return s;                                                                               \
    /* The binding always passes host scalars; in device mode they would be device pointers. */   \
    if (h->mode != rocblas_pointer_mode_host) return rocblas_status_invalid_pointer;               \
    if (!valid_op(ta) || !valid_op(tb)) return rocblas_status_invalid_value;                       \
    rocblas_int arows = ta == rocblas_operation_none ? m : k;                                      \
    rocblas_int brows = tb == rocblas_operation_none ? k : n;                                      \
    if (m < 0 || n < 0 || k < 0 || lda < (arows > 1 ? arows : 1) || ldb < (brows > 1 ? brows : 1) || \
        ldc < (m > 1 ? m : 1))                                                                     \
      return rocblas_status_invalid_size;                                                          \
    if (m == 0 || n == 0) return rocblas_status_success;                                           \
    if (!alpha || !beta || !C || (k > 0 && (!A || !B))) return rocblas_status_invalid_pointer;    \
    for (rocblas_int j = 0; j < n; j++)                                                            \
      for (rocblas_int i = 0; i < m; i++) {                                                        \
        T sum = 0;                                                                                 \
        for (rocblas_int l = 0; l < k; l++) {                                                      \
          T a = ta == rocblas_operation_none ? A[i + (int64_t)l * lda] : A[l + (int64_t)i * lda]; \
          T b = tb == rocblas_operation_none ? B[l + (int64_t)j * ldb] : B[j + (int64_t)l * ldb]; \
          sum += a * b;                                                                            \
        }                                                                                          \
        T* c = &C[i + (int64_t)j * ldc];                                                           \
        *c = *beta == 0 ? *alpha * sum : *alpha * sum + *beta * *c;                                \
      }                                                                                            \
    return rocblas_status_success;                                                                 \
  }

GEMM(rocblas_sgemm, float)
GEMM(rocblas_dgemm, double)

const char* rocblas_status_to_string(rocblas_status s) {
  switch (s) {
  case rocblas_status_success: return "rocblas_status_success";
  case rocblas_status_invalid_handle: return "rocblas_status_invalid_handle";
  case rocblas_status_not_implemented: return "rocblas_status_not_implemented";
  case rocblas_status_invalid_pointer: return "rocblas_status_invalid_pointer";
  case rocblas_status_invalid_size: return "rocblas_status_invalid_size";
  case rocblas_status_memory_error: return "rocblas_status_memory_error";
  case rocblas_status_internal_error: return "rocblas_status_internal_error";
  case rocblas_status_perf_degraded: return "rocblas_status_perf_degraded";
  case rocblas_status_size_query_mismatch: return "rocblas_status_size_query_mismatch";
  case rocblas_status_size_increased: return "rocblas_status_size_increased";
  case rocblas_status_size_unchanged: return "rocblas_status_size_unchanged";
  case rocblas_status_invalid_value: return "rocblas_status_invalid_value";
  case rocblas_status_continue: return "rocblas_status_continue";
  default: return "<undefined rocblas_status value>";
  }
}
