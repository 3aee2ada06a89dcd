// fakehip.c: a test-only stand-in for libamdhip64, compiled by lib_test.go
// into a temporary directory as lib/libamdhip64.so.7. It exports the symbols
// in hip.BoundSymbols with the real prototypes and models just enough of
// HIP's behaviour to check, without a GPU, what the purego binding passes:
//   - the current device is per thread (hipSetDevice), as in HIP;
//   - streams, events and modules remember the device they were created on;
//     hipModuleGetFunction/Unload and hipModuleLaunchKernel fail unless the
//     right device is current (real HIP aborts or returns
//     hipErrorInvalidResourceHandle);
//   - "device memory" is host memory, so memcpy/memset/wait/write can be
//     checked from Go;
//   - hipModuleLoadData keeps the image pointer and re-reads it later, like
//     HIP's lazy code-object loading;
//   - hipModuleLaunchKernel checks the extra array and the argument buffer;
//   - stream memory operations resolve memory HIP did not allocate through
//     the calling thread's current device (fakehip_register_foreign).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int hipError_t;
enum {
  hipSuccess = 0, hipErrorInvalidValue = 1, hipErrorInvalidDevice = 101,
  hipErrorInvalidImage = 200, hipErrorInvalidHandle = 400, hipErrorNotFound = 500,
  hipErrorNotReady = 600,
};
#define NDEV 4
#define MAGIC_STREAM 0x5354524dU
#define MAGIC_EVENT 0x45564e54U
#define MAGIC_MODULE 0x4d4f444cU
#define MAGIC_FUNC 0x46554e43U

static __thread int cur;

struct obj { uint32_t magic; int dev; int flags; int state; const unsigned char* image; };

static struct obj* mk(uint32_t magic, int dev, int flags) {
  struct obj* o = calloc(1, sizeof *o);
  o->magic = magic; o->dev = dev; o->flags = flags;
  return o;
}
static int is(const void* p, uint32_t magic) { return p && ((const struct obj*)p)->magic == magic; }

hipError_t hipInit(unsigned flags) { return flags == 0 ? hipSuccess : hipErrorInvalidValue; }
hipError_t hipGetDeviceCount(int* n) { *n = NDEV; return hipSuccess; }
hipError_t hipSetDevice(int d) {
  if (d < 0 || d >= NDEV) return hipErrorInvalidDevice;
  cur = d;
  return hipSuccess;
}
hipError_t hipGetDevice(int* d) { *d = cur; return hipSuccess; }
hipError_t hipDeviceSynchronize(void) { return hipSuccess; }
hipError_t hipDeviceGetName(char* name, int len, int dev) {
  if (dev < 0 || dev >= NDEV) return hipErrorInvalidDevice;
  snprintf(name, (size_t)len, "Fake AMD GPU %d", dev);
  return hipSuccess;
}
hipError_t hipDeviceGetPCIBusId(char* id, int len, int dev) {
  if (dev < 0 || dev >= NDEV) return hipErrorInvalidDevice;
  snprintf(id, (size_t)len, "0000:%02x:00.0", 0x80 + dev);
  return hipSuccess;
}
hipError_t hipDeviceGetAttribute(int* v, int attr, int dev) {
  if (dev < 0 || dev >= NDEV) return hipErrorInvalidDevice;
  *v = attr * 10 + dev;
  return hipSuccess;
}
hipError_t hipRuntimeGetVersion(int* v) { *v = 70012345; return hipSuccess; }

