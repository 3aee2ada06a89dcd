// fakecuda.c: a test-only stand-in for libcuda.so.1, compiled by the tests
// (gcc -shared) into a temporary directory and opened through
// ROCSYNC_LIBCUDA. It exports cuda.BoundSymbols with the real prototypes and
// models just enough of the driver to check, without a GPU, what the purego
// binding passes:
//   - the current context is per OS thread, as in CUDA: every call that
//     needs one fails with CUDA_ERROR_INVALID_CONTEXT (201) on a thread where
//     none was made current, and calls on objects of another context fail
//     with CUDA_ERROR_INVALID_HANDLE (400);
//   - "device memory" is host memory, so copies can be checked from Go;
//   - cuModuleLoadData keeps the image pointer and cuModuleGetFunction reads
//     it again (looking for ".entry <name>("), so a freed image shows up;
//   - cuLaunchKernel reads the argument values through kernelParams and runs
//     rocsync's elementwise kernels on the host, synchronously: streams and
//     events are always complete;
//   - stream capture (cuStreamBeginCapture_v2 .. cuStreamEndCapture) records
//     launches and asynchronous copies into a graph instead of running them
//     (the launch's argument values are read at capture, as CUDA does), and
//     cuGraphLaunch of its instance runs them in order; calls that would
//     wait on a capturing stream fail, as CUDA's do. The fake cuBLAS does
//     not take part in capture.
//   - cuStreamWaitValue64_v2 blocks the calling thread until the host word
//     satisfies the condition (the fake's streams run at the call), up to
//     10 s, then fails with CUDA_ERROR_LAUNCH_TIMEOUT (702); its memory
//     comes from cuMemHostAlloc, whose device pointer is its host pointer
//     (unified addressing). Since a blocking wait at the call would hold
//     the caller's locks, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS
//     (122) reads 0 (rocsync then waits on the host) unless
//     FAKECUDA_STREAM_MEM_OPS is set: the binding's tests call it directly.
//     The deprecated _V1 attribute (93) reads 0, as on a driver loaded
//     without NVreg_EnableStreamMemOPs=1 (the H100 machine's).
//   - cuStreamWriteValue64_v2 writes the word at the call (the stream's
//     work has run by then).
// fakecuda_count(i) reads call counters, for tests; fakecuda_stream_marks
// what a stream recorded for others (for fakenccl).
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

typedef int CUresult;
enum {
  OK = 0, INVALID_VALUE = 1, NOT_INITIALIZED = 3, NO_DEVICE = 100, INVALID_DEVICE = 101,
  INVALID_IMAGE = 200, INVALID_CONTEXT = 201, INVALID_HANDLE = 400, NOT_FOUND = 500,
  NOT_READY = 600, LAUNCH_FAILED = 719,
};
#define NDEV 2
#define MAGIC_CTX 0x43545854U
#define MAGIC_STREAM 0x5354524dU
#define MAGIC_EVENT 0x45564e54U
#define MAGIC_MODULE 0x4d4f444cU
#define MAGIC_FUNC 0x46554e43U
#define MAGIC_GRAPH 0x47524150U
#define MAGIC_EXEC 0x47455845U

// A captured operation: a launch of rocsync's kernel (its argument values)
// or an asynchronous copy.
struct node { int copy; void* f; uint64_t out, a, b, n; double alpha; uint64_t dst, src, len; int kind; };
struct graph { struct node* nodes; int n, cap; };

struct ctx { uint32_t magic; int dev; int refs; };
struct obj {
  uint32_t magic; struct ctx* ctx; unsigned flags; int state; const char* image; char name[64];
  struct graph* capturing; // a stream being captured; a graph or exec's nodes
  unsigned long long marks; // a stream's event records and value writes, for fakenccl
};

static struct ctx ctxs[NDEV];
static int inited;
static __thread struct ctx* cur;

