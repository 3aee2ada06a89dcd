/*
 * The sysfs files the simulated KFD and DRM devices show, generated from
 * the configuration (config.c) into a directory that the path interposition
 * (shim.c) redirects to:
 *
 *   /sys/devices/virtual/kfd/kfd/...   (and /sys/class/kfd/kfd/...)
 *       topology/{generation_id,system_properties}
 *       topology/nodes/N/{gpu_id,name,properties}
 *       topology/nodes/N/{mem_banks,caches,io_links}/M/properties
 *     in the "name value" lines of amdgpu's kfd_topology.c;
 *   /sys/devices/system/node/nodeX/cpuN/cache/indexK/ files (and
 *   /sys/devices/system/cpu/cpuN/cache/...): the CPU caches. The 5.2.3
 *     thunk rejects the whole topology when a CPU node has no cache
 *     (topology.c, topology_get_cpu_cache_props), and VMs often have none;
 *   /sys/dev/char/226:M/device/...: the render node's device (libdrm checks
 *     that device/drm exists for a render fd, reads the card name from it,
 *     and the PCI address from the device link);
 *   /dev/dri: the listing of the render nodes.
 *
 * The directory is keyed by a hash of everything written into it (the
 * configuration and the library that writes it), under
 * $TMPDIR/kfdsim-<uid>/, created once (built aside and renamed into place) and
 * shared by every process with the same configuration.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kfdsim_int.h"

#define GPU_FCOMPUTE_ID_BASE 0x80001000u

static pthread_mutex_t root_lock = PTHREAD_MUTEX_INITIALIZER;
static char root[512];
static int root_generation = -1;

uint64_t kfdsim_system_memory_bytes(void)
{
	long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
	if (pages <= 0 || psz <= 0) return 8ull << 30;
	return (uint64_t)pages * (uint64_t)psz;
}

static uint32_t cpu_count(void)
{
	long n = sysconf(_SC_NPROCESSORS_CONF);
	return n > 0 ? (uint32_t)n : 1;
}

static int mkdirs(const char *path)
{
	char buf[768];
	snprintf(buf, sizeof buf, "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			if (mkdir(buf, 0755) != 0 && errno != EEXIST) return -1;
			*p = '/';
		}
	return mkdir(buf, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

static int write_file(const char *dir, const char *name, const char *fmt, ...)
{
	char path[768];
	snprintf(path, sizeof path, "%s/%s", dir, name);
	char *slash = strrchr(path, '/');
	*slash = '\0';
	if (mkdirs(path) != 0) return -1;
	*slash = '/';
	FILE *f = fopen(path, "w");
	if (f == NULL) return -1;
	va_list ap;
	va_start(ap, fmt);
	vfprintf(f, fmt, ap);
	va_end(ap);
	return fclose(f);
}

static uint32_t capability(const kfdsim_gpu *g)
{
	HSA_CAPABILITY c;
	c.Value = 0;
	c.ui32.QueueSizePowerOfTwo = 1;
	c.ui32.QueueSize32bit = 1;
	c.ui32.DoorbellType = 2;
	c.ui32.SRAM_EDCSupport = g->sramecc ? 1 : 0;
	return c.Value;
}

static void gpu_node(const char *nodes, const kfdsim_gpu *g, uint32_t ncpus)
{
	(void)ncpus;
	char dir[700];
	snprintf(dir, sizeof dir, "%s/%u", nodes, g->node);
	uint32_t location = (g->bus << 8) | (g->dev << 3) | (g->fn | g->partition);
	uint32_t links = kfdsim_p2p ? (uint32_t)kfdsim_num_gpus : 1;
	write_file(dir, "gpu_id", "%u\n", g->gpu_id);
	write_file(dir, "name", "%s\n", g->name);
	write_file(dir, "properties",
		   "cpu_cores_count 0\n"
		   "simd_count %u\n"
		   "mem_banks_count 1\n"
		   "caches_count 2\n"
		   "io_links_count %u\n"
		   "p2p_links_count 0\n"
		   "cpu_core_id_base 0\n"
		   "simd_id_base %u\n"
		   "max_waves_per_simd %u\n"
		   "lds_size_in_kb 64\n"
		   "gds_size_in_kb 0\n"
		   "num_gws 0\n"
		   "wave_front_size %u\n"
		   "array_count %u\n"
		   "simd_arrays_per_engine 1\n"
		   "cu_per_simd_array %u\n"
		   "simd_per_cu %u\n"
		   "max_slots_scratch_cu 32\n"
		   "gfx_target_version %u\n"
		   "vendor_id 4098\n"
		   "device_id %u\n"
		   "location_id %u\n"
		   "domain %u\n"
		   "drm_render_minor %u\n"
		   "hive_id 0\n"
		   "num_sdma_engines 2\n"
		   "num_sdma_xgmi_engines 0\n"
		   "num_sdma_queues_per_engine 8\n"
		   "num_cp_queues 24\n"
		   "max_engine_clk_fcompute 1700\n"
		   "local_mem_size %llu\n"
		   "fw_version 0\n"
		   "capability %u\n"
		   "debug_prop 0\n"
		   "sdma_fw_version 500\n"
		   "unique_id %llu\n"
		   "num_xcc 1\n"
		   "max_engine_clk_ccompute 3000\n",
		   g->cus * g->simd_per_cu, links, GPU_FCOMPUTE_ID_BASE + 0x100 * (g->node - 1),
		   g->major >= 10 ? 16u : 8u, g->wave_size, g->shader_engines, g->cus / g->shader_engines,
		   g->simd_per_cu, g->major * 10000 + g->minor * 100 + g->stepping, g->device_id, location,
		   g->domain, g->render_minor, (unsigned long long)KFDSIM_VRAM_BYTES, capability(g),
		   (unsigned long long)(0x6b66640000000000ull | ((uint64_t)g->domain << 16) | location));
	write_file(dir, "mem_banks/0/properties",
		   "heap_type 1\nsize_in_bytes %llu\nflags 0\nwidth 4096\nmem_clk_max 1600\n",
		   (unsigned long long)KFDSIM_VRAM_BYTES);
	HsaCacheType ct;
	ct.Value = 0;
	ct.ui32.Data = 1;
	ct.ui32.HSACU = 1;
	for (int i = 0; i < 2; i++) {
		char name[64];
		snprintf(name, sizeof name, "caches/%d/properties", i);
		write_file(dir, name,
			   "processor_id_low %u\nlevel %d\nsize %u\ncache_line_size %u\ncache_lines_per_tag 1\n"
			   "association 16\nlatency %u\ntype %u\nsibling_map 1\n",
			   GPU_FCOMPUTE_ID_BASE + 0x100 * (g->node - 1), i + 1, i == 0 ? 16u : 8192u,
			   i == 0 ? 64u : 128u, i == 0 ? 50u : 200u, ct.Value);
	}
	for (uint32_t i = 0; i < links; i++) {
		/* The CPU first, then (KFDSIM_P2P=1) every other GPU. */
		uint32_t to = 0, weight = 20;
		if (i > 0) {
			to = i < g->node ? i : i + 1;
			weight = 40;
		}
		char name[64];
		snprintf(name, sizeof name, "io_links/%u/properties", i);
		write_file(dir, name,
			   "type 2\nversion_major 4\nversion_minor 0\nnode_from %u\nnode_to %u\nweight %u\n"
			   "min_latency 0\nmax_latency 0\nmin_bandwidth 16000\nmax_bandwidth 32000\n"
			   "recommended_transfer_size 4096\nflags 1\n",
			   g->node, to, weight);
	}
}

