package nccl

import "github.com/rocsync/rocsync/internal/cmem"

// C memory (see package cmem): out-parameters and the unique id, so that
// the calls make no Go allocation. 128 bytes hold an ncclUniqueId; the
// out-parameter words share its first bytes (no call uses both).
const blockBytes = 128

var blocks = &cmem.Pool{Size: blockBytes}
