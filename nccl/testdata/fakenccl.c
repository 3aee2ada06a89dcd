// fakenccl.c: a test-only stand-in for libnccl.so.2 / librccl.so.1,
// compiled by the tests against testdata/nccl.h (the upstream prototypes
// and enum values) and opened through ROCSYNC_LIBNCCL / ROCSYNC_LIBRCCL.
//
// "Device memory" is host memory. What it models:
//   - communicators from ncclCommInitAll (one clique in this process, fake
//     devices 0..FAKE_DEVICES-1) and from ncclCommInitRank (a clique keyed
//     by the unique id, kept in a file mapping under $TMPDIR, so ranks in
//     different processes meet);
//   - all-reduce (sum, prod, max, min, avg), all-gather, broadcast and
//     reduce-scatter: each rank copies its input into its slot of the
//     clique, all ranks meet at a barrier, each computes its output from
//     the slots (in rank order, so every rank gets the same bits), and all
//     meet again before the slots are reused;
//   - group semantics per thread: inside ncclGroupStart/End the calls are
//     queued and run at the outermost ncclGroupEnd, so one thread can issue
//     every rank's call; outside a group a call waits for its peers, and a
//     peer that never comes is an error after fakenccl_timeout_ms (real
//     NCCL would hang); ncclGroupEnd without ncclGroupStart is
//     ncclInvalidUsage;
//   - the order a group gives on the stream: real NCCL puts a group's
//     collective on its stream at ncclGroupEnd, behind whatever was
//     recorded there after the call. The fake's streams (the fake CUDA's)
//     run everything at once and cannot show that order, so, with the fake
//     CUDA loaded, ncclGroupEnd counts in fakenccl_marks_before_launch the
//     calls whose stream recorded an event or wrote a value between the
//     call and ncclGroupEnd: a fence that real NCCL would leave ahead of
//     the collective;
//   - argument checks with NCCL's result codes, and ranks that disagree on
//     a collective (ncclInvalidUsage, also reported by
//     ncclCommGetAsyncError);
//   - the NVLink multicast guard: every communicator init reads
//     getenv("NCCL_NVLS_ENABLE") and fails with ncclInvalidUsage unless it
//     is "0", so a path that reaches NCCL without rocsync's guard fails.
//     What the variable was at load and at the last init is exported.
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "nccl.h"

#define MAX_RANKS 8
#define FAKE_DEVICES 8
#define SLOT_BYTES (256 * 1024)
#define COMM_MAGIC 0x4e43434cU
#define COMM_DEAD 0xdeadc011U
static const char id_magic[8] = {'F', 'A', 'K', 'E', 'N', 'C', 'C', 'L'};

// Exported for the tests.
const int fakenccl_results[] = {ncclSuccess,       ncclUnhandledCudaError, ncclSystemError,
                                ncclInternalError, ncclInvalidArgument,    ncclInvalidUsage,
                                ncclRemoteError,   ncclInProgress,         ncclTimeout};
const int fakenccl_redops[] = {ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg};
const int fakenccl_datatypes[] = {ncclInt8,    ncclUint8,    ncclInt32,      ncclUint32,
                                  ncclInt64,   ncclUint64,   ncclFloat16,    ncclFloat32,
                                  ncclFloat64, ncclBfloat16, ncclFloat8e4m3, ncclFloat8e5m2};
const int fakenccl_unique_id_bytes = (int)sizeof(ncclUniqueId);
int fakenccl_timeout_ms = 5000;
void* fakenccl_last_stream;
int fakenccl_live_comms;
int fakenccl_marks_before_launch;
// The fake CUDA's, when it is loaded (globally, as purego loads it).
extern unsigned long long fakecuda_stream_marks(void* s) __attribute__((weak));
char fakenccl_nvls_at_load[64];
char fakenccl_nvls_at_init[64];
static __thread int current_device;

// fakenccl_set_device stands in for cudaSetDevice: ncclCommInitRank uses
// the calling thread's current device.
void fakenccl_set_device(int d) { current_device = d; }

static void record_nvls(char* dst) {
  const char* v = getenv("NCCL_NVLS_ENABLE");
  snprintf(dst, 64, "%s", v ? v : "(unset)");
}
__attribute__((constructor)) static void at_load(void) { record_nvls(fakenccl_nvls_at_load); }
static int nvls_off(void) {
  record_nvls(fakenccl_nvls_at_init);
  const char* v = getenv("NCCL_NVLS_ENABLE");
  return v && strcmp(v, "0") == 0;
}

