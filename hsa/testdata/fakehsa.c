/*
 * fakehsa.c is a stand-in libhsa-runtime64 for lib_test.go: without an AMD
 * GPU the real runtime refuses hsa_init, so the binding's argument order,
 * out-parameters, callbacks and the AQL ring protocol could not be run at
 * all. This library implements the functions in BoundSymbols with simple
 * in-memory semantics and logs every call, so the test can check both what
 * C received and what Go got back.
 *
 * It includes the real ROCm headers, so the compiler checks each definition
 * against the real prototype. Built by the test (not part of the package):
 *   cc -shared -fPIC -I<rocm include> -o $ROCM_PATH/lib/libhsa-runtime64.so.1 fakehsa.c -lpthread
 * and deliberately has no DT_SONAME, so it never stands in for the real
 * library in a process that loads both.
 */
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hsa/hsa.h>
#include <hsa/hsa_ext_amd.h>

/* ---- call log, read by the test ---- */

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_buf[1 << 16];
static size_t log_len;

static void logf_(const char *fmt, ...) {
  va_list ap;
  pthread_mutex_lock(&log_mu);
  va_start(ap, fmt);
  int n = vsnprintf(log_buf + log_len, sizeof log_buf - log_len - 1, fmt, ap);
  va_end(ap);
  if (n > 0 && log_len + (size_t)n < sizeof log_buf - 2) {
    log_len += (size_t)n;
    log_buf[log_len++] = '\n';
    log_buf[log_len] = 0;
  }
  pthread_mutex_unlock(&log_mu);
}

const char *fake_log(void) { return log_buf; }
void fake_log_reset(void) {
  pthread_mutex_lock(&log_mu);
  log_len = 0;
  log_buf[0] = 0;
  pthread_mutex_unlock(&log_mu);
}

/* ---- runtime state ---- */

enum { CPU = 0x100, GPU = 0x200, GPU_ISA = 0x300, POOL_KERNARG = 0x400, POOL_VRAM = 0x401,
       EXE = 0x500, SYM_SAXPY = 0x600 };
static const char *isa_name = "amdgcn-amd-amdhsa--gfx90a:sramecc+:xnack-";
static int refcount;

#define OPEN() \
  do { if (refcount == 0) return HSA_STATUS_ERROR_NOT_INITIALIZED; } while (0)

