/*
 * The thunk's process state: configuration (kfdsim_configure / KFDSIM_GPUS),
 * hsaKmtOpenKFD/CloseKFD, the topology ROCr reads (nodes, memory banks,
 * caches, IO links), clocks, and the small calls hsa_init makes.
 *
 * Configuration grammar (kfdsim_configure's spec, or $KFDSIM_GPUS):
 *
 *   spec     = gpu { "," gpu }            at most 8 GPUs
 *   gpu      = target [ "@" location ]
 *   target   = "gfx908" | "gfx90a" | "gfx1030"
 *   location = [ domain ":" ] bus ":" device "." function
 *              hex numbers: domain <= ffff, bus <= ff, device <= 1f,
 *              function <= 7; e.g. 0000:83:00.0 or 83:00.0
 *
 * GPU i (0-based, in spec order) is KFD node i+1; node 0 is the CPU. Without
 * a location GPU i sits at 0000:(03 + 16*i):00.0. Two GPUs at one location
 * are an error. Neither set: one gfx90a at 0000:03:00.0.
 *
 * KFDSIM_P2P=1 links every two GPUs (IO links of each GPU node to the
 * others, after its link to the CPU), as KFD lists P2P links: without a
 * link ROCr never allows one GPU access to another's memory.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kfdsim_int.h"

int kfdsim_num_gpus;
kfdsim_gpu kfdsim_gpus[KFDSIM_MAX_GPUS];
int kfdsim_debug_on;
int kfdsim_vmfault_queue_error = 1;
int kfdsim_p2p;

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static int open_count;
static char *configured_spec;   /* from kfdsim_configure, NULL: use env */
static char config_error[256];

int kfdsim_is_open(void)
{
	return __atomic_load_n(&open_count, __ATOMIC_ACQUIRE) > 0;
}

uint64_t kfdsim_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- configuration --------------------------------------------------- */

struct target_info {
	const char *name;
	uint32_t major, minor, stepping;
	uint16_t device_id;
	uint32_t cus, simd_per_cu, wave_size, shader_engines;
	int sramecc;
};

static const struct target_info targets[] = {
	/* MI100 */
	{"gfx908", 9, 0, 8, 0x738c, 120, 4, 64, 8, 1},
	/* MI210 */
	{"gfx90a", 9, 0, 10, 0x740f, 104, 4, 64, 8, 1},
	/* RX 6800 XT; wave64 is the HSA default on gfx10 */
	{"gfx1030", 10, 3, 0, 0x73bf, 72, 2, 64, 4, 0},
};

static int config_fail(const char *spec, const char *fmt, ...)
{
	char why[160];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(why, sizeof why, fmt, ap);
	va_end(ap);
	snprintf(config_error, sizeof config_error, "bad GPU spec \"%.60s\": %s", spec, why);
	return -1;
}

static int parse_hex(const char **p, uint32_t max, uint32_t *out)
{
	const char *s = *p;
	uint32_t v = 0;
	int n = 0;
	for (;;) {
		char c = *s;
		uint32_t d;
		if (c >= '0' && c <= '9') d = (uint32_t)(c - '0');
		else if (c >= 'a' && c <= 'f') d = (uint32_t)(c - 'a' + 10);
		else if (c >= 'A' && c <= 'F') d = (uint32_t)(c - 'A' + 10);
		else break;
		v = v * 16 + d;
		if (v > max || ++n > 8) return -1;
		s++;
	}
	if (n == 0) return -1;
	*p = s;
	*out = v;
	return 0;
}

