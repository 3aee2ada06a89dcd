/*
 * The simulated machine's configuration: which GPUs the simulated KFD
 * describes (kfdsim_configure / $KFDSIM_GPUS), for which ROCm release
 * ($KFDSIM_ROCM), and the switches of the rules it enforces.
 *
 * Configuration grammar (kfdsim_configure's spec, or $KFDSIM_GPUS):
 *
 *   spec      = gpu { "," gpu }            at most 8 KFD GPU nodes
 *   gpu       = target [ "@" location ] [ "/" partition ]
 *   target    = "gfx908" | "gfx90a" | "gfx1030" | "gfx1100" | "gfx942"
 *   location  = [ domain ":" ] bus ":" device "." function
 *               hex numbers: domain <= ffff, bus <= ff, device <= 1f,
 *               function <= 7; e.g. 0000:83:00.0 or 83:00.0
 *   partition = "spx" | "dpx" | "qpx" | "cpx"  (1, 2, 4 or 8 KFD nodes)
 *
 * GPU i (0-based, in spec order, partitions expanded) is KFD node i+1; node
 * 0 is the CPU. Without a location device i sits at 0000:(03 + 16*i):00.0.
 * Two devices at one location are an error.
 *
 * A partitioned GPU (an MI300X in DPX, QPX or CPX mode) is several KFD
 * nodes of one PCI device: KFD reports each with location_id = the device's
 * PCI id | the partition's node id (amdgpu kfd_topology.c,
 * kfd_topology_add_device: "dev->node_props.location_id |= dev->gpu->node_id"
 * for GC 9.4.3), so they differ in the function bits only; the CUs are split
 * between them.
 *
 * Each ROCm release knows a set of targets (its thunk and ROCr name the ISA
 * from the node's gfx_target_version): $KFDSIM_ROCM (default 5.2) selects
 * the release, and a target the release does not know makes the spec bad,
 * as a GPU the release cannot drive would be.
 *
 * $KFDSIM_RULE_OFF lists rules to switch off (comma separated), so that a
 * test can show that it depends on the rule:
 *   evict   a VM fault stops only the faulting queue instead of evicting
 *           every user queue of the process on that GPU;
 *   access  accesses are not checked against the GPU mappings.
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
int kfdsim_rule_evict = 1;
int kfdsim_rule_access = 1;
int kfdsim_release_major = 5, kfdsim_release_minor = 2;

static pthread_mutex_t state_lock = PTHREAD_MUTEX_INITIALIZER;
static char *configured_spec; /* from kfdsim_configure, NULL: use env */
static char config_error[256];
static int configured;          /* the GPUs above are valid */
static int config_generation;   /* bumped by each successful configuration */

uint64_t kfdsim_now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

struct target_info {
	const char *name;
	uint32_t major, minor, stepping;
	uint16_t device_id;
	uint32_t cus, simd_per_cu, wave_size, shader_engines;
	int sramecc;
	int since_major, since_minor; /* first ROCm release that knows it */
};