hipError_t hipStreamCreateWithFlags(void** s, unsigned flags) {
  if (flags > 1) return hipErrorInvalidValue;
  *s = mk(MAGIC_STREAM, cur, (int)flags);
  return hipSuccess;
}
hipError_t hipStreamCreateWithPriority(void** s, unsigned flags, int priority) {
  (void)priority;
  return hipStreamCreateWithFlags(s, flags);
}
hipError_t hipStreamDestroy(void* s) {
  if (!is(s, MAGIC_STREAM)) return hipErrorInvalidHandle;
  ((struct obj*)s)->magic = 0; free(s);
  return hipSuccess;
}
hipError_t hipStreamSynchronize(void* s) { return s == NULL || is(s, MAGIC_STREAM) ? hipSuccess : hipErrorInvalidHandle; }
hipError_t hipStreamQuery(void* s) { return s == NULL || is(s, MAGIC_STREAM) ? hipSuccess : hipErrorInvalidHandle; }

static int streamDev(void* s) { return s ? ((struct obj*)s)->dev : cur; }

hipError_t hipEventCreateWithFlags(void** e, unsigned flags) {
  if (flags > 7) return hipErrorInvalidValue;
  *e = mk(MAGIC_EVENT, cur, (int)flags);
  return hipSuccess;
}
hipError_t hipEventRecord(void* e, void* s) {
  if (!is(e, MAGIC_EVENT) || (s && !is(s, MAGIC_STREAM))) return hipErrorInvalidHandle;
  if (((struct obj*)e)->dev != streamDev(s)) return hipErrorInvalidHandle;
  ((struct obj*)e)->state = 1;
  return hipSuccess;
}
hipError_t hipEventQuery(void* e) {
  if (!is(e, MAGIC_EVENT)) return hipErrorInvalidHandle;
  return ((struct obj*)e)->state ? hipSuccess : hipErrorNotReady;
}
hipError_t hipEventElapsedTime(float* ms, void* start, void* stop) {
  if (!is(start, MAGIC_EVENT) || !is(stop, MAGIC_EVENT)) return hipErrorInvalidHandle;
  if ((((struct obj*)start)->flags | ((struct obj*)stop)->flags) & 2 /* hipEventDisableTiming */) return hipErrorInvalidHandle;
  if (!((struct obj*)start)->state || !((struct obj*)stop)->state) return hipErrorNotReady;
  *ms = 1.5f;
  return hipSuccess;
}
hipError_t hipEventSynchronize(void* e) { return is(e, MAGIC_EVENT) ? hipSuccess : hipErrorInvalidHandle; }
hipError_t hipEventDestroy(void* e) {
  if (!is(e, MAGIC_EVENT)) return hipErrorInvalidHandle;
  ((struct obj*)e)->magic = 0; free(e);
  return hipSuccess;
}
hipError_t hipStreamWaitEvent(void* s, void* e, unsigned flags) {
  if (flags != 0) return hipErrorInvalidValue;
  if (!is(e, MAGIC_EVENT) || (s && !is(s, MAGIC_STREAM))) return hipErrorInvalidHandle;
  return hipSuccess;
}

