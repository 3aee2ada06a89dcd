/*
 * exec.c: the simulated GPU's shader executor.
 *
 * A dispatch names its kernel only by the address of a 64-byte kernel
 * descriptor. The executor recovers the kernel from what ROCr put in GPU
 * memory:
 *   - kernels of a loaded code object: ROCr's loader copies the PT_LOAD
 *     segments of the ELF to GPU memory, so the image starts with the ELF
 *     header and its dynamic symbol table names the descriptor (the ".kd"
 *     symbol whose value is the descriptor's offset in the image). The
 *     image also holds the metadata note with the argument layouts.
 *   - ROCr 5.2.3's own blit kernels (CopyAligned, CopyMisaligned, Fill),
 *     which GpuAgent::AssembleShader writes as an amd_kernel_code_t header
 *     followed by machine code, outside any ELF. They are told apart by the
 *     entry offset (256, the header size) and the granulated register counts
 *     ROCr derives from each kernel's fixed SGPR/VGPR needs.
 * ROCr's blit kernels and HIP's own blit program (__amd_rocclr_*) run here,
 * in C, emulating the kernel's effect on memory; every other kernel goes to
 * the executor the embedding process registered.
 *
 * Every byte the simulated GPU reads or writes is first checked with
 * kfdsim_gpu_access, which raises the VM fault itself when the memory is not
 * mapped to the GPU; then the work stops with KFDSIM_FAULT. All checks of a
 * kernel come before its first write, so a faulting kernel changes nothing.
 */
#include "kfdsim.h"

#include <elf.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef EM_AMDGPU
#define EM_AMDGPU 224
#endif

#define KFDSIM_EXPORT __attribute__((visibility("default")))

/* ---- the registered executor ------------------------------------------ */

static _Atomic(kfdsim_executor_fn) registered_executor;

KFDSIM_EXPORT void kfdsim_set_executor(kfdsim_executor_fn fn)
{
	atomic_store_explicit(&registered_executor, fn, memory_order_release);
}

/* ---- small helpers ------------------------------------------------------ */

/* Reports why a dispatch was refused. The command processor turns the
 * returned code into a queue fault; the message says what to fix. */
static void complain(const kfdsim_dispatch *d, const char *what, const char *name)
{
	fprintf(stderr, "kfdsim: queue %llu: kernel object 0x%llx%s%s: %s\n",
		(unsigned long long)d->queue_id, (unsigned long long)d->kernel_object,
		name ? " " : "", name ? name : "", what);
}

static inline uint64_t rd64(const uint8_t *p)
{
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}

static inline uint32_t rd32(const uint8_t *p)
{
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}

/* end = base + size, false when it wraps. */
static inline bool range_end(uint64_t base, uint64_t size, uint64_t *end)
{
	*end = base + size;
	return *end >= base;
}

/* Whether [addr, addr+size) lies in one allocation mapped to node, without
 * raising a fault: used only where the simulator itself, not the GPU, looks
 * at memory (probing for an ELF header). */
static bool mapped_quietly(uint32_t node, uint64_t addr, uint64_t size, kfdsim_alloc *out)
{
	kfdsim_alloc a;
	uint64_t end, aend;
	if (!kfdsim_lookup(addr, &a) || !range_end(addr, size, &end) ||
	    !range_end(a.base, a.size, &aend) || end > aend)
		return false;
	if (node >= 64 || !(a.mapped_mask & (1ull << node)))
		return false;
	if (out)
		*out = a;
	return true;
}

/* Checked access for the GPU, with zero-sized ranges allowed (they touch
 * nothing) and wrapping ranges refused. */
static bool gpu_access(uint32_t node, uint64_t addr, uint64_t size, bool write)
{
	uint64_t end;
	if (size == 0)
		return true;
	if (!range_end(addr, size, &end))
		return kfdsim_gpu_access(node, addr, UINT64_MAX - addr, write);
	return kfdsim_gpu_access(node, addr, size, write);
}

/* gpu_access for the copies and fills that touch memory: the CPU address
 * of the checked range (see kfdsim_gpu_ptr), NULL after a fault. */
static uint8_t *gpu_ptr(uint32_t node, uint64_t addr, uint64_t size, bool write)
{
	if (size == 0)
		return (uint8_t *)(uintptr_t)addr;
	return kfdsim_gpu_ptr(node, addr, size, write);
}

/* ---- finding the loaded ELF image -------------------------------------- */

typedef struct image {
	uint64_t base;
	uint64_t size;          /* extent of the PT_LOAD segments */
	const uint8_t *bytes;   /* == (const uint8_t *)base */
} image;

/* Validates an ELF header at base (already known to be readable for
 * sizeof(Elf64_Ehdr) bytes) and computes the loaded extent. limit is the
 * number of bytes from base to the end of its allocation. */
static bool parse_image(uint64_t base, uint64_t limit, image *img)
{
	const uint8_t *p = (const uint8_t *)(uintptr_t)base;
	Elf64_Ehdr eh;
	if (limit < sizeof eh)
		return false;
	memcpy(&eh, p, sizeof eh);
	if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0 || eh.e_ident[EI_CLASS] != ELFCLASS64 ||
	    eh.e_ident[EI_DATA] != ELFDATA2LSB || eh.e_machine != EM_AMDGPU ||
	    eh.e_phentsize != sizeof(Elf64_Phdr) || eh.e_phnum == 0)
		return false;
	uint64_t ph_end;
	if (!range_end(eh.e_phoff, (uint64_t)eh.e_phnum * sizeof(Elf64_Phdr), &ph_end) ||
	    ph_end > limit)
		return false;
	uint64_t extent = 0;
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		memcpy(&ph, p + eh.e_phoff + i * sizeof ph, sizeof ph);
		if (ph.p_type != PT_LOAD)
			continue;
		uint64_t end;
		if (!range_end(ph.p_vaddr, ph.p_memsz, &end))
			return false;
		if (end > extent)
			extent = end;
	}
	if (extent < ph_end || extent > limit)
		return false;
	img->base = base;
	img->size = extent;
	img->bytes = p;
	return true;
}

/* Finds the program header of the given type; false when absent or outside
 * the image. */
static bool find_phdr(const image *img, uint32_t type, Elf64_Phdr *out)
{
	Elf64_Ehdr eh;
	memcpy(&eh, img->bytes, sizeof eh);
	for (unsigned i = 0; i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		memcpy(&ph, img->bytes + eh.e_phoff + i * sizeof ph, sizeof ph);
		uint64_t end;
		if (ph.p_type != type)
			continue;
		if (!range_end(ph.p_vaddr, ph.p_memsz, &end) || end > img->size)
			return false;
		*out = ph;
		return true;
	}
	return false;
}

/* The number of dynamic symbols, from DT_HASH (nchain) or, failing that,
 * from DT_GNU_HASH (one past the highest symbol index reachable from its
 * buckets). 0 when neither is usable. */
