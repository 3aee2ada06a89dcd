// rocsync elementwise kernels.
//
// Every kernel has the same signature, so that one kernarg layout (see
// kernels/args.go) serves all of them:
//
//   kernel void rocsync_<op>_<f32|f64>(global T* out, global const T* a,
//                                      global const T* b, T alpha, ulong n)
//
// Kernels that do not read a or b ignore those pointers (they may be 0).
// out may alias a or b exactly (in-place operation): each work-item reads
// a[i] and b[i] before it writes out[i], and no pointer is declared restrict.
//
// The source uses compiler builtins only. It is compiled with -nogpulib, so
// neither the AMD device libraries nor libclc/libdevice are linked: a call to
// an OpenCL library function such as get_global_id() or exp() would stay an
// undefined symbol. build.sh checks that no code object has one.
//
// Floating-point behaviour is chosen so that the CPU references in
// kernels/ref.go reproduce the results bit for bit (NaN payloads aside):
//   - division and sqrt are correctly rounded (-cl-fp32-correctly-rounded-divide-sqrt
//     for f32; f64 is always correctly rounded);
//   - FP_CONTRACT is OFF, so axpy is round(round(alpha*a)+b), never an fma;
//   - relu is (a > 0 ? a : 0): NaN and -0 give +0; relu_grad is
//     (a > 0 ? b : 0), the gradient b passed back through relu(a);
//   - exp is implemented here (rs_exp_f64), because neither AMDGPU nor NVPTX
//     can lower llvm.exp.f64 without a library ("no libcall available for
//     fexp"), and NVPTX cannot lower llvm.exp.f32 either. f32 exp is the f64
//     result rounded to float, so both dtypes share one tested implementation
//     (kernels/exp_test.go holds a Go port). Its error is within 1 ulp of the
//     exact result for f64; for f32 it is correctly rounded except in rare
//     double-rounding cases.

#pragma OPENCL FP_CONTRACT OFF
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

#if defined(__AMDGCN__)

// hsa_kernel_dispatch_packet_t, read through the dispatch pointer (s[4:5]):
// workgroup_size_x is the u16 at byte 4, grid_size_x the u32 at byte 12.
static inline ulong rs_global_id(void) {
    __constant ushort* packet = (__constant ushort*)__builtin_amdgcn_dispatch_ptr();
    return (ulong)__builtin_amdgcn_workgroup_id_x() * (ulong)packet[2] +
           (ulong)__builtin_amdgcn_workitem_id_x();
}

// grid_size_x counts work-items (not workgroups), and every global id is
// below it, so it is the stride of the grid-stride loop.
static inline ulong rs_grid_stride(void) {
    __constant uint* packet = (__constant uint*)__builtin_amdgcn_dispatch_ptr();
    return (ulong)packet[3];
}

#elif defined(__NVPTX__)

static inline ulong rs_global_id(void) {
    return (ulong)__nvvm_read_ptx_sreg_ctaid_x() * (ulong)__nvvm_read_ptx_sreg_ntid_x() +
           (ulong)__nvvm_read_ptx_sreg_tid_x();
}

static inline ulong rs_grid_stride(void) {
    return (ulong)__nvvm_read_ptx_sreg_nctaid_x() * (ulong)__nvvm_read_ptx_sreg_ntid_x();
}

#else
#error "elementwise.cl supports only the AMDGCN and NVPTX targets"
#endif

