// The gemm kernels of simblas, the test-only librocblas for the simulated
// GPU (see doc.go). On the simulated GPU they run by name in the Go executor
// (hsa/kfdsim), which computes what this source computes; on a real GPU they
// would run as written.
//
//   C = alpha*op(A)*op(B) + beta*C, column-major, op(A) m×k, op(B) k×n,
//   one work-item per element of C: x = row i, y = column j.
//
// rocBLAS conventions: when alpha == 0 or k == 0, A and B are not read; when
// beta == 0, C is not read (a NaN in C does not survive).
//
// Built with -nogpulib (no device libraries): the work-item ids come from
// compiler builtins and the dispatch packet, so the code object has no hidden
// arguments to fill and no undefined symbols. FP_CONTRACT is OFF: each
// multiply and add is rounded on its own, which the Go reference reproduces.

#pragma OPENCL FP_CONTRACT OFF
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

// hsa_kernel_dispatch_packet_t through the dispatch pointer: workgroup_size_x
// and _y are the u16s at bytes 4 and 6.
static inline ulong sb_global_id(int dim) {
    __constant ushort* packet = (__constant ushort*)__builtin_amdgcn_dispatch_ptr();
    if (dim == 0)
        return (ulong)__builtin_amdgcn_workgroup_id_x() * (ulong)packet[2] +
               (ulong)__builtin_amdgcn_workitem_id_x();
    return (ulong)__builtin_amdgcn_workgroup_id_y() * (ulong)packet[3] +
           (ulong)__builtin_amdgcn_workitem_id_y();
}

#define SB_GEMM(NAME, T)                                                              \
    kernel void NAME(global const T* a, global const T* b, global T* c,               \
                     ulong m, ulong n, ulong k, ulong lda, ulong ldb, ulong ldc,      \
                     T alpha, T beta, uint trans_a, uint trans_b) {                   \
        const ulong i = sb_global_id(0), j = sb_global_id(1);                         \
        if (i >= m || j >= n)                                                         \
            return;                                                                   \
        T r = 0;                                                                      \
        if (alpha != 0 && k != 0) {                                                   \
            T sum = 0;                                                                \
            for (ulong l = 0; l < k; l++) {                                           \
                const T x = trans_a ? a[l + i * lda] : a[i + l * lda];                \
                const T y = trans_b ? b[j + l * ldb] : b[l + j * ldb];                \
                sum = sum + x * y;                                                    \
            }                                                                         \
            r = alpha * sum;                                                          \
        }                                                                             \
        if (beta != 0)                                                                \
            r = r + beta * c[i + j * ldc];                                            \
        c[i + j * ldc] = r;                                                           \
    }

SB_GEMM(simblas_sgemm, float)
SB_GEMM(simblas_dgemm, double)