static uint64_t dynsym_count(const image *img, uint64_t hash, uint64_t gnu_hash)
{
	if (hash && hash + 8 <= img->size)
		return rd32(img->bytes + hash + 4);
	if (!gnu_hash || gnu_hash + 16 > img->size)
		return 0;
	const uint8_t *g = img->bytes + gnu_hash;
	uint64_t nbuckets = rd32(g), symoffset = rd32(g + 4), bloom_size = rd32(g + 8);
	uint64_t buckets = gnu_hash + 16 + bloom_size * 8;
	uint64_t chains = buckets + nbuckets * 4;
	if (bloom_size > img->size || nbuckets > img->size || chains > img->size)
		return 0;
	uint64_t last = 0;
	for (uint64_t i = 0; i < nbuckets; i++) {
		uint64_t b = rd32(img->bytes + buckets + i * 4);
		if (b > last)
			last = b;
	}
	if (last < symoffset)
		return symoffset;
	for (;;) {
		uint64_t at = chains + (last - symoffset) * 4;
		if (at + 4 > img->size)
			return 0;
		if (rd32(img->bytes + at) & 1)
			return last + 1;
		last++;
	}
}

/* Finds the ".kd" symbol whose value is offset; copies the kernel name
 * (without ".kd") into name. */
static bool name_descriptor(const image *img, uint64_t offset, char *name, size_t name_cap)
{
	Elf64_Phdr dyn;
	if (!find_phdr(img, PT_DYNAMIC, &dyn))
		return false;
	uint64_t symtab = 0, strtab = 0, strsz = 0, syment = sizeof(Elf64_Sym), hash = 0, gnu_hash = 0;
	for (uint64_t at = dyn.p_vaddr; at + sizeof(Elf64_Dyn) <= dyn.p_vaddr + dyn.p_memsz;
	     at += sizeof(Elf64_Dyn)) {
		Elf64_Dyn e;
		memcpy(&e, img->bytes + at, sizeof e);
		if (e.d_tag == DT_NULL)
			break;
		switch (e.d_tag) {
		case DT_SYMTAB: symtab = e.d_un.d_ptr; break;
		case DT_STRTAB: strtab = e.d_un.d_ptr; break;
		case DT_STRSZ: strsz = e.d_un.d_val; break;
		case DT_SYMENT: syment = e.d_un.d_val; break;
		case DT_HASH: hash = e.d_un.d_ptr; break;
		case DT_GNU_HASH: gnu_hash = e.d_un.d_ptr; break;
		}
	}
	uint64_t str_end;
	if (!symtab || !strtab || syment < sizeof(Elf64_Sym) ||
	    !range_end(strtab, strsz, &str_end) || str_end > img->size)
		return false;
	uint64_t count = dynsym_count(img, hash, gnu_hash);
	if (count == 0 || symtab > img->size || count > (img->size - symtab) / syment)
		return false;
	for (uint64_t i = 1; i < count; i++) {
		Elf64_Sym s;
		memcpy(&s, img->bytes + symtab + i * syment, sizeof s);
		if (s.st_value != offset || s.st_shndx == SHN_UNDEF || s.st_name >= strsz)
			continue;
		const char *str = (const char *)img->bytes + strtab + s.st_name;
		size_t len = strnlen(str, strsz - s.st_name);
		if (len == strsz - s.st_name || len < 3 || strcmp(str + len - 3, ".kd") != 0)
			continue;
		if (len - 3 >= name_cap)
			return false;
		memcpy(name, str, len - 3);
		name[len - 3] = 0;
		return true;
	}
	return false;
}

/* Locates the loaded image that holds kernel_object: its allocation's start,
 * or (when the loader sub-allocated) a page boundary below the descriptor,
 * whose ELF image's PT_LOAD extent covers the descriptor. */
static bool find_image(uint32_t node, uint64_t kernel_object, image *img)
{
	kfdsim_alloc a;
	if (!kfdsim_lookup(kernel_object, &a))
		return false;
	uint64_t aend = a.base + a.size;
	uint64_t candidate = kernel_object & ~(uint64_t)0xfff;
	if (candidate < a.base)
		candidate = a.base;
	for (;;) {
		if (mapped_quietly(node, candidate, sizeof(Elf64_Ehdr), NULL) &&
		    parse_image(candidate, aend - candidate, img) &&
		    kernel_object + 64 <= candidate + img->size)
			return true;
		if (candidate == a.base)
			return false;
		candidate = candidate - 0x1000 < a.base || candidate < 0x1000 ? a.base : candidate - 0x1000;
	}
}

/* ---- the metadata note -------------------------------------------------- */

/* A minimal MessagePack reader for the NT_AMDGPU_METADATA note: enough to
 * find one kernel's argument list. Every read is bounds-checked; malformed
 * data makes the reader fail, never read past the note. */
typedef struct mp {
	const uint8_t *p, *end;
	bool bad;
} mp;

static uint64_t mp_take(mp *m, unsigned n)
{
	uint64_t v = 0;
	if (m->bad || (uint64_t)(m->end - m->p) < n) {
		m->bad = true;
		return 0;
	}
	for (unsigned i = 0; i < n; i++)
		v = v << 8 | m->p[i];
	m->p += n;
	return v;
}

enum mp_kind { MP_NIL, MP_BOOL, MP_UINT, MP_INT, MP_FLOAT, MP_STR, MP_BIN, MP_ARRAY, MP_MAP, MP_EXT };

typedef struct mp_val {
	enum mp_kind kind;
	uint64_t u;          /* integer value, or element count, or byte length */
	const uint8_t *data; /* MP_STR / MP_BIN / MP_EXT payload */
} mp_val;

/* Reads one value's header; for strings and binaries also consumes the
 * payload. Arrays and maps leave their elements to be read. */
