// rocsync sum reductions: multi-workgroup kernels that combine their
// partials through a zeroed workspace and leave it zeroed (nvFuser #1829:
// no memset before each launch).
//
// Every kernel has the same signature, so one kernarg layout (see
// kernels/reduce.go, ReduceLayout) serves all six:
//
//   kernel void rocsync_sum_<all|rows|cols>_<f32|f64>(
//       global T* out, global const T* in, global uint* workspace,
//       ulong rows, ulong cols)
//
// in is a row-major rows x cols matrix. sum_all writes out[0], the sum of
// all rows*cols elements; sum_rows writes out[i] = sum_j in[i][j] (rows
// outputs); sum_cols writes out[j] = sum_i in[i][j] (cols outputs).
//
// The combination order is fixed by (rows, cols) alone, never by the grid
// or the timing, so every launch gives the same bits, and kernels/reduce.go
// reproduces them (ReduceBytes):
//   - each output reduces K elements (K = rows*cols, cols or rows), split
//     into S = clamp(ceil(K / RS_CHUNK), 1, RS_MAX_SLICES) slices of
//     L = ceil(K / S) elements; slice s is elements [s*L, min(s*L+L, K));
//   - within a slice, lane l (0..255) adds elements l, l+256, l+512, ... in
//     order, starting from +0; then the 256 lane sums are combined by a
//     fixed tree: for st = 128, 64, ..., 1: v[l] = v[l] + v[l+st] (l < st);
//   - with S = 1 that is the output; otherwise the slice's value is a
//     partial, and the S partials are combined by the same tree, lane l
//     starting from partial l (+0 for l >= S).
//
// Work is split into units (output j, slice s), handed to workgroups in a
// grid-stride loop, so any number of workgroups computes the same result.
// With S > 1, the workgroup that finishes a unit stores its partial in the
// workspace and increments output j's semaphore (a release); the one that
// brings it to S (the last) acquires, combines the S partials in index
// order, writes out[j], and sets the semaphore and the partials it used back
// to zero before it exits. No workgroup ever waits for another, so nothing
// can deadlock. The workspace (ReduceWorkspaceSize bytes; none when S = 1)
// is M uint semaphores, padded to 8 bytes, then M*S partials of T. It must
// be zero when a launch starts, and is zero again when the launch ends.
//
// Dispatch: workgroups of exactly 256 work-items (reqd_work_group_size) and a
// grid that is a whole number of workgroups, one-dimensional. The kernels
// use 256*sizeof(T)+4 bytes of static LDS (group_segment_fixed_size).
//
// Built like elementwise.cl: compiler builtins only (-nogpulib), no hidden
// arguments. The memory-model operations are per target: AMDGCN uses the
// OpenCL 2.0 atomic builtins (__opencl_atomic_*), which lower to atomic
// instructions with the cache maintenance the scope needs; on NVPTX clang
// 22 lowers an acq_rel atomicrmw to a relaxed atom, so the kernels fence
// explicitly there (membar.gl, as CUDA's __threadfence), the classic
// threadFenceReduction pattern.

#pragma OPENCL FP_CONTRACT OFF
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

#define RS_LANES 256
#define RS_CHUNK 4096
#define RS_MAX_SLICES 256

#if defined(__AMDGCN__)

static inline uint rs_lane(void) { return __builtin_amdgcn_workitem_id_x(); }
static inline ulong rs_group(void) { return (ulong)__builtin_amdgcn_workgroup_id_x(); }

// The number of workgroups, from the dispatch packet: grid_size_x (u32 at
// byte 12) over workgroup_size_x (u16 at byte 4).
static inline ulong rs_groups(void) {
    __constant ushort* p16 = (__constant ushort*)__builtin_amdgcn_dispatch_ptr();
    __constant uint* p32 = (__constant uint*)__builtin_amdgcn_dispatch_ptr();
    ulong wg = (ulong)p16[2];
    return ((ulong)p32[3] + wg - 1) / wg;
}

// barrier(CLK_LOCAL_MEM_FENCE | CLK_GLOBAL_MEM_FENCE) without the library.
static inline void rs_barrier(void) {
    __builtin_amdgcn_fence(__ATOMIC_RELEASE, "workgroup");
    __builtin_amdgcn_s_barrier();
    __builtin_amdgcn_fence(__ATOMIC_ACQUIRE, "workgroup");
}

// rs_arrive adds one to the semaphore, releasing the partial this work-item
// stored, and returns the old count; the last arriver's read also acquires.
static inline uint rs_arrive(global uint* sem) {
    return __opencl_atomic_fetch_add((volatile global atomic_uint*)sem, 1u, __ATOMIC_ACQ_REL,
                                     __OPENCL_MEMORY_SCOPE_DEVICE);
}

// rs_acquire makes the partials every arriver released visible to this
// work-item: an acquire load of the semaphore reads the last increment,
// which is in the release sequence of every earlier one.
static inline void rs_acquire(global uint* sem) {
    (void)__opencl_atomic_load((volatile global atomic_uint*)sem, __ATOMIC_ACQUIRE,
                               __OPENCL_MEMORY_SCOPE_DEVICE);
}

