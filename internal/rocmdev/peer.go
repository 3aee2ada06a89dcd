package rocmdev

import (
	"errors"
	"fmt"

	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/hip"
)

// Peer copies go through HIP: hipDeviceEnablePeerAccess once per pair
// (which maps the peer's memory to this GPU, the HSA agents' access
// included), then hipMemcpyPeerAsync on the task's stream, which reads the
// peer's memory and writes this device's.

var _ driver.PeerCopier = (*Device)(nil)

// EnablePeer implements driver.PeerCopier.
func (d *Device) EnablePeer(peer driver.Device) (bool, error) {
	p, ok := peer.(*Device)
	if !ok || p.rt.HIP != d.rt.HIP {
		return false, fmt.Errorf("rocmdev: gpu%d cannot copy from %T of another runtime", d.index, peer)
	}
	if p == d {
		return false, fmt.Errorf("rocmdev: gpu%d: a peer copy needs two devices", d.index)
	}
	pr, ok := d.rt.HIP.(hip.PeerRuntime)
	if !ok {
		return false, nil
	}
	return d.peers.Enable(p, func() (bool, error) {
		can, err := pr.DeviceCanAccessPeer(d.hipIndex, p.hipIndex)
		if err != nil || !can {
			return false, err
		}
		err = pr.DeviceEnablePeerAccess(d.hipIndex, p.hipIndex)
		var he *hip.Error
		if errors.As(err, &he) && he.Code == hip.ErrorPeerAccessAlreadyEnabled {
			err = nil // another Open of these GPUs enabled it first
		}
		if err != nil {
			return false, err
		}
		return true, nil
	})
}

// submitPeerCopy runs a CopyPeer op on the task's stream.
func (t *Task) submitPeerCopy(op *driver.PeerCopyOp) (uint64, error) {
	p, ok := op.Peer.(*Device)
	if !ok || p.rt.HIP != t.d.rt.HIP {
		return 0, fmt.Errorf("%w: copy from %T", driver.ErrUnsupported, op.Peer)
	}
	pr, ok := t.d.rt.HIP.(hip.PeerRuntime)
	if !ok {
		return 0, fmt.Errorf("%w: the HIP runtime has no peer copies", driver.ErrUnsupported)
	}
	dst, src, n, dd, sd := hip.DevicePtr(op.Dst), hip.DevicePtr(op.Src), op.Size, t.d.hipIndex, p.hipIndex
	return t.st.Stream.Submit(func(s uintptr) error { return pr.MemcpyPeerAsync(dst, dd, src, sd, n, hip.Stream(s)) })
}
