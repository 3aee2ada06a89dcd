// Package ncclid is NCCL's unique id as a Go value, with its text form:
// the one part of the NCCL binding that code which never loads NCCL (the
// front package, the driver interface) names. Package nccl aliases it.
package ncclid

import (
	"encoding/hex"
	"fmt"
)

// Bytes is NCCL_UNIQUE_ID_BYTES.
const Bytes = 128

// UniqueID is an ncclUniqueId: opaque bytes naming one communicator's
// bootstrap (on NCCL, the address of the root's listener). Its text form
// (MarshalText) is 256 hexadecimal digits, safe in an environment
// variable, a command line or a file, for handing it to the other ranks.
type UniqueID [Bytes]byte

// MarshalText is the id as lowercase hexadecimal.
func (id UniqueID) MarshalText() ([]byte, error) {
	out := make([]byte, hex.EncodedLen(len(id)))
	hex.Encode(out, id[:])
	return out, nil
}

// UnmarshalText reads what MarshalText wrote; anything else is an error
// and leaves id unchanged.
func (id *UniqueID) UnmarshalText(text []byte) error {
	if len(text) != hex.EncodedLen(Bytes) {
		return fmt.Errorf("nccl: a unique id is %d hexadecimal digits, not %d", hex.EncodedLen(Bytes), len(text))
	}
	var tmp UniqueID
	if _, err := hex.Decode(tmp[:], text); err != nil {
		return fmt.Errorf("nccl: unique id: %w", err)
	}
	*id = tmp
	return nil
}

// String is the text form.
func (id UniqueID) String() string {
	b, _ := id.MarshalText()
	return string(b)
}

// Parse is UnmarshalText on a string.
func Parse(s string) (UniqueID, error) {
	var id UniqueID
	err := id.UnmarshalText([]byte(s))
	return id, err
}
