package nccl

import (
	"encoding/binary"

	"github.com/ebitengine/purego"
)

// callInitRank calls ncclCommInitRank(ncclComm_t*, int, ncclUniqueId, int)
// with the id by value. In the System V x86-64 ABI a 128-byte struct is
// of class MEMORY: it is copied into the argument area on the stack and
// takes no register, so rank goes in the third integer register (RDX)
// and the id's sixteen eightbytes are the first stack arguments. purego
// puts arguments after the sixth on the stack in order, so the three
// unused registers are padded with zeros.
func callInitRank(fn, commOut uintptr, nranks int32, id *UniqueID, rank int32) (uintptr, error) {
	var a [6 + UniqueIDBytes/8]uintptr
	a[0], a[1], a[2] = commOut, uintptr(uint32(nranks)), uintptr(uint32(rank))
	for i := range UniqueIDBytes / 8 {
		a[6+i] = uintptr(binary.LittleEndian.Uint64(id[8*i:]))
	}
	r, _, _ := purego.SyscallN(fn, a[:]...)
	return r, nil
}