// rs_exp_f64 computes e^x to within 1 ulp.
//
// Reduction: x = k*ln2 + r with k = rint(x/ln2) and |r| <= ln2/2, using a
// two-part ln2 (Cody-Waite) and fma, so r carries no cancellation error.
// exp(r) = 1 + r + r^2*(1/2! + r/3! + ... + r^11/13!); the Taylor remainder
// for |r| <= 0.347 is below 6e-18, well under half an ulp, and adding the
// small terms to 1 last keeps the rounding error near half an ulp.
// Scaling by 2^k is done as two exact multiplications by normal powers of
// two, so a subnormal result is rounded only once.
//
// x is clamped to [-746, 710] first: beyond those bounds the result is 0 or
// +inf anyway, which the clamped input reproduces, and the clamp keeps k in
// int range. A NaN input is returned unchanged.
static inline double rs_exp_f64(double x) {
    double xc = __builtin_fmin(__builtin_fmax(x, -746.0), 710.0);
    double k = __builtin_rint(xc * 0x1.71547652b82fep+0);
    double r = __builtin_fma(-k, 0x1.62e42fefa39efp-1, xc);
    r = __builtin_fma(-k, 0x1.abc9e3b39803fp-56, r);

    double p = 0x1.6124613a86d09p-33;                 // 1/13!
    p = __builtin_fma(p, r, 0x1.1eed8eff8d898p-29);   // 1/12!
    p = __builtin_fma(p, r, 0x1.ae64567f544e4p-26);   // 1/11!
    p = __builtin_fma(p, r, 0x1.27e4fb7789f5cp-22);   // 1/10!
    p = __builtin_fma(p, r, 0x1.71de3a556c734p-19);   // 1/9!
    p = __builtin_fma(p, r, 0x1.a01a01a01a01ap-16);   // 1/8!
    p = __builtin_fma(p, r, 0x1.a01a01a01a01ap-13);   // 1/7!
    p = __builtin_fma(p, r, 0x1.6c16c16c16c17p-10);   // 1/6!
    p = __builtin_fma(p, r, 0x1.1111111111111p-7);    // 1/5!
    p = __builtin_fma(p, r, 0x1.5555555555555p-5);    // 1/4!
    p = __builtin_fma(p, r, 0x1.5555555555555p-3);    // 1/3!
    p = __builtin_fma(p, r, 0x1.0000000000000p-1);    // 1/2!
    p = __builtin_fma(p, r * r, r);                   // r + r^2*(...)
    p = 1.0 + p;

    int ki = (int)k;             // k is in [-1077, 1025]
    int k1 = ki / 2;             // both halves keep 2^k1, 2^k2 normal
    int k2 = ki - k1;
    double s1 = as_double((ulong)(k1 + 1023) << 52);
    double s2 = as_double((ulong)(k2 + 1023) << 52);
    double z = (p * s1) * s2;
    return x != x ? x : z;
}

static inline float rs_exp_f32(float x) {
    return (float)rs_exp_f64((double)x);
}

// RS_KERNEL defines one kernel. EXPR computes out[i] from ai = a[i],
// bi = b[i] and alpha; the loads of a and b are written only for ops that
// read them (READ_A/READ_B), so fill and the unary ops never touch the
// unused pointers.
#define RS_LOAD_1(p) p[i]
#define RS_LOAD_0(p) 0

#define RS_KERNEL(OP, SUFFIX, T, READ_A, READ_B, EXPR)                               \
    kernel void rocsync_##OP##_##SUFFIX(global T* out, global const T* a,           \
                                        global const T* b, T alpha, ulong n) {      \
        const ulong stride = rs_grid_stride();                                       \
        for (ulong i = rs_global_id(); i < n; i += stride) {                         \
            const T ai = RS_LOAD_##READ_A(a);                                        \
            const T bi = RS_LOAD_##READ_B(b);                                        \
            (void)ai;                                                                \
            (void)bi;                                                                \
            (void)alpha;                                                             \
            out[i] = (EXPR);                                                         \
        }                                                                            \
    }

#define RS_ALL_OPS(SUFFIX, T, EXP, SQRT)                                             \
    RS_KERNEL(mul, SUFFIX, T, 1, 1, ai * bi)                                          \
    RS_KERNEL(add, SUFFIX, T, 1, 1, ai + bi)                                          \
    RS_KERNEL(sub, SUFFIX, T, 1, 1, ai - bi)                                          \
    RS_KERNEL(div, SUFFIX, T, 1, 1, ai / bi)                                          \
    RS_KERNEL(scale, SUFFIX, T, 1, 0, alpha * ai)                                     \
    RS_KERNEL(axpy, SUFFIX, T, 1, 1, alpha * ai + bi)                                 \
    RS_KERNEL(fill, SUFFIX, T, 0, 0, alpha)                                           \
    RS_KERNEL(copy, SUFFIX, T, 1, 0, ai)                                              \
    RS_KERNEL(neg, SUFFIX, T, 1, 0, -ai)                                              \
    RS_KERNEL(exp, SUFFIX, T, 1, 0, EXP(ai))                                          \
    RS_KERNEL(sqrt, SUFFIX, T, 1, 0, SQRT(ai))                                        \
    RS_KERNEL(relu, SUFFIX, T, 1, 0, ai > (T)0 ? ai : (T)0)                          \
    RS_KERNEL(relu_grad, SUFFIX, T, 1, 1, ai > (T)0 ? bi : (T)0)

RS_ALL_OPS(f32, float, rs_exp_f32, __builtin_sqrtf)
RS_ALL_OPS(f64, double, rs_exp_f64, __builtin_sqrt)