enum { C_SETCURRENT, C_LAUNCH, C_RECORD, C_WAIT, C_QUERY, C_SYNC, C_ALLOC, C_FREE, C_HTOD, C_DTOH, C_LOAD, C_GETCURRENT, C_GRAPHLAUNCH, C_WAITVALUE, C_WRITEVALUE, NCOUNT };
static long counts[NCOUNT];
long fakecuda_count(int i) { return i >= 0 && i < NCOUNT ? __atomic_load_n(&counts[i], __ATOMIC_RELAXED) : -1; }
static void bump(int i) { __atomic_add_fetch(&counts[i], 1, __ATOMIC_RELAXED); }

// The last launch, for tests.
struct launch { unsigned grid[3], block[3], shared; void* stream; uint64_t out, a, b, n; double alpha; char name[64]; };
static struct launch last;
void fakecuda_last_launch(struct launch* dst) { *dst = last; }

static struct obj* mk(uint32_t magic, unsigned flags) {
  struct obj* o = calloc(1, sizeof *o);
  o->magic = magic; o->ctx = cur; o->flags = flags;
  return o;
}
static int is(const void* p, uint32_t magic) { return p && ((const struct obj*)p)->magic == magic; }
#define NEED_CTX() do { if (!inited) return NOT_INITIALIZED; if (!cur) return INVALID_CONTEXT; } while (0)
// A handle of another context than the current one.
#define SAME_CTX(o) do { if (((struct obj*)(o))->ctx != cur) return INVALID_HANDLE; } while (0)

CUresult cuInit(unsigned flags) {
  if (flags != 0) return INVALID_VALUE;
  if (getenv("FAKECUDA_NODEVICE")) return NO_DEVICE;
  inited = 1;
  return OK;
}
CUresult cuDriverGetVersion(int* v) { *v = 13000; return OK; }
CUresult cuDeviceGetCount(int* n) { if (!inited) return NOT_INITIALIZED; *n = NDEV; return OK; }
CUresult cuDeviceGet(int* d, int ordinal) {
  if (!inited) return NOT_INITIALIZED;
  if (ordinal < 0 || ordinal >= NDEV) return INVALID_DEVICE;
  *d = ordinal;
  return OK;
}
CUresult cuDeviceGetName(char* name, int len, int dev) {
  if (dev < 0 || dev >= NDEV) return INVALID_DEVICE;
  snprintf(name, (size_t)len, "Fake NVIDIA GPU %d", dev);
  return OK;
}
CUresult cuDeviceGetAttribute(int* v, int attr, int dev) {
  if (dev < 0 || dev >= NDEV) return INVALID_DEVICE;
  switch (attr) {
  case 75: *v = dev == 0 ? 9 : 8; return OK; // compute capability major
  case 76: *v = 0; return OK;
  case 16: *v = 132; return OK;
  case 93: *v = 0; return OK; // the legacy (_V1) operations: off by default
  case 122: *v = getenv("FAKECUDA_STREAM_MEM_OPS") ? 1 : 0; return OK;
  default: *v = attr * 10 + dev; return OK;
  }
}
CUresult cuDevicePrimaryCtxRetain(void** c, int dev) {
  if (!inited) return NOT_INITIALIZED;
  if (dev < 0 || dev >= NDEV) return INVALID_DEVICE;
  ctxs[dev].magic = MAGIC_CTX; ctxs[dev].dev = dev; ctxs[dev].refs++;
  *c = &ctxs[dev];
  return OK;
}
CUresult cuDevicePrimaryCtxRelease_v2(int dev) {
  if (dev < 0 || dev >= NDEV) return INVALID_DEVICE;
  if (ctxs[dev].refs <= 0) return INVALID_CONTEXT;
  ctxs[dev].refs--;
  return OK;
}
CUresult cuCtxSetCurrent(void* c) {
  bump(C_SETCURRENT);
  if (c && ((struct ctx*)c)->magic != MAGIC_CTX) return INVALID_CONTEXT;
  cur = c;
  return OK;
}
CUresult cuCtxGetCurrent(void** c) { bump(C_GETCURRENT); *c = cur; return OK; }
CUresult cuCtxSynchronize(void) { NEED_CTX(); return OK; }