static mp_val mp_next(mp *m)
{
	mp_val v = { MP_NIL, 0, NULL };
	uint8_t t = (uint8_t)mp_take(m, 1);
	if (m->bad)
		return v;
	if (t <= 0x7f) { v.kind = MP_UINT; v.u = t; return v; }
	if (t >= 0xe0) { v.kind = MP_INT; v.u = (uint64_t)(int64_t)(int8_t)t; return v; }
	if ((t & 0xf0) == 0x80) { v.kind = MP_MAP; v.u = t & 0x0f; return v; }
	if ((t & 0xf0) == 0x90) { v.kind = MP_ARRAY; v.u = t & 0x0f; return v; }
	if ((t & 0xe0) == 0xa0) { v.kind = MP_STR; v.u = t & 0x1f; goto payload; }
	switch (t) {
	case 0xc0: return v;
	case 0xc2: case 0xc3: v.kind = MP_BOOL; v.u = t & 1; return v;
	case 0xc4: v.kind = MP_BIN; v.u = mp_take(m, 1); goto payload;
	case 0xc5: v.kind = MP_BIN; v.u = mp_take(m, 2); goto payload;
	case 0xc6: v.kind = MP_BIN; v.u = mp_take(m, 4); goto payload;
	case 0xc7: v.kind = MP_EXT; v.u = mp_take(m, 1) + 1; goto payload;
	case 0xc8: v.kind = MP_EXT; v.u = mp_take(m, 2) + 1; goto payload;
	case 0xc9: v.kind = MP_EXT; v.u = mp_take(m, 4) + 1; goto payload;
	case 0xca: v.kind = MP_FLOAT; v.u = mp_take(m, 4); return v;
	case 0xcb: v.kind = MP_FLOAT; v.u = mp_take(m, 8); return v;
	case 0xcc: v.kind = MP_UINT; v.u = mp_take(m, 1); return v;
	case 0xcd: v.kind = MP_UINT; v.u = mp_take(m, 2); return v;
	case 0xce: v.kind = MP_UINT; v.u = mp_take(m, 4); return v;
	case 0xcf: v.kind = MP_UINT; v.u = mp_take(m, 8); return v;
	case 0xd0: v.kind = MP_INT; v.u = (uint64_t)(int64_t)(int8_t)mp_take(m, 1); return v;
	case 0xd1: v.kind = MP_INT; v.u = (uint64_t)(int64_t)(int16_t)mp_take(m, 2); return v;
	case 0xd2: v.kind = MP_INT; v.u = (uint64_t)(int64_t)(int32_t)mp_take(m, 4); return v;
	case 0xd3: v.kind = MP_INT; v.u = mp_take(m, 8); return v;
	case 0xd4: v.kind = MP_EXT; v.u = 2; goto payload;
	case 0xd5: v.kind = MP_EXT; v.u = 3; goto payload;
	case 0xd6: v.kind = MP_EXT; v.u = 5; goto payload;
	case 0xd7: v.kind = MP_EXT; v.u = 9; goto payload;
	case 0xd8: v.kind = MP_EXT; v.u = 17; goto payload;
	case 0xd9: v.kind = MP_STR; v.u = mp_take(m, 1); goto payload;
	case 0xda: v.kind = MP_STR; v.u = mp_take(m, 2); goto payload;
	case 0xdb: v.kind = MP_STR; v.u = mp_take(m, 4); goto payload;
	case 0xdc: v.kind = MP_ARRAY; v.u = mp_take(m, 2); return v;
	case 0xdd: v.kind = MP_ARRAY; v.u = mp_take(m, 4); return v;
	case 0xde: v.kind = MP_MAP; v.u = mp_take(m, 2); return v;
	case 0xdf: v.kind = MP_MAP; v.u = mp_take(m, 4); return v;
	}
	m->bad = true; /* 0xc1 is never used */
	return v;
payload:
	if (m->bad || (uint64_t)(m->end - m->p) < v.u) {
		m->bad = true;
		return v;
	}
	v.data = m->p;
	m->p += v.u;
	return v;
}

/* Skips one complete value, nested ones included (depth-limited). */
static void mp_skip(mp *m, int depth)
{
	mp_val v = mp_next(m);
	if (m->bad)
		return;
	if (depth > 32) {
		m->bad = true;
		return;
	}
	uint64_t n = v.kind == MP_ARRAY ? v.u : v.kind == MP_MAP ? 2 * v.u : 0;
	for (uint64_t i = 0; i < n && !m->bad; i++)
		mp_skip(m, depth + 1);
}

static bool mp_is_str(const mp_val *v, const char *s)
{
	size_t n = strlen(s);
	return v->kind == MP_STR && v->u == n && memcmp(v->data, s, n) == 0;
}

/* One explicit (non-hidden) kernel argument from the metadata. */
typedef struct arg_meta {
	uint32_t offset, size;
} arg_meta;

#define MAX_ARGS 16

/* Reads one .args entry: offset, size and whether it is a hidden argument. */
static bool read_arg(mp *m, arg_meta *a, bool *hidden)
{
	mp_val map = mp_next(m);
	if (m->bad || map.kind != MP_MAP)
		return false;
	bool have_off = false, have_size = false;
	*hidden = false;
	for (uint64_t i = 0; i < map.u && !m->bad; i++) {
		mp_val key = mp_next(m);
		if (mp_is_str(&key, ".offset") || mp_is_str(&key, ".size")) {
			mp_val n = mp_next(m);
			if (n.kind != MP_UINT || n.u > UINT32_MAX)
				return false;
			if (key.data[1] == 'o') {
				a->offset = (uint32_t)n.u;
				have_off = true;
			} else {
				a->size = (uint32_t)n.u;
				have_size = true;
			}
		} else if (mp_is_str(&key, ".value_kind")) {
			mp_val s = mp_next(m);
			if (s.kind != MP_STR)
				return false;
			*hidden = s.u >= 7 && memcmp(s.data, "hidden_", 7) == 0;
		} else {
			mp_skip(m, 0);
		}
	}
	return !m->bad && have_off && have_size;
}

/* Finds kernel `name` in the metadata map and reads its explicit arguments
 * (hidden ones, which follow them, are left out). */
static bool kernel_args_from_metadata(const uint8_t *desc, uint64_t len, const char *name,
				      arg_meta *args, unsigned *nargs)
{
	mp m = { desc, desc + len, false };
	mp_val top = mp_next(&m);
	if (m.bad || top.kind != MP_MAP)
		return false;
	for (uint64_t i = 0; i < top.u && !m.bad; i++) {
		mp_val key = mp_next(&m);
		if (!mp_is_str(&key, "amdhsa.kernels")) {
			mp_skip(&m, 0);
			continue;
		}
		mp_val kernels = mp_next(&m);
		if (kernels.kind != MP_ARRAY)
			return false;
		for (uint64_t k = 0; k < kernels.u && !m.bad; k++) {
			mp_val kmap = mp_next(&m);
			if (kmap.kind != MP_MAP)
				return false;
			bool is_it = false, have_args = false;
			unsigned n = 0;
			for (uint64_t f = 0; f < kmap.u && !m.bad; f++) {
				mp_val fk = mp_next(&m);
				if (mp_is_str(&fk, ".name")) {
					mp_val s = mp_next(&m);
					is_it = s.kind == MP_STR && s.u == strlen(name) &&
						memcmp(s.data, name, s.u) == 0;
				} else if (mp_is_str(&fk, ".args")) {
					/* Read into args regardless: .name may come later. */
					mp_val arr = mp_next(&m);
					if (arr.kind != MP_ARRAY)
						return false;
					n = 0;
					for (uint64_t j = 0; j < arr.u && !m.bad; j++) {
						arg_meta a = { 0, 0 };
						bool hidden;
						if (!read_arg(&m, &a, &hidden))
							return false;
						if (hidden)
							continue;
						if (n == MAX_ARGS)
							return false;
						args[n++] = a;
					}
					have_args = true;
				} else {
					mp_skip(&m, 0);
				}
			}
			if (is_it && !m.bad) {
				*nargs = have_args ? n : 0;
				return true;
			}
		}
		return false;
	}
	return false;
}

/* Finds the NT_AMDGPU_METADATA note (owner "AMDGPU", type 32) in the
 * image's PT_NOTE segment. */
