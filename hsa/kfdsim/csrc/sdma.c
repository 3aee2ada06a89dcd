/*
 * The SDMA engine: one thread per SDMA queue, processing the packets ROCr's
 * BlitSdmaV4/V5 (gfx9/gfx10) write: COPY_LINEAR, COPY_LINEAR_RECT, FENCE,
 * TRAP, POLL_REGMEM (memory polls; ROCr's HDP flush, an always-true
 * register poll, completes at once),
 * ATOMIC (ADD64), CONST_FILL (dword), TIMESTAMP (global), GCR, NOP.
 *
 * The ring is a byte ring; the read and write pointers are 64-bit monotonic
 * byte offsets in the thunk's queue memory (it passes their addresses to
 * CREATE_QUEUE), and ROCr rings the
 * doorbell with the new write offset. Every memory access of a packet is
 * checked with kfdsim_gpu_access first: an unmapped source or destination
 * is a VM fault (the MEMORY event), and the engine stops. A packet the engine
 * does not know also stops it; since an SDMA queue has no error signal in
 * ROCr, that is reported as a VM fault at the packet's address, so it reaches
 * the application's system event handler (or aborts, as any GPU fault does
 * without one) instead of leaving a copy's waiter hanging silently.
 */
#include <string.h>

#include "kfdsim_int.h"

enum {
	OP_NOP = 0,
	OP_COPY = 1,
	OP_FENCE = 5,
	OP_TRAP = 6,
	OP_POLL_REGMEM = 8,
	OP_ATOMIC = 10,
	OP_CONST_FILL = 11,
	OP_TIMESTAMP = 13,
	OP_GCR = 17,
	SUBOP_COPY_LINEAR = 0,
	SUBOP_COPY_LINEAR_RECT = 4,
	SUBOP_TIMESTAMP_GET_GLOBAL = 2,
	ATOMIC_ADD64 = 47,
};

static uint64_t packets_done;

/* Test hook: SDMA packets completed since load, so a test can tell the SDMA
 * path from ROCr's blit-kernel fallback. */
__attribute__((visibility("default"))) uint64_t kfdsim_test_sdma_packets(void)
{
	return __atomic_load_n(&packets_done, __ATOMIC_ACQUIRE);
}

static uint32_t ring_dw(kfdsim_queue *q, uint64_t off)
{
	uint32_t v;
	memcpy(&v, q->ring + (off % q->ring_bytes), 4);
	return v;
}

static uint64_t addr64(uint32_t lo, uint32_t hi) { return (uint64_t)lo | ((uint64_t)hi << 32); }

static void sdma_stop(kfdsim_queue *q, uint64_t pkt_off, const char *why)
{
	uint64_t va = (uint64_t)(uintptr_t)(q->ring + (pkt_off % q->ring_bytes));
	fprintf(stderr, "kfdsim: SDMA queue %llu on GPU node %u: %s at ring offset %#llx; engine stopped\n",
		(unsigned long long)q->id, q->node, why, (unsigned long long)pkt_off);
	kfdsim_vm_fault(q->node, va, 0, 1);
	kfdsim_queue_fault(q, 0, why);
}

/* Size in bytes of the packet at off (0 when unknown). */
static uint32_t packet_bytes(uint32_t op, uint32_t sub)
{
	switch (op) {
	case OP_NOP: return 4;
	case OP_COPY: return sub == SUBOP_COPY_LINEAR ? 28 : sub == SUBOP_COPY_LINEAR_RECT ? 52 : 0;
	case OP_FENCE: return 16;
	case OP_TRAP: return 8;
	case OP_POLL_REGMEM: return 24;
	case OP_ATOMIC: return 32;
	case OP_CONST_FILL: return 20;
	case OP_TIMESTAMP: return sub == SUBOP_TIMESTAMP_GET_GLOBAL ? 12 : 0;
	case OP_GCR: return 20;
	default: return 0;
	}
}

