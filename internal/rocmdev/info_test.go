package rocmdev

import "testing"

func TestHIPVersionString(t *testing.T) {
	for v, want := range map[int]string{50221153: "HIP 5.2.21153", 60200000: "HIP 6.2.0", 60342134: "HIP 6.3.42134"} {
		if got := hipVersionString(v); got != want {
			t.Errorf("hipVersionString(%d) = %q, want %q", v, got, want)
		}
	}
}