static bool find_metadata_note(const image *img, const uint8_t **desc, uint64_t *len)
{
	Elf64_Phdr note;
	if (!find_phdr(img, PT_NOTE, &note))
		return false;
	uint64_t at = note.p_vaddr, end = note.p_vaddr + note.p_memsz;
	while (at + 12 <= end) {
		uint64_t namesz = rd32(img->bytes + at), descsz = rd32(img->bytes + at + 4);
		uint32_t type = rd32(img->bytes + at + 8);
		uint64_t name_at = at + 12;
		uint64_t desc_at = name_at + ((namesz + 3) & ~3ull);
		uint64_t next = desc_at + ((descsz + 3) & ~3ull);
		if (namesz > end || descsz > end || next > end)
			return false;
		if (type == 32 && namesz == 7 && memcmp(img->bytes + name_at, "AMDGPU", 7) == 0) {
			*desc = img->bytes + desc_at;
			*len = descsz;
			return true;
		}
		at = next;
	}
	return false;
}

/* ---- ROCr 5.2.3's blit kernels (amd_blit_kernel.cpp) ------------------- */

/* The descriptor fields ROCr's AssembleShader sets (amd_kernel_code_t and
 * the v3 kernel descriptor share these offsets). */
enum {
	KD_ENTRY_OFFSET = 16,  /* int64 kernel_code_entry_byte_offset */
	KD_PGM_RSRC1 = 48,
	KD_PGM_RSRC2 = 52,
	AMD_KERNEL_CODE_T_SIZE = 256,
};

enum rocr_blit { ROCR_NONE, ROCR_COPY_ALIGNED, ROCR_COPY_MISALIGNED, ROCR_FILL };

/* ROCr sets GRANULATED_WAVEFRONT_SGPR_COUNT = (sgprs-1)/8 and
 * GRANULATED_WORKITEM_VGPR_COUNT = (vgprs-1)/4 from each kernel's fixed
 * needs: CopyAligned 32/12, CopyMisaligned 23/10, Fill 19/8. */
static enum rocr_blit rocr_blit_kind(const uint8_t *kd)
{
	int64_t entry;
	memcpy(&entry, kd + KD_ENTRY_OFFSET, 8);
	uint32_t rsrc1 = rd32(kd + KD_PGM_RSRC1), rsrc2 = rd32(kd + KD_PGM_RSRC2);
	uint32_t vgpr_gran = rsrc1 & 0x3f, sgpr_gran = (rsrc1 >> 6) & 0xf;
	uint32_t user_sgprs = (rsrc2 >> 1) & 0x1f;
	if (entry != AMD_KERNEL_CODE_T_SIZE || user_sgprs != 2)
		return ROCR_NONE;
	if (sgpr_gran == 3 && vgpr_gran == 2)
		return ROCR_COPY_ALIGNED;
	if (sgpr_gran == 2 && vgpr_gran == 2)
		return ROCR_COPY_MISALIGNED;
	if (sgpr_gran == 2 && vgpr_gran == 1)
		return ROCR_FILL;
	return ROCR_NONE;
}

/* ROCr dispatches its blit kernels as one dimension of workgroups of 64,
 * with a grid of num_workitems (a multiple of 64) and kernargs whose phases
 * split the range so that each phase's loop runs the same number of
 * iterations in every lane. The kernels index work-items as
 * workgroup_id*64 + local_id and (for the unmasked phases) rely on that
 * split; under it, each kernel's effect is exactly a copy or fill of the
 * whole range, which is what runs here. Kernargs outside that contract would
 * make the real kernels skip or overrun bytes, so they are refused rather
 * than guessed at. */
static bool rocr_grid_ok(const kfdsim_dispatch *d, uint32_t num_workitems)
{
	return d->workgroup[0] == 64 && d->workgroup[1] == 1 && d->workgroup[2] == 1 &&
	       d->grid[1] == 1 && d->grid[2] == 1 && num_workitems != 0 &&
	       num_workitems % 64 == 0 && d->grid[0] == num_workitems;
}

/* A copy of [src, src+n) to [dst, dst+n), checked first. */
static int checked_copy(const kfdsim_dispatch *d, uint64_t dst, uint64_t src, uint64_t n)
{
	const uint8_t *s = gpu_ptr(d->gpu_node, src, n, false);
	uint8_t *t = s ? gpu_ptr(d->gpu_node, dst, n, true) : NULL;
	if (s == NULL || t == NULL)
		return KFDSIM_FAULT;
	if (n)
		memmove(t, s, n);
	return KFDSIM_OK;
}

static int run_rocr_copy_aligned(const kfdsim_dispatch *d)
{
	const uint32_t size = 10 * 8 + 4;
	if (!gpu_access(d->gpu_node, d->kernarg, size, false))
		return KFDSIM_FAULT;
	const uint8_t *k = (const uint8_t *)(uintptr_t)d->kernarg;
	uint64_t s[5], t[5]; /* phase starts 1..4 and end, source and destination */
	for (int i = 0; i < 5; i++) {
		s[i] = rd64(k + 16 * i);
		t[i] = rd64(k + 16 * i + 8);
	}
	uint32_t n = rd32(k + 80);
	bool ok = rocr_grid_ok(d, n);
	for (int i = 0; ok && i < 4; i++)
		ok = s[i] <= s[i + 1] && t[i + 1] - s[i + 1] == t[0] - s[0];
	/* phase 2 copies whole blocks of n dwordx4, phase 3 whole dwords, phase
	 * 4 (no loop) at most one byte per work-item */
	ok = ok && (s[2] - s[1]) % (16ull * n) == 0 && (s[3] - s[2]) % 4 == 0 && s[4] - s[3] <= n;
	if (!ok) {
		complain(d, "ROCr CopyAligned kernargs or grid outside what ROCr produces", NULL);
		return KFDSIM_UNKNOWN_KERNEL;
	}
	return checked_copy(d, t[0], s[0], s[4] - s[0]);
}

static int run_rocr_copy_misaligned(const kfdsim_dispatch *d)
{
	const uint32_t size = 6 * 8 + 4;
	if (!gpu_access(d->gpu_node, d->kernarg, size, false))
		return KFDSIM_FAULT;
	const uint8_t *k = (const uint8_t *)(uintptr_t)d->kernarg;
	uint64_t s[3], t[3];
	for (int i = 0; i < 3; i++) {
		s[i] = rd64(k + 16 * i);
		t[i] = rd64(k + 16 * i + 8);
	}
	uint32_t n = rd32(k + 48);
	bool ok = rocr_grid_ok(d, n) && s[0] <= s[1] && s[1] <= s[2] &&
		  t[1] - s[1] == t[0] - s[0] && t[2] - s[2] == t[0] - s[0] &&
		  (s[1] - s[0]) % (4ull * n) == 0; /* phase 1: 4 unrolled bytes per lane */
	if (!ok) {
		complain(d, "ROCr CopyMisaligned kernargs or grid outside what ROCr produces", NULL);
		return KFDSIM_UNKNOWN_KERNEL;
	}
	return checked_copy(d, t[0], s[0], s[2] - s[0]);
}