static const struct target_info targets[] = {
	/* MI100 */
	{"gfx908", 9, 0, 8, 0x738c, 120, 4, 64, 8, 1, 3, 0},
	/* MI210 */
	{"gfx90a", 9, 0, 10, 0x740f, 104, 4, 64, 8, 1, 4, 0},
	/* RX 6800 XT; wave64 is the HSA default on gfx10 */
	{"gfx1030", 10, 3, 0, 0x73bf, 72, 2, 64, 4, 0, 4, 0},
	/* RX 7900 XTX */
	{"gfx1100", 11, 0, 0, 0x744c, 96, 2, 64, 6, 0, 5, 5},
	/* MI300X */
	{"gfx942", 9, 4, 2, 0x74a1, 304, 4, 64, 32, 1, 6, 0},
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

static int release_knows(const struct target_info *t)
{
	return kfdsim_release_major > t->since_major ||
	       (kfdsim_release_major == t->since_major && kfdsim_release_minor >= t->since_minor);
}

/* Parses spec into gpus; returns the node count or -1 with config_error set. */
static int parse_spec(const char *spec, kfdsim_gpu *gpus)
{
	int n = 0, dev = 0;
	const char *p = spec;
	if (*p == '\0') return config_fail(spec, "empty (want e.g. gfx90a@0000:03:00.0,gfx1030@0000:83:00.0)");
	for (;; dev++) {
		size_t len = strcspn(p, "@,/");
		const struct target_info *t = NULL;
		for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
			if (strlen(targets[i].name) == len && strncmp(p, targets[i].name, len) == 0)
				t = &targets[i];
		if (t == NULL || !release_knows(t)) {
			char known[96] = "";
			for (size_t i = 0; i < sizeof targets / sizeof targets[0]; i++)
				if (release_knows(&targets[i])) {
					if (known[0]) strncat(known, ", ", sizeof known - strlen(known) - 1);
					strncat(known, targets[i].name, sizeof known - strlen(known) - 1);
				}
			return config_fail(spec, "GPU %d: unknown target \"%.*s\" (ROCm %d.%d targets here: %s)", dev,
					   (int)(len > 20 ? 20 : len), p, kfdsim_release_major, kfdsim_release_minor, known);
		}
		kfdsim_gpu g;
		memset(&g, 0, sizeof g);
		snprintf(g.name, sizeof g.name, "%s", t->name);
		g.major = t->major;
		g.minor = t->minor;
		g.stepping = t->stepping;
		g.device_id = t->device_id;
		g.cus = t->cus;
		g.simd_per_cu = t->simd_per_cu;
		g.wave_size = t->wave_size;
		g.shader_engines = t->shader_engines;
		g.sramecc = t->sramecc;
		g.bus = 3 + 16 * (uint32_t)dev;
		g.device_index = (uint32_t)dev;
		g.partitions = 1;
		p += len;
		if (*p == '@') {
			uint32_t a, b, c, d;
			p++;
			if (parse_hex(&p, 0xffff, &a) != 0 || *p != ':')
				return config_fail(spec, "GPU %d: location must be [domain:]bus:device.function in hex", dev);
			p++;
			if (parse_hex(&p, 0xff, &b) != 0)
				return config_fail(spec, "GPU %d: bad bus number", dev);
			if (*p == ':') { /* domain:bus:dev.fn */
				p++;
				if (parse_hex(&p, 0x1f, &c) != 0 || *p != '.')
					return config_fail(spec, "GPU %d: bad device number (0-1f) or missing .function", dev);
				p++;
				if (parse_hex(&p, 7, &d) != 0)
					return config_fail(spec, "GPU %d: bad function number (0-7)", dev);
				g.domain = a;
				g.bus = b;
				g.dev = c;
				g.fn = d;
			} else if (*p == '.') { /* bus:dev.fn */
				if (a > 0xff || b > 0x1f)
					return config_fail(spec, "GPU %d: bus must be <= ff and device <= 1f", dev);
				p++;
				if (parse_hex(&p, 7, &d) != 0)
					return config_fail(spec, "GPU %d: bad function number (0-7)", dev);
				g.bus = a;
				g.dev = b;
				g.fn = d;
			} else {
				return config_fail(spec, "GPU %d: location must be [domain:]bus:device.function in hex", dev);
			}
		}
		if (*p == '/') {
			p++;
			size_t pl = strcspn(p, ",");
			if (pl == 3 && strncmp(p, "spx", 3) == 0) g.partitions = 1;
			else if (pl == 3 && strncmp(p, "dpx", 3) == 0) g.partitions = 2;
			else if (pl == 3 && strncmp(p, "qpx", 3) == 0) g.partitions = 4;
			else if (pl == 3 && strncmp(p, "cpx", 3) == 0) g.partitions = 8;
			else return config_fail(spec, "GPU %d: partition mode must be spx, dpx, qpx or cpx", dev);
			if (g.partitions > 1 && g.fn != 0)
				return config_fail(spec, "GPU %d: a partitioned GPU's function must be 0 (KFD ORs the partition into it)", dev);
			p += pl;
		}
		for (int i = 0; i < n; i++)
			if (gpus[i].domain == g.domain && gpus[i].bus == g.bus && gpus[i].dev == g.dev &&
			    (gpus[i].fn == g.fn || gpus[i].partitions > 1 || g.partitions > 1))
				return config_fail(spec, "GPUs %u and %d share the location %04x:%02x:%02x.%x",
						   gpus[i].device_index, dev, g.domain, g.bus, g.dev, g.fn);
		for (uint32_t part = 0; part < g.partitions; part++) {
			if (n == KFDSIM_MAX_GPUS) return config_fail(spec, "more than %d GPU nodes", KFDSIM_MAX_GPUS);
			gpus[n] = g;
			gpus[n].partition = part;
			gpus[n].cus = g.cus / g.partitions;
			if (gpus[n].shader_engines > gpus[n].cus) gpus[n].shader_engines = gpus[n].cus;
			if (g.partitions > 1) gpus[n].shader_engines = g.shader_engines / g.partitions;
			n++;
		}
		if (*p == '\0') break;
		if (*p != ',') return config_fail(spec, "unexpected \"%.10s\" after GPU %d", p, dev);
		p++;
	}
	return n;
}

static void read_env_switches(void)
{
	const char *dbg = getenv("KFDSIM_DEBUG");
	kfdsim_debug_on = dbg != NULL && dbg[0] != '\0' && strcmp(dbg, "0") != 0;
	const char *qerr = getenv("KFDSIM_VMFAULT_QUEUE_ERROR");
	kfdsim_vmfault_queue_error = qerr == NULL || strcmp(qerr, "0") != 0;
	const char *p2p = getenv("KFDSIM_P2P");
	kfdsim_p2p = p2p != NULL && strcmp(p2p, "1") == 0;
	const char *off = getenv("KFDSIM_RULE_OFF");
	kfdsim_rule_evict = 1;
	kfdsim_rule_access = 1;
	if (off != NULL) {
		char buf[128];
		snprintf(buf, sizeof buf, "%s", off);
		for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
			if (strcmp(tok, "evict") == 0) kfdsim_rule_evict = 0;
			else if (strcmp(tok, "access") == 0) kfdsim_rule_access = 0;
			else fprintf(stderr, "kfdsim: KFDSIM_RULE_OFF: unknown rule \"%s\" (known: evict, access)\n", tok);
		}
	}
	const char *rel = getenv("KFDSIM_ROCM");
	kfdsim_release_major = 5;
	kfdsim_release_minor = 2;
	if (rel != NULL && rel[0] != '\0') {
		int ma = 0, mi = 0;
		if (sscanf(rel, "%d.%d", &ma, &mi) >= 1 && ma >= 5 && ma < 100) {
			kfdsim_release_major = ma;
			kfdsim_release_minor = mi;
		} else {
			fprintf(stderr, "kfdsim: KFDSIM_ROCM=\"%s\" is not a ROCm release (want e.g. 5.2, 6.1, 6.4)\n", rel);
		}
	}
}

