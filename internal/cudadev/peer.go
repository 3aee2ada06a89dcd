package cudadev

import (
	"errors"
	"fmt"

	"github.com/rocsync/rocsync/cuda"
	"github.com/rocsync/rocsync/driver"
	"github.com/rocsync/rocsync/stream"
)

// Peer copies: cuCtxEnablePeerAccess once per pair (this device's context
// reaching the peer's), then cuMemcpyPeerAsync on the task's stream. The
// events that order the copy against the peer's streams need no peer
// access: cuStreamWaitEvent takes an event of another context.

var _ driver.PeerCopier = (*Device)(nil)

// peerBackend is a backend that copies between devices (the real one; the
// emulated backend of the unit tests has a single device).
type peerBackend interface {
	// enablePeer reports whether this device reaches peer's memory,
	// enabling access when it does.
	enablePeer(peer backend) (bool, error)
	// copyPeer enqueues a copy from src on peer to dst here on s.
	copyPeer(dst driver.DevicePtr, peer backend, src driver.DevicePtr, size uint64, s uintptr) error
}

// EnablePeer implements driver.PeerCopier.
func (d *Device) EnablePeer(peer driver.Device) (bool, error) {
	p, ok := peer.(*Device)
	if !ok || p == d {
		return false, fmt.Errorf("cudadev: device %d cannot copy from %T", d.index, peer)
	}
	pb, ok := d.b.(peerBackend)
	if !ok {
		return false, nil
	}
	return d.peers.Enable(p, func() (bool, error) { return pb.enablePeer(p.b) })
}

// submitPeerCopy runs a CopyPeer op on stream s.
func (t *Task) submitPeerCopy(op *driver.PeerCopyOp, s *stream.Stream) (uint64, error) {
	p, ok := op.Peer.(*Device)
	pb, isPeer := t.d.b.(peerBackend)
	if !ok || !isPeer {
		return 0, fmt.Errorf("%w: copy from %T", driver.ErrUnsupported, op.Peer)
	}
	dst, src, n, from := op.Dst, op.Src, op.Size, p.b
	return s.Submit(func(s uintptr) error { return pb.copyPeer(dst, from, src, n, s) })
}

func (b *cudaBackend) enablePeer(peer backend) (bool, error) {
	p, ok := peer.(*cudaBackend)
	if !ok || p.lib != b.lib {
		return false, fmt.Errorf("cudadev: a peer of another driver (%T)", peer)
	}
	can, err := b.lib.DeviceCanAccessPeer(b.dev, p.dev)
	if err != nil || !can {
		return false, err
	}
	c, err := b.context()
	if err != nil {
		return false, err
	}
	pc, err := p.context()
	if err != nil {
		return false, err
	}
	err = c.EnablePeerAccess(pc)
	var ce *cuda.Error
	if errors.As(err, &ce) && ce.Code == cuda.ErrorPeerAccessAlreadyEnabled {
		err = nil // another Open of these GPUs enabled it first
	}
	return err == nil, err
}

func (b *cudaBackend) copyPeer(dst driver.DevicePtr, peer backend, src driver.DevicePtr, size uint64, s uintptr) error {
	p, ok := peer.(*cudaBackend)
	if !ok {
		return fmt.Errorf("%w: copy from %T", driver.ErrUnsupported, peer)
	}
	c := b.ctx.Load()
	return c.MemcpyPeerAsync(cuda.DevicePtr(dst), c, cuda.DevicePtr(src), p.ctx.Load(), size, cuda.Stream(s))
}