CUresult cuStreamCreate(void** s, unsigned flags) {
  NEED_CTX();
  if (flags > 1) return INVALID_VALUE;
  *s = mk(MAGIC_STREAM, flags);
  return OK;
}
CUresult cuStreamDestroy_v2(void* s) {
  NEED_CTX();
  if (!is(s, MAGIC_STREAM)) return INVALID_HANDLE;
  SAME_CTX(s);
  ((struct obj*)s)->magic = 0; free(s);
  return OK;
}
// Stream 0 is the current context's legacy default stream.
static CUresult stream_ok(void* s) {
  if (!s) return OK;
  if (!is(s, MAGIC_STREAM)) return INVALID_HANDLE;
  SAME_CTX(s);
  return OK;
}
// fakecuda_stream_marks counts what a stream has recorded for others to
// wait on (event records, value writes): the fake NCCL checks that none
// is recorded between a group's call on the stream and ncclGroupEnd,
// where real NCCL would put the collective behind it.
unsigned long long fakecuda_stream_marks(void* s) { return is(s, MAGIC_STREAM) ? ((struct obj*)s)->marks : 0; }
static void marked(void* s) { if (is(s, MAGIC_STREAM)) ((struct obj*)s)->marks++; }
static int capturing(void* s) { return s && is(s, MAGIC_STREAM) && ((struct obj*)s)->capturing; }
#define CAPTURE_ILLEGAL 900 // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
CUresult cuStreamSynchronize(void* s) { NEED_CTX(); bump(C_SYNC); if (capturing(s)) return CAPTURE_ILLEGAL; return stream_ok(s); }
CUresult cuStreamQuery(void* s) { NEED_CTX(); bump(C_QUERY); if (capturing(s)) return CAPTURE_ILLEGAL; return stream_ok(s); }
static CUresult add_node(void* s, struct node nd) {
  struct graph* g = ((struct obj*)s)->capturing;
  if (g->n == g->cap) {
    g->cap = g->cap ? 2 * g->cap : 8;
    g->nodes = realloc(g->nodes, (size_t)g->cap * sizeof *g->nodes);
  }
  g->nodes[g->n++] = nd;
  return OK;
}

CUresult cuEventCreate(void** e, unsigned flags) {
  NEED_CTX();
  if (flags > 15) return INVALID_VALUE;
  *e = mk(MAGIC_EVENT, flags);
  return OK;
}
CUresult cuEventDestroy_v2(void* e) {
  NEED_CTX();
  if (!is(e, MAGIC_EVENT)) return INVALID_HANDLE;
  ((struct obj*)e)->magic = 0; free(e);
  return OK;
}
CUresult cuEventRecord(void* e, void* s) {
  NEED_CTX();
  bump(C_RECORD);
  if (!is(e, MAGIC_EVENT)) return INVALID_HANDLE;
  SAME_CTX(e);
  CUresult r = stream_ok(s);
  if (r) return r;
  static int records; /* the fake's clock: each record is 0.25 ms after the one before */
  ((struct obj*)e)->state = ++records;
  marked(s);
  return OK;
}
CUresult cuEventQuery(void* e) {
  NEED_CTX();
  bump(C_QUERY);
  if (!is(e, MAGIC_EVENT)) return INVALID_HANDLE;
  return OK; // the fake device has always finished
}
CUresult cuEventElapsedTime(float* ms, void* start, void* stop) {
  NEED_CTX();
  if (!is(start, MAGIC_EVENT) || !is(stop, MAGIC_EVENT)) return INVALID_HANDLE;
  if ((((struct obj*)start)->flags | ((struct obj*)stop)->flags) & 2 /* CU_EVENT_DISABLE_TIMING */) return INVALID_HANDLE;
  if (!((struct obj*)start)->state || !((struct obj*)stop)->state) return INVALID_HANDLE; /* never recorded */
  *ms = 0.25f * (float)(((struct obj*)stop)->state - ((struct obj*)start)->state);
  return OK;
}
CUresult cuEventSynchronize(void* e) {
  NEED_CTX();
  bump(C_SYNC);
  return is(e, MAGIC_EVENT) ? OK : INVALID_HANDLE;
}
CUresult cuStreamWaitEvent(void* s, void* e, unsigned flags) {
  NEED_CTX();
  bump(C_WAIT);
  if (flags != 0) return INVALID_VALUE;
  if (!is(e, MAGIC_EVENT)) return INVALID_HANDLE; // events of other contexts are allowed
  return stream_ok(s);
}

