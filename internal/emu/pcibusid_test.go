package emu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocsync/rocsync/hip"
)

// HIP 5.2.3 refuses hipDeviceAttributePciDomainID (measured over the
// simulated driver) and reports the domain through hipDeviceGetPCIBusId;
// later releases answer both.
func TestPCIDomainPerHIPRelease(t *testing.T) {
	for _, tc := range []struct {
		version   int
		attribute bool
	}{{50_221_153, false}, {60_200_000, true}} {
		h := New(Options{HIPVersion: tc.version}).HIP()
		id, err := h.DevicePCIBusID(0)
		require.NoError(t, err)
		require.Regexp(t, `^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.0$`, id)
		_, err = h.DeviceAttribute(0, hip.DeviceAttributePciDomainID)
		if tc.attribute {
			require.NoError(t, err, "HIP %d", tc.version)
		} else {
			require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorInvalidValue}, "HIP %d", tc.version)
		}
	}
	_, err := New(Options{}).HIP().DevicePCIBusID(5)
	require.ErrorIs(t, err, &hip.Error{Code: hip.ErrorInvalidDevice})
}