enum { OP_ALLREDUCE = 1, OP_ALLGATHER, OP_BROADCAST, OP_REDUCESCATTER };
struct desc {
  int32_t kind, dtype, op, root;
  uint64_t count;
};

struct clique {
  uint32_t nranks, joined, refs, broken;
  uint32_t arrived, gen;
  struct desc desc[MAX_RANKS];
  unsigned char slot[MAX_RANKS][SLOT_BYTES];
};

struct ncclComm {
  uint32_t magic;
  int rank, nranks, dev;
  struct clique* cl;
  int mapped;  // cl is a file mapping at path
  char path[256];
  ncclResult_t async;
  void* last_stream;
};

ncclResult_t ncclGetVersion(int* version) {
  if (!version) return ncclInvalidArgument;
  *version = 22803;  // NCCL_VERSION(2, 28, 3)
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
  case ncclSuccess: return "no error";
  case ncclUnhandledCudaError: return "unhandled cuda error (run with NCCL_DEBUG=INFO for details)";
  case ncclSystemError: return "unhandled system error (run with NCCL_DEBUG=INFO for details)";
  case ncclInternalError: return "internal error - please report this issue to the NCCL developers";
  case ncclInvalidArgument: return "invalid argument (run with NCCL_DEBUG=WARN for details)";
  case ncclInvalidUsage: return "invalid usage (run with NCCL_DEBUG=WARN for details)";
  case ncclRemoteError: return "remote process exited or there was a network error";
  case ncclInProgress: return "NCCL operation in progress";
  case ncclTimeout: return "NCCL timeout";
  }
  return "unknown result code";
}

static struct ncclComm* new_comm(int rank, int nranks, int dev, struct clique* cl) {
  struct ncclComm* c = calloc(1, sizeof *c);
  c->magic = COMM_MAGIC;
  c->rank = rank;
  c->nranks = nranks;
  c->dev = dev;
  c->cl = cl;
  __atomic_add_fetch(&fakenccl_live_comms, 1, __ATOMIC_RELAXED);
  return c;
}
static int live(const struct ncclComm* c) { return c && c->magic == COMM_MAGIC; }

ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  if (!comm || ndev < 1 || ndev > MAX_RANKS) return ncclInvalidArgument;
  if (!nvls_off()) return ncclInvalidUsage;
  for (int i = 0; i < ndev; i++) {
    int d = devlist ? devlist[i] : i;
    if (d < 0 || d >= FAKE_DEVICES) return ncclUnhandledCudaError;  // cudaSetDevice fails
    for (int j = 0; j < i; j++)
      if (devlist && devlist[j] == d) return ncclInvalidUsage;  // "Duplicate GPU detected"
  }
  struct clique* cl = calloc(1, sizeof *cl);
  if (!cl) return ncclSystemError;
  cl->nranks = (uint32_t)ndev;
  cl->refs = (uint32_t)ndev;
  for (int i = 0; i < ndev; i++) comm[i] = new_comm(i, ndev, devlist ? devlist[i] : i, cl);
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return ncclInvalidArgument;
  memset(id, 0, sizeof *id);
  memcpy(id->internal, id_magic, sizeof id_magic);
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0 || read(fd, id->internal + 8, 16) != 16) {
    if (fd >= 0) close(fd);
    return ncclSystemError;
  }
  close(fd);
  return ncclSuccess;
}