hipError_t hipMalloc(void** p, size_t n) { *p = calloc(1, n ? n : 1); return hipSuccess; }
hipError_t hipExtMallocWithFlags(void** p, size_t n, unsigned flags) {
  if (flags > 2) return hipErrorInvalidValue;
  *p = calloc(1, n ? n : 1);
  return hipSuccess;
}
hipError_t hipFree(void* p) { free(p); return hipSuccess; }
hipError_t hipHostMalloc(void** p, size_t n, unsigned flags) {
  if (flags != 0) return hipErrorInvalidValue;
  *p = calloc(1, n ? n : 1);
  return *p ? hipSuccess : hipErrorInvalidValue;
}
hipError_t hipHostFree(void* p) { free(p); return hipSuccess; }
hipError_t hipMemcpy(void* dst, const void* src, size_t n, int kind) {
  if (kind != 1 && kind != 2) return hipErrorInvalidValue;
  memcpy(dst, src, n);
  return hipSuccess;
}
hipError_t hipMemcpyWithStream(void* dst, const void* src, size_t n, int kind, void* s) {
  if ((kind != 1 && kind != 2) || (s && !is(s, MAGIC_STREAM))) return hipErrorInvalidValue;
  memcpy(dst, src, n);
  return hipSuccess;
}
hipError_t hipMemcpyAsync(void* dst, const void* src, size_t n, int kind, void* s) {
  if (kind < 1 || kind > 3 || (s && !is(s, MAGIC_STREAM))) return hipErrorInvalidValue;
  memcpy(dst, src, n);
  return hipSuccess;
}
hipError_t hipDeviceCanAccessPeer(int* can, int dev, int peer) {
  if (dev < 0 || peer < 0) return hipErrorInvalidDevice;
  *can = dev != peer;
  return hipSuccess;
}
hipError_t hipDeviceEnablePeerAccess(int peer, unsigned flags) {
  if (flags != 0) return hipErrorInvalidValue;
  if (peer < 0) return hipErrorInvalidDevice;
  return hipSuccess;
}
hipError_t hipMemcpyPeerAsync(void* dst, int dd, const void* src, int sd, size_t n, void* s) {
  if (dd < 0 || sd < 0) return hipErrorInvalidDevice;
  if (s && !is(s, MAGIC_STREAM)) return hipErrorInvalidHandle;
  memcpy(dst, src, n);
  return hipSuccess;
}
hipError_t hipMemsetAsync(void* dst, int v, size_t n, void* s) {
  if (s && !is(s, MAGIC_STREAM)) return hipErrorInvalidHandle;
  memset(dst, v, n);
  return hipSuccess;
}

// The image must start with "FAKE"; it is checked again later through the
// kept pointer, as HIP may read the image after hipModuleLoadData returns.
hipError_t hipModuleLoadData(void** m, const void* image) {
  if (!image || memcmp(image, "FAKE", 4) != 0) return hipErrorInvalidImage;
  struct obj* o = mk(MAGIC_MODULE, cur, 0);
  o->image = image;
  *m = o;
  return hipSuccess;
}
hipError_t hipModuleGetFunction(void** f, void* m, const char* name) {
  if (!is(m, MAGIC_MODULE)) return hipErrorInvalidHandle;
  struct obj* mo = m;
  if (mo->dev != cur) return hipErrorInvalidDevice; // real HIP aborts the process
  if (memcmp(mo->image, "FAKE", 4) != 0) return hipErrorInvalidImage;
  if (strcmp(name, "kern") != 0) return hipErrorNotFound;
  *f = mk(MAGIC_FUNC, cur, 0);
  return hipSuccess;
}
hipError_t hipModuleUnload(void* m) {
  if (!is(m, MAGIC_MODULE)) return hipErrorInvalidHandle;
  if (((struct obj*)m)->dev != cur) return hipErrorInvalidDevice;
  ((struct obj*)m)->magic = 0; free(m);
  return hipSuccess;
}

// Argument buffer convention of the Go test: uint32 k, then bytes
// b[i] = (uint8)(i*k + 7) for i in [4, size). The launch geometry must be
// grid = {k+1, k+2, k+3}, block = {k+4, k+5, k+6}, shared = k+7.
hipError_t hipModuleLaunchKernel(void* f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                                 unsigned by, unsigned bz, unsigned shared, void* s, void** params,
                                 void** extra) {
  if (!is(f, MAGIC_FUNC) || (s && !is(s, MAGIC_STREAM))) return hipErrorInvalidHandle;
  if (streamDev(s) != cur) return hipErrorInvalidHandle; // as in HIP
  if (((struct obj*)f)->dev != cur) return hipErrorInvalidDevice;
  if (params != NULL || extra == NULL) return hipErrorInvalidValue;
  if (extra[0] != (void*)1 || extra[2] != (void*)2 || extra[4] != (void*)3) return hipErrorInvalidValue;
  const unsigned char* buf = extra[1];
  size_t n = *(const size_t*)extra[3];
  if (n == 0) return hipSuccess;
  if (n < 4) return hipErrorInvalidValue;
  uint32_t k;
  memcpy(&k, buf, 4);
  if (gx != k + 1 || gy != k + 2 || gz != k + 3 || bx != k + 4 || by != k + 5 || bz != k + 6 ||
      shared != k + 7)
    return 9; // hipErrorInvalidConfiguration
  for (size_t i = 4; i < n; i++)
    if (buf[i] != (unsigned char)(i * k + 7)) return hipErrorInvalidValue;
  return hipSuccess;
}

