package driver

import "sync"

// PeerMemo remembers, per peer device, what enabling peer access found, so
// that a PeerCopier asks its runtime once per pair. Its zero value is
// ready; it is safe for concurrent use.
type PeerMemo[D comparable] struct {
	mu sync.Mutex
	ok map[D]bool
}

// Enable returns what enable found for peer, calling it (under the memo's
// lock, so once per pair) the first time. A failure is returned and not
// remembered: the next call tries again.
func (m *PeerMemo[D]) Enable(peer D, enable func() (bool, error)) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if v, seen := m.ok[peer]; seen {
		return v, nil
	}
	can, err := enable()
	if err != nil {
		return false, err
	}
	if m.ok == nil {
		m.ok = map[D]bool{}
	}
	m.ok[peer] = can
	return can, nil
}