CUresult cuMemAlloc_v2(uint64_t* p, size_t n) {
  NEED_CTX();
  bump(C_ALLOC);
  void* m = calloc(1, n ? n : 1);
  if (!m) return 2;
  *p = (uint64_t)(uintptr_t)m;
  return OK;
}
CUresult cuMemFree_v2(uint64_t p) { NEED_CTX(); bump(C_FREE); free((void*)(uintptr_t)p); return OK; }
CUresult cuMemcpyHtoD_v2(uint64_t dst, const void* src, size_t n) {
  NEED_CTX(); bump(C_HTOD);
  memcpy((void*)(uintptr_t)dst, src, n);
  return OK;
}
CUresult cuMemcpyDtoH_v2(void* dst, uint64_t src, size_t n) {
  NEED_CTX(); bump(C_DTOH);
  memcpy(dst, (void*)(uintptr_t)src, n);
  return OK;
}

// The asynchronous copies run at the call: the fake's streams are
// synchronous.
CUresult cuMemcpyHtoDAsync_v2(uint64_t dst, const void* src, size_t n, void* s) {
  NEED_CTX(); bump(C_HTOD);
  if (capturing(s)) return add_node(s, (struct node){.copy = 1, .dst = dst, .src = (uint64_t)(uintptr_t)src, .len = n});
  memcpy((void*)(uintptr_t)dst, src, n);
  return OK;
}
CUresult cuMemcpyDtoHAsync_v2(void* dst, uint64_t src, size_t n, void* s) {
  NEED_CTX(); bump(C_DTOH);
  if (capturing(s)) return add_node(s, (struct node){.copy = 1, .dst = (uint64_t)(uintptr_t)dst, .src = src, .len = n});
  memcpy(dst, (void*)(uintptr_t)src, n);
  return OK;
}
CUresult cuMemcpyDtoDAsync_v2(uint64_t dst, uint64_t src, size_t n, void* s) {
  NEED_CTX();
  if (capturing(s)) return add_node(s, (struct node){.copy = 1, .dst = dst, .src = src, .len = n});
  memmove((void*)(uintptr_t)dst, (void*)(uintptr_t)src, n);
  return OK;
}
CUresult cuMemHostAlloc(void** p, size_t n, unsigned flags) {
  NEED_CTX();
  *p = calloc(1, n ? n : 1);
  return *p ? OK : 2;
}
CUresult cuDeviceCanAccessPeer(int* can, int d, int peer) {
  if (!inited) return NOT_INITIALIZED;
  *can = d != peer;
  return OK;
}
CUresult cuCtxEnablePeerAccess(void* peer, unsigned flags) {
  NEED_CTX();
  return (peer && flags == 0) ? OK : 1;
}
CUresult cuMemcpyPeerAsync(uint64_t dst, void* dc, uint64_t src, void* sc, size_t n, void* s) {
  NEED_CTX();
  if (!dc || !sc) return 201;
  memmove((void*)(uintptr_t)dst, (void*)(uintptr_t)src, n);
  return OK;
}
CUresult cuMemFreeHost(void* p) { NEED_CTX(); free(p); return OK; }
CUresult cuMemHostGetDevicePointer_v2(uint64_t* d, void* p, unsigned flags) {
  NEED_CTX();
  if (!p || flags != 0) return INVALID_VALUE;
  *d = (uint64_t)(uintptr_t)p;
  return OK;
}
CUresult cuStreamWaitValue64_v2(void* s, uint64_t addr, uint64_t value, unsigned flags) {
  NEED_CTX(); bump(C_WAITVALUE);
  CUresult r = stream_ok(s);
  if (r != OK) return r;
  if (!addr || (flags & 0xf) != 0 /* GEQ only */) return INVALID_VALUE;
  const uint64_t* w = (const uint64_t*)(uintptr_t)addr;
  struct timespec pause = {0, 20000};
  for (long i = 0; i < 500000; i++) { // 10 s
    if ((int64_t)(__atomic_load_n(w, __ATOMIC_ACQUIRE) - value) >= 0) return OK;
    nanosleep(&pause, NULL);
  }
  return 702;
}