static void cpu_node(const char *nodes, uint32_t ncpus)
{
	char dir[700];
	snprintf(dir, sizeof dir, "%s/0", nodes);
	write_file(dir, "gpu_id", "0\n");
	write_file(dir, "name", "\n");
	write_file(dir, "properties",
		   "cpu_cores_count %u\nsimd_count 0\nmem_banks_count 1\ncaches_count 0\nio_links_count %d\n"
		   "p2p_links_count 0\ncpu_core_id_base 0\nsimd_id_base 0\nmax_waves_per_simd 0\nlds_size_in_kb 0\n"
		   "gds_size_in_kb 0\nnum_gws 0\nwave_front_size 0\narray_count 0\nsimd_arrays_per_engine 0\n"
		   "cu_per_simd_array 0\nsimd_per_cu 0\nmax_slots_scratch_cu 0\ngfx_target_version 0\nvendor_id 0\n"
		   "device_id 0\nlocation_id 0\ndomain 0\ndrm_render_minor 0\nhive_id 0\nnum_sdma_engines 0\n"
		   "num_sdma_xgmi_engines 0\nnum_sdma_queues_per_engine 0\nnum_cp_queues 0\n"
		   "max_engine_clk_ccompute 3000\n",
		   ncpus, kfdsim_num_gpus);
	write_file(dir, "mem_banks/0/properties",
		   "heap_type 0\nsize_in_bytes %llu\nflags 0\nwidth 64\nmem_clk_max 3200\n",
		   (unsigned long long)kfdsim_system_memory_bytes());
	for (int i = 0; i < kfdsim_num_gpus; i++) {
		char name[64];
		snprintf(name, sizeof name, "io_links/%d/properties", i);
		write_file(dir, name,
			   "type 2\nversion_major 4\nversion_minor 0\nnode_from 0\nnode_to %d\nweight 20\n"
			   "min_latency 0\nmax_latency 0\nmin_bandwidth 16000\nmax_bandwidth 32000\n"
			   "recommended_transfer_size 4096\nflags 1\n",
			   i + 1);
	}
}

