package emu

import (
	"unsafe"
)

// Pinned host memory that the host fills and a stream's copy reads (or a
// copy fills and the host reads) is a place where a missing wait is a
// race the hazard checker should see, like device memory. The checker
// follows only the host memory it is told to, since most pinned memory
// (kernarg rings, signal words) is written by the host without the
// ordering the checker models.

// TrackHost makes the checker follow accesses to the hipHostMalloc block
// at p: the GPU's copies through it and the host's accesses reported
// with HostAccess. It reports whether p is such a block.
func (m *Machine) TrackHost(p unsafe.Pointer) bool {
	r, err := m.find(uint64(uintptr(p)), 1)
	if err != nil || r.base != uint64(uintptr(p)) || r.device >= 0 {
		return false
	}
	r.checked.Store(true)
	return true
}

// HostAccess records an access by the host (a copy into or out of
// tracked pinned memory) as the checker records the GPU's, reporting a
// hazard when it is not ordered after the GPU's conflicting accesses
// (the host learns of those through its waits). what names the access.
func (m *Machine) HostAccess(p unsafe.Pointer, n uint64, write bool, what string) {
	if !m.opts.Hazards || n == 0 {
		return
	}
	_, _ = m.span(uint64(uintptr(p)), n, write, m.hostActor(what))
}