static inline void rs_reset(global uint* sem) {
    __opencl_atomic_store((volatile global atomic_uint*)sem, 0u, __ATOMIC_RELAXED,
                          __OPENCL_MEMORY_SCOPE_DEVICE);
}

#elif defined(__NVPTX__)

static inline uint rs_lane(void) { return __nvvm_read_ptx_sreg_tid_x(); }
static inline ulong rs_group(void) { return (ulong)__nvvm_read_ptx_sreg_ctaid_x(); }
static inline ulong rs_groups(void) { return (ulong)__nvvm_read_ptx_sreg_nctaid_x(); }

// bar.sync orders shared and global memory within the block.
static inline void rs_barrier(void) { __nvvm_barrier_sync(0); }

static inline uint rs_arrive(global uint* sem) {
    __nvvm_membar_gl(); // release: the partial before the increment
    uint old = __opencl_atomic_fetch_add((volatile global atomic_uint*)sem, 1u, __ATOMIC_RELAXED,
                                         __OPENCL_MEMORY_SCOPE_DEVICE);
    __nvvm_membar_gl(); // acquire, for the last arriver
    return old;
}

static inline void rs_acquire(global uint* sem) {
    (void)sem;
    __nvvm_membar_gl();
}

static inline void rs_reset(global uint* sem) { *(volatile global uint*)sem = 0u; }

#else
#error "reduce.cl supports only the AMDGCN and NVPTX targets"
#endif

// RS_TREE combines lds[0..255] into lds[0] in the fixed order; every
// work-item of the workgroup must call it (it has barriers).
#define RS_TREE(lds, l)                                                              \
    for (uint st = RS_LANES / 2; st > 0; st >>= 1) {                                 \
        if ((l) < st) {                                                              \
            lds[l] = lds[l] + lds[(l) + st];                                         \
        }                                                                            \
        rs_barrier();                                                                \
    }

// RS_REDUCE defines one kernel. KIND selects the shape: M outputs of K
// elements, output j's element t at in[j*OUTER + t*INNER].
#define RS_REDUCE(KIND, SUFFIX, T, M, K, OUTER, INNER)                              \
    kernel __attribute__((reqd_work_group_size(RS_LANES, 1, 1))) void               \
    rocsync_sum_##KIND##_##SUFFIX(global T* out, global const T* in,                \
                                  global uint* workspace, ulong rows, ulong cols) { \
        local T lds[RS_LANES];                                                       \
        local uint last[1];                                                          \
        const uint l = rs_lane();                                                    \
        const ulong m = (M), k = (K);                                                \
        ulong s_count = (k + RS_CHUNK - 1) / RS_CHUNK;                               \
        s_count = s_count < 1 ? 1 : (s_count > RS_MAX_SLICES ? RS_MAX_SLICES : s_count); \
        const ulong len = (k + s_count - 1) / s_count;                               \
        global uint* sems = workspace;                                               \
        global T* partials = (global T*)((global uchar*)workspace + ((4 * m + 7) & ~(ulong)7)); \
        const ulong units = m * s_count, groups = rs_groups();                       \
        for (ulong u = rs_group(); u < units; u += groups) {                         \
            const ulong j = u / s_count, s = u % s_count;                            \
            const ulong lo = s * len, hi = (lo + len < k) ? lo + len : k;            \
            const ulong base = j * (OUTER);                                          \
            T acc = (T)0;                                                            \
            for (ulong t = lo + l; t < hi; t += RS_LANES) {                          \
                acc = acc + in[base + t * (INNER)];                                  \
            }                                                                        \
            lds[l] = acc;                                                            \
            rs_barrier();                                                            \
            RS_TREE(lds, l)                                                          \
            if (s_count == 1) {                                                      \
                if (l == 0) {                                                        \
                    out[j] = lds[0];                                                 \
                }                                                                    \
                continue;                                                            \
            }                                                                        \
            if (l == 0) {                                                            \
                partials[j * s_count + s] = lds[0];                                  \
                last[0] = rs_arrive(&sems[j]) == (uint)(s_count - 1);                \
            }                                                                        \
            rs_barrier();                                                            \
            if (last[0]) {                                                           \
                rs_acquire(&sems[j]);                                                \
                volatile global T* mine = partials + j * s_count;                    \
                T v = (T)0;                                                          \
                if (l < s_count) {                                                   \
                    v = mine[l];                                                     \
                    mine[l] = (T)0;                                                  \
                }                                                                    \
                lds[l] = v;                                                          \
                rs_barrier();                                                        \
                RS_TREE(lds, l)                                                      \
                if (l == 0) {                                                        \
                    out[j] = lds[0];                                                 \
                    rs_reset(&sems[j]);                                              \
                }                                                                    \
            }                                                                        \
            rs_barrier();                                                            \
        }                                                                            \
    }

#define RS_ALL_REDUCTIONS(SUFFIX, T)                                                 \
    RS_REDUCE(all, SUFFIX, T, 1, rows * cols, 0, 1)                                  \
    RS_REDUCE(rows, SUFFIX, T, rows, cols, cols, 1)                                  \
    RS_REDUCE(cols, SUFFIX, T, cols, rows, 1, cols)

RS_ALL_REDUCTIONS(f32, float)
RS_ALL_REDUCTIONS(f64, double)
