package hip

import (
	"errors"
	"testing"
)

// OnDevice selects the device on the calling thread before fn runs, and
// refuses a device HIP does not have without calling fn.
func TestFakeOnDevice(t *testing.T) {
	l := fakeLib(t)
	ran := false
	if err := l.OnDevice(1, func() error {
		ran = true
		return nil
	}); err != nil || !ran {
		t.Fatalf("OnDevice(1): ran %v, %v", ran, err)
	}
	want := errors.New("from fn")
	if err := l.OnDevice(0, func() error { return want }); err != want {
		t.Fatalf("fn's error: %v", err)
	}
	for _, d := range []int{-1, 9} {
		ran = false
		err := l.OnDevice(d, func() error { ran = true; return nil })
		if !errors.Is(err, &Error{Func: "hipSetDevice", Code: ErrorInvalidDevice}) || ran {
			t.Fatalf("OnDevice(%d): ran %v, %v", d, ran, err)
		}
	}
}
