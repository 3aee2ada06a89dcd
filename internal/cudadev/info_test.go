package cudadev

import "testing"

func TestDriverVersionString(t *testing.T) {
	for v, want := range map[int]string{13000: "CUDA driver 13.0", 12040: "CUDA driver 12.4", 11080: "CUDA driver 11.8"} {
		if got := driverVersionString(v); got != want {
			t.Errorf("driverVersionString(%d) = %q, want %q", v, got, want)
		}
	}
}
