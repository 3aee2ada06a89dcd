package nccl

import (
	"encoding/hex"
	"fmt"
)

// UniqueIDBytes is NCCL_UNIQUE_ID_BYTES.
const UniqueIDBytes = 128

// UniqueID is an ncclUniqueId: opaque bytes naming one communicator's
// bootstrap (on NCCL, the address of the root's listener). Its text form
// (MarshalText) is 256 hexadecimal digits, safe in an environment
// variable, a command line or a file, for handing it to the other ranks.
type UniqueID [UniqueIDBytes]byte

// MarshalText is the id as lowercase hexadecimal.
func (id UniqueID) MarshalText() ([]byte, error) {
	out := make([]byte, hex.EncodedLen(len(id)))
	hex.Encode(out, id[:])
	return out, nil
}

// UnmarshalText reads what MarshalText wrote; anything else is an error
// and leaves id unchanged.
func (id *UniqueID) UnmarshalText(text []byte) error {
	if len(text) != hex.EncodedLen(UniqueIDBytes) {
		return fmt.Errorf("nccl: a unique id is %d hexadecimal digits, not %d", hex.EncodedLen(UniqueIDBytes), len(text))
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

// ParseUniqueID is UnmarshalText on a string.
func ParseUniqueID(s string) (UniqueID, error) {
	var id UniqueID
	err := id.UnmarshalText([]byte(s))
	return id, err
}
