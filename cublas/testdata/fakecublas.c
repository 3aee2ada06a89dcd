// fakecublas.c: a test-only stand-in for libcublas.so.13, compiled by the
// tests and opened through ROCSYNC_LIBCUBLAS next to cuda/testdata's fake
// libcuda. It exports cublas.BoundSymbols with the real prototypes and
// models what the binding must get right:
//   - a handle belongs to the CUDA context current when it was created
//     (found through the fake libcuda's cuCtxGetCurrent), and every call
//     with it fails with CUBLAS_STATUS_NOT_INITIALIZED unless that context
//     is current on the calling thread;
//   - sgemm and dgemm run on the host, column-major, reading alpha and beta
//     through host pointers and checking the leading dimensions as cuBLAS
//     does.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>

typedef int cublasStatus_t;
enum { OK = 0, NOT_INITIALIZED = 1, INVALID_VALUE = 7 };
#define MAGIC 0x424c4153U

struct handle { uint32_t magic; void* ctx; void* stream; };

static void* current(void) {
  static int (*get)(void**);
  if (!get) get = (int (*)(void**))dlsym(RTLD_DEFAULT, "cuCtxGetCurrent");
  void* c = NULL;
  if (get) get(&c);
  return c;
}
static int ok(struct handle* h) { return h && h->magic == MAGIC && h->ctx && h->ctx == current(); }

void* fakecublas_last_stream;
int fakecublas_calls;

cublasStatus_t cublasCreate_v2(struct handle** h) {
  void* c = current();
  if (!c) return NOT_INITIALIZED;
  *h = calloc(1, sizeof **h);
  (*h)->magic = MAGIC; (*h)->ctx = c;
  return OK;
}
cublasStatus_t cublasDestroy_v2(struct handle* h) {
  if (!ok(h)) return NOT_INITIALIZED;
  h->magic = 0; free(h);
  return OK;
}
cublasStatus_t cublasSetStream_v2(struct handle* h, void* s) {
  if (!ok(h)) return NOT_INITIALIZED;
  h->stream = s;
  return OK;
}
const char* cublasGetStatusString(cublasStatus_t s) {
  switch (s) {
  case OK: return "the operation completed successfully";
  case NOT_INITIALIZED: return "the library was not initialized";
  case INVALID_VALUE: return "an invalid numeric value was used as an argument";
  }
  return "unknown error";
}
cublasStatus_t cublasGetProperty(int type, int* v) {
  if (type < 0 || type > 2) return INVALID_VALUE;
  *v = type == 0 ? 13 : type == 1 ? 1 : 7;
  return OK;
}

#define GEMM(T)                                                                                    \
  if (!ok(h)) return NOT_INITIALIZED;                                                              \
  if (ta < 0 || ta > 2 || tb < 0 || tb > 2 || m < 0 || n < 0 || k < 0) return INVALID_VALUE;       \
  if (lda < (ta == 0 ? (m > 1 ? m : 1) : (k > 1 ? k : 1))) return INVALID_VALUE;                   \
  if (ldb < (tb == 0 ? (k > 1 ? k : 1) : (n > 1 ? n : 1))) return INVALID_VALUE;                   \
  if (ldc < (m > 1 ? m : 1)) return INVALID_VALUE;                                                 \
  fakecublas_last_stream = h->stream; fakecublas_calls++;                                          \
  T al = *alpha, be = *beta;                                                                       \
  for (int j = 0; j < n; j++)                                                                      \
    for (int i = 0; i < m; i++) {                                                                  \
      T s = 0;                                                                                     \
      for (int p = 0; p < k; p++)                                                                  \
        s += (ta ? A[p + (long)i * lda] : A[i + (long)p * lda]) *                                  \
             (tb ? B[j + (long)p * ldb] : B[p + (long)j * ldb]);                                   \
      T* c = &C[i + (long)j * ldc];                                                                \
      *c = be == 0 ? al * s : al * s + be * *c;                                                    \
    }                                                                                              \
  return OK;

cublasStatus_t cublasSgemm_v2(struct handle* h, int ta, int tb, int m, int n, int k, const float* alpha,
                              const float* A, int lda, const float* B, int ldb, const float* beta, float* C,
                              int ldc) { GEMM(float) }
cublasStatus_t cublasDgemm_v2(struct handle* h, int ta, int tb, int m, int n, int k, const double* alpha,
                              const double* A, int lda, const double* B, int ldb, const double* beta,
                              double* C, int ldc) { GEMM(double) }
