package driver

import (
	"errors"
	"slices"
	"testing"
)

// InOrder (and RunCalls) make the calls in order on the stream given and
// stop at the first that fails, returning its error.
func TestInOrderStopsAtTheFirstFailure(t *testing.T) {
	var made []int
	boom := errors.New("boom")
	call := func(i int, err error) func(uintptr) error {
		return func(s uintptr) error {
			if s != 7 {
				t.Errorf("call %d on stream %d, want 7", i, s)
			}
			made = append(made, i)
			return err
		}
	}
	all := InOrder([]func(uintptr) error{call(0, nil), call(1, nil), call(2, boom), call(3, nil)})
	if err := all(7); err != boom {
		t.Fatalf("InOrder returned %v, want the failing call's error", err)
	}
	if !slices.Equal(made, []int{0, 1, 2}) {
		t.Errorf("calls made %v, want [0 1 2]", made)
	}
	made = nil
	if err := RunCalls([]func(uintptr) error{call(0, nil), call(1, nil)}, 7); err != nil || !slices.Equal(made, []int{0, 1}) {
		t.Errorf("RunCalls: %v, calls %v", err, made)
	}
}
