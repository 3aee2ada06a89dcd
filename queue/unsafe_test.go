package queue_test

import "unsafe"

func unsafePtr(f []float32) unsafe.Pointer { return unsafe.Pointer(&f[0]) }