static int run_rocr_fill(const kfdsim_dispatch *d)
{
	const uint32_t size = 3 * 8 + 8;
	if (!gpu_access(d->gpu_node, d->kernarg, size, false))
		return KFDSIM_FAULT;
	const uint8_t *k = (const uint8_t *)(uintptr_t)d->kernarg;
	uint64_t p1 = rd64(k), p2 = rd64(k + 8), end = rd64(k + 16);
	uint32_t value = rd32(k + 24), n = rd32(k + 28);
	bool ok = rocr_grid_ok(d, n) && p1 <= p2 && p2 <= end && p1 % 4 == 0 &&
		  (p2 - p1) % (16ull * n) == 0 && (end - p2) % 4 == 0;
	if (!ok) {
		complain(d, "ROCr Fill kernargs or grid outside what ROCr produces", NULL);
		return KFDSIM_UNKNOWN_KERNEL;
	}
	uint8_t *t = gpu_ptr(d->gpu_node, p1, end - p1, true);
	if (t == NULL)
		return KFDSIM_FAULT;
	for (uint64_t a = p1; a < end; a += 4)
		memcpy(t + (a - p1), &value, 4);
	return KFDSIM_OK;
}

/* ---- HIP 5.2.3's blit program (ROCclr blitcl.cpp / rocblitcl.cpp) ------- */

/* The explicit arguments of each kernel, from the OpenCL signatures in
 * HIP 5.2.3's blit source (ulong4 arguments are 32-byte aligned). They are
 * checked against the metadata note of the loaded program at every
 * dispatch, so a HIP whose kernels differ is refused, not misread. */
typedef struct hip_blit {
	const char *name;
	int (*run)(const kfdsim_dispatch *d, const uint8_t *k);
	unsigned nargs;
	arg_meta args[10];
} hip_blit;

static uint64_t global_size(const kfdsim_dispatch *d, int dim)
{
	return d->grid[dim];
}

/* __amd_copyBuffer(srcI, dstI, srcOrigin, dstOrigin, size, remain): work-item
 * id < size copies byte id when remain == 8, else dword id, except the last,
 * which copies `remain` bytes at id*4. */
static int run_copy_buffer(const kfdsim_dispatch *d, const uint8_t *k)
{
	uint64_t src = rd64(k) + rd64(k + 16), dst = rd64(k + 8) + rd64(k + 24);
	uint64_t size = rd64(k + 32);
	uint32_t remain = rd32(k + 40);
	uint64_t items = global_size(d, 0) < size ? global_size(d, 0) : size;
	uint64_t bytes;
	if (remain == 8)
		bytes = items;
	else if (items < size)
		bytes = items * 4;
	else
		bytes = items ? (items - 1) * 4 + remain : 0;
	return checked_copy(d, dst, src, bytes);
}

/* __amd_copyBufferAligned(src, dst, srcOrigin, dstOrigin, size, alignment):
 * origins and size count uint4 elements when alignment == 16, else uints. */
static int run_copy_buffer_aligned(const kfdsim_dispatch *d, const uint8_t *k)
{
	uint32_t alignment = rd32(k + 40);
	uint64_t elem = alignment == 16 ? 16 : 4;
	uint64_t size = rd64(k + 32);
	uint64_t items = global_size(d, 0) < size ? global_size(d, 0) : size;
	uint64_t src = rd64(k) + rd64(k + 16) * elem, dst = rd64(k + 8) + rd64(k + 24) * elem;
	return checked_copy(d, dst, src, items * elem);
}

/* __amd_copyBufferRect(Aligned)(src, dst, srcRect, dstRect, size): element
 * (x, y, z) at rect.z + x + y*rect.x + z*rect.y, in bytes for the byte
 * kernel, in uints (or uint4s when size.w == 16) for the aligned one. */
static int copy_rect(const kfdsim_dispatch *d, const uint8_t *k, uint64_t elem)
{
	uint64_t src = rd64(k), dst = rd64(k + 8);
	uint64_t sr[4], dr[4], sz[4];
	for (int i = 0; i < 4; i++) {
		sr[i] = rd64(k + 32 + 8 * i);
		dr[i] = rd64(k + 64 + 8 * i);
		sz[i] = rd64(k + 96 + 8 * i);
	}
	if (elem == 0)
		elem = sz[3] == 16 ? 16 : 4;
	uint64_t nx = sz[0] < global_size(d, 0) ? sz[0] : global_size(d, 0);
	uint64_t ny = sz[1] < global_size(d, 1) ? sz[1] : global_size(d, 1);
	uint64_t nz = sz[2] < global_size(d, 2) ? sz[2] : global_size(d, 2);
	if (nx == 0)
		return KFDSIM_OK;
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t z = 0; z < nz; z++) {
			for (uint64_t y = 0; y < ny; y++) {
				uint64_t so = src + (sr[2] + y * sr[0] + z * sr[1]) * elem;
				uint64_t dof = dst + (dr[2] + y * dr[0] + z * dr[1]) * elem;
				if (pass == 0) {
					if (!gpu_access(d->gpu_node, so, nx * elem, false) ||
					    !gpu_access(d->gpu_node, dof, nx * elem, true))
						return KFDSIM_FAULT;
				} else {
					memmove(gpu_ptr(d->gpu_node, dof, nx * elem, true),
						gpu_ptr(d->gpu_node, so, nx * elem, false), nx * elem);
				}
			}
		}
	}
	return KFDSIM_OK;
}

static int run_copy_buffer_rect(const kfdsim_dispatch *d, const uint8_t *k)
{
	return copy_rect(d, k, 1);
}

static int run_copy_buffer_rect_aligned(const kfdsim_dispatch *d, const uint8_t *k)
{
	return copy_rect(d, k, 0);
}

/* The element size a fill writes: the first non-null of bufULong, bufUInt,
 * bufUShort (bufUChar otherwise), as the device library tests them. */
static void fill_target(const uint8_t *k, uint64_t *buf, uint64_t *elem)
{
	if (rd64(k + 24)) {
		*buf = rd64(k + 24);
		*elem = 8;
	} else if (rd64(k + 16)) {
		*buf = rd64(k + 16);
		*elem = 4;
	} else if (rd64(k + 8)) {
		*buf = rd64(k + 8);
		*elem = 2;
	} else {
		*buf = rd64(k);
		*elem = 1;
	}
}

/* __amd_fillBufferAligned(..., pattern, patternSize, offset, size): work-item
 * id < size writes the patternSize-element pattern at element
 * offset + id*patternSize. */