/* Parses spec into gpus; returns the count or -1 with config_error set. */
static int parse_spec(const char *spec, kfdsim_gpu *gpus)
{
	int n = 0;
	const char *p = spec;
	if (*p == '\0') return config_fail(spec, "empty (want e.g. gfx90a@0000:03:00.0,gfx1030@0000:83:00.0)");
	for (;;) {
		size_t len = strcspn(p, "@,");
		const struct target_info *t = NULL;
		for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
			if (strlen(targets[i].name) == len && strncmp(p, targets[i].name, len) == 0)
				t = &targets[i];
		if (t == NULL)
			return config_fail(spec, "GPU %d: unknown target \"%.*s\" (ROCm 5.2 targets here: gfx908, gfx90a, gfx1030)",
					   n, (int)(len > 20 ? 20 : len), p);
		if (n == KFDSIM_MAX_GPUS) return config_fail(spec, "more than %d GPUs", KFDSIM_MAX_GPUS);
		kfdsim_gpu *g = &gpus[n];
		memset(g, 0, sizeof *g);
		snprintf(g->name, sizeof g->name, "%s", t->name);
		g->major = t->major;
		g->minor = t->minor;
		g->stepping = t->stepping;
		g->device_id = t->device_id;
		g->cus = t->cus;
		g->simd_per_cu = t->simd_per_cu;
		g->wave_size = t->wave_size;
		g->shader_engines = t->shader_engines;
		g->sramecc = t->sramecc;
		g->bus = 3 + 16 * (uint32_t)n;
		p += len;
		if (*p == '@') {
			uint32_t a, b, c, d;
			p++;
			if (parse_hex(&p, 0xffff, &a) != 0 || *p != ':')
				return config_fail(spec, "GPU %d: location must be [domain:]bus:device.function in hex", n);
			p++;
			if (parse_hex(&p, 0xff, &b) != 0)
				return config_fail(spec, "GPU %d: bad bus number", n);
			if (*p == ':') { /* domain:bus:dev.fn */
				p++;
				if (parse_hex(&p, 0x1f, &c) != 0 || *p != '.')
					return config_fail(spec, "GPU %d: bad device number (0-1f) or missing .function", n);
				p++;
				if (parse_hex(&p, 7, &d) != 0)
					return config_fail(spec, "GPU %d: bad function number (0-7)", n);
				g->domain = a;
				g->bus = b;
				g->dev = c;
				g->fn = d;
			} else if (*p == '.') { /* bus:dev.fn */
				if (a > 0xff || b > 0x1f)
					return config_fail(spec, "GPU %d: bus must be <= ff and device <= 1f", n);
				p++;
				if (parse_hex(&p, 7, &d) != 0)
					return config_fail(spec, "GPU %d: bad function number (0-7)", n);
				g->bus = a;
				g->dev = b;
				g->fn = d;
			} else {
				return config_fail(spec, "GPU %d: location must be [domain:]bus:device.function in hex", n);
			}
		}
		for (int i = 0; i < n; i++)
			if (gpus[i].domain == g->domain && gpus[i].bus == g->bus && gpus[i].dev == g->dev &&
			    gpus[i].fn == g->fn)
				return config_fail(spec, "GPUs %d and %d share the location %04x:%02x:%02x.%x", i, n,
						   g->domain, g->bus, g->dev, g->fn);
		n++;
		if (*p == '\0') break;
		if (*p != ',') return config_fail(spec, "unexpected \"%.10s\" after GPU %d", p, n - 1);
		p++;
	}
	return n;
}

/* Sets the simulated GPUs for the next hsaKmtOpenKFD (see the grammar at the
 * top of this file). Returns 0, or -1 for a bad spec (the message goes to
 * stderr, and OpenKFD will fail with it) or when KFD is already open. */
__attribute__((visibility("default"))) int kfdsim_configure(const char *spec)
{
	kfdsim_gpu tmp[KFDSIM_MAX_GPUS];
	pthread_mutex_lock(&state_lock);
	if (open_count > 0) {
		pthread_mutex_unlock(&state_lock);
		fprintf(stderr, "kfdsim: kfdsim_configure called while KFD is open; close it first\n");
		return -1;
	}
	free(configured_spec);
	configured_spec = strdup(spec ? spec : "");
	config_error[0] = '\0';
	int n = parse_spec(configured_spec, tmp);
	pthread_mutex_unlock(&state_lock);
	if (n < 0) {
		fprintf(stderr, "kfdsim: %s\n", config_error);
		return -1;
	}
	return 0;
}

