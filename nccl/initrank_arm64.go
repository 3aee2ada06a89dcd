package nccl

import "github.com/ebitengine/purego"

// callInitRank calls ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int)
// with the id by value. In AAPCS64 a composite larger than 16 bytes is
// passed as a pointer to a copy the caller makes, in the next integer
// register: x0 comm, x1 nranks, x2 the copy, x3 rank.
func callInitRank(fn, commOut uintptr, nranks int32, id *UniqueID, rank int32) (uintptr, error) {
	b := blocks.Get()
	defer blocks.Put(b)
	p := b.Ptr()
	copy((*[UniqueIDBytes]byte)(p)[:], id[:])
	r, _, _ := purego.SyscallN(fn, commOut, uintptr(uint32(nranks)), uintptr(p), uintptr(uint32(rank)))
	return r, nil
}