static int poll_met(uint32_t func, uint32_t v, uint32_t ref)
{
	switch (func) {
	case 0: return 1;
	case 1: return v < ref;
	case 2: return v <= ref;
	case 3: return v == ref;
	case 4: return v != ref;
	case 5: return v >= ref;
	case 6: return v > ref;
	default: return 0;
	}
}

/* Runs the packet at off: 0 done, -1 faulted, -2 stopping. */
static int run_packet(kfdsim_queue *q, uint64_t off, uint32_t *len)
{
	uint32_t dw[13];
	uint32_t hdr = ring_dw(q, off);
	uint32_t op = hdr & 0xff, sub = (hdr >> 8) & 0xff;
	*len = packet_bytes(op, sub);
	if (*len == 0) {
		sdma_stop(q, off, "unknown SDMA packet");
		return -1;
	}
	for (uint32_t i = 0; i < *len / 4; i++) dw[i] = ring_dw(q, off + 4 * i);
	switch (op) {
	case OP_NOP:
	case OP_GCR:
		return 0; /* caches are coherent in the simulation */
	case OP_COPY:
		if (sub == SUBOP_COPY_LINEAR) {
			uint64_t n = (uint64_t)(dw[1] & 0x3fffff) + 1; /* gfx9+: count is bytes - 1 */
			uint64_t src = addr64(dw[3], dw[4]), dst = addr64(dw[5], dw[6]);
			const void *sp = kfdsim_gpu_ptr(q->node, src, n, false);
			void *dp = sp ? kfdsim_gpu_ptr(q->node, dst, n, true) : NULL;
			if (sp == NULL || dp == NULL) return -1;
			memmove(dp, sp, n);
			return 0;
		} else {
			uint32_t el = (hdr >> 29) & 7;
			uint64_t sbase = addr64(dw[1], dw[2]), dbase = addr64(dw[6], dw[7]);
			uint64_t sx = dw[3] & 0x3fff, sy = (dw[3] >> 16) & 0x3fff, sz = dw[4] & 0x7ff;
			uint64_t spitch = ((dw[4] >> 13) & 0x7ffff) + 1, sslice = (dw[5] & 0xfffffff) + 1;
			uint64_t dx = dw[8] & 0x3fff, dy = (dw[8] >> 16) & 0x3fff, dz = dw[9] & 0x7ff;
			uint64_t dpitch = ((dw[9] >> 13) & 0x7ffff) + 1, dslice = (dw[10] & 0xfffffff) + 1;
			uint64_t rx = (dw[11] & 0x3fff) + 1, ry = ((dw[11] >> 16) & 0x3fff) + 1, rz = (dw[12] & 0x7ff) + 1;
			if (el > 4) {
				sdma_stop(q, off, "COPY_LINEAR_RECT with an element size over 16 bytes");
				return -1;
			}
			uint64_t row = rx << el;
			for (uint64_t z = 0; z < rz; z++)
				for (uint64_t y = 0; y < ry; y++) {
					uint64_t s = sbase + ((sx + (sy + y) * spitch + (sz + z) * sslice) << el);
					uint64_t d = dbase + ((dx + (dy + y) * dpitch + (dz + z) * dslice) << el);
					const void *sp = kfdsim_gpu_ptr(q->node, s, row, false);
					void *dp = sp ? kfdsim_gpu_ptr(q->node, d, row, true) : NULL;
					if (sp == NULL || dp == NULL) return -1;
					memmove(dp, sp, row);
				}
			return 0;
		}
	case OP_FENCE: {
		uint64_t a = addr64(dw[1], dw[2]);
		uint32_t *p = kfdsim_gpu_ptr(q->node, a, 4, true);
		if (p == NULL) return -1;
		__atomic_store_n(p, dw[3], __ATOMIC_RELEASE);
		return 0;
	}
	case OP_TRAP:
		/* KFD's SDMA trap handler signals the event named by the context. */
		kfdsim_event_fire(dw[1] & 0x0fffffff);
		return 0;
	case OP_POLL_REGMEM: {
		int hdp_flush = (hdr >> 26) & 1, func = (hdr >> 28) & 7, mem = (hdr >> 31) & 1;
		/* ROCr's HDP flush is a register poll that always passes (func 0);
		 * there is no HDP to flush here. */
		if (hdp_flush || (!mem && func == 0)) return 0;
		if (!mem) {
			sdma_stop(q, off, "POLL_REGMEM on a register");
			return -1;
		}
		uint64_t a = addr64(dw[1], dw[2]);
		backoff b = {0, 0};
		for (;;) {
			uint32_t *p = kfdsim_gpu_ptr(q->node, a, 4, false);
			if (p == NULL) return -1;
			uint32_t v = __atomic_load_n(p, __ATOMIC_ACQUIRE) & dw[4];
			if (poll_met((uint32_t)func, v, dw[3])) return 0;
			if (kfdsim_queue_stopping(q)) return -2;
			backoff_wait(&b);
		}
	}
	case OP_ATOMIC: {
		uint32_t operation = (hdr >> 25) & 0x7f;
		uint64_t a = addr64(dw[1], dw[2]);
		if (operation != ATOMIC_ADD64) {
			sdma_stop(q, off, "unsupported SDMA atomic operation");
			return -1;
		}
		uint64_t *p = kfdsim_gpu_ptr(q->node, a, 8, true);
		if (p == NULL) return -1;
		__atomic_fetch_add(p, addr64(dw[3], dw[4]), __ATOMIC_SEQ_CST);
		return 0;
	}
	case OP_CONST_FILL: {
		uint32_t fillsize = (hdr >> 30) & 3;
		uint64_t a = addr64(dw[1], dw[2]);
		if (fillsize != 2) {
			sdma_stop(q, off, "CONST_FILL of other than dwords");
			return -1;
		}
		uint64_t n = (uint64_t)(dw[4] & 0x3fffff) + 4; /* gfx9+: bytes - 4 for dword fills */
		uint32_t *p = kfdsim_gpu_ptr(q->node, a, n, true);
		if (p == NULL) return -1;
		for (uint64_t i = 0; i < n / 4; i++) p[i] = dw[3];
		return 0;
	}
	case OP_TIMESTAMP: {
		uint64_t a = addr64(dw[1], dw[2]);
		uint64_t *p = kfdsim_gpu_ptr(q->node, a, 8, true);
		if (p == NULL) return -1;
		__atomic_store_n(p, kfdsim_now_ns(), __ATOMIC_RELEASE);
		return 0;
	}
	}
	return 0;
}

void kfdsim_sdma_loop(kfdsim_queue *q)
{
	backoff b = {0, 0};
	while (!kfdsim_queue_stopping(q)) {
		if (kfdsim_queue_paused(q)) {
			backoff_wait(&b);
			continue;
		}
		uint64_t rd = __atomic_load_n(q->rptr, __ATOMIC_ACQUIRE);
		uint64_t wr = __atomic_load_n(q->doorbell, __ATOMIC_ACQUIRE);
		if (wr <= rd) {
			backoff_wait(&b);
			continue;
		}
		backoff_reset(&b);
		uint32_t len = 0;
		int rc = run_packet(q, rd, &len);
		if (rc != 0) continue;
		if (rd + len > wr) {
			sdma_stop(q, rd, "packet runs past the write pointer");
			continue;
		}
		KFDSIM_DEBUG("SDMA queue %llu: op %u at %#llx", (unsigned long long)q->id, ring_dw(q, rd) & 0xff,
			     (unsigned long long)rd);
		__atomic_fetch_add(&packets_done, 1, __ATOMIC_RELEASE);
		__atomic_store_n(q->rptr, rd + len, __ATOMIC_RELEASE);
	}
}