static void id_path(const ncclUniqueId* id, char* path, size_t n) {
  const char* dir = getenv("TMPDIR");
  if (!dir || !*dir) dir = "/tmp";
  char hex[33];
  for (int i = 0; i < 16; i++) snprintf(hex + 2 * i, 3, "%02x", (unsigned char)id->internal[8 + i]);
  snprintf(path, n, "%s/fakenccl-%s", dir, hex);
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  if (!comm || nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks) return ncclInvalidArgument;
  if (memcmp(id.internal, id_magic, sizeof id_magic) != 0) return ncclInvalidArgument;
  if (!nvls_off()) return ncclInvalidUsage;
  char path[256];
  id_path(&id, path, sizeof path);
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0) return ncclSystemError;
  if (ftruncate(fd, sizeof(struct clique)) != 0) {
    close(fd);
    return ncclSystemError;
  }
  struct clique* cl = mmap(NULL, sizeof *cl, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (cl == MAP_FAILED) return ncclSystemError;
  uint32_t want = 0;
  if (!__atomic_compare_exchange_n(&cl->nranks, &want, (uint32_t)nranks, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
      want != (uint32_t)nranks) {
    munmap(cl, sizeof *cl);
    return ncclInvalidUsage;  // ranks disagree on the size
  }
  if (__atomic_fetch_or(&cl->joined, 1U << rank, __ATOMIC_ACQ_REL) & (1U << rank)) {
    munmap(cl, sizeof *cl);
    return ncclInvalidUsage;  // two ranks with one number
  }
  __atomic_add_fetch(&cl->refs, 1, __ATOMIC_ACQ_REL);
  struct ncclComm* c = new_comm(rank, nranks, current_device, cl);
  c->mapped = 1;
  snprintf(c->path, sizeof c->path, "%s", path);
  *comm = c;
  return ncclSuccess;
}

static ncclResult_t release(ncclComm_t c, int abort) {
  if (!live(c)) return ncclInvalidArgument;
  struct clique* cl = c->cl;
  if (abort) __atomic_store_n(&cl->broken, 1, __ATOMIC_RELEASE);
  uint32_t left = __atomic_sub_fetch(&cl->refs, 1, __ATOMIC_ACQ_REL);
  if (c->mapped) {
    if (left == 0) unlink(c->path);
    munmap(cl, sizeof *cl);
  } else if (left == 0) {
    free(cl);
  }
  // The struct stays, marked dead, so that a later call with the stale
  // handle gets ncclInvalidArgument rather than reading freed memory.
  c->magic = COMM_DEAD;
  c->cl = NULL;
  __atomic_sub_fetch(&fakenccl_live_comms, 1, __ATOMIC_RELAXED);
  return ncclSuccess;
}
ncclResult_t ncclCommDestroy(ncclComm_t c) { return release(c, 0); }
ncclResult_t ncclCommAbort(ncclComm_t c) { return release(c, 1); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* r) {
  if (!live(c) || !r) return ncclInvalidArgument;
  *r = c->async;
  return ncclSuccess;
}
ncclResult_t ncclCommCount(const ncclComm_t c, int* n) {
  if (!live(c) || !n) return ncclInvalidArgument;
  *n = c->nranks;
  return ncclSuccess;
}
ncclResult_t ncclCommCuDevice(const ncclComm_t c, int* d) {
  if (!live(c) || !d) return ncclInvalidArgument;
  *d = c->dev;
  return ncclSuccess;
}
ncclResult_t ncclCommUserRank(const ncclComm_t c, int* r) {
  if (!live(c) || !r) return ncclInvalidArgument;
  *r = c->rank;
  return ncclSuccess;
}

// ---- collectives ----

struct call {
  struct desc d;
  const void* send;
  void* recv;
  ncclComm_t comm;
  void* stream;
  unsigned long long marks;  // the stream's marks when the call was queued
};

static size_t type_size(int dt) {
  switch (dt) {
  case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
  case ncclFloat16: case ncclBfloat16: return 2;
  case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
  case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
  }
  return 0;
}

// in_bytes is what a rank puts in its slot.
static size_t in_bytes(const struct call* k) {
  size_t n = k->d.count * type_size(k->d.dtype);
  if (k->d.kind == OP_REDUCESCATTER) n *= (size_t)k->comm->nranks;
  if (k->d.kind == OP_BROADCAST && k->comm->rank != k->d.root) n = 0;
  return n;
}

static ncclResult_t validate(const struct call* k) {
  if (!live(k->comm)) return ncclInvalidArgument;
  if (k->d.dtype < 0 || k->d.dtype >= ncclNumTypes) return ncclInvalidArgument;
  int reduces = k->d.kind == OP_ALLREDUCE || k->d.kind == OP_REDUCESCATTER;
  if (reduces && (k->d.op < 0 || k->d.op >= ncclNumOps)) return ncclInvalidArgument;
  if (k->d.kind == OP_BROADCAST && (k->d.root < 0 || k->d.root >= k->comm->nranks)) return ncclInvalidArgument;
  if (k->d.count == 0) return ncclSuccess;
  if (in_bytes(k) && !k->send) return ncclInvalidArgument;
  if (!k->recv) return ncclInvalidArgument;
  // Limits of the fake, not of NCCL.
  if (in_bytes(k) > SLOT_BYTES || k->d.count > SLOT_BYTES) return ncclInternalError;
  if (reduces && (k->d.dtype == ncclFloat16 || k->d.dtype == ncclBfloat16 || k->d.dtype == ncclFloat8e4m3 ||
                  k->d.dtype == ncclFloat8e5m2))
    return ncclInternalError;
  return ncclSuccess;
}

static uint32_t arrive(struct clique* cl) {
  uint32_t g = __atomic_load_n(&cl->gen, __ATOMIC_ACQUIRE);
  if (__atomic_add_fetch(&cl->arrived, 1, __ATOMIC_ACQ_REL) == cl->nranks) {
    __atomic_store_n(&cl->arrived, 0, __ATOMIC_RELAXED);
    __atomic_add_fetch(&cl->gen, 1, __ATOMIC_ACQ_REL);
  }
  return g;
}

static ncclResult_t wait_gen(struct clique* cl, uint32_t g) {
  struct timespec start, now, nap = {0, 20000};
  clock_gettime(CLOCK_MONOTONIC, &start);
  while (__atomic_load_n(&cl->gen, __ATOMIC_ACQUIRE) == g) {
    if (__atomic_load_n(&cl->broken, __ATOMIC_ACQUIRE)) return ncclInvalidUsage;
    clock_gettime(CLOCK_MONOTONIC, &now);
    long ms = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
    if (ms > fakenccl_timeout_ms) {
      // The barrier's count now includes a rank that left: the clique is
      // unusable from here on.
      __atomic_store_n(&cl->broken, 1, __ATOMIC_RELEASE);
      return ncclInvalidUsage;
    }
    nanosleep(&nap, NULL);
  }
  return ncclSuccess;
}

#define REDUCE(T)                                                                  \
  do {                                                                             \
    T* out = (T*)k->recv;                                                          \
    for (size_t i = 0; i < k->d.count; i++) {                                      \
      T a = ((const T*)cl->slot[0])[off + i];                                      \
      for (int r = 1; r < n; r++) {                                                \
        T b = ((const T*)cl->slot[r])[off + i];                                    \
        switch (k->d.op) {                                                         \
        case ncclSum: case ncclAvg: a = (T)(a + b); break;                         \
        case ncclProd: a = (T)(a * b); break;                                      \
        case ncclMax: a = b > a ? b : a; break;                                    \
        case ncclMin: a = b < a ? b : a; break;                                    \
        }                                                                          \
      }                                                                            \
      if (k->d.op == ncclAvg) a = (T)(a / (T)n);                                   \
      out[i] = a;                                                                  \
    }                                                                              \
  } while (0)

static int same_desc(const struct desc* a, const struct desc* b) {
  return a->kind == b->kind && a->dtype == b->dtype && a->op == b->op && a->root == b->root && a->count == b->count;
}

static void compute(const struct call* k) {
  struct clique* cl = k->comm->cl;
  int n = k->comm->nranks;
  size_t off = k->d.kind == OP_REDUCESCATTER ? (size_t)k->comm->rank * k->d.count : 0;
  size_t bytes = k->d.count * type_size(k->d.dtype);
  if (k->d.count == 0) return;
  switch (k->d.kind) {
  case OP_BROADCAST: memcpy(k->recv, cl->slot[k->d.root], bytes); return;
  case OP_ALLGATHER:
    for (int r = 0; r < n; r++) memcpy((char*)k->recv + (size_t)r * bytes, cl->slot[r], bytes);
    return;
  }
  switch (k->d.dtype) {
  case ncclInt8: REDUCE(int8_t); break;
  case ncclUint8: REDUCE(uint8_t); break;
  case ncclInt32: REDUCE(int32_t); break;
  case ncclUint32: REDUCE(uint32_t); break;
  case ncclInt64: REDUCE(int64_t); break;
  case ncclUint64: REDUCE(uint64_t); break;
  case ncclFloat32: REDUCE(float); break;
  case ncclFloat64: REDUCE(double); break;
  }
}

// run executes one call per communicator: all post, meet, compute, meet.
static ncclResult_t run(struct call* ks, int n) {
  ncclResult_t err = ncclSuccess;
  uint32_t* g = calloc((size_t)n, sizeof *g);
  if (!g) return ncclSystemError;
  for (int i = 0; i < n; i++) {
    struct clique* cl = live(ks[i].comm) ? ks[i].comm->cl : NULL;
    if (!cl || __atomic_load_n(&cl->broken, __ATOMIC_ACQUIRE)) {
      // Calls before this one have arrived already: their cliques cannot
      // be trusted any more.
      for (int j = 0; j < i; j++) __atomic_store_n(&ks[j].comm->cl->broken, 1, __ATOMIC_RELEASE);
      free(g);
      return ncclInvalidUsage;
    }
    if (in_bytes(&ks[i])) memcpy(cl->slot[ks[i].comm->rank], ks[i].send, in_bytes(&ks[i]));
    cl->desc[ks[i].comm->rank] = ks[i].d;
    g[i] = arrive(cl);
  }
  for (int i = 0; i < n; i++) {
    ncclResult_t r = wait_gen(ks[i].comm->cl, g[i]);
    if (r != ncclSuccess) {
      ks[i].comm->async = r;
      if (err == ncclSuccess) err = r;
    }
  }
  if (err != ncclSuccess) {
    free(g);
    return err;
  }
  for (int i = 0; i < n; i++) {
    struct ncclComm* c = ks[i].comm;
    int agree = 1;
    for (int r = 0; r < c->nranks; r++) agree &= same_desc(&c->cl->desc[r], &ks[i].d);
    if (!agree) {
      c->async = ncclInvalidUsage;
      err = ncclInvalidUsage;
      continue;
    }
    compute(&ks[i]);
    c->last_stream = ks[i].stream;
    fakenccl_last_stream = ks[i].stream;
  }
  for (int i = 0; i < n; i++) g[i] = arrive(ks[i].comm->cl);
  for (int i = 0; i < n; i++) {
    ncclResult_t r = wait_gen(ks[i].comm->cl, g[i]);
    if (r != ncclSuccess && err == ncclSuccess) err = r;
  }
  free(g);
  return err;
}

static __thread int group_depth;
static __thread struct call* queued;
static __thread int nqueued, capqueued;

ncclResult_t ncclGroupStart(void) {
  group_depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
  if (group_depth == 0) return ncclInvalidUsage;
  if (--group_depth > 0) return ncclSuccess;
  ncclResult_t err = ncclSuccess;
  if (fakecuda_stream_marks)
    for (int i = 0; i < nqueued; i++)
      if (fakecuda_stream_marks(queued[i].stream) != queued[i].marks)
        __atomic_add_fetch(&fakenccl_marks_before_launch, 1, __ATOMIC_RELAXED);
  // Round r runs the r-th queued call of every communicator together.
  int* round = calloc((size_t)nqueued + 1, sizeof *round);
  struct call* batch = calloc((size_t)nqueued + 1, sizeof *batch);
  int rounds = 0;
  for (int i = 0; i < nqueued; i++) {
    for (int j = 0; j < i; j++)
      if (queued[j].comm == queued[i].comm) round[i]++;
    if (round[i] + 1 > rounds) rounds = round[i] + 1;
  }
  for (int r = 0; r < rounds && err == ncclSuccess; r++) {
    int n = 0;
    for (int i = 0; i < nqueued; i++)
      if (round[i] == r) batch[n++] = queued[i];
    err = run(batch, n);
  }
  free(batch);
  free(round);
  nqueued = 0;
  return err;
}

static ncclResult_t submit(struct call k) {
  ncclResult_t r = validate(&k);
  if (r != ncclSuccess) return r;
  if (group_depth == 0) return run(&k, 1);
  if (nqueued == capqueued) {
    capqueued = capqueued ? 2 * capqueued : 16;
    struct call* q = realloc(queued, (size_t)capqueued * sizeof *queued);
    if (!q) return ncclSystemError;
    queued = q;
  }
  if (fakecuda_stream_marks) k.marks = fakecuda_stream_marks(k.stream);
  queued[nqueued++] = k;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                           ncclComm_t comm, streamHandle stream) {
  struct call k = {{OP_ALLREDUCE, dt, op, 0, count}, send, recv, comm, stream, 0};
  return submit(k);
}
ncclResult_t ncclAllGather(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclComm_t comm,
                           streamHandle stream) {
  struct call k = {{OP_ALLGATHER, dt, 0, 0, count}, send, recv, comm, stream, 0};
  return submit(k);
}
ncclResult_t ncclBroadcast(const void* send, void* recv, size_t count, ncclDataType_t dt, int root,
                           ncclComm_t comm, streamHandle stream) {
  struct call k = {{OP_BROADCAST, dt, 0, root, count}, send, recv, comm, stream, 0};
  return submit(k);
}
ncclResult_t ncclReduceScatter(const void* send, void* recv, size_t count, ncclDataType_t dt, ncclRedOp_t op,
                               ncclComm_t comm, streamHandle stream) {
  struct call k = {{OP_REDUCESCATTER, dt, op, 0, count}, send, recv, comm, stream, 0};
  return submit(k);
}