/* ---- open / close ---------------------------------------------------- */

HSAKMT_STATUS HSAKMTAPI hsaKmtOpenKFD(void)
{
	const char *dbg = getenv("KFDSIM_DEBUG");
	kfdsim_debug_on = dbg != NULL && dbg[0] != '\0' && strcmp(dbg, "0") != 0;
	const char *qerr = getenv("KFDSIM_VMFAULT_QUEUE_ERROR");
	kfdsim_vmfault_queue_error = qerr == NULL || strcmp(qerr, "0") != 0;
	const char *p2p = getenv("KFDSIM_P2P");
	kfdsim_p2p = p2p != NULL && strcmp(p2p, "1") == 0;
	pthread_mutex_lock(&state_lock);
	if (open_count > 0) {
		open_count++;
		pthread_mutex_unlock(&state_lock);
		return HSAKMT_STATUS_SUCCESS;
	}
	const char *spec = configured_spec;
	const char *from = "kfdsim_configure";
	if (spec == NULL) {
		spec = getenv("KFDSIM_GPUS");
		from = "KFDSIM_GPUS";
	}
	if (spec == NULL) {
		spec = "gfx90a@0000:03:00.0";
		from = "the default";
	}
	kfdsim_gpu gpus[KFDSIM_MAX_GPUS];
	int n = parse_spec(spec, gpus);
	if (n < 0) {
		pthread_mutex_unlock(&state_lock);
		fprintf(stderr, "kfdsim: hsaKmtOpenKFD fails: %s (from %s)\n", config_error, from);
		return HSAKMT_STATUS_ERROR;
	}
	memcpy(kfdsim_gpus, gpus, sizeof gpus);
	kfdsim_num_gpus = n;
	kfdsim_events_init();
	__atomic_store_n(&open_count, 1, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&state_lock);
	KFDSIM_DEBUG("OpenKFD: %d GPU(s) from %s \"%s\"", n, from, spec);
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtCloseKFD(void)
{
	pthread_mutex_lock(&state_lock);
	if (open_count == 0) {
		pthread_mutex_unlock(&state_lock);
		return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	}
	if (--open_count == 0) {
		kfdsim_queues_fini();
		kfdsim_events_fini();
		kfdsim_memory_fini();
	}
	pthread_mutex_unlock(&state_lock);
	KFDSIM_DEBUG("CloseKFD");
	return HSAKMT_STATUS_SUCCESS;
}

#define REQUIRE_OPEN()                                                          \
	do {                                                                    \
		if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED; \
	} while (0)

HSAKMT_STATUS HSAKMTAPI hsaKmtGetVersion(HsaVersionInfo *v)
{
	REQUIRE_OPEN();
	if (v == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	v->KernelInterfaceMajorVersion = 1;
	v->KernelInterfaceMinorVersion = 8;
	return HSAKMT_STATUS_SUCCESS;
}

/* KFD without the debugger interface: ROCr then creates queues without an
 * exception event, and reports queue errors through queue_inactive_signal. */
HSAKMT_STATUS HSAKMTAPI hsaKmtRuntimeEnable(void *rDebug, bool setupTtmp)
{
	(void)rDebug;
	(void)setupTtmp;
	REQUIRE_OPEN();
	KFDSIM_DEBUG("RuntimeEnable: NOT_SUPPORTED (no debugger interface)");
	return HSAKMT_STATUS_NOT_SUPPORTED;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtRuntimeDisable(void)
{
	REQUIRE_OPEN();
	return HSAKMT_STATUS_NOT_SUPPORTED;
}

/* ---- topology -------------------------------------------------------- */

static int topology_acquired;

HSAKMT_STATUS HSAKMTAPI hsaKmtAcquireSystemProperties(HsaSystemProperties *p)
{
	REQUIRE_OPEN();
	if (p == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	memset(p, 0, sizeof *p);
	p->NumNodes = (HSAuint32)kfdsim_num_gpus + 1;
	p->PlatformOem = 0x414d44; /* "AMD" */
	p->PlatformId = 0x4b4644;
	p->PlatformRev = 1;
	__atomic_store_n(&topology_acquired, 1, __ATOMIC_RELEASE);
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtReleaseSystemProperties(void)
{
	REQUIRE_OPEN();
	__atomic_store_n(&topology_acquired, 0, __ATOMIC_RELEASE);
	return HSAKMT_STATUS_SUCCESS;
}

static uint64_t system_memory_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || psz <= 0) return 8ull << 30;
	return (uint64_t)pages * (uint64_t)psz;
}

static uint32_t cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_ONLN);
	return n > 0 ? (uint32_t)n : 1;
}

#define GPU_VRAM_BYTES (16ull << 30)
#define GPU_FCOMPUTE_ID_BASE 0x80001000u
#define LDS_APERTURE 0x1000000000000ull
#define SCRATCH_APERTURE 0x2000000000000ull

static void ascii_to_utf16(HSAuint16 *dst, size_t n, const char *src)
{
	size_t i = 0;
	for (; i + 1 < n && src[i]; i++) dst[i] = (HSAuint16)(unsigned char)src[i];
	dst[i] = 0;
}

static HSAKMT_STATUS check_node(HSAuint32 node)
{
	if (!kfdsim_is_open()) return HSAKMT_STATUS_KERNEL_IO_CHANNEL_NOT_OPENED;
	if (node > (HSAuint32)kfdsim_num_gpus) return HSAKMT_STATUS_INVALID_NODE_UNIT;
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtGetNodeProperties(HSAuint32 node, HsaNodeProperties *p)
{
	HSAKMT_STATUS st = check_node(node);
	if (st != HSAKMT_STATUS_SUCCESS) return st;
	if (p == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	memset(p, 0, sizeof *p);
	if (node == 0) {
		p->NumCPUCores = cpu_count();
		p->NumMemoryBanks = 1;
		p->NumCaches = 1;
		p->NumIOLinks = (HSAuint32)kfdsim_num_gpus;
		p->CComputeIdLo = 0;
		p->MaxEngineClockMhzCCompute = 3000;
		ascii_to_utf16(p->MarketingName, HSA_PUBLIC_NAME_SIZE, "kfdsim simulated CPU");
		snprintf((char *)p->AMDName, HSA_PUBLIC_NAME_SIZE, "CPU");
		return HSAKMT_STATUS_SUCCESS;
	}
	const kfdsim_gpu *g = &kfdsim_gpus[node - 1];
	p->NumFComputeCores = g->cus * g->simd_per_cu;
	p->NumMemoryBanks = 3;
	p->NumCaches = 2;
	p->NumIOLinks = kfdsim_p2p ? (HSAuint32)kfdsim_num_gpus : 1; /* the CPU, and the other GPUs with KFDSIM_P2P */
	p->FComputeIdLo = GPU_FCOMPUTE_ID_BASE + 0x100 * (node - 1);
	p->Capability.ui32.QueueSizePowerOfTwo = 1;
	p->Capability.ui32.QueueSize32bit = 1;
	p->Capability.ui32.DoorbellType = 2;
	p->Capability.ui32.SRAM_EDCSupport = g->sramecc ? 1 : 0;
	p->MaxWavesPerSIMD = g->major >= 10 ? 16 : 8;
	p->LDSSizeInKB = 64;
	p->WaveFrontSize = g->wave_size;
	p->NumShaderBanks = g->shader_engines;
	p->NumArrays = 1;
	p->NumCUPerArray = g->cus / g->shader_engines;
	p->NumSIMDPerCU = g->simd_per_cu;
	p->MaxSlotsScratchCU = 32;
	p->EngineId.ui32.uCode = 0;
	p->EngineId.ui32.Major = g->major & 0x3f;
	p->EngineId.ui32.Minor = g->minor & 0xff;
	p->EngineId.ui32.Stepping = g->stepping & 0xff;
	p->VendorId = 0x1002;
	p->DeviceId = g->device_id;
	p->LocationId = (g->bus << 8) | (g->dev << 3) | g->fn;
	p->Domain = g->domain;
	p->LocalMemSize = GPU_VRAM_BYTES;
	p->MaxEngineClockMhzFCompute = 1700;
	p->MaxEngineClockMhzCCompute = 3000;
	p->DrmRenderMinor = (HSAint32)(128 + node - 1);
	char name[64];
	snprintf(name, sizeof name, "kfdsim %s", g->name);
	ascii_to_utf16(p->MarketingName, HSA_PUBLIC_NAME_SIZE, name);
	snprintf((char *)p->AMDName, HSA_PUBLIC_NAME_SIZE, "%s", g->name);
	p->uCodeEngineVersions.uCodeSDMA = 500;
	p->NumSdmaEngines = 2;
	p->NumSdmaXgmiEngines = 0;
	p->NumSdmaQueuesPerEngine = 8;
	p->NumCpQueues = 24;
	p->NumGws = 0;
	p->UniqueID = 0x6b66640000000000ull | ((uint64_t)g->domain << 16) | p->LocationId;
	p->VGPRSizePerCU = 512 * 1024;
	p->SGPRSizePerCU = 800 * 4;
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtGetNodeMemoryProperties(HSAuint32 node, HSAuint32 n, HsaMemoryProperties *m)
{
	HSAKMT_STATUS st = check_node(node);
	if (st != HSAKMT_STATUS_SUCCESS) return st;
	if (m == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	HsaMemoryProperties banks[3];
	memset(banks, 0, sizeof banks);
	HSAuint32 have;
	if (node == 0) {
		have = 1;
		banks[0].HeapType = HSA_HEAPTYPE_SYSTEM;
		banks[0].SizeInBytes = system_memory_bytes();
		banks[0].Width = 64;
		banks[0].MemoryClockMax = 3200;
	} else {
		have = 3;
		banks[0].HeapType = HSA_HEAPTYPE_FRAME_BUFFER_PUBLIC;
		banks[0].SizeInBytes = GPU_VRAM_BYTES;
		banks[0].Width = 4096;
		banks[0].MemoryClockMax = 1600;
		banks[1].HeapType = HSA_HEAPTYPE_GPU_LDS;
		banks[1].SizeInBytes = 64 * 1024;
		banks[1].VirtualBaseAddress = LDS_APERTURE;
		banks[2].HeapType = HSA_HEAPTYPE_GPU_SCRATCH;
		banks[2].SizeInBytes = 4ull << 30;
		banks[2].VirtualBaseAddress = SCRATCH_APERTURE;
	}
	if (n > have) n = have;
	memcpy(m, banks, n * sizeof *m);
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtGetNodeCacheProperties(HSAuint32 node, HSAuint32 proc, HSAuint32 n,
						      HsaCacheProperties *c)
{
	(void)proc;
	HSAKMT_STATUS st = check_node(node);
	if (st != HSAKMT_STATUS_SUCCESS) return st;
	if (c == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	HsaCacheProperties caches[2];
	memset(caches, 0, sizeof caches);
	HSAuint32 have;
	if (node == 0) {
		have = 1;
		caches[0].ProcessorIdLow = 0;
		caches[0].CacheLevel = 2;
		caches[0].CacheSize = 1024; /* KiB, as KFD reports it */
		caches[0].CacheLineSize = 64;
		caches[0].CacheLinesPerTag = 1;
		caches[0].CacheAssociativity = 8;
		caches[0].CacheLatency = 10;
		caches[0].CacheType.ui32.Data = 1;
		caches[0].CacheType.ui32.CPU = 1;
		caches[0].SiblingMap[0] = 1;
	} else {
		have = 2;
		for (int i = 0; i < 2; i++) {
			caches[i].ProcessorIdLow = GPU_FCOMPUTE_ID_BASE + 0x100 * (node - 1);
			caches[i].CacheLevel = (HSAuint32)i + 1;
			caches[i].CacheSize = i == 0 ? 16 : 8192;
			caches[i].CacheLineSize = i == 0 ? 64 : 128;
			caches[i].CacheLinesPerTag = 1;
			caches[i].CacheAssociativity = 16;
			caches[i].CacheLatency = i == 0 ? 50 : 200;
			caches[i].CacheType.ui32.Data = 1;
			caches[i].CacheType.ui32.HSACU = 1;
			caches[i].SiblingMap[0] = 1;
		}
	}
	if (n > have) n = have;
	memcpy(c, caches, n * sizeof *c);
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtGetNodeIoLinkProperties(HSAuint32 node, HSAuint32 n, HsaIoLinkProperties *l)
{
	HSAKMT_STATUS st = check_node(node);
	if (st != HSAKMT_STATUS_SUCCESS) return st;
	if (l == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	HsaIoLinkProperties links[KFDSIM_MAX_GPUS];
	memset(links, 0, sizeof links);
	HSAuint32 have = node == 0 || kfdsim_p2p ? (HSAuint32)kfdsim_num_gpus : 1;
	for (HSAuint32 i = 0; i < have; i++) {
		links[i].IoLinkType = HSA_IOLINKTYPE_PCIEXPRESS;
		links[i].VersionMajor = 4;
		links[i].NodeFrom = node;
		links[i].NodeTo = node == 0 ? i + 1 : 0;
		links[i].Weight = 20;
		if (node != 0 && i > 0) {
			/* A P2P link to another GPU: node i+1 for i < node, skipping
			 * this GPU itself. */
			links[i].NodeTo = i < node ? i : i + 1;
			links[i].Weight = 40;
		}
		links[i].MinimumBandwidth = 16000;
		links[i].MaximumBandwidth = 32000;
		links[i].RecTransferSize = 4096;
	}
	if (n > have) n = have;
	memcpy(l, links, n * sizeof *l);
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtGetClockCounters(HSAuint32 node, HsaClockCounters *c)
{
	HSAKMT_STATUS st = check_node(node);
	if (st != HSAKMT_STATUS_SUCCESS) return st;
	if (c == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	uint64_t now = kfdsim_now_ns();
	c->GPUClockCounter = now;
	c->CPUClockCounter = now;
	c->SystemClockCounter = now;
	c->SystemClockFrequencyHz = 1000000000ull;
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtGetTileConfig(HSAuint32 node, HsaGpuTileConfig *cfg)
{
	HSAKMT_STATUS st = check_node(node);
	if (st != HSAKMT_STATUS_SUCCESS) return st;
	if (cfg == NULL || node == 0) return HSAKMT_STATUS_INVALID_PARAMETER;
	/* gfx9+ has no tile mode tables; only the address config matters. */
	cfg->NumTileConfigs = 0;
	cfg->NumMacroTileConfigs = 0;
	cfg->GbAddrConfig = 0x2a114042;
	cfg->NumBanks = 16;
	cfg->NumRanks = 1;
	return HSAKMT_STATUS_SUCCESS;
}

static int xnack_mode;

HSAKMT_STATUS HSAKMTAPI hsaKmtGetXNACKMode(HSAint32 *enable)
{
	REQUIRE_OPEN();
	if (enable == NULL) return HSAKMT_STATUS_INVALID_PARAMETER;
	*enable = xnack_mode;
	return HSAKMT_STATUS_SUCCESS;
}

/* The simulated GPUs have no retry faults (no page migration): only xnack-. */
HSAKMT_STATUS HSAKMTAPI hsaKmtSetXNACKMode(HSAint32 enable)
{
	REQUIRE_OPEN();
	if (enable != 0) {
		KFDSIM_DEBUG("SetXNACKMode(%d): NOT_SUPPORTED (xnack- only)", enable);
		return HSAKMT_STATUS_NOT_SUPPORTED;
	}
	xnack_mode = 0;
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtSetTrapHandler(HSAuint32 node, void *base, HSAuint64 size, void *buf,
					      HSAuint64 bufsize)
{
	HSAKMT_STATUS st = check_node(node);
	if (st != HSAKMT_STATUS_SUCCESS) return st;
	if (node == 0) return HSAKMT_STATUS_INVALID_NODE_UNIT;
	KFDSIM_DEBUG("SetTrapHandler node %u: code %p+%llu buffer %p+%llu", node, base, (unsigned long long)size,
		     buf, (unsigned long long)bufsize);
	return HSAKMT_STATUS_SUCCESS;
}

HSAKMT_STATUS HSAKMTAPI hsaKmtSetMemoryPolicy(HSAuint32 node, HSAuint32 def, HSAuint32 alt, void *altbase,
					       HSAuint64 altsize)
{
	(void)altbase;
	(void)altsize;
	HSAKMT_STATUS st = check_node(node);
	if (st != HSAKMT_STATUS_SUCCESS) return st;
	if (def > HSA_CACHING_WRITECOMBINED || alt > HSA_CACHING_WRITECOMBINED) return HSAKMT_STATUS_INVALID_PARAMETER;
	return HSAKMT_STATUS_SUCCESS;
}

/* ---- calls the simulated driver does not model ------------------------ */

#define UNSUPPORTED(call)                                                       \
	do {                                                                    \
		KFDSIM_DEBUG("%s: NOT_SUPPORTED by the simulated driver", call); \
		return HSAKMT_STATUS_NOT_SUPPORTED;                             \
	} while (0)

HSAKMT_STATUS HSAKMTAPI hsaKmtAllocQueueGWS(HSA_QUEUEID q, HSAuint32 n, HSAuint32 *first)
{
	(void)q; (void)n; (void)first;
	UNSUPPORTED("AllocQueueGWS");
}

HSAKMT_STATUS HSAKMTAPI hsaKmtRegisterGraphicsHandleToNodes(HSAuint64 h, HsaGraphicsResourceInfo *info,
							     HSAuint64 n, HSAuint32 *nodes)
{
	(void)h; (void)info; (void)n; (void)nodes;
	UNSUPPORTED("RegisterGraphicsHandleToNodes");
}

HSAKMT_STATUS HSAKMTAPI hsaKmtShareMemory(void *addr, HSAuint64 size, HsaSharedMemoryHandle *h)
{
	(void)addr; (void)size; (void)h;
	UNSUPPORTED("ShareMemory (IPC)");
}

HSAKMT_STATUS HSAKMTAPI hsaKmtRegisterSharedHandle(const HsaSharedMemoryHandle *h, void **addr, HSAuint64 *size)
{
	(void)h; (void)addr; (void)size;
	UNSUPPORTED("RegisterSharedHandle (IPC)");
}

HSAKMT_STATUS HSAKMTAPI hsaKmtRegisterSharedHandleToNodes(const HsaSharedMemoryHandle *h, void **addr,
							   HSAuint64 *size, HSAuint64 n, HSAuint32 *nodes)
{
	(void)h; (void)addr; (void)size; (void)n; (void)nodes;
	UNSUPPORTED("RegisterSharedHandleToNodes (IPC)");
}

HSAKMT_STATUS HSAKMTAPI hsaKmtSVMGetAttr(void *start, HSAuint64 size, unsigned int n, HSA_SVM_ATTRIBUTE *a)
{
	(void)start; (void)size; (void)n; (void)a;
	UNSUPPORTED("SVMGetAttr");
}

HSAKMT_STATUS HSAKMTAPI hsaKmtSVMSetAttr(void *start, HSAuint64 size, unsigned int n, HSA_SVM_ATTRIBUTE *a)
{
	(void)start; (void)size; (void)n; (void)a;
	UNSUPPORTED("SVMSetAttr");
}
