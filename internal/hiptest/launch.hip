// Test kernels for rocsync's hidden-argument handling, compiled by
// internal/hiptest with clang-22 -x hip against Debian's HIP headers.
#include <hip/hip_runtime.h>

// Work-item functions for the HIP headers, which call ROCm-Device-Libs'
// ockl (not installed here): the same computations as ockl's workitem.cl,
// from the dispatch packet (code object v4) or the implicit arguments (v5+).
struct dispatch_packet { // hsa_kernel_dispatch_packet_t's first fields
  unsigned short header, setup, workgroup_size[3], reserved0;
  unsigned grid_size[3];
};
[[maybe_unused]] static __device__ const dispatch_packet* packet() {
  return (const dispatch_packet*)__builtin_amdgcn_dispatch_ptr();
}
#if ROCSYNC_COV >= 5
struct implicit_args {
  unsigned block_count[3];
  unsigned short group_size[3];
  unsigned short remainder[3];
};
static __device__ const implicit_args* implicit() {
  return (const implicit_args*)__builtin_amdgcn_implicitarg_ptr();
}
#endif
static __device__ unsigned group_id(unsigned d) {
  return d == 0 ? __builtin_amdgcn_workgroup_id_x() : d == 1 ? __builtin_amdgcn_workgroup_id_y() : __builtin_amdgcn_workgroup_id_z();
}
extern "C" __device__ size_t __ockl_get_local_id(unsigned d) {
  return d == 0 ? __builtin_amdgcn_workitem_id_x() : d == 1 ? __builtin_amdgcn_workitem_id_y() : __builtin_amdgcn_workitem_id_z();
}
extern "C" __device__ size_t __ockl_get_group_id(unsigned d) { return group_id(d); }
extern "C" __device__ size_t __ockl_get_local_size(unsigned d) {
#if ROCSYNC_COV >= 5
  const implicit_args* a = implicit();
  return group_id(d) < a->block_count[d] ? a->group_size[d] : a->remainder[d];
#else
  unsigned wg = packet()->workgroup_size[d], grid = packet()->grid_size[d];
  unsigned r = grid - group_id(d) * wg;
  return r < wg ? r : wg;
#endif
}
extern "C" __device__ size_t __ockl_get_num_groups(unsigned d) {
#if ROCSYNC_COV >= 5
  const implicit_args* a = implicit();
  return a->block_count[d] + (a->remainder[d] != 0);
#else
  unsigned wg = packet()->workgroup_size[d], grid = packet()->grid_size[d];
  unsigned q = grid / wg;
  return q + (grid > q * wg);
#endif
}

// The test kernels. Each reads blockDim and gridDim as HIP code does; in
// code object v5 and later that makes the kernel reserve the 256-byte
// implicit-argument area after its explicit arguments.

// scale doubles x[i] and adds the grid's block count, for i < n.
extern "C" __global__ void scale(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = 2.0f * x[i] + (float)gridDim.x;
}

// geom records what each work-item sees, blockDim.x | gridDim.x << 16, at
// out[blockIdx.x * 1024 + threadIdx.x].
extern "C" __global__ void geom(unsigned* out) {
  out[blockIdx.x * 1024 + threadIdx.x] = blockDim.x | gridDim.x << 16;
}

// offs records the global offset a work-item sees (OpenCL's
// get_global_offset, ockl's __ockl_get_global_offset: the first implicit
// argument in v4, the one at byte 40 of the implicit area in v5), which a
// launch without an offset must leave 0, plus the work-item's id.
extern "C" __global__ void offs(unsigned long* out) {
#if ROCSYNC_COV >= 5
  const unsigned long* off = (const unsigned long*)((const char*)__builtin_amdgcn_implicitarg_ptr() + 40);
#else
  const unsigned long* off = (const unsigned long*)__builtin_amdgcn_implicitarg_ptr();
#endif
  unsigned i = blockIdx.x * 64 + threadIdx.x;
  out[i] = off[0] + off[1] + off[2] + i;
}

// noargs has no explicit parameters but reads blockDim: in v5 its kernarg
// segment is the implicit area alone. A workgroup of another size than the
// one launched traps.
extern "C" __global__ void noargs() {
  if (blockDim.x != 64 && blockIdx.x + 1 != gridDim.x) __builtin_trap();
}