static int run_fill_buffer_aligned(const kfdsim_dispatch *d, const uint8_t *k)
{
	uint64_t buf, elem;
	fill_target(k, &buf, &elem);
	uint64_t pattern = rd64(k + 32), psize = rd32(k + 40);
	uint64_t offset = rd64(k + 48), size = rd64(k + 56);
	uint64_t items = global_size(d, 0) < size ? global_size(d, 0) : size;
	uint64_t pbytes = psize * elem;
	if (items == 0 || psize == 0)
		return KFDSIM_OK;
	uint64_t start = buf + offset * elem;
	if (pbytes > (1ull << 20) || items > UINT64_MAX / pbytes) {
		complain(d, "__amd_rocclr_fillBufferAligned with an impossible size", NULL);
		return KFDSIM_UNKNOWN_KERNEL;
	}
	const uint8_t *pat = gpu_ptr(d->gpu_node, pattern, pbytes, false);
	uint8_t *t = pat ? gpu_ptr(d->gpu_node, start, items * pbytes, true) : NULL;
	if (pat == NULL || t == NULL)
		return KFDSIM_FAULT;
	for (uint64_t i = 0; i < items; i++)
		memcpy(t + i * pbytes, pat, pbytes);
	return KFDSIM_OK;
}

/* __amd_fillBufferAligned2D(..., pattern, patternSize, origin, width, height,
 * pitch): work-item (x, y) writes the pattern at element origin + y*pitch + x. */
static int run_fill_buffer_aligned_2d(const kfdsim_dispatch *d, const uint8_t *k)
{
	uint64_t buf, elem;
	fill_target(k, &buf, &elem);
	uint64_t pattern = rd64(k + 32), psize = rd32(k + 40);
	uint64_t origin = rd64(k + 48), width = rd64(k + 56), height = rd64(k + 64), pitch = rd64(k + 72);
	uint64_t nx = width < global_size(d, 0) ? width : global_size(d, 0);
	uint64_t ny = height < global_size(d, 1) ? height : global_size(d, 1);
	uint64_t pbytes = psize * elem;
	if (nx == 0 || ny == 0 || psize == 0)
		return KFDSIM_OK;
	if (pbytes > (1ull << 20)) {
		complain(d, "__amd_rocclr_fillBufferAligned2D with an impossible pattern", NULL);
		return KFDSIM_UNKNOWN_KERNEL;
	}
	const uint8_t *pat = gpu_ptr(d->gpu_node, pattern, pbytes, false);
	if (pat == NULL)
		return KFDSIM_FAULT;
	for (int pass = 0; pass < 2; pass++) {
		for (uint64_t y = 0; y < ny; y++) {
			uint64_t row = buf + (origin + y * pitch) * elem;
			if (pass == 0) {
				if (!gpu_access(d->gpu_node, row, (nx - 1) * elem + pbytes, true))
					return KFDSIM_FAULT;
				continue;
			}
			uint8_t *t = gpu_ptr(d->gpu_node, row, (nx - 1) * elem + pbytes, true);
			for (uint64_t x = 0; x < nx; x++)
				memcpy(t + x * elem, pat, pbytes);
		}
	}
	return KFDSIM_OK;
}

/* __amd_streamOpsWrite(ptrUint, ptrUlong, value): a 32-bit store when ptrUint
 * is set, else a 64-bit one. One work-item. */
static int run_stream_ops_write(const kfdsim_dispatch *d, const uint8_t *k)
{
	uint64_t p32 = rd64(k), p64 = rd64(k + 8), value = rd64(k + 16);
	uint64_t at = p32 ? p32 : p64, n = p32 ? 4 : 8;
	if (!gpu_access(d->gpu_node, at, n, true))
		return KFDSIM_FAULT;
	if (p32)
		__atomic_store_n((uint32_t *)(uintptr_t)at, (uint32_t)value, __ATOMIC_SEQ_CST);
	else
		__atomic_store_n((uint64_t *)(uintptr_t)at, value, __ATOMIC_SEQ_CST);
	return KFDSIM_OK;
}

/* How long a streamOpsWait may spin before the simulated GPU gives up and
 * faults the queue. Real hardware would wait forever; a test must not. */
#define STREAM_WAIT_LIMIT_NS (60ull * 1000 * 1000 * 1000)

static bool stream_wait_done(uint64_t cur, uint64_t value, uint64_t op, uint64_t mask, bool narrow)
{
	if (narrow) {
		uint32_t c = (uint32_t)cur, v = (uint32_t)value, m = (uint32_t)mask;
		switch (op) {
		case 0: return (c & m) >= v;
		case 1: return (c & m) == v;
		case 2: return ((c & m) & v) != 0;
		case 3: return ((c | v) & m) != m;
		}
		return true;
	}
	switch (op) {
	case 0: return (cur & mask) >= value;
	case 1: return (cur & mask) == value;
	case 2: return ((cur & mask) & value) != 0;
	case 3: return ((cur | value) & mask) != mask;
	}
	return true;
}

/* Spins until the condition of a stream wait holds, as run_stream_ops_wait:
 * KFDSIM_OK, KFDSIM_FAULT, or KFDSIM_UNKNOWN_KERNEL past the limit. */
static int spin_stream_wait(const kfdsim_dispatch *d, const char *name, uint64_t at, bool narrow,
			    uint64_t value, uint64_t op, uint64_t mask)
{
	uint64_t n = narrow ? 4 : 8;
	struct timespec start, now, nap = { 0, 20000 };
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		if (!gpu_access(d->gpu_node, at, n, false))
			return KFDSIM_FAULT;
		uint64_t cur = narrow ? __atomic_load_n((uint32_t *)(uintptr_t)at, __ATOMIC_SEQ_CST)
				      : __atomic_load_n((uint64_t *)(uintptr_t)at, __ATOMIC_SEQ_CST);
		if (stream_wait_done(cur, value, op, mask, narrow))
			return KFDSIM_OK;
		clock_gettime(CLOCK_MONOTONIC, &now);
		uint64_t waited = (uint64_t)(now.tv_sec - start.tv_sec) * 1000000000ull +
				  (uint64_t)now.tv_nsec - (uint64_t)start.tv_nsec;
		if (waited > STREAM_WAIT_LIMIT_NS) {
			complain(d, "stream wait still unsatisfied after 60 s", name);
			return KFDSIM_UNKNOWN_KERNEL;
		}
		nanosleep(&nap, NULL);
	}
}

/* __amd_streamOpsWait(ptrUint, ptrUlong, value, compareOp, mask): spins until
 * the condition holds (GEQ, EQ, AND, NOR); an unknown compareOp returns at
 * once, as the device library's switch does. GEQ compares unsigned: the
 * library casts the loaded value to a signed type and compares it with an
 * unsigned one, which C's conversions make an unsigned comparison. */
static int run_stream_ops_wait(const kfdsim_dispatch *d, const uint8_t *k)
{
	uint64_t p32 = rd64(k), p64 = rd64(k + 8), value = rd64(k + 16);
	uint64_t op = rd64(k + 24), mask = rd64(k + 32);
	if (op > 3)
		return KFDSIM_OK;
	return spin_stream_wait(d, "__amd_rocclr_streamOpsWait", p32 ? p32 : p64, p32 != 0, value, op, mask);
}

/* __amd_rocclr_batchMemOp(params, count): HIP 6.4.3 (hipStreamBatchMemOp)
 * calls the device library's __amd_batchMemOp (ROCm-Device-Libs amdblit.cl,
 * as comgr 6.4.3 embeds it), in which work-item i performs params[i]
 * alone, whatever count says: the grid HIP dispatches decides how many
 * run. Each element is 48 bytes: operation (u32) at 0, address at 8, the
 * value (u32 or u64) at 16, a wait's compare operation (u32) at 24.
 * Operations: 1 wait 32-bit, 2 write 32-bit, 4 wait 64-bit, 5 write
 * 64-bit; others do nothing. Waits compare with every bit (mask ~0). */
