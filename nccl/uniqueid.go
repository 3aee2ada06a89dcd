package nccl

import "github.com/rocsync/rocsync/nccl/ncclid"

// UniqueIDBytes is NCCL_UNIQUE_ID_BYTES.
const UniqueIDBytes = ncclid.Bytes

// UniqueID is an ncclUniqueId: opaque bytes naming one communicator's
// bootstrap (on NCCL, the address of the root's listener). Its text form
// (MarshalText) is 256 hexadecimal digits, safe in an environment
// variable, a command line or a file, for handing it to the other ranks.
type UniqueID = ncclid.UniqueID

// ParseUniqueID is UnmarshalText on a string.
func ParseUniqueID(s string) (UniqueID, error) { return ncclid.Parse(s) }