static void cpu_caches(const char *base, uint32_t ncpus)
{
	static const struct {
		int level;
		const char *type, *size;
		int ways;
	} idx[] = {{1, "Data", "32K", 8}, {1, "Instruction", "32K", 8}, {2, "Unified", "512K", 8}, {3, "Unified", "16384K", 16}};
	for (uint32_t c = 0; c < ncpus; c++)
		for (int k = 0; k < 4; k++) {
			char dir[700];
			snprintf(dir, sizeof dir, "%s/cpu%u/cache/index%d", base, c, k);
			/* Each CPU's own caches: shared with itself only. */
			char map[16];
			snprintf(map, sizeof map, "%08x", c < 32 ? 1u << c : 0u);
			write_file(dir, "level", "%d\n", idx[k].level);
			write_file(dir, "type", "%s\n", idx[k].type);
			write_file(dir, "size", "%s\n", idx[k].size);
			write_file(dir, "coherency_line_size", "64\n");
			write_file(dir, "ways_of_associativity", "%d\n", idx[k].ways);
			write_file(dir, "physical_line_partition", "1\n");
			write_file(dir, "number_of_sets", "64\n");
			write_file(dir, "shared_cpu_map", "%s\n", map);
			write_file(dir, "shared_cpu_list", "%u\n", c);
		}
}

static void drm_devices(const char *t)
{
	char buf[768], target[768];
	snprintf(buf, sizeof buf, "%s/bus/pci", t);
	mkdirs(buf);
	for (int i = 0; i < kfdsim_num_gpus; i++) {
		const kfdsim_gpu *g = &kfdsim_gpus[i];
		char bdf[32];
		snprintf(bdf, sizeof bdf, "%04x:%02x:%02x.%x", g->domain, g->bus, g->dev, g->fn | g->partition);
		char dev[700];
		snprintf(dev, sizeof dev, "%s/pci/%s", t, bdf);
		write_file(dev, "vendor", "0x1002\n");
		write_file(dev, "device", "0x%04x\n", g->device_id);
		write_file(dev, "subsystem_vendor", "0x1002\n");
		write_file(dev, "subsystem_device", "0x0c34\n");
		write_file(dev, "revision", "0x02\n");
		write_file(dev, "class", "0x038000\n");
		write_file(dev, "uevent", "DRIVER=amdgpu\nPCI_CLASS=38000\nPCI_ID=1002:%04X\nPCI_SUBSYS_ID=1002:0C34\n"
			   "PCI_SLOT_NAME=%s\n", g->device_id, bdf);
		char n[64];
		snprintf(n, sizeof n, "drm/card%d/dev", i);
		write_file(dev, n, "226:%d\n", i);
		snprintf(n, sizeof n, "drm/renderD%u/dev", g->render_minor);
		write_file(dev, n, "226:%u\n", g->render_minor);
		/* Relative links: the tree is renamed into place. */
		snprintf(buf, sizeof buf, "%s/subsystem", dev);
		symlink("../../bus/pci", buf);
		snprintf(target, sizeof target, "../../pci/%s", bdf);
		snprintf(buf, sizeof buf, "%s/devchar/226:%u", t, g->render_minor);
		mkdirs(buf);
		snprintf(buf, sizeof buf, "%s/devchar/226:%u/device", t, g->render_minor);
		symlink(target, buf);
		snprintf(buf, sizeof buf, "%s/devchar/226:%u/dev", t, g->render_minor);
		write_file(t, buf + strlen(t) + 1, "226:%u\n", g->render_minor);
		snprintf(buf, sizeof buf, "%s/devchar/226:%d", t, i);
		mkdirs(buf);
		snprintf(buf, sizeof buf, "%s/devchar/226:%d/device", t, i);
		symlink(target, buf);
		snprintf(n, sizeof n, "dev/dri/renderD%u", g->render_minor);
		write_file(t, n, "");
		snprintf(n, sizeof n, "dev/dri/card%d", i);
		write_file(t, n, "");
	}
}

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *b = p;
	for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}