#define BATCH_MEM_OP_SIZE 48

static int run_batch_mem_op(const kfdsim_dispatch *d, const uint8_t *k)
{
	uint64_t params = rd64(k);
	uint64_t items = (uint64_t)d->grid[0] * d->grid[1] * d->grid[2];
	for (uint64_t i = 0; i < items; i++) {
		uint64_t p = params + i * BATCH_MEM_OP_SIZE;
		if (!gpu_access(d->gpu_node, p, 32, false))
			return KFDSIM_FAULT;
		const uint8_t *e = (const uint8_t *)(uintptr_t)p;
		uint32_t op = rd32(e), cmp = rd32(e + 24);
		uint64_t at = rd64(e + 8), value = rd64(e + 16);
		int r = KFDSIM_OK;
		switch (op) {
		case 1:
			if (cmp <= 3)
				r = spin_stream_wait(d, "__amd_rocclr_batchMemOp", at, true, (uint32_t)value, cmp, ~0ull);
			break;
		case 4:
			if (cmp <= 3)
				r = spin_stream_wait(d, "__amd_rocclr_batchMemOp", at, false, value, cmp, ~0ull);
			break;
		case 2:
			if (!gpu_access(d->gpu_node, at, 4, true))
				return KFDSIM_FAULT;
			__atomic_store_n((uint32_t *)(uintptr_t)at, (uint32_t)value, __ATOMIC_SEQ_CST);
			break;
		case 5:
			if (!gpu_access(d->gpu_node, at, 8, true))
				return KFDSIM_FAULT;
			__atomic_store_n((uint64_t *)(uintptr_t)at, value, __ATOMIC_SEQ_CST);
			break;
		}
		if (r != KFDSIM_OK)
			return r;
	}
	return KFDSIM_OK;
}

/* ---- HIP 6.4.3's blit program (clr rocblitcl.cpp, the source string in
 * libamdhip64.so.6) ------------------------------------------------------ */

/* __amd_rocclr_copyBuffer(src, dst, size, remainder, aligned_size, end_ptr,
 * next_chunk) of HIP 6.x: src and dst already include the origins; work-item
 * id copies element id, id+next_chunk, ... (16-byte elements when
 * aligned_size == 16, else 4-byte) while the element's destination address
 * is below end_ptr; work-item 0 then copies the last `remainder` bytes of
 * [0, size) byte by byte. Element j is reached iff j % next_chunk < the grid
 * size. A next_chunk of 0 with work to do would spin forever on hardware:
 * refused. */
static int run_copy_buffer_64(const kfdsim_dispatch *d, const uint8_t *k)
{
	uint64_t src = rd64(k), dst = rd64(k + 8), size = rd64(k + 16);
	uint32_t remainder = rd32(k + 24), aligned = rd32(k + 28);
	uint64_t end = rd64(k + 32), chunk = rd32(k + 40);
	uint64_t e = aligned == 16 ? 16 : 4, grid = global_size(d, 0);
	uint64_t n = end > dst ? (end - dst + e - 1) / e : 0; /* elements below end_ptr */
	if (n && grid && chunk == 0) {
		complain(d, "__amd_rocclr_copyBuffer with next_chunk 0 never ends", NULL);
		return KFDSIM_UNKNOWN_KERNEL;
	}
	if (grid == 0)
		return KFDSIM_OK;
	if (chunk <= grid) {
		int r = checked_copy(d, dst, src, n * e);
		if (r != KFDSIM_OK)
			return r;
	} else {
		for (uint64_t base = 0; base < n; base += chunk) {
			uint64_t m = n - base < grid ? n - base : grid;
			int r = checked_copy(d, dst + base * e, src + base * e, m * e);
			if (r != KFDSIM_OK)
				return r;
		}
	}
	if (remainder != 0) {
		if (remainder > size)
			return KFDSIM_FAULT; /* size - remainder wraps: far out of range */
		return checked_copy(d, dst + size - remainder, src + size - remainder, remainder);
	}
	return KFDSIM_OK;
}

/* __amd_rocclr_fillBufferAligned(buf, pattern, pattern_size, alignment,
 * end_ptr, next_chunk) of HIP 6.x: elements are `alignment` bytes (16, 8, 4
 * or 2; 1 otherwise); work-item id writes the pattern_size-element pattern
 * at element id*pattern_size, then next_chunk elements further on, while
 * the element's address is below end_ptr. */
static int run_fill_buffer_aligned_64(const kfdsim_dispatch *d, const uint8_t *k)
{
	uint64_t buf = rd64(k), pattern = rd64(k + 8);
	uint64_t psize = rd32(k + 16), alignment = rd32(k + 20);
	uint64_t end = rd64(k + 24), chunk = rd32(k + 32);
	uint64_t e = alignment == 16 || alignment == 8 || alignment == 4 || alignment == 2 ? alignment : 1;
	uint64_t grid = global_size(d, 0), pbytes = psize * e;
	if (grid == 0 || end <= buf)
		return KFDSIM_OK;
	if (chunk == 0 || pbytes == 0 || pbytes > (1ull << 20)) {
		complain(d, "__amd_rocclr_fillBufferAligned with an impossible pattern or chunk", NULL);
		return KFDSIM_UNKNOWN_KERNEL;
	}
	const uint8_t *pat = gpu_ptr(d->gpu_node, pattern, pbytes, false);
	if (pat == NULL)
		return KFDSIM_FAULT;
	for (uint64_t id = 0; id < grid; id++) {
		/* the kernel's id is an int: ids past 2^31 wrap */
		uint64_t at = (uint64_t)(int64_t)(int32_t)id * psize;
		for (uint64_t a = buf + at * e; a >= buf && a < end; a += chunk * e) {
			uint8_t *t = gpu_ptr(d->gpu_node, a, pbytes, true);
			if (t == NULL)
				return KFDSIM_FAULT;
			memcpy(t, pat, pbytes);
		}
		if (buf + at * e >= end)
			break; /* later work-items start further on */
	}
	return KFDSIM_OK;
}

#define P8(o) { (o), 8 }
#define P4(o) { (o), 4 }
#define V32(o) { (o), 32 }

