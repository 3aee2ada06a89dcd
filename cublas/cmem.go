package cublas

import "github.com/rocsync/rocsync/internal/cmem"

// C memory (see package cmem): alpha, beta and an out-parameter word per
// call, so the gemm calls make no Go allocation.
const blockBytes = 32

var blocks = &cmem.Pool{Size: blockBytes}
