//go:build linux && (amd64 || arm64)

package hsa

import (
	"unsafe"

	"github.com/ebitengine/purego"

	"github.com/rocsync/rocsync/internal/cmem"
)

// Memory pools and copies (the hsa_amd_* memory API).

// MemoryPools is hsa_amd_agent_iterate_memory_pools.
func (l *Lib) MemoryPools(a Agent) ([]MemoryPool, error) {
	var out []MemoryPool
	err := l.iterate("hsa_amd_agent_iterate_memory_pools", func(cb, data uintptr) uintptr {
		return cmem.Call(l.fn[symAMDAgentIterateMemoryPools], uintptr(a), cb, data)
	}, func(h uint64) { out = append(out, MemoryPool(h)) })
	return out, err
}

func (l *Lib) poolInfo(p MemoryPool, attr PoolInfo) (uint64, error) {
	var b infoBuf
	r, _, _ := purego.SyscallN(l.fn[symAMDMemoryPoolGetInfo], uintptr(p), uintptr(attr), uintptr(unsafe.Pointer(&b)))
	return b.uint64(), l.check("hsa_amd_memory_pool_get_info", r)
}

// MemoryPoolInfoUint32 is hsa_amd_memory_pool_get_info for uint32 attributes
// (segment, global flags).
func (l *Lib) MemoryPoolInfoUint32(p MemoryPool, attr PoolInfo) (uint32, error) {
	v, err := l.poolInfo(p, attr)
	return uint32(v), err
}

// MemoryPoolInfoUint64 is hsa_amd_memory_pool_get_info for size_t
// attributes (size, granule, alignment, max allocation).
func (l *Lib) MemoryPoolInfoUint64(p MemoryPool, attr PoolInfo) (uint64, error) {
	return l.poolInfo(p, attr)
}

// MemoryPoolInfoBool is hsa_amd_memory_pool_get_info for bool attributes.
// C bool is one byte.
func (l *Lib) MemoryPoolInfoBool(p MemoryPool, attr PoolInfo) (bool, error) {
	v, err := l.poolInfo(p, attr)
	return uint8(v) != 0, err
}

// AgentMemoryPoolAccess is hsa_amd_agent_memory_pool_get_info with
// AgentMemoryPoolInfoAccess: whether agent a may use pool p, as one of the
// PoolAccess* values.
func (l *Lib) AgentMemoryPoolAccess(a Agent, p MemoryPool) (uint32, error) {
	var b infoBuf
	r, _, _ := purego.SyscallN(l.fn[symAMDAgentMemoryPoolGetInfo], uintptr(a), uintptr(p),
		uintptr(AgentMemoryPoolInfoAccess), uintptr(unsafe.Pointer(&b)))
	return uint32(b.uint64()), l.check("hsa_amd_agent_memory_pool_get_info", r)
}

// MemoryPoolAllocate is hsa_amd_memory_pool_allocate with flags 0 (the only
// value ROCm 5.2 accepts; "standard" in 6.x). The result is C memory.
func (l *Lib) MemoryPoolAllocate(p MemoryPool, size uint64) (unsafe.Pointer, error) {
	var ptr uintptr
	r, _, _ := purego.SyscallN(l.fn[symAMDMemoryPoolAllocate], uintptr(p), uintptr(size), 0, uintptr(unsafe.Pointer(&ptr)))
	if err := l.check("hsa_amd_memory_pool_allocate", r); err != nil {
		return nil, err
	}
	return cmem.Ptr(ptr), nil
}

// MemoryPoolFree is hsa_amd_memory_pool_free.
func (l *Lib) MemoryPoolFree(ptr unsafe.Pointer) error {
	return l.check("hsa_amd_memory_pool_free", cmem.Call(l.fn[symAMDMemoryPoolFree], uintptr(ptr)))
}

// AgentsAllowAccess is hsa_amd_agents_allow_access (flags must be NULL).
func (l *Lib) AgentsAllowAccess(agents []Agent, ptr unsafe.Pointer) error {
	r, _, _ := purego.SyscallN(l.fn[symAMDAgentsAllowAccess], uintptr(len(agents)),
		uintptr(unsafe.Pointer(unsafe.SliceData(agents))), 0, uintptr(ptr))
	return l.check("hsa_amd_agents_allow_access", r)
}

// MemoryAsyncCopy is hsa_amd_memory_async_copy: copies size bytes once every
// signal in deps reaches 0, then decrements completion. dst and src are
// runtime-allocated (C) memory; deps is read during the call only.
func (l *Lib) MemoryAsyncCopy(dst unsafe.Pointer, dstAgent Agent, src unsafe.Pointer, srcAgent Agent, size uint64, deps []Signal, completion Signal) error {
	r, _, _ := purego.SyscallN(l.fn[symAMDMemoryAsyncCopy], uintptr(dst), uintptr(dstAgent), uintptr(src), uintptr(srcAgent),
		uintptr(size), uintptr(len(deps)), uintptr(unsafe.Pointer(unsafe.SliceData(deps))), uintptr(completion))
	return l.check("hsa_amd_memory_async_copy", r)
}