static const hip_blit hip_blits[] = {
	{ "__amd_rocclr_copyBuffer", run_copy_buffer, 6,
	  { P8(0), P8(8), P8(16), P8(24), P8(32), P4(40) } },
	{ "__amd_rocclr_copyBufferAligned", run_copy_buffer_aligned, 6,
	  { P8(0), P8(8), P8(16), P8(24), P8(32), P4(40) } },
	{ "__amd_rocclr_copyBufferRect", run_copy_buffer_rect, 5,
	  { P8(0), P8(8), V32(32), V32(64), V32(96) } },
	{ "__amd_rocclr_copyBufferRectAligned", run_copy_buffer_rect_aligned, 5,
	  { P8(0), P8(8), V32(32), V32(64), V32(96) } },
	{ "__amd_rocclr_fillBufferAligned", run_fill_buffer_aligned, 8,
	  { P8(0), P8(8), P8(16), P8(24), P8(32), P4(40), P8(48), P8(56) } },
	{ "__amd_rocclr_fillBufferAligned2D", run_fill_buffer_aligned_2d, 10,
	  { P8(0), P8(8), P8(16), P8(24), P8(32), P4(40), P8(48), P8(56), P8(64), P8(72) } },
	{ "__amd_rocclr_streamOpsWrite", run_stream_ops_write, 4,
	  { P8(0), P8(8), P8(16), P8(24) } },
	{ "__amd_rocclr_streamOpsWait", run_stream_ops_wait, 5,
	  { P8(0), P8(8), P8(16), P8(24), P8(32) } },
	/* HIP 6.4.3 (its blit source in libamdhip64.so.6): copyBuffer and
	 * fillBufferAligned loop over chunks and take the end address;
	 * streamOpsWrite has no size argument. The others are as above. */
	{ "__amd_rocclr_copyBuffer", run_copy_buffer_64, 7,
	  { P8(0), P8(8), P8(16), P4(24), P4(28), P8(32), P4(40) } },
	{ "__amd_rocclr_fillBufferAligned", run_fill_buffer_aligned_64, 6,
	  { P8(0), P8(8), P4(16), P4(20), P8(24), P4(32) } },
	{ "__amd_rocclr_streamOpsWrite", run_stream_ops_write, 3,
	  { P8(0), P8(8), P8(16) } },
	{ "__amd_rocclr_batchMemOp", run_batch_mem_op, 2,
	  { P8(0), P4(8) } },
};

static int run_hip_blit(const kfdsim_dispatch *d, const image *img, const char *name)
{
	bool known = false;
	for (size_t i = 0; i < sizeof hip_blits / sizeof hip_blits[0]; i++)
		known = known || strcmp(hip_blits[i].name, name) == 0;
	if (!known) {
		complain(d, "HIP blit kernel the simulated GPU does not implement", name);
		return KFDSIM_UNKNOWN_KERNEL;
	}
	const uint8_t *desc;
	uint64_t len;
	arg_meta got[MAX_ARGS];
	unsigned n = 0;
	if (!find_metadata_note(img, &desc, &len) ||
	    !kernel_args_from_metadata(desc, len, name, got, &n)) {
		complain(d, "no usable metadata note for this kernel in its code object", name);
		return KFDSIM_UNKNOWN_KERNEL;
	}
	/* The kernel of this name whose layout the metadata note has: each
	 * HIP release's blit source is its own. */
	const hip_blit *b = NULL;
	for (size_t i = 0; b == NULL && i < sizeof hip_blits / sizeof hip_blits[0]; i++) {
		const hip_blit *c = &hip_blits[i];
		bool same = strcmp(c->name, name) == 0 && n == c->nargs;
		for (unsigned j = 0; same && j < n; j++)
			same = got[j].offset == c->args[j].offset && got[j].size == c->args[j].size;
		if (same)
			b = c;
	}
	if (!b) {
		complain(d, "argument layout in the metadata note is none of HIP 5.2.3's, 5.7.1's or 6.4.3's", name);
		return KFDSIM_UNKNOWN_KERNEL;
	}
	const arg_meta *last = &b->args[b->nargs - 1];
	if (!gpu_access(d->gpu_node, d->kernarg, last->offset + last->size, false))
		return KFDSIM_FAULT;
	return b->run(d, (const uint8_t *)(uintptr_t)d->kernarg);
}

/* ---- the entry point ----------------------------------------------------- */

/* KFDSIM_EXEC_TRACE=1 prints the kernel of every dispatch to stderr. */
static bool trace_enabled(void)
{
	static int state; /* 0 unknown, 1 off, 2 on */
	int s = __atomic_load_n(&state, __ATOMIC_RELAXED);
	if (s == 0) {
		const char *v = getenv("KFDSIM_EXEC_TRACE");
		s = v && *v && strcmp(v, "0") != 0 ? 2 : 1;
		__atomic_store_n(&state, s, __ATOMIC_RELAXED);
	}
	return s == 2;
}

static void trace(const kfdsim_dispatch *d, const char *name)
{
	if (trace_enabled())
		fprintf(stderr, "kfdsim exec: queue %llu: %s grid %u×%u×%u\n",
			(unsigned long long)d->queue_id, name, d->grid[0], d->grid[1], d->grid[2]);
}

KFDSIM_EXPORT int kfdsim_exec_dispatch(const kfdsim_dispatch *d)
{
	/* The packet processor reads the kernel descriptor first. */
	if (!gpu_access(d->gpu_node, d->kernel_object, 64, false))
		return KFDSIM_FAULT;

	image img;
	if (find_image(d->gpu_node, d->kernel_object, &img)) {
		/* The loader maps the whole image for the GPU; reading it to find
		 * the symbol stands for the GPU reading its own code. */
		if (!gpu_access(d->gpu_node, img.base, img.size, false))
			return KFDSIM_FAULT;
		char name[256];
		if (!name_descriptor(&img, d->kernel_object - img.base, name, sizeof name)) {
			complain(d, "no .kd symbol in its code object names this descriptor", NULL);
			return KFDSIM_UNKNOWN_KERNEL;
		}
		trace(d, name);
		if (strncmp(name, "__amd_rocclr_", 13) == 0)
			return run_hip_blit(d, &img, name);
		kfdsim_executor_fn fn = atomic_load_explicit(&registered_executor, memory_order_acquire);
		if (!fn) {
			complain(d, "no executor registered for this kernel", name);
			return KFDSIM_UNKNOWN_KERNEL;
		}
		kfdsim_kernel_call call = { name, img.base, img.size, d };
		int r = fn(&call);
		if (r != KFDSIM_OK && r != KFDSIM_FAULT) {
			if (r != KFDSIM_UNKNOWN_KERNEL)
				complain(d, "executor returned an undefined status", name);
			else
				complain(d, "the registered executor refused this kernel (unknown to it, or its metadata differs)", name);
			return KFDSIM_UNKNOWN_KERNEL;
		}
		return r;
	}

	switch (rocr_blit_kind((const uint8_t *)(uintptr_t)d->kernel_object)) {
	case ROCR_COPY_ALIGNED:
		trace(d, "ROCr CopyAligned");
		return run_rocr_copy_aligned(d);
	case ROCR_COPY_MISALIGNED:
		trace(d, "ROCr CopyMisaligned");
		return run_rocr_copy_misaligned(d);
	case ROCR_FILL:
		trace(d, "ROCr Fill");
		return run_rocr_fill(d);
	case ROCR_NONE:
		break;
	}
	complain(d, "descriptor is in no loaded code object and is not one of ROCr's blit kernels", NULL);
	return KFDSIM_UNKNOWN_KERNEL;
}
