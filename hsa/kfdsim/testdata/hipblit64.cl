// The kernel signatures of HIP 6.4.3's blit program whose layouts differ
// from HIP 5.2.3's (the OpenCL source in libamdhip64.so.6.4: clr's
// rocblitcl.cpp), with empty bodies, for exec_test.go as hipblit.cl.
__kernel void __amd_rocclr_copyBuffer(__global uchar* src, __global uchar* dst, ulong size,
    uint remainder, uint aligned_size, ulong end_ptr, uint next_chunk) {}
__kernel void __amd_rocclr_fillBufferAligned(__global void* buf, __constant uchar* pattern,
    uint pattern_size, uint alignment, ulong end_ptr, uint next_chunk) {}
__kernel void __amd_rocclr_streamOpsWrite(__global uint* ptrInt, __global ulong* ptrUlong,
    ulong value) {}
__kernel void __amd_rocclr_batchMemOp(__global void* params, uint count) {}