// Memory HIP did not allocate (an HSA signal's value address, ROCr's) is
// resolved through the calling thread's current device (clr
// hip_memory.cpp, getMemoryObject: the current device's arena memory
// object); on another device the lookup fails. fakehip_register_foreign
// (test-only) names such memory and the device whose lookup finds it;
// memory not registered counts as HIP's own, found from any device.
#define NFOREIGN 16
static void* foreign_ptr[NFOREIGN];
static int foreign_dev[NFOREIGN];
int fakehip_register_foreign(void* p, int dev) { // dev < 0: forget p
  for (int i = 0; i < NFOREIGN; i++) {
    if (foreign_ptr[i] == p && dev < 0) {
      for (; i + 1 < NFOREIGN; i++) {
        foreign_ptr[i] = foreign_ptr[i + 1];
        foreign_dev[i] = foreign_dev[i + 1];
      }
      foreign_ptr[NFOREIGN - 1] = NULL;
      return 0;
    }
    if (dev >= 0 && (foreign_ptr[i] == NULL || foreign_ptr[i] == p)) {
      foreign_ptr[i] = p;
      foreign_dev[i] = dev;
      return 0;
    }
  }
  return -1;
}
static int lookup_ok(void* p) {
  for (int i = 0; i < NFOREIGN && foreign_ptr[i]; i++)
    if (foreign_ptr[i] == p) return foreign_dev[i] == cur;
  return 1;
}

hipError_t hipStreamWaitValue64(void* s, void* ptr, uint64_t value, unsigned flags, uint64_t mask) {
  if (s && !is(s, MAGIC_STREAM)) return hipErrorInvalidHandle;
  if (!lookup_ok(ptr)) return hipErrorInvalidValue;
  uint64_t v = *(volatile uint64_t*)ptr & mask;
  int ok;
  switch (flags) {
  case 0: ok = v >= value; break;
  case 1: ok = v == value; break;
  case 2: ok = (v & value) != 0; break;
  case 3: ok = ~(v | (value & mask)) != 0; break;
  default: return hipErrorInvalidValue;
  }
  return ok ? hipSuccess : hipErrorNotReady; // the real call would wait instead
}
hipError_t hipStreamWriteValue64(void* s, void* ptr, uint64_t value, unsigned flags) {
  if (s && !is(s, MAGIC_STREAM)) return hipErrorInvalidHandle;
  if (!lookup_ok(ptr)) return hipErrorInvalidValue;
  if (flags != 0) return hipErrorInvalidValue;
  *(volatile uint64_t*)ptr = value;
  return hipSuccess;
}

const char* hipGetErrorName(hipError_t e) {
  switch (e) {
  case hipSuccess: return "hipSuccess";
  case hipErrorInvalidValue: return "hipErrorInvalidValue";
  case 9: return "hipErrorInvalidConfiguration";
  case hipErrorInvalidDevice: return "hipErrorInvalidDevice";
  case hipErrorInvalidImage: return "hipErrorInvalidImage";
  case hipErrorInvalidHandle: return "hipErrorInvalidHandle";
  case hipErrorNotFound: return "hipErrorNotFound";
  case hipErrorNotReady: return "hipErrorNotReady";
  default: return "hipErrorUnknown";
  }
}
const char* hipGetErrorString(hipError_t e) {
  switch (e) {
  case hipErrorNotReady: return "fake: work still pending";
  default: return hipGetErrorName(e);
  }
}