/* The version of the generated layout: part of the key. */
#define SYSFS_LAYOUT 1

static int build_locked(void)
{
	uint32_t ncpus = cpu_count();
	uint64_t mem = kfdsim_system_memory_bytes();
	int layout = SYSFS_LAYOUT;
	uint64_t h = 0xcbf29ce484222325ull;
	h = fnv(h, &layout, sizeof layout);
	h = fnv(h, kfdsim_gpus, sizeof(kfdsim_gpu) * (size_t)kfdsim_num_gpus);
	h = fnv(h, &kfdsim_num_gpus, sizeof kfdsim_num_gpus);
	h = fnv(h, &kfdsim_p2p, sizeof kfdsim_p2p);
	h = fnv(h, &ncpus, sizeof ncpus);
	h = fnv(h, &mem, sizeof mem);
	/* The library itself: another build writes other files. Its path is the
	 * content-addressed cache entry; size and times catch a rebuild in
	 * place. */
	Dl_info self;
	if (dladdr((void *)kfdsim_sysfs_root, &self) && self.dli_fname) {
		struct stat ls;
		h = fnv(h, self.dli_fname, strlen(self.dli_fname));
		if (stat(self.dli_fname, &ls) == 0) {
			h = fnv(h, &ls.st_size, sizeof ls.st_size);
			h = fnv(h, &ls.st_mtim, sizeof ls.st_mtim);
			h = fnv(h, &ls.st_ino, sizeof ls.st_ino);
		}
	}
	const char *tmp = getenv("TMPDIR");
	if (tmp == NULL || tmp[0] != '/') tmp = "/tmp";
	char base[400];
	snprintf(base, sizeof base, "%s/kfdsim-%u", tmp, (unsigned)getuid());
	if (mkdirs(base) != 0) return -1;
	char final[512];
	snprintf(final, sizeof final, "%s/%016llx", base, (unsigned long long)h);
	struct stat st;
	if (stat(final, &st) == 0 && S_ISDIR(st.st_mode)) {
		snprintf(root, sizeof root, "%s", final);
		return 0;
	}
	char work[512];
	snprintf(work, sizeof work, "%s/.build-%d-%016llx", base, (int)getpid(), (unsigned long long)h);
	nftw(work, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
	char nodes[600];
	snprintf(nodes, sizeof nodes, "%s/kfd/topology/nodes", work);
	if (mkdirs(nodes) != 0) return -1;
	char topo[600];
	snprintf(topo, sizeof topo, "%s/kfd/topology", work);
	write_file(topo, "generation_id", "1\n");
	write_file(topo, "system_properties", "platform_oem 4279876\nplatform_id 4998724\nplatform_rev 1\n");
	cpu_node(nodes, ncpus);
	for (int i = 0; i < kfdsim_num_gpus; i++) gpu_node(nodes, &kfdsim_gpus[i], ncpus);
	char cpus[600];
	snprintf(cpus, sizeof cpus, "%s/cpu", work);
	cpu_caches(cpus, ncpus);
	drm_devices(work);
	/* The symlinks name the final directory. */
	if (rename(work, final) != 0) {
		nftw(work, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
		if (stat(final, &st) != 0) return -1; /* another process won the race, or failed */
	}
	snprintf(root, sizeof root, "%s", final);
	return 0;
}

void kfdsim_sysfs_after_fork(void) { pthread_mutex_init(&root_lock, NULL); }

const char *kfdsim_sysfs_root(void)
{
	if (kfdsim_config_ensure() != 0) return NULL;
	pthread_mutex_lock(&root_lock);
	int gen = kfdsim_config_generation();
	if (gen != root_generation) {
		if (build_locked() == 0) root_generation = gen;
		else root[0] = '\0';
	}
	const char *r = root[0] ? root : NULL;
	pthread_mutex_unlock(&root_lock);
	return r;
}