// The fake's streams have run their work at the call, so the write is
// made at once (after that work, as CUDA orders it).
CUresult cuStreamWriteValue64_v2(void* s, uint64_t addr, uint64_t value, unsigned flags) {
  NEED_CTX(); bump(C_WRITEVALUE);
  CUresult r = stream_ok(s);
  if (r != OK) return r;
  if (!addr || flags != 0) return INVALID_VALUE;
  __atomic_store_n((uint64_t*)(uintptr_t)addr, value, __ATOMIC_RELEASE);
  marked(s);
  return OK;
}

CUresult cuModuleLoadData(void** m, const void* image) {
  NEED_CTX();
  bump(C_LOAD);
  const char* text = image;
  if (!text || !strstr(text, ".version") || !strstr(text, ".target")) return INVALID_IMAGE;
  struct obj* o = mk(MAGIC_MODULE, 0);
  o->image = text; // kept, and read again by cuModuleGetFunction
  *m = o;
  return OK;
}
CUresult cuModuleUnload(void* m) {
  NEED_CTX();
  if (!is(m, MAGIC_MODULE)) return INVALID_HANDLE;
  SAME_CTX(m);
  ((struct obj*)m)->magic = 0; free(m);
  return OK;
}
CUresult cuModuleGetFunction(void** f, void* m, const char* name) {
  NEED_CTX();
  if (!is(m, MAGIC_MODULE)) return INVALID_HANDLE;
  SAME_CTX(m);
  char pat[96];
  if (strlen(name) >= 60) return NOT_FOUND;
  snprintf(pat, sizeof pat, ".entry %s(", name);
  if (!strstr(((struct obj*)m)->image, pat)) return NOT_FOUND;
  struct obj* o = mk(MAGIC_FUNC, 0);
  snprintf(o->name, sizeof o->name, "%s", name);
  *f = o;
  return OK;
}

