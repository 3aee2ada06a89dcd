// The kernel signatures of HIP 5.2.3's blit program (the OpenCL source in
// libamdhip64.so.5.2: ROCclr's blitcl.cpp and rocblitcl.cpp), with empty
// bodies: exec_test.go compiles this for gfx90a as code object v4, as
// HIP's comgr does, so that exec.c's argument tables are checked against
// the metadata note a compiler really writes. -DWRONG_LAYOUT changes one
// argument's size, which exec.c must refuse.
#pragma OPENCL EXTENSION cl_khr_fp64 : enable

#ifdef WRONG_LAYOUT
#define REMAIN_T ulong
#else
#define REMAIN_T uint
#endif

__kernel void __amd_rocclr_fillBufferAligned(__global uchar* bufUChar, __global ushort* bufUShort,
    __global uint* bufUInt, __global ulong* bufULong, __constant uchar* pattern, uint patternSize,
    ulong offset, ulong size) {}
__kernel void __amd_rocclr_fillBufferAligned2D(__global uchar* bufUChar, __global ushort* bufUShort,
    __global uint* bufUInt, __global ulong* bufULong, __constant uchar* pattern, uint patternSize,
    ulong offset, ulong width, ulong height, ulong pitch) {}
__kernel void __amd_rocclr_copyBuffer(__global uchar* srcI, __global uchar* dstI, ulong srcOrigin,
    ulong dstOrigin, ulong size, REMAIN_T remain) {}
__kernel void __amd_rocclr_copyBufferAligned(__global uint* src, __global uint* dst, ulong srcOrigin,
    ulong dstOrigin, ulong size, uint alignment) {}
__kernel void __amd_rocclr_copyBufferRect(__global uchar* src, __global uchar* dst, ulong4 srcRect,
    ulong4 dstRect, ulong4 size) {}
__kernel void __amd_rocclr_copyBufferRectAligned(__global uint* src, __global uint* dst,
    ulong4 srcRect, ulong4 dstRect, ulong4 size) {}
__kernel void __amd_rocclr_streamOpsWrite(__global uint* ptrInt, __global ulong* ptrUlong,
    ulong value, ulong sizeBytes) {}
__kernel void __amd_rocclr_streamOpsWait(__global uint* ptrInt, __global ulong* ptrUlong,
    ulong value, ulong flags, ulong mask) {}
__kernel void __amd_rocclr_gwsInit(uint value) {}
