package emu

import "syscall"

// threadID is the calling OS thread's id: NCCL keeps group state per
// thread.
func threadID() int64 { return int64(syscall.Gettid()) }