// Runs rocsync_<op>_<f32|f64> over n elements.
#define RUN(T, ALPHA)                                                                   \
  do {                                                                                  \
    T* o = (T*)(uintptr_t)out; const T* x = (const T*)(uintptr_t)a;                     \
    const T* y = (const T*)(uintptr_t)b; T al = (T)(ALPHA);                             \
    for (uint64_t i = 0; i < n; i++) {                                                  \
      if (!strcmp(op, "mul")) o[i] = x[i] * y[i];                                       \
      else if (!strcmp(op, "add")) o[i] = x[i] + y[i];                                  \
      else if (!strcmp(op, "sub")) o[i] = x[i] - y[i];                                  \
      else if (!strcmp(op, "div")) o[i] = x[i] / y[i];                                  \
      else if (!strcmp(op, "scale")) o[i] = al * x[i];                                  \
      else if (!strcmp(op, "axpy")) { volatile T p = al * x[i]; o[i] = p + y[i]; }      \
      else if (!strcmp(op, "fill")) o[i] = al;                                          \
      else if (!strcmp(op, "copy")) o[i] = x[i];                                        \
      else if (!strcmp(op, "neg")) o[i] = -x[i];                                        \
      else if (!strcmp(op, "exp")) o[i] = (T)exp((double)x[i]);                          \
      else if (!strcmp(op, "sqrt")) o[i] = (T)sqrt((double)x[i]);                        \
      else if (!strcmp(op, "relu")) o[i] = x[i] > 0 ? x[i] : (T)0;                      \
      else if (!strcmp(op, "relu_grad")) o[i] = x[i] > 0 ? y[i] : (T)0;                 \
      else return LAUNCH_FAILED;                                                        \
    }                                                                                   \
  } while (0)

// run_kernel runs rocsync_<op>_<f32|f64> named name.
static CUresult run_kernel(const char* name, uint64_t out, uint64_t a, uint64_t b, uint64_t n, double alpha) {
  char op[16];
  const char* p = name + strlen("rocsync_");
  const char* us = strrchr(name, '_');
  if (strncmp(name, "rocsync_", 8) || !us || us <= p || (size_t)(us - p) >= sizeof op) return LAUNCH_FAILED;
  memcpy(op, p, (size_t)(us - p)); op[us - p] = 0;
  if (!strcmp(us + 1, "f64")) RUN(double, alpha); else RUN(float, alpha);
  return OK;
}

CUresult cuLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                        unsigned bz, unsigned shared, void* s, void** params, void** extra) {
  NEED_CTX();
  bump(C_LAUNCH);
  if (!is(f, MAGIC_FUNC)) return INVALID_HANDLE;
  SAME_CTX(f);
  CUresult r = stream_ok(s);
  if (r) return r;
  if (!params || extra) return INVALID_VALUE;
  if (!gx || !gy || !gz || !bx || !by || !bz || bx * by * bz > 1024) return INVALID_VALUE;
  const char* name = ((struct obj*)f)->name;
  const char* us = strrchr(name, '_');
  int f64 = us && !strcmp(us + 1, "f64");
  uint64_t out = *(uint64_t*)params[0], a = *(uint64_t*)params[1], b = *(uint64_t*)params[2];
  uint64_t n = *(uint64_t*)params[4];
  double alpha = f64 ? *(double*)params[3] : (double)*(float*)params[3];
  last = (struct launch){{gx, gy, gz}, {bx, by, bz}, shared, s, out, a, b, n, alpha, {0}};
  snprintf(last.name, sizeof last.name, "%s", name);
  if (capturing(s)) return add_node(s, (struct node){.f = f, .out = out, .a = a, .b = b, .n = n, .alpha = alpha});
  return run_kernel(name, out, a, b, n, alpha);
}

