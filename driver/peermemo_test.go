package driver

import (
	"errors"
	"testing"
)

// PeerMemo asks once per peer and remembers the answer, but not a failure.
func TestPeerMemoAsksOncePerPeer(t *testing.T) {
	var m PeerMemo[int]
	asked := map[int]int{}
	fail := errors.New("busy")
	answer := func(peer int, can bool, err error) func() (bool, error) {
		return func() (bool, error) { asked[peer]++; return can, err }
	}
	for range 2 {
		if can, err := m.Enable(1, answer(1, true, nil)); !can || err != nil {
			t.Fatalf("peer 1: %v, %v", can, err)
		}
		if can, err := m.Enable(2, answer(2, false, nil)); can || err != nil {
			t.Fatalf("peer 2: %v, %v", can, err)
		}
	}
	if _, err := m.Enable(3, answer(3, true, fail)); err != fail {
		t.Fatalf("peer 3: %v, want the failure", err)
	}
	if can, err := m.Enable(3, answer(3, true, nil)); !can || err != nil {
		t.Fatalf("peer 3 again: %v, %v", can, err)
	}
	if asked[1] != 1 || asked[2] != 1 || asked[3] != 2 {
		t.Errorf("asked %v, want peers 1 and 2 once, 3 twice (its failure not remembered)", asked)
	}
}