/* Applies the configuration (kfdsim_configure's spec, else $KFDSIM_GPUS, else
 * one gfx90a); caller holds state_lock. Returns 0 or -1 with config_error. */
static int apply_locked(void)
{
	read_env_switches();
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
		size_t l = strlen(config_error);
		snprintf(config_error + l, sizeof config_error - l, " (from %s)", from);
		configured = 0;
		return -1;
	}
	for (int i = 0; i < n; i++) {
		gpus[i].node = (uint32_t)i + 1;
		/* KFD's gpu_id is a hash of the device; any unique non-zero value. */
		gpus[i].gpu_id = 0x1000u + 0x111u * (uint32_t)(i + 1);
		gpus[i].render_minor = 128u + (uint32_t)i;
	}
	memcpy(kfdsim_gpus, gpus, sizeof gpus);
	kfdsim_num_gpus = n;
	configured = 1;
	config_generation++;
	KFDSIM_DEBUG("configured %d GPU node(s) from %s \"%s\" for ROCm %d.%d", n, from, spec, kfdsim_release_major,
		     kfdsim_release_minor);
	return 0;
}

int kfdsim_config_ensure(void)
{
	pthread_mutex_lock(&state_lock);
	int rc = configured ? 0 : apply_locked();
	pthread_mutex_unlock(&state_lock);
	return rc;
}

const char *kfdsim_config_error(void) { return config_error; }

/* In a forked child (its only thread), a lock another thread of the parent
 * held at the fork is re-made, not waited for. */
void kfdsim_config_after_fork(void) { pthread_mutex_init(&state_lock, NULL); }

int kfdsim_config_generation(void) { return __atomic_load_n(&config_generation, __ATOMIC_ACQUIRE); }

/* Sets the simulated GPUs (see the grammar at the top of this file) for the
 * next open of /dev/kfd. Returns 0, or -1 for a bad spec (the message goes to
 * stderr, and opening /dev/kfd then fails) or when the device is open. */
__attribute__((visibility("default"))) int kfdsim_configure(const char *spec)
{
	pthread_mutex_lock(&state_lock);
	if (kfdsim_device_in_use()) {
		pthread_mutex_unlock(&state_lock);
		fprintf(stderr, "kfdsim: kfdsim_configure called while /dev/kfd is open; close it first\n");
		return -1;
	}
	free(configured_spec);
	configured_spec = strdup(spec ? spec : "");
	config_error[0] = '\0';
	int rc = apply_locked();
	pthread_mutex_unlock(&state_lock);
	if (rc < 0) fprintf(stderr, "kfdsim: %s\n", config_error);
	return rc;
}

int kfdsim_gpu_index_by_id(uint32_t gpu_id)
{
	for (int i = 0; i < kfdsim_num_gpus; i++)
		if (kfdsim_gpus[i].gpu_id == gpu_id) return i;
	return -1;
}
