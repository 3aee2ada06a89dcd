package emu

import (
	"fmt"

	"github.com/rocsync/rocsync/hip"
)

// Peer access between emulated GPUs. As with HIP on XGMI or PCIe peer
// links, a GPU's streams may touch another GPU's memory only once peer
// access from the first to the second has been enabled; any other access
// is a VM fault (gpuSpan). Options.PeerAccess says which pairs can, so
// that a machine without peer links (and rocsync's staged copies) can be
// modelled too.

var _ hip.PeerRuntime = (*HIP)(nil)

// canPeer reports whether GPU accessor can map GPU owner's memory.
func (m *Machine) canPeer(accessor, owner int) bool {
	if accessor == owner {
		return false // hipDeviceCanAccessPeer answers 0 for a device and itself
	}
	if m.opts.PeerAccess == nil {
		return true
	}
	return m.opts.PeerAccess(accessor, owner)
}

// DeviceCanAccessPeer is hipDeviceCanAccessPeer.
func (h *HIP) DeviceCanAccessPeer(device, peer int) (bool, error) {
	d, err := h.dev("hipDeviceCanAccessPeer", device)
	if err != nil {
		return false, err
	}
	p, err := h.dev("hipDeviceCanAccessPeer", peer)
	if err != nil {
		return false, err
	}
	return h.m.canPeer(d, p), nil
}

// DeviceEnablePeerAccess is hipDeviceEnablePeerAccess(peer, 0) on device:
// hipErrorPeerAccessUnsupported for a pair that cannot, and
// hipErrorPeerAccessAlreadyEnabled the second time, as HIP answers.
func (h *HIP) DeviceEnablePeerAccess(device, peer int) error {
	d, err := h.dev("hipDeviceEnablePeerAccess", device)
	if err != nil {
		return err
	}
	p, err := h.dev("hipDeviceEnablePeerAccess", peer)
	if err != nil {
		return err
	}
	if d == p {
		return hipErr("hipDeviceEnablePeerAccess", hip.ErrorInvalidDevice, "a device and itself")
	}
	if !h.m.canPeer(d, p) {
		return hipErr("hipDeviceEnablePeerAccess", hip.ErrorPeerAccessUnsupported, fmt.Sprintf("gpu%d cannot map gpu%d's memory", d, p))
	}
	h.m.memMu.Lock()
	defer h.m.memMu.Unlock()
	if h.m.peerOn[d]&(1<<uint(p)) != 0 {
		return hipErr("hipDeviceEnablePeerAccess", hip.ErrorPeerAccessAlreadyEnabled, "")
	}
	h.m.peerOn[d] |= 1 << uint(p)
	return nil
}

// MemcpyPeerAsync is hipMemcpyPeerAsync on s. The stream's GPU does the
// copy, so it must reach both sides: its own memory, and the other GPU's
// through enabled peer access (real HIP would stage a copy between GPUs
// without it; the emulator refuses, so that rocsync's staged path is the
// one that runs there).
func (h *HIP) MemcpyPeerAsync(dst hip.DevicePtr, dstDevice int, src hip.DevicePtr, srcDevice int, size uint64, sid hip.Stream) error {
	s, err := h.stream("hipMemcpyPeerAsync", sid)
	if err != nil {
		return err
	}
	dd, err := h.dev("hipMemcpyPeerAsync", dstDevice)
	if err != nil {
		return err
	}
	sd, err := h.dev("hipMemcpyPeerAsync", srcDevice)
	if err != nil {
		return err
	}
	if size == 0 {
		return nil
	}
	for _, x := range [2]struct {
		p   hip.DevicePtr
		gpu int
	}{{dst, dd}, {src, sd}} {
		r, err := h.m.find(uint64(x.p), size)
		if err != nil {
			return hipErr("hipMemcpyPeerAsync", hip.ErrorInvalidValue, err.Error())
		}
		if r.device != x.gpu {
			return hipErr("hipMemcpyPeerAsync", hip.ErrorInvalidValue, fmt.Sprintf("%#x is not memory of gpu%d", uint64(x.p), x.gpu))
		}
	}
	return s.enqueue(cmd{kind: cmdWork, what: "hipMemcpyPeerAsync", fn: func(a *actor) error {
		in, err := h.m.gpuSpan(s.dev, uint64(src), size, false, a)
		if err != nil {
			return err
		}
		out, err := h.m.gpuSpan(s.dev, uint64(dst), size, true, a)
		if err != nil {
			return err
		}
		copy(out, in)
		return nil
	}})
}