CUresult cuStreamBeginCapture_v2(void* s, int mode) {
  NEED_CTX();
  if (!is(s, MAGIC_STREAM)) return INVALID_HANDLE; // the legacy stream cannot be captured
  SAME_CTX(s);
  if (mode < 0 || mode > 2) return INVALID_VALUE;
  if (capturing(s)) return 401; // CUDA_ERROR_ILLEGAL_STATE
  ((struct obj*)s)->capturing = calloc(1, sizeof(struct graph));
  return OK;
}
CUresult cuStreamEndCapture(void* s, void** graph) {
  NEED_CTX();
  if (!is(s, MAGIC_STREAM)) return INVALID_HANDLE;
  if (!capturing(s)) return 401; // CUDA_ERROR_ILLEGAL_STATE
  struct obj* g = mk(MAGIC_GRAPH, 0);
  g->capturing = ((struct obj*)s)->capturing;
  ((struct obj*)s)->capturing = NULL;
  *graph = g;
  return OK;
}
CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, unsigned long long flags) {
  NEED_CTX();
  if (!is(graph, MAGIC_GRAPH)) return INVALID_HANDLE;
  if (flags) return INVALID_VALUE;
  struct graph* src = ((struct obj*)graph)->capturing;
  struct obj* e = mk(MAGIC_EXEC, 0);
  e->capturing = calloc(1, sizeof(struct graph));
  e->capturing->n = e->capturing->cap = src->n;
  e->capturing->nodes = malloc((size_t)(src->n ? src->n : 1) * sizeof *src->nodes);
  memcpy(e->capturing->nodes, src->nodes, (size_t)src->n * sizeof *src->nodes);
  *exec = e;
  return OK;
}
static void free_graph(struct obj* o) { free(o->capturing->nodes); free(o->capturing); o->magic = 0; free(o); }
CUresult cuGraphDestroy(void* graph) {
  NEED_CTX();
  if (!is(graph, MAGIC_GRAPH)) return INVALID_HANDLE;
  free_graph(graph);
  return OK;
}
CUresult cuGraphExecDestroy(void* exec) {
  NEED_CTX();
  if (!is(exec, MAGIC_EXEC)) return INVALID_HANDLE;
  free_graph(exec);
  return OK;
}
// Runs the graph's nodes in order, at the call (the fake's streams are
// synchronous); a launch node's function must still be loaded.
CUresult cuGraphLaunch(void* exec, void* s) {
  NEED_CTX();
  bump(C_GRAPHLAUNCH);
  if (!is(exec, MAGIC_EXEC)) return INVALID_HANDLE;
  CUresult r = stream_ok(s);
  if (r) return r;
  if (capturing(s)) return CAPTURE_ILLEGAL;
  struct graph* g = ((struct obj*)exec)->capturing;
  for (int i = 0; i < g->n; i++) {
    struct node* nd = &g->nodes[i];
    if (nd->copy) {
      memmove((void*)(uintptr_t)nd->dst, (const void*)(uintptr_t)nd->src, nd->len);
      continue;
    }
    if (!is(nd->f, MAGIC_FUNC)) return LAUNCH_FAILED;
    if ((r = run_kernel(((struct obj*)nd->f)->name, nd->out, nd->a, nd->b, nd->n, nd->alpha))) return r;
  }
  return OK;
}

static const char* names[][2] = {
  {"CUDA_SUCCESS", "no error"},
  {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
};
CUresult cuGetErrorName(CUresult e, const char** s) {
  switch (e) {
  case 0: case 1: *s = names[e][0]; return OK;
  case 3: *s = "CUDA_ERROR_NOT_INITIALIZED"; return OK;
  case 100: *s = "CUDA_ERROR_NO_DEVICE"; return OK;
  case 101: *s = "CUDA_ERROR_INVALID_DEVICE"; return OK;
  case 200: *s = "CUDA_ERROR_INVALID_IMAGE"; return OK;
  case 201: *s = "CUDA_ERROR_INVALID_CONTEXT"; return OK;
  case 400: *s = "CUDA_ERROR_INVALID_HANDLE"; return OK;
  case 500: *s = "CUDA_ERROR_NOT_FOUND"; return OK;
  case 600: *s = "CUDA_ERROR_NOT_READY"; return OK;
  case 719: *s = "CUDA_ERROR_LAUNCH_FAILED"; return OK;
  }
  *s = NULL;
  return INVALID_VALUE;
}
CUresult cuGetErrorString(CUresult e, const char** s) {
  switch (e) {
  case 0: case 1: *s = names[e][1]; return OK;
  case 201: *s = "invalid device context"; return OK;
  case 400: *s = "invalid resource handle"; return OK;
  case 600: *s = "device not ready"; return OK;
  }
  return cuGetErrorName(e, s);
}