hsa_status_t hsa_init() { refcount++; logf_("hsa_init"); return HSA_STATUS_SUCCESS; }
hsa_status_t hsa_shut_down() {
  OPEN();
  refcount--;
  logf_("hsa_shut_down");
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_status_string(hsa_status_t status, const char **status_string) {
  switch (status) {
  case HSA_STATUS_SUCCESS: *status_string = "FAKE_SUCCESS"; break;
  case HSA_STATUS_ERROR_NOT_INITIALIZED: *status_string = "FAKE_NOT_INITIALIZED: no hsa_init"; break;
  case HSA_STATUS_ERROR_INVALID_ARGUMENT: *status_string = "FAKE_INVALID_ARGUMENT: bad argument"; break;
  case HSA_STATUS_ERROR_INVALID_AGENT: *status_string = "FAKE_INVALID_AGENT: bad agent"; break;
  case HSA_STATUS_ERROR_INVALID_SYMBOL_NAME: *status_string = "FAKE_INVALID_SYMBOL_NAME: no such symbol"; break;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_system_get_info(hsa_system_info_t attribute, void *value) {
  OPEN();
  switch (attribute) {
  case HSA_SYSTEM_INFO_VERSION_MAJOR: *(uint16_t *)value = 1; break;
  case HSA_SYSTEM_INFO_VERSION_MINOR: *(uint16_t *)value = 1; break;
  case HSA_SYSTEM_INFO_TIMESTAMP_FREQUENCY: *(uint64_t *)value = 1000000000ULL; break;
  case HSA_AMD_SYSTEM_INFO_BUILD_VERSION: *(const char **)value = "\"1.5.0-local-build-unknown\""; break; /* as Debian's, quotes included */
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_iterate_agents(hsa_status_t (*callback)(hsa_agent_t agent, void *data), void *data) {
  OPEN();
  logf_("hsa_iterate_agents(data=%p)", data);
  uint64_t agents[] = {CPU, GPU};
  for (int i = 0; i < 2; i++) {
    hsa_status_t s = callback((hsa_agent_t){agents[i]}, data);
    if (s != HSA_STATUS_SUCCESS) return s;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_agent_get_info(hsa_agent_t agent, hsa_agent_info_t attribute, void *value) {
  OPEN();
  if (agent.handle != CPU && agent.handle != GPU) return HSA_STATUS_ERROR_INVALID_AGENT;
  int gpu = agent.handle == GPU;
  switch ((int)attribute) {
  case HSA_AGENT_INFO_NAME: strcpy(value, gpu ? "gfx90a" : "Fake EPYC"); break;
  case HSA_AGENT_INFO_DEVICE: *(hsa_device_type_t *)value = gpu ? HSA_DEVICE_TYPE_GPU : HSA_DEVICE_TYPE_CPU; break;
  case HSA_AGENT_INFO_QUEUE_MAX_SIZE: *(uint32_t *)value = gpu ? 131072 : 0; break;
  case HSA_AMD_AGENT_INFO_PRODUCT_NAME: strcpy(value, gpu ? "Fake Instinct MI210" : "Fake EPYC"); break;
  case HSA_AMD_AGENT_INFO_COMPUTE_UNIT_COUNT: *(uint32_t *)value = gpu ? 104 : 64; break;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_agent_iterate_isas(hsa_agent_t agent, hsa_status_t (*callback)(hsa_isa_t isa, void *data),
                                    void *data) {
  OPEN();
  if (agent.handle != GPU) return HSA_STATUS_SUCCESS;
  return callback((hsa_isa_t){GPU_ISA}, data);
}

hsa_status_t hsa_isa_get_info_alt(hsa_isa_t isa, hsa_isa_info_t attribute, void *value) {
  OPEN();
  if (isa.handle != GPU_ISA) return HSA_STATUS_ERROR_INVALID_ISA;
  switch (attribute) {
  case HSA_ISA_INFO_NAME_LENGTH: *(uint32_t *)value = (uint32_t)strlen(isa_name); break;
  case HSA_ISA_INFO_NAME: memcpy(value, isa_name, strlen(isa_name)); break; /* no NUL, as allowed */
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

/* ---- memory ---- */

hsa_status_t hsa_amd_agent_iterate_memory_pools(hsa_agent_t agent,
                                                hsa_status_t (*callback)(hsa_amd_memory_pool_t memory_pool, void *data),
                                                void *data) {
  OPEN();
  hsa_status_t s = callback((hsa_amd_memory_pool_t){POOL_KERNARG}, data);
  if (s != HSA_STATUS_SUCCESS || agent.handle != GPU) return s;
  return callback((hsa_amd_memory_pool_t){POOL_VRAM}, data);
}

hsa_status_t hsa_amd_memory_pool_get_info(hsa_amd_memory_pool_t memory_pool, hsa_amd_memory_pool_info_t attribute,
                                          void *value) {
  OPEN();
  int vram = memory_pool.handle == POOL_VRAM;
  switch (attribute) {
  case HSA_AMD_MEMORY_POOL_INFO_SEGMENT: *(uint32_t *)value = HSA_AMD_SEGMENT_GLOBAL; break;
  case HSA_AMD_MEMORY_POOL_INFO_GLOBAL_FLAGS:
    *(uint32_t *)value = vram ? HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_COARSE_GRAINED
                              : HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_KERNARG_INIT | HSA_AMD_MEMORY_POOL_GLOBAL_FLAG_FINE_GRAINED;
    break;
  case HSA_AMD_MEMORY_POOL_INFO_SIZE: *(size_t *)value = vram ? (size_t)64 << 30 : (size_t)1 << 40; break;
  case HSA_AMD_MEMORY_POOL_INFO_RUNTIME_ALLOC_ALLOWED: *(bool *)value = true; break;
  case HSA_AMD_MEMORY_POOL_INFO_ACCESSIBLE_BY_ALL: *(bool *)value = !vram; break;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_agent_memory_pool_get_info(hsa_agent_t agent, hsa_amd_memory_pool_t memory_pool,
                                                hsa_amd_agent_memory_pool_info_t attribute, void *value) {
  OPEN();
  if (attribute != HSA_AMD_AGENT_MEMORY_POOL_INFO_ACCESS) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  *(hsa_amd_memory_pool_access_t *)value =
      (agent.handle == CPU && memory_pool.handle == POOL_VRAM) ? HSA_AMD_MEMORY_POOL_ACCESS_DISALLOWED_BY_DEFAULT
                                                               : HSA_AMD_MEMORY_POOL_ACCESS_ALLOWED_BY_DEFAULT;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_memory_pool_allocate(hsa_amd_memory_pool_t memory_pool, size_t size, uint32_t flags, void **ptr) {
  OPEN();
  logf_("hsa_amd_memory_pool_allocate(pool=0x%" PRIx64 ",size=%zu,flags=%u)", memory_pool.handle, size, flags);
  if (flags != 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  *ptr = aligned_alloc(4096, (size + 4095) & ~(size_t)4095);
  memset(*ptr, 0, size);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_memory_pool_free(void *ptr) {
  OPEN();
  free(ptr);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_agents_allow_access(uint32_t num_agents, const hsa_agent_t *agents, const uint32_t *flags,
                                         const void *ptr) {
  OPEN();
  if (flags != NULL || ptr == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  char list[256] = "";
  for (uint32_t i = 0; i < num_agents && i < 8; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s0x%" PRIx64, i ? "," : "", agents[i].handle);
  logf_("hsa_amd_agents_allow_access(n=%u,agents=[%s])", num_agents, list);
  return HSA_STATUS_SUCCESS;
}

/* ---- signals ---- */

struct fake_queue;
struct fake_signal {
  int64_t value;
  struct fake_queue *doorbell_of; /* non-NULL for a queue's doorbell */
};

static hsa_signal_t new_signal(int64_t v) {
  struct fake_signal *s = calloc(1, sizeof *s);
  s->value = v;
  return (hsa_signal_t){(uint64_t)(uintptr_t)s};
}
static struct fake_signal *sig(hsa_signal_t s) { return (struct fake_signal *)(uintptr_t)s.handle; }

static void log_consumers(const char *fn, int64_t initial, uint32_t n, const hsa_agent_t *consumers) {
  char list[256] = "";
  for (uint32_t i = 0; consumers && i < n && i < 8; i++)
    snprintf(list + strlen(list), sizeof list - strlen(list), "%s0x%" PRIx64, i ? "," : "", consumers[i].handle);
  logf_("%s(initial=%" PRId64 ",n=%u,consumers=%s%s%s)", fn, initial, n, consumers ? "[" : "NULL", list,
        consumers ? "]" : "");
}

hsa_status_t hsa_signal_create(hsa_signal_value_t initial_value, uint32_t num_consumers, const hsa_agent_t *consumers,
                               hsa_signal_t *signal) {
  OPEN();
  log_consumers("hsa_signal_create", initial_value, num_consumers, consumers);
  *signal = new_signal(initial_value);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_signal_create(hsa_signal_value_t initial_value, uint32_t num_consumers,
                                   const hsa_agent_t *consumers, uint64_t attributes, hsa_signal_t *signal) {
  OPEN();
  log_consumers("hsa_amd_signal_create", initial_value, num_consumers, consumers);
  logf_("hsa_amd_signal_create.attributes=%" PRIu64, attributes);
  *signal = new_signal(initial_value);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_signal_destroy(hsa_signal_t signal) {
  OPEN();
  if (signal.handle == 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  free(sig(signal));
  return HSA_STATUS_SUCCESS;
}

static void process_queue(struct fake_queue *q, uint64_t doorbell);

void hsa_signal_store_screlease(hsa_signal_t signal, hsa_signal_value_t value) {
  __atomic_store_n(&sig(signal)->value, value, __ATOMIC_RELEASE);
  if (sig(signal)->doorbell_of) process_queue(sig(signal)->doorbell_of, (uint64_t)value);
}
void hsa_signal_store_relaxed(hsa_signal_t signal, hsa_signal_value_t value) {
  __atomic_store_n(&sig(signal)->value, value, __ATOMIC_RELAXED);
  if (sig(signal)->doorbell_of) process_queue(sig(signal)->doorbell_of, (uint64_t)value);
}
void hsa_signal_silent_store_relaxed(hsa_signal_t signal, hsa_signal_value_t value) {
  __atomic_store_n(&sig(signal)->value, value, __ATOMIC_RELAXED);
}
hsa_signal_value_t hsa_signal_load_scacquire(hsa_signal_t signal) {
  return __atomic_load_n(&sig(signal)->value, __ATOMIC_ACQUIRE);
}
hsa_signal_value_t hsa_signal_load_relaxed(hsa_signal_t signal) {
  return __atomic_load_n(&sig(signal)->value, __ATOMIC_RELAXED);
}

hsa_signal_value_t hsa_signal_wait_scacquire(hsa_signal_t signal, hsa_signal_condition_t condition,
                                             hsa_signal_value_t compare_value, uint64_t timeout_hint,
                                             hsa_wait_state_t wait_state_hint) {
  logf_("hsa_signal_wait_scacquire(cond=%d,compare=%" PRId64 ",timeout=%" PRIu64 ",state=%d)", (int)condition,
        compare_value, timeout_hint, (int)wait_state_hint);
  return __atomic_load_n(&sig(signal)->value, __ATOMIC_ACQUIRE); /* never blocks: the test sets values first */
}

hsa_status_t hsa_amd_signal_value_pointer(hsa_signal_t signal, volatile hsa_signal_value_t **value_ptr) {
  OPEN();
  *value_ptr = &sig(signal)->value;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_amd_memory_async_copy(void *dst, hsa_agent_t dst_agent, const void *src, hsa_agent_t src_agent,
                                       size_t size, uint32_t num_dep_signals, const hsa_signal_t *dep_signals,
                                       hsa_signal_t completion_signal) {
  OPEN();
  if (dst == NULL || src == NULL || (num_dep_signals > 0) != (dep_signals != NULL))
    return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  char deps[256] = "";
  for (uint32_t i = 0; i < num_dep_signals && i < 8; i++)
    snprintf(deps + strlen(deps), sizeof deps - strlen(deps), "%s%" PRId64, i ? "," : "",
             sig(dep_signals[i])->value);
  logf_("hsa_amd_memory_async_copy(dst_agent=0x%" PRIx64 ",src_agent=0x%" PRIx64 ",size=%zu,deps=[%s])",
        dst_agent.handle, src_agent.handle, size, deps);
  memcpy(dst, src, size);
  __atomic_fetch_sub(&sig(completion_signal)->value, 1, __ATOMIC_RELEASE);
  return HSA_STATUS_SUCCESS;
}

/* ---- queues: a packet processor that runs when the doorbell is rung ---- */

struct fake_queue {
  hsa_queue_t q; /* first, so hsa_queue_t* == fake_queue* */
  uint64_t write_index, read_index;
  void (*callback)(hsa_status_t, hsa_queue_t *, void *);
  void *data;
};

hsa_status_t hsa_queue_create(hsa_agent_t agent, uint32_t size, hsa_queue_type32_t type,
                              void (*callback)(hsa_status_t status, hsa_queue_t *source, void *data), void *data,
                              uint32_t private_segment_size, uint32_t group_segment_size, hsa_queue_t **queue) {
  OPEN();
  logf_("hsa_queue_create(agent=0x%" PRIx64 ",size=%u,type=%u,callback=%s,data=%p,private=%u,group=%u)", agent.handle,
        size, type, callback ? "set" : "NULL", data, private_segment_size, group_segment_size);
  if (agent.handle != GPU) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (size == 0 || (size & (size - 1)) != 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  struct fake_queue *q = calloc(1, sizeof *q);
  q->q.type = type;
  q->q.features = HSA_QUEUE_FEATURE_KERNEL_DISPATCH;
  q->q.base_address = aligned_alloc(64, (size_t)size * 64);
  for (uint32_t i = 0; i < size; i++) /* every slot starts INVALID */
    ((hsa_kernel_dispatch_packet_t *)q->q.base_address)[i].header = HSA_PACKET_TYPE_INVALID << HSA_PACKET_HEADER_TYPE;
  q->q.doorbell_signal = new_signal(-1);
  sig(q->q.doorbell_signal)->doorbell_of = q;
  q->q.size = size;
  q->q.reserved1 = 0xdeadbeef;
  q->q.id = 7;
  q->callback = callback;
  q->data = data;
  *queue = &q->q;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_queue_destroy(hsa_queue_t *queue) {
  OPEN();
  if (queue == NULL) return HSA_STATUS_ERROR_INVALID_QUEUE;
  struct fake_queue *q = (struct fake_queue *)queue;
  free(sig(q->q.doorbell_signal));
  free(q->q.base_address);
  free(q);
  return HSA_STATUS_SUCCESS;
}

#define FQ(p) ((struct fake_queue *)(p))
uint64_t hsa_queue_load_read_index_scacquire(const hsa_queue_t *queue) {
  return __atomic_load_n(&FQ(queue)->read_index, __ATOMIC_ACQUIRE);
}
uint64_t hsa_queue_load_write_index_relaxed(const hsa_queue_t *queue) {
  return __atomic_load_n(&FQ(queue)->write_index, __ATOMIC_RELAXED);
}
uint64_t hsa_queue_load_write_index_scacquire(const hsa_queue_t *queue) {
  return __atomic_load_n(&FQ(queue)->write_index, __ATOMIC_ACQUIRE);
}
uint64_t hsa_queue_add_write_index_scacq_screl(const hsa_queue_t *queue, uint64_t value) {
  return __atomic_fetch_add(&FQ(queue)->write_index, value, __ATOMIC_ACQ_REL);
}
uint64_t hsa_queue_cas_write_index_scacq_screl(const hsa_queue_t *queue, uint64_t expected, uint64_t value) {
  __atomic_compare_exchange_n(&FQ(queue)->write_index, &expected, value, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE);
  return expected; /* the observed value */
}
void hsa_queue_store_write_index_screlease(const hsa_queue_t *queue, uint64_t value) {
  __atomic_store_n(&FQ(queue)->write_index, value, __ATOMIC_RELEASE);
}

/* process_queue consumes published packets up to the doorbell index, logs
   them as C reads them through the header's structs, completes them and
   marks the slots INVALID again, as a packet processor does. */
static void process_queue(struct fake_queue *q, uint64_t doorbell) {
  logf_("doorbell(%" PRIu64 ")", doorbell);
  for (;;) {
    uint64_t idx = q->read_index;
    if (idx > doorbell) break;
    void *slot = (char *)q->q.base_address + (idx & (q->q.size - 1)) * 64;
    uint32_t first = __atomic_load_n((uint32_t *)slot, __ATOMIC_ACQUIRE);
    uint16_t header = (uint16_t)first;
    int type = (header >> HSA_PACKET_HEADER_TYPE) & ((1 << HSA_PACKET_HEADER_WIDTH_TYPE) - 1);
    if (type == HSA_PACKET_TYPE_INVALID) break;
    int barrier = (header >> HSA_PACKET_HEADER_BARRIER) & 1;
    int acq = (header >> HSA_PACKET_HEADER_SCACQUIRE_FENCE_SCOPE) & 3;
    int rel = (header >> HSA_PACKET_HEADER_SCRELEASE_FENCE_SCOPE) & 3;
    hsa_signal_t done = {0};
    if (type == HSA_PACKET_TYPE_KERNEL_DISPATCH) {
      hsa_kernel_dispatch_packet_t *p = slot;
      logf_("packet %" PRIu64 ": dispatch barrier=%d acquire=%d release=%d dims=%d wg=%ux%ux%u grid=%ux%ux%u "
            "private=%u group=%u kernel_object=0x%" PRIx64 " kernarg=%p reserved0=%u reserved2=%" PRIu64,
            idx, barrier, acq, rel, p->setup & 3, p->workgroup_size_x, p->workgroup_size_y, p->workgroup_size_z,
            p->grid_size_x, p->grid_size_y, p->grid_size_z, p->private_segment_size, p->group_segment_size,
            p->kernel_object, p->kernarg_address, p->reserved0, p->reserved2);
      done = p->completion_signal;
    } else if (type == HSA_PACKET_TYPE_BARRIER_AND || type == HSA_PACKET_TYPE_BARRIER_OR) {
      hsa_barrier_and_packet_t *p = slot;
      logf_("packet %" PRIu64 ": barrier-%s barrier=%d acquire=%d release=%d deps=%" PRIx64 ",%" PRIx64 ",%" PRIx64
            ",%" PRIx64 ",%" PRIx64 " reserved0=%u reserved1=%u reserved2=%" PRIu64,
            idx, type == HSA_PACKET_TYPE_BARRIER_AND ? "and" : "or", barrier, acq, rel, p->dep_signal[0].handle,
            p->dep_signal[1].handle, p->dep_signal[2].handle, p->dep_signal[3].handle, p->dep_signal[4].handle,
            p->reserved0, p->reserved1, p->reserved2);
      done = p->completion_signal;
    } else {
      logf_("packet %" PRIu64 ": type %d", idx, type);
    }
    if (done.handle) __atomic_fetch_sub(&sig(done)->value, 1, __ATOMIC_RELEASE);
    __atomic_store_n((uint32_t *)slot, HSA_PACKET_TYPE_INVALID << HSA_PACKET_HEADER_TYPE, __ATOMIC_RELEASE);
    __atomic_store_n(&q->read_index, idx + 1, __ATOMIC_RELEASE);
  }
}

struct cb_call {
  struct fake_queue *q;
  hsa_status_t status;
};
static void *run_callback(void *p) {
  struct cb_call *c = p;
  c->q->callback(c->status, &c->q->q, c->q->data);
  return NULL;
}

/* fake_queue_error reports status on queue the way ROCr does: from a
   runtime thread. Returns -1 when the queue has no callback. */
int fake_queue_error(hsa_queue_t *queue, hsa_status_t status) {
  struct fake_queue *q = (struct fake_queue *)queue;
  if (q->callback == NULL) return -1;
  struct cb_call c = {q, status};
  pthread_t t;
  if (pthread_create(&t, NULL, run_callback, &c) != 0) return -2;
  return pthread_join(t, NULL);
}

/* ---- system events ---- */

/* Registered handlers, called in order like ROCr 5.2's VMFaultHandler. */
#define MAX_EVENT_HANDLERS 8
static struct {
  hsa_amd_system_event_callback_t cb;
  void *data;
} event_handlers[MAX_EVENT_HANDLERS];
static int n_event_handlers;

hsa_status_t hsa_amd_register_system_event_handler(hsa_amd_system_event_callback_t callback, void *data) {
  OPEN();
  logf_("hsa_amd_register_system_event_handler(callback=%s,data=%p)", callback ? "set" : "NULL", data);
  if (callback == NULL || n_event_handlers == MAX_EVENT_HANDLERS) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  event_handlers[n_event_handlers].cb = callback;
  event_handlers[n_event_handlers].data = data;
  n_event_handlers++;
  return HSA_STATUS_SUCCESS;
}

struct fault_call {
  hsa_amd_event_t event;
  int handled;
};
static void *run_fault(void *p) {
  struct fault_call *c = p;
  for (int i = 0; i < n_event_handlers; i++)
    if (event_handlers[i].cb(&c->event, event_handlers[i].data) == HSA_STATUS_SUCCESS) c->handled = 1;
  return NULL;
}

/* fake_memory_fault reports a GPU memory fault to every handler from a
   runtime thread, as ROCr's event thread does, and returns 1 if one of
   them handled it (ROCr would abort the process on 0), or -1 when the
   thread could not start. The event's stack copy dies with the call, as
   ROCr's does. */
int fake_memory_fault(uint64_t agent, uint64_t address, uint32_t reason) {
  struct fault_call c;
  memset(&c, 0xee, sizeof c); /* padding and the union's tail are garbage */
  c.event.event_type = HSA_AMD_GPU_MEMORY_FAULT_EVENT;
  c.event.memory_fault.agent.handle = agent;
  c.event.memory_fault.virtual_address = address;
  c.event.memory_fault.fault_reason_mask = reason;
  c.handled = 0;
  pthread_t t;
  if (pthread_create(&t, NULL, run_fault, &c) != 0) return -1;
  pthread_join(t, NULL);
  return c.handled;
}

/* fake_other_event sends an event of a type the binding does not know. */
int fake_other_event(void) {
  struct fault_call c;
  memset(&c, 0, sizeof c);
  c.event.event_type = (hsa_amd_event_type_t)7;
  pthread_t t;
  if (pthread_create(&t, NULL, run_fault, &c) != 0) return -1;
  pthread_join(t, NULL);
  return c.handled;
}

/* ---- code objects and executables ---- */

struct reader {
  const void *code;
  size_t size;
};

hsa_status_t hsa_code_object_reader_create_from_memory(const void *code_object, size_t size,
                                                        hsa_code_object_reader_t *code_object_reader) {
  OPEN();
  if (code_object == NULL || size == 0) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  struct reader *r = malloc(sizeof *r);
  r->code = code_object; /* kept, not copied: like ROCr */
  r->size = size;
  code_object_reader->handle = (uint64_t)(uintptr_t)r;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_code_object_reader_destroy(hsa_code_object_reader_t code_object_reader) {
  OPEN();
  free((struct reader *)(uintptr_t)code_object_reader.handle);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_create_alt(hsa_profile_t profile, hsa_default_float_rounding_mode_t rounding,
                                       const char *options, hsa_executable_t *executable) {
  OPEN();
  logf_("hsa_executable_create_alt(profile=%d,rounding=%d,options=%s)", (int)profile, (int)rounding,
        options ? options : "NULL");
  executable->handle = EXE;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_load_agent_code_object(hsa_executable_t executable, hsa_agent_t agent,
                                                    hsa_code_object_reader_t code_object_reader, const char *options,
                                                    hsa_loaded_code_object_t *loaded_code_object) {
  OPEN();
  struct reader *r = (struct reader *)(uintptr_t)code_object_reader.handle;
  logf_("hsa_executable_load_agent_code_object(exe=0x%" PRIx64 ",agent=0x%" PRIx64 ",code=%.*s,options=%s,loaded=%s)",
        executable.handle, agent.handle, (int)r->size, (const char *)r->code, options ? options : "NULL",
        loaded_code_object ? "set" : "NULL");
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_freeze(hsa_executable_t executable, const char *options) {
  OPEN();
  logf_("hsa_executable_freeze(exe=0x%" PRIx64 ",options=%s)", executable.handle, options ? options : "NULL");
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_destroy(hsa_executable_t executable) {
  OPEN();
  logf_("hsa_executable_destroy(exe=0x%" PRIx64 ")", executable.handle);
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_get_symbol_by_name(hsa_executable_t executable, const char *symbol_name,
                                               const hsa_agent_t *agent, hsa_executable_symbol_t *symbol) {
  OPEN();
  char a[32] = "NULL";
  if (agent) snprintf(a, sizeof a, "0x%" PRIx64, agent->handle);
  logf_("hsa_executable_get_symbol_by_name(exe=0x%" PRIx64 ",name=%s,agent=%s)", executable.handle, symbol_name, a);
  if (strcmp(symbol_name, "saxpy.kd") != 0) return HSA_STATUS_ERROR_INVALID_SYMBOL_NAME;
  symbol->handle = SYM_SAXPY;
  return HSA_STATUS_SUCCESS;
}

hsa_status_t hsa_executable_symbol_get_info(hsa_executable_symbol_t executable_symbol,
                                            hsa_executable_symbol_info_t attribute, void *value) {
  OPEN();
  if (executable_symbol.handle != SYM_SAXPY) return HSA_STATUS_ERROR_INVALID_EXECUTABLE_SYMBOL;
  switch (attribute) {
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_SIZE: *(uint32_t *)value = 24; break;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_KERNARG_SEGMENT_ALIGNMENT: *(uint32_t *)value = 8; break;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_GROUP_SEGMENT_SIZE: *(uint32_t *)value = 256; break;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_PRIVATE_SEGMENT_SIZE: *(uint32_t *)value = 0; break;
  case HSA_EXECUTABLE_SYMBOL_INFO_KERNEL_OBJECT: *(uint64_t *)value = 0x7f00deadbe00ULL; break;
  default: return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  }
  return HSA_STATUS_SUCCESS;
}

/* ---- profiling ---- */

hsa_status_t hsa_amd_profiling_set_profiler_enabled(hsa_queue_t *queue, int enable) {
  OPEN();
  logf_("hsa_amd_profiling_set_profiler_enabled(queue=%s,enable=%d)", queue ? "set" : "NULL", enable);
  return queue ? HSA_STATUS_SUCCESS : HSA_STATUS_ERROR_INVALID_QUEUE;
}

hsa_status_t hsa_amd_profiling_get_dispatch_time(hsa_agent_t agent, hsa_signal_t signal, hsa_amd_profiling_dispatch_time_t *time) {
  OPEN();
  logf_("hsa_amd_profiling_get_dispatch_time(agent=%llu,signal=%llu)", (unsigned long long)agent.handle, (unsigned long long)signal.handle);
  if (agent.handle != GPU) return HSA_STATUS_ERROR_INVALID_AGENT;
  if (time == NULL) return HSA_STATUS_ERROR_INVALID_ARGUMENT;
  time->start = 1000;
  time->end = 3000;
  return HSA_STATUS_SUCCESS;
}
